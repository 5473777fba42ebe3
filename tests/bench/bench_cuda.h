/* SPDX-License-Identifier: Apache-2.0 */
/* What the CUDA benchmarks (vram-bench, vram-bench-driver) share: the
 * allocation properties and the access of a chunk of GPU 0. Each is one
 * program, so these are static inline here. */
#ifndef VRAM_BENCH_CUDA_H
#define VRAM_BENCH_CUDA_H

#include <stdbool.h>
#include <string.h>

#include "common/cuda_driver.h"

/* Device memory of GPU 0; shareable: with the handle type vramd's chunks
 * ask for (an fd), else none (what an engine allocates in-process). */
static inline CUmemAllocationProp bench_cu_prop(bool shareable)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes =
        shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
}

/* Read and write from GPU 0. */
static inline CUmemAccessDesc bench_cu_access(void)
{
    CUmemAccessDesc a;
    memset(&a, 0, sizeof(a));
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return a;
}

#endif
