/* NVML, loaded at run time like the CUDA driver: only for what the driver
 * API cannot say without a CUDA context, how much memory a GPU has free
 * (other processes' allocations included). vramd asks it before it fills a
 * device's pool, so that it never takes what others on the GPU need. */
#ifndef VRAM_NVML_H
#define VRAM_NVML_H

#include <stdint.h>

struct vnvml {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    int (*by_uuid)(const char *uuid, void **dev);
    int (*memory)(void *dev, void *mem);
};

/* Loads and initialises NVML. -ENOENT without it (no driver, or a driver
 * without NVML): callers then go by the device's capacity alone. */
int vnvml_load(struct vnvml *n);
/* Free bytes of the GPU with this UUID ("GPU-..."), as NVML counts them. */
int vnvml_free_bytes(const struct vnvml *n, const char *uuid, uint64_t *out);
void vnvml_unload(struct vnvml *n); /* NULL-tolerant, idempotent */

#endif
