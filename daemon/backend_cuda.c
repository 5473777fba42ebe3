/* The CUDA backend. The driver is loaded at run time (dlopen, then
 * cuGetProcAddress), so one vramd binary runs on machines without a driver
 * and says in one line why the backend is unavailable there.
 *
 * This build enumerates devices; chunk creation and export on CUDA VMM are
 * the next step (see the README's status section), so the probe reports the
 * backend unavailable after enumeration and --backend auto uses host. */
#include "backend.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#ifdef VRAM_HAVE_CUDA_H
#include <cuda.h>

typedef CUresult (*pfn_cuInit)(unsigned int);
typedef CUresult (*pfn_cuDeviceGetCount)(int *);

int vd_backend_cuda_probe(struct vd_backend **out, char *why, size_t whylen)
{
    (void)out;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, whylen, "cuda backend unavailable: no NVIDIA driver "
                 "(libcuda.so.1 not found)");
        return -ENODEV;
    }
    pfn_cuInit init = (pfn_cuInit)dlsym(lib, "cuInit");
    pfn_cuDeviceGetCount count = (pfn_cuDeviceGetCount)dlsym(lib, "cuDeviceGetCount");
    int n = 0;
    CUresult r = init && count ? init(0) : CUDA_ERROR_NOT_FOUND;
    if (r == CUDA_SUCCESS)
        r = count(&n);
    if (r != CUDA_SUCCESS || n == 0) {
        snprintf(why, whylen, "cuda backend unavailable: the driver reports no "
                 "usable GPU (cuInit/cuDeviceGetCount: error %d)", (int)r);
        dlclose(lib);
        return -ENODEV;
    }
    snprintf(why, whylen, "cuda backend unavailable: %d GPU(s) found, but this "
             "build's cuda backend cannot export chunks yet", n);
    dlclose(lib);
    return -ENOSYS;
}
#else
int vd_backend_cuda_probe(struct vd_backend **out, char *why, size_t whylen)
{
    (void)out;
    snprintf(why, whylen, "cuda backend unavailable: vramd was built without "
             "the CUDA headers (cuda.h)");
    return -ENOSYS;
}
#endif
