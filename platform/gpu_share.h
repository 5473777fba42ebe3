/* SPDX-License-Identifier: Apache-2.0 */
/* How GPU memory crosses between processes on this system, for the CUDA
 * code above platform/ (common/cuda_driver.h, common/nvml.c,
 * daemon/backends/cuda.c), which names no system itself.
 *
 * The kind of shareable handle: a POSIX file descriptor (Linux), or an NT
 * HANDLE (Windows), never the KMT kind, a global value with no security
 * descriptor that any process learning it could use. The driver's and
 * NVML's library names, as vp_dl_open finds them. Whether a GPU may run
 * under a driver model that pages an oversubscribed allocation to system
 * memory instead of failing it (Windows' WDDM; TCC fails as Linux does).
 *
 * And who may hold a chunk's handle: on Windows cuMemCreate takes, in
 * CUmemAllocationProp.win32HandleMetaData, an OBJECT_ATTRIBUTES whose
 * security descriptor the allocation's shareable object gets
 * (platform/win32/cuda_share.h); an fd needs none. */
#ifndef VRAM_PLATFORM_GPU_SHARE_H
#define VRAM_PLATFORM_GPU_SHARE_H

#include <stdbool.h>
#include <stddef.h>

enum vp_gpu_handle {
    VP_GPU_HANDLE_FD, /* the driver takes an int (in the pointer argument) */
    VP_GPU_HANDLE_NT, /* a HANDLE of this process */
};

struct vp_gpu_system {
    enum vp_gpu_handle handle;
    const char *handle_name;   /* "POSIX fd handles", for messages */
    const char *driver;        /* the CUDA driver's library */
    const char *driver_where;  /* "... cannot be loaded (from ...)" */
    const char *nvml;          /* NVML's library */
    const char *nvml_where;
    bool paging_model;         /* GPUs may run under WDDM */
};

const struct vp_gpu_system *vp_gpu_system(void);

/* What a chunk's allocation carries for its handle's security, made once
 * at start and kept alive across every cuMemCreate. 0 with *out set (NULL
 * where the system needs nothing), or a negative errno with why. */
struct vp_gpu_share;
int vp_gpu_share_create(struct vp_gpu_share **out, char *why, size_t whylen);
/* What goes in win32HandleMetaData (NULL: nothing, as an fd needs). */
void *vp_gpu_share_meta(const struct vp_gpu_share *s);
/* What it grants, for the log; NULL when there is nothing to say. */
const char *vp_gpu_share_describe(const struct vp_gpu_share *s);
void vp_gpu_share_free(struct vp_gpu_share *s); /* NULL-tolerant */

#endif
