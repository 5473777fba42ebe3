/* SPDX-License-Identifier: Apache-2.0 */
/* A PyTorch allocator over vramd: load it with
 *   torch.cuda.memory.CUDAPluggableAllocator(path, "vram_torch_malloc",
 *                                            "vram_torch_free")
 * and PyTorch's allocations (all of them, or a torch.cuda.MemPool's) are
 * carved out of a vramd region of an ad-hoc stage on the tensor's GPU: its
 * address never moves, so CUDA graphs captured over it replay, and vramd
 * accounts for the memory with everything else on the device.
 *
 * The region is reserved once per device (VRAM_TORCH_REGION, default
 * 16GiB of address space, at most the device's capacity) and backed by
 * chunks as allocations need them;
 * within it, first fit over a list of free ranges, 512-byte aligned,
 * neighbours merged on free. Limits: mapped chunks are kept until the
 * process exits (vram_torch_trim gives back the free ones at the end of
 * the region); torch.cuda.empty_cache() frees PyTorch's cached blocks into
 * this allocator, not to vramd; one connection ($VRAM_SOCKET) for all
 * devices. A failure returns NULL (PyTorch raises out of memory) with the
 * reason in vram_torch_last_error(). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <stddef.h>
#include <threads.h>

#include "vram.h"
#include "units.h"
#include "vram_torch_alloc.h"

#define ALIGN 512u
#define MAX_DEVICES 64

struct span {
    uint64_t off, len;
};

struct pool {
    bool ready;
    uint32_t stage, region;
    uint64_t base, chunk_bytes, reserved, mapped; /* mapped: a prefix */
    struct span *free;   /* sorted by offset */
    size_t nfree, capfree;
};

static mtx_t lock;
static once_flag once = ONCE_FLAG_INIT;
static vram_client *client;
static struct pool pools[MAX_DEVICES];
static char last_error[512];

static void init_lock(void)
{
    mtx_init(&lock, mtx_plain | mtx_recursive);
}

const char *vram_torch_last_error(void)
{
    return last_error;
}

static void *fail(const char *fmt, const char *why)
{
    snprintf(last_error, sizeof(last_error), fmt, why);
    return NULL;
}

/* The free list, sorted: insert [off, off+len), merging neighbours. */
static int free_insert(struct pool *p, uint64_t off, uint64_t len)
{
    size_t i = 0;
    while (i < p->nfree && p->free[i].off < off)
        i++;
    bool left = i > 0 && p->free[i - 1].off + p->free[i - 1].len == off;
    bool right = i < p->nfree && off + len == p->free[i].off;
    if (left && right) {
        p->free[i - 1].len += len + p->free[i].len;
        memmove(&p->free[i], &p->free[i + 1], (p->nfree - i - 1) * sizeof(*p->free));
        p->nfree--;
    } else if (left) {
        p->free[i - 1].len += len;
    } else if (right) {
        p->free[i].off = off;
        p->free[i].len += len;
    } else {
        if (p->nfree == p->capfree) {
            size_t cap = p->capfree ? p->capfree * 2 : 64;
            struct span *v = realloc(p->free, cap * sizeof(*v));
            if (!v)
                return -ENOMEM;
            p->free = v;
            p->capfree = cap;
        }
        memmove(&p->free[i + 1], &p->free[i], (p->nfree - i) * sizeof(*p->free));
        p->free[i] = (struct span){off, len};
        p->nfree++;
    }
    return 0;
}

static int pool_open(struct pool *p, int device)
{
    if (!client) {
        char err[512] = "";
        struct vram_client_options o = {.name = "torch-allocator",
                                        .error = err, .error_len = sizeof(err)};
        int e = vram_client_connect(NULL, &o, &client);
        if (e < 0) {
            fail("%s", err[0] ? err : vram_strerror(e));
            return e;
        }
    }
    uint64_t want = 16ull << 30;
    const char *env = getenv("VRAM_TORCH_REGION");
    if (env && vram_size_parse(env, &want) < 0) {
        fail("VRAM_TORCH_REGION='%s' is not a size such as 16GiB", env);
        return -EINVAL;
    }
    /* No more than the device's capacity (a region never outgrows it). */
    struct vram_device_info dev[MAX_DEVICES];
    int nd = vram_devices(client, dev, MAX_DEVICES);
    for (int i = 0; i < nd && i < MAX_DEVICES; i++)
        if (dev[i].id == (uint32_t)device && want > dev[i].capacity_bytes)
            want = dev[i].capacity_bytes;
    uint32_t stage, region;
    int e = vram_stage_register_adhoc(client, (uint32_t)device, 0, 0, &stage);
    if (e == 0)
        e = vram_region_create(client, stage, VRAM_REGION_FIXED, want, 1,
                               &region);
    struct vram_region_info ri;
    if (e == 0)
        e = vram_region_info(client, region, &ri);
    if (e < 0) {
        fail("%s", vram_client_last_error(client));
        return e;
    }
    *p = (struct pool){.ready = true, .stage = stage, .region = region,
                       .base = (uint64_t)(uintptr_t)ri.base,
                       .chunk_bytes = ri.chunk_bytes,
                       .reserved = (uint64_t)ri.lane_slots * ri.chunk_bytes};
    return 0;
}

/* Backs more of the region, at its end, so that a block of len fits. */
static int pool_grow(struct pool *p, uint64_t len)
{
    /* What the free range at the end already gives. */
    uint64_t tail = 0;
    if (p->nfree && p->free[p->nfree - 1].off + p->free[p->nfree - 1].len == p->mapped)
        tail = p->free[p->nfree - 1].len;
    uint64_t need = len > tail ? len - tail : 0;
    uint64_t chunks = (need + p->chunk_bytes - 1) / p->chunk_bytes;
    if (p->mapped + chunks * p->chunk_bytes > p->reserved) {
        fail("%s", "the region is full (raise VRAM_TORCH_REGION)");
        return -ENOSPC;
    }
    int e = vram_region_grow(client, p->region, (uint32_t)chunks);
    if (e < 0) {
        fail("%s", vram_client_last_error(client));
        return e;
    }
    uint64_t off = p->mapped;
    p->mapped += chunks * p->chunk_bytes;
    return free_insert(p, off, chunks * p->chunk_bytes);
}

void *vram_torch_malloc(ptrdiff_t size, int device, void *stream)
{
    (void)stream;
    call_once(&once, init_lock);
    if (size < 0 || device < 0 || device >= MAX_DEVICES)
        return fail("%s", "bad size or device");
    uint64_t len = ((uint64_t)size + ALIGN - 1) / ALIGN * ALIGN;
    if (!len)
        len = ALIGN;
    mtx_lock(&lock);
    struct pool *p = &pools[device];
    void *r = NULL;
    if (!p->ready && pool_open(p, device) < 0)
        goto out;
    for (int pass = 0; pass < 2 && !r; pass++) {
        for (size_t i = 0; i < p->nfree; i++)
            if (p->free[i].len >= len) {
                r = (void *)(uintptr_t)(p->base + p->free[i].off);
                p->free[i].off += len;
                p->free[i].len -= len;
                if (!p->free[i].len) {
                    memmove(&p->free[i], &p->free[i + 1],
                            (p->nfree - i - 1) * sizeof(*p->free));
                    p->nfree--;
                }
                break;
            }
        if (!r && pass == 0 && pool_grow(p, len) < 0)
            break;
    }
out:
    mtx_unlock(&lock);
    return r;
}

void vram_torch_free(void *ptr, ptrdiff_t size, int device, void *stream)
{
    (void)stream;
    if (!ptr || device < 0 || device >= MAX_DEVICES)
        return;
    uint64_t len = ((uint64_t)size + ALIGN - 1) / ALIGN * ALIGN;
    if (!len)
        len = ALIGN;
    mtx_lock(&lock);
    struct pool *p = &pools[device];
    uint64_t a = (uint64_t)(uintptr_t)ptr;
    if (p->ready && a >= p->base && a + len <= p->base + p->mapped)
        free_insert(p, a - p->base, len);
    mtx_unlock(&lock);
}

/* Gives the chunks wholly inside the free range at the end of each
 * device's region back to vramd. Returns the bytes given back. */
long long vram_torch_trim(void)
{
    call_once(&once, init_lock);
    long long given = 0;
    mtx_lock(&lock);
    for (int d = 0; d < MAX_DEVICES; d++) {
        struct pool *p = &pools[d];
        if (!p->ready || !p->nfree)
            continue;
        struct span *t = &p->free[p->nfree - 1];
        if (t->off + t->len != p->mapped)
            continue;
        uint64_t chunks = t->len / p->chunk_bytes;
        if (!chunks || vram_region_shrink(client, p->region, (uint32_t)chunks) < 0)
            continue;
        uint64_t bytes = chunks * p->chunk_bytes;
        p->mapped -= bytes;
        t->len -= bytes;
        if (!t->len)
            p->nfree--;
        given += (long long)bytes;
    }
    mtx_unlock(&lock);
    return given;
}

/* Where a device's region is, for tests and diagnostics: 0 and its base
 * and mapped bytes, or -ENOENT before the first allocation there. */
int vram_torch_region(int device, uint64_t *base, uint64_t *mapped)
{
    call_once(&once, init_lock);
    if (device < 0 || device >= MAX_DEVICES || !pools[device].ready)
        return -ENOENT;
    mtx_lock(&lock);
    *base = pools[device].base;
    *mapped = pools[device].mapped;
    mtx_unlock(&lock);
    return 0;
}
