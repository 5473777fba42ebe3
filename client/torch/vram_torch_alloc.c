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
 * reason in vram_torch_last_error().
 *
 * Tags (as torch_memory_saver's regions): allocations made while a thread's
 * tag is set (vram_torch_set_tag) come from that tag's own region, on an
 * ad-hoc stage of its own, so that a tag sleeps and wakes alone
 * (vram_torch_sleep, vram_torch_wake: vram_stage_sleep and _wake, at the
 * same addresses, CUDA graphs over them replaying after the wake). A tag
 * set with backup keeps its bytes across a sleep (a fixed region, copied to
 * pinned host memory); one without has them discarded (a kv region: its
 * memory comes back undefined), as KV whose sequences are started again.
 * Use one torch.cuda.MemPool per tag: PyTorch caches blocks per pool, and a
 * pool's segments are made under the tag that was set. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <stddef.h>
#include <threads.h>

#include "client/include/vram.h"
#include "proto/units.h"
#include "client/torch/vram_torch_alloc.h"

#define ALIGN 512u
#define MAX_DEVICES 64
#define MAX_TAGS 16 /* the untagged one (0) included */
#define TAG_MAX 31  /* bytes of a tag's name */

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
static struct pool pools[MAX_TAGS][MAX_DEVICES];
static struct tag {
    char name[TAG_MAX + 1];
    bool backup;
    bool asleep;
} tags[MAX_TAGS] = {{"", true, false}};
static int ntags = 1;
static thread_local int cur_tag; /* this thread's: an index of tags */
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

static int pool_open(struct pool *p, int device, const struct tag *t)
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
    if (env && vw_size_parse(env, &want) < 0) {
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
        e = vram_region_create(client, stage,
                               t->backup ? VRAM_REGION_FIXED : VRAM_REGION_KV,
                               want, 1, &region);
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
    struct pool *p = &pools[cur_tag][device];
    void *r = NULL;
    if (tags[cur_tag].asleep) {
        snprintf(last_error, sizeof(last_error), "tag '%s' sleeps: wake it first",
                 tags[cur_tag].name);
        goto out;
    }
    if (!p->ready && pool_open(p, device, &tags[cur_tag]) < 0)
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
    /* A block goes back to the pool of whichever tag it came from (PyTorch
     * may free it on another thread, under another tag). */
    uint64_t a = (uint64_t)(uintptr_t)ptr;
    for (int t = 0; t < ntags; t++) {
        struct pool *p = &pools[t][device];
        if (p->ready && a >= p->base && a + len <= p->base + p->mapped) {
            free_insert(p, a - p->base, len);
            break;
        }
    }
    mtx_unlock(&lock);
}

/* Gives the chunks wholly inside the free range at the end of each
 * device's region back to vramd. Returns the bytes given back. */
long long vram_torch_trim(void)
{
    call_once(&once, init_lock);
    long long given = 0;
    mtx_lock(&lock);
    for (int d = 0; d < MAX_DEVICES * MAX_TAGS; d++) {
        struct pool *p = &pools[d / MAX_DEVICES][d % MAX_DEVICES];
        if (!p->ready || !p->nfree || tags[d / MAX_DEVICES].asleep)
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
    if (device < 0 || device >= MAX_DEVICES)
        return -ENOENT;
    mtx_lock(&lock);
    const struct pool *p = &pools[cur_tag][device];
    int e = p->ready ? 0 : -ENOENT;
    if (e == 0) {
        *base = p->base;
        *mapped = p->mapped;
    }
    mtx_unlock(&lock);
    return e;
}

static int tag_find(const char *name)
{
    for (int t = 0; t < ntags; t++)
        if (strcmp(tags[t].name, name) == 0)
            return t;
    return -1;
}

int vram_torch_set_tag(const char *name, int backup)
{
    call_once(&once, init_lock);
    if (!name)
        name = "";
    if (strlen(name) > TAG_MAX) {
        snprintf(last_error, sizeof(last_error), "a tag is at most %d bytes", TAG_MAX);
        return -ENAMETOOLONG;
    }
    mtx_lock(&lock);
    int t = tag_find(name), e = 0;
    if (t < 0 && ntags == MAX_TAGS) {
        snprintf(last_error, sizeof(last_error), "at most %d tags", MAX_TAGS - 1);
        e = -E2BIG;
    } else if (t < 0) {
        t = ntags++;
        snprintf(tags[t].name, sizeof(tags[t].name), "%s", name);
        tags[t].backup = backup != 0;
    } else if (t > 0 && tags[t].backup != (backup != 0)) {
        snprintf(last_error, sizeof(last_error), "tag '%s' was set %s a backup", name,
                 tags[t].backup ? "with" : "without");
        e = -EINVAL;
    }
    if (e == 0)
        cur_tag = t;
    mtx_unlock(&lock);
    return e;
}

const char *vram_torch_get_tag(void)
{
    return tags[cur_tag].name;
}

/* stage_sleep or stage_wake of every device's stage of the tag. */
static int tag_turn(const char *name, bool sleep)
{
    call_once(&once, init_lock);
    mtx_lock(&lock);
    int t = tag_find(name ? name : ""), e = 0;
    if (t < 0) {
        snprintf(last_error, sizeof(last_error), "no tag '%s'", name ? name : "");
        e = -ENOENT;
    } else if (tags[t].asleep == sleep) {
        snprintf(last_error, sizeof(last_error), "tag '%s' %s already", tags[t].name,
                 sleep ? "sleeps" : "is awake");
        e = -EALREADY;
    }
    for (int d = 0; e == 0 && d < MAX_DEVICES; d++) {
        struct pool *p = &pools[t][d];
        if (!p->ready)
            continue;
        /* A tag without backup is a kv region: discarded. The pinned host
         * buffer stays for the next sleep (the two take turns). */
        e = sleep ? vram_stage_sleep(client, p->stage, VRAM_SLEEP_DISCARD_KV)
                  : vram_stage_wake(client, p->stage, VRAM_WAKE_KEEP_HOST);
        if (e < 0) {
            snprintf(last_error, sizeof(last_error), "%s", vram_client_last_error(client));
            /* What turned already turns back: the tag is one thing. */
            for (int k = 0; k < d; k++)
                if (pools[t][k].ready)
                    (void)(sleep ? vram_stage_wake(client, pools[t][k].stage,
                                                   VRAM_WAKE_KEEP_HOST)
                                 : vram_stage_sleep(client, pools[t][k].stage,
                                                    VRAM_SLEEP_DISCARD_KV));
        }
    }
    if (e == 0)
        tags[t].asleep = sleep;
    mtx_unlock(&lock);
    return e;
}

int vram_torch_sleep(const char *tag)
{
    return tag_turn(tag, true);
}

int vram_torch_wake(const char *tag)
{
    return tag_turn(tag, false);
}
