/* SPDX-License-Identifier: Apache-2.0 */
/* NVML, loaded at run time like the CUDA driver: only for what the driver
 * API cannot say without a CUDA context, how much memory a GPU has free
 * (other processes' allocations included). vramd asks it before it fills a
 * device's pool, so that it never takes what others on the GPU need; on a
 * GPU under WDDM (Windows) it also asks before every chunk it creates,
 * since there an allocation beyond the GPU's memory does not fail. */
#ifndef VRAM_NVML_H
#define VRAM_NVML_H

#include <stddef.h>
#include <stdint.h>

struct vnvml {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    int (*by_uuid)(const char *uuid, void **dev);
    int (*memory)(void *dev, void *mem);
};

/* Loads and initialises NVML. -ENOENT without it (no driver, or a driver
 * without NVML), with why saying which (why may be NULL): callers then go
 * by the device's capacity alone, except on WDDM. *n is written only on
 * success. */
int vnvml_load(struct vnvml *n, char *why, size_t whylen);
/* Free bytes of the GPU with this UUID ("GPU-..."), as NVML counts them:
 * the dedicated (framebuffer) memory, never the shared system memory WDDM
 * can page to. */
int vnvml_free_bytes(const struct vnvml *n, const char *uuid, uint64_t *out);
void vnvml_unload(struct vnvml *n); /* NULL-tolerant, idempotent */

/* Whether need more bytes fit in free bytes of dedicated memory while keep
 * bytes stay to others: 0, or -ENOSPC with why saying how much is free and
 * why vramd refuses rather than let the allocation go ahead (under WDDM it
 * would page to system memory instead of failing). Pure arithmetic. */
int vnvml_fits(uint64_t free, uint64_t keep, uint64_t need, char *why,
               size_t whylen);

#endif
