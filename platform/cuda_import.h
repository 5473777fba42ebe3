/* SPDX-License-Identifier: Apache-2.0 */
/* A GPU chunk's shareable handle after the CUDA driver imported it into
 * this process (libvram's CUDA mapper): on Linux an fd kept until the
 * chunk is released, on Windows an NT handle closed at once. The policy is
 * the OS's, so it lives here; the import itself is the driver's. */
#ifndef VRAM_PLATFORM_CUDA_IMPORT_H
#define VRAM_PLATFORM_CUDA_IMPORT_H

#include "platform/handle.h"

/* Takes the shareable handle just imported; returns the one the chunk
 * keeps (closed at its release), VP_NONE where it was closed here. */
vp_handle vp_cuda_import_kept(vp_handle shared);

#endif
