/* SPDX-License-Identifier: Apache-2.0 */
/* GPU memory between processes on Windows: chunks are NT handles carrying
 * the security descriptor of cuda_share.h, and the libraries are the
 * driver's DLLs in System32, the only place vp_dl_open looks for a bare
 * name (dl_win32.c). */
#include "platform/gpu_share.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "platform/win32/cuda_share.h"

const struct vp_gpu_system *vp_gpu_system(void)
{
    static const struct vp_gpu_system s = {
        .handle = VP_GPU_HANDLE_NT,
        .handle_name = "Win32 NT handles",
        .driver = "nvcuda.dll",
        .driver_where = "nvcuda.dll cannot be loaded from System32",
        .nvml = "nvml.dll",
        .nvml_where = "nvml.dll cannot be loaded from System32",
        .paging_model = true,
    };
    return &s;
}

struct vp_gpu_share {
    struct vpw_cuda_share *cs;
    char what[512];
};

int vp_gpu_share_create(struct vp_gpu_share **out, char *why, size_t whylen)
{
    struct vp_gpu_share *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    int e = vpw_cuda_share_create(NULL, &s->cs, why, whylen);
    if (e < 0) {
        free(s);
        return e;
    }
    snprintf(s->what, sizeof(s->what), "cuda chunks' Win32 handles get the "
             "security descriptor %s", vpw_cuda_share_sddl(s->cs));
    *out = s;
    return 0;
}

void *vp_gpu_share_meta(const struct vp_gpu_share *s)
{
    return s ? vpw_cuda_share_meta(s->cs) : NULL;
}

const char *vp_gpu_share_describe(const struct vp_gpu_share *s)
{
    return s ? s->what : NULL;
}

void vp_gpu_share_free(struct vp_gpu_share *s)
{
    if (!s)
        return;
    vpw_cuda_share_free(s->cs);
    free(s);
}
