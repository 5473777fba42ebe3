/* SPDX-License-Identifier: Apache-2.0 */
/* GPU memory between processes on Linux: chunks are file descriptors,
 * which need no security of their own (they reach a client only over its
 * socket), and the libraries are the driver's sonames. */
#include "platform/gpu_share.h"

const struct vp_gpu_system *vp_gpu_system(void)
{
    static const struct vp_gpu_system s = {
        .handle = VP_GPU_HANDLE_FD,
        .handle_name = "POSIX fd handles",
        .driver = "libcuda.so.1",
        .driver_where = "libcuda.so.1 cannot be loaded",
        .nvml = "libnvidia-ml.so.1",
        .nvml_where = "libnvidia-ml.so.1 cannot be loaded",
        .paging_model = false,
    };
    return &s;
}

int vp_gpu_share_create(struct vp_gpu_share **out, char *why, size_t whylen)
{
    (void)why;
    (void)whylen;
    *out = NULL;
    return 0;
}

void *vp_gpu_share_meta(const struct vp_gpu_share *s)
{
    (void)s;
    return NULL;
}

const char *vp_gpu_share_describe(const struct vp_gpu_share *s)
{
    (void)s;
    return NULL;
}

void vp_gpu_share_free(struct vp_gpu_share *s)
{
    (void)s;
}
