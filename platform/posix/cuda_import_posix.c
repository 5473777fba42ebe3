/* SPDX-License-Identifier: Apache-2.0 */
/* The allocation handle keeps the memory; the shareable handle (an fd) is
 * closed when the chunk is released. Closing it costs about 14 us on an
 * H200 (the driver drops the export behind it), a fifth of a grant's time
 * per chunk, and it cannot overlap the imports (the driver serializes
 * them): so not on the grant's path. */
#include "platform/cuda_import.h"

vp_handle vp_cuda_import_kept(vp_handle shared)
{
    return shared;
}
