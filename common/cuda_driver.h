/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA driver, loaded at run time. Nothing in the project links against
 * libcuda: vramd and libvram dlopen it and look every entry point up through
 * cuGetProcAddress, so the same binaries run on machines without a driver
 * and can say in one line why CUDA is unavailable there. */
#ifndef VRAM_CUDA_DRIVER_H
#define VRAM_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "platform/gpu_share.h"

/* How a chunk is shared between processes, as this system has it
 * (platform/gpu_share.h: a POSIX fd on Linux, an NT HANDLE on Windows).
 * The driver takes the fd as an integer in the pointer argument, the
 * HANDLE as itself. VCU_SHAREABLE_ATTR is the device attribute that says a
 * GPU can export that kind. */
static inline CUmemAllocationHandleType vcu_shareable_type(void)
{
    return vp_gpu_system()->handle == VP_GPU_HANDLE_NT
               ? CU_MEM_HANDLE_TYPE_WIN32
               : CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

static inline CUdevice_attribute vcu_shareable_attr(void)
{
    return vp_gpu_system()->handle == VP_GPU_HANDLE_NT
               ? CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED
               : CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED;
}

#define VCU_SHAREABLE_TYPE vcu_shareable_type()
#define VCU_SHAREABLE_ATTR vcu_shareable_attr()
#define VCU_SHAREABLE_NAME (vp_gpu_system()->handle_name)
static inline void *vcu_shareable_arg(intptr_t h)
{
    return (void *)h;
}

/* Every entry point the project uses, with the ABI of CUDA 12.0. */
#define VCU_FUNCS(X)                                                           \
    X(cuInit)                                                                  \
    X(cuDriverGetVersion)                                                      \
    X(cuDeviceGetCount)                                                        \
    X(cuDeviceGet)                                                             \
    X(cuDeviceGetName)                                                         \
    X(cuDeviceGetUuid)                                                         \
    X(cuDeviceTotalMem)                                                        \
    X(cuDeviceGetAttribute)                                                    \
    X(cuDeviceCanAccessPeer)                                                   \
    X(cuDevicePrimaryCtxRetain)                                                \
    X(cuDevicePrimaryCtxRelease)                                               \
    X(cuDevicePrimaryCtxGetState)                                              \
    X(cuCtxGetDevice)                                                          \
    X(cuCtxSetCurrent)                                                         \
    X(cuCtxGetCurrent)                                                         \
    X(cuCtxSynchronize)                                                        \
    X(cuMemGetAllocationGranularity)                                           \
    X(cuMemCreate)                                                             \
    X(cuMemRelease)                                                            \
    X(cuMemExportToShareableHandle)                                            \
    X(cuMemImportFromShareableHandle)                                          \
    X(cuMemAddressReserve)                                                     \
    X(cuMemAddressFree)                                                        \
    X(cuMemMap)                                                                \
    X(cuMemUnmap)                                                              \
    X(cuMemSetAccess)                                                          \
    X(cuMemsetD8)                                                              \
    X(cuMemcpyDtoH)                                                            \
    X(cuMemcpyHtoD)                                                            \
    X(cuMemHostAlloc)                                                          \
    X(cuMemFreeHost)                                                           \
    X(cuGetErrorName)                                                          \
    X(cuGetErrorString)

struct vcu {
    void *lib;
#define VCU_MEMBER(name) __typeof__(&name) name;
    VCU_FUNCS(VCU_MEMBER)
#undef VCU_MEMBER
    int driver_version;
};

/* Loads the driver and initialises it (cuInit). Returns 0, or -ENODEV with
 * a one-line reason in why (d untouched). */
int vcu_load(struct vcu *d, char *why, size_t whylen);
void vcu_unload(struct vcu *d);
/* "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for r. */
const char *vcu_strerror(const struct vcu *d, CUresult r, char *buf, size_t len);

#endif
