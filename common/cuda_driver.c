/* SPDX-License-Identifier: Apache-2.0 */
#include "common/cuda_driver.h"
#include "platform/dl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

int vcu_load(struct vcu *out, char *why, size_t whylen)
{
    /* Filled here, copied out only once the driver is up. */
    struct vcu t;
    struct vcu *d = &t;
    memset(d, 0, sizeof(*d));
    d->lib = vp_dl_open(vp_gpu_system()->driver);
    if (!d->lib) {
        snprintf(why, whylen, "no NVIDIA driver (%s)",
                 vp_gpu_system()->driver_where);
        return -ENODEV;
    }
    get_proc_fn gpa;
    void *sym = vp_dl_sym(d->lib, "cuGetProcAddress_v2");
    memcpy(&gpa, &sym, sizeof(gpa));
    if (!gpa) {
        snprintf(why, whylen, "the NVIDIA driver is older than CUDA 12 (no "
                 "cuGetProcAddress_v2)");
        vcu_unload(d);
        return -ENODEV;
    }
#define VCU_LOOKUP(name)                                                       \
    {                                                                          \
        void *p = NULL;                                                        \
        CUdriverProcAddressQueryResult q;                                      \
        if (gpa(#name, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) !=          \
                CUDA_SUCCESS || !p) {                                          \
            snprintf(why, whylen, "the NVIDIA driver lacks %s", #name);        \
            vcu_unload(d);                                                     \
            return -ENODEV;                                                    \
        }                                                                      \
        memcpy(&d->name, &p, sizeof(p));                                       \
    }
    VCU_FUNCS(VCU_LOOKUP)
#undef VCU_LOOKUP
    CUresult r = d->cuInit(0);
    if (r != CUDA_SUCCESS) {
        char buf[128];
        snprintf(why, whylen, "cuInit failed: %s", vcu_strerror(d, r, buf, sizeof(buf)));
        vcu_unload(d);
        return -ENODEV;
    }
    d->cuDriverGetVersion(&d->driver_version);
    *out = t;
    return 0;
}

void vcu_unload(struct vcu *d)
{
    if (d && d->lib) {
        vp_dl_close(d->lib);
        memset(d, 0, sizeof(*d));
    }
}

const char *vcu_strerror(const struct vcu *d, CUresult r, char *buf, size_t len)
{
    const char *name = NULL, *str = NULL;
    if (d && d->cuGetErrorName)
        d->cuGetErrorName(r, &name);
    if (d && d->cuGetErrorString)
        d->cuGetErrorString(r, &str);
    snprintf(buf, len, "%s: %s", name ? name : "CUDA error",
             str ? str : "unknown");
    return buf;
}
