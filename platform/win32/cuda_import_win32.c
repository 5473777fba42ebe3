/* SPDX-License-Identifier: Apache-2.0 */
/* The allocation handle keeps the memory. The NT handle vramd pushed into
 * this process is closed at once, as NVIDIA's memMapIPCDrv sample does:
 * nothing here uses it again (a move maps the allocation handle), and
 * Windows has no fd limit that holding it would count against. What
 * closing costs on Windows is not measured. */
#include "platform/cuda_import.h"

vp_handle vp_cuda_import_kept(vp_handle shared)
{
    vp_close(&shared);
    return VP_NONE;
}
