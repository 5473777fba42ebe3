/* SPDX-License-Identifier: Apache-2.0 */
/* The host backend: each chunk is a memory object of the chunk size (a
 * sealed memfd on Linux), which nobody can shrink or grow under a mapping.
 * Scrubbing is by fresh memory: a granted chunk's handle goes to its
 * holder, and the next grant of that chunk gets a new, zero-filled object
 * from the pre-filled pool. The daemon keeps only what identifies the
 * memory (to see a client that keeps mapping a chunk it released). */
#include "daemon/backends/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"
#include "daemon/backends/standby.h"
#include "platform/mem.h"

struct host_dev {
    uint64_t chunk_bytes;
    uint32_t nchunks;
    uint64_t *mem_id; /* per chunk: its memory's id while granted, else 0 */
    vp_handle *ready; /* pre-filled pool */
    uint32_t nready, ready_cap;
};

struct host_backend {
    struct vd_backend base;
    struct host_dev dev[64];
};

static int host_chunk_handle(struct vd_backend *b, uint32_t dev, uint32_t idx,
                             vp_handle *out)
{
    struct host_backend *h = (struct host_backend *)b;
    if (dev >= b->ndev || idx >= h->dev[dev].nchunks)
        return -EINVAL;
    struct host_dev *d = &h->dev[dev];
    vp_handle m;
    if (d->nready) {
        m = d->ready[--d->nready]; /* the idle loop refills the pool */
    } else {
        int e = vp_mem_create(d->chunk_bytes, "vramd-chunk", &m);
        if (e < 0)
            return e;
    }
    d->mem_id[idx] = vp_mem_id(m);
    *out = m;
    return 0;
}

static void host_chunk_drop(struct vd_backend *b, uint32_t dev, uint32_t idx)
{
    struct host_backend *h = (struct host_backend *)b;
    if (dev < b->ndev && idx < h->dev[dev].nchunks)
        h->dev[dev].mem_id[idx] = 0;
}

static int host_prefill(struct vd_backend *b, uint32_t dev, uint32_t want,
                        uint32_t n)
{
    struct host_backend *h = (struct host_backend *)b;
    if (dev >= b->ndev)
        return 0;
    struct host_dev *d = &h->dev[dev];
    int made = 0;
    if (want > d->ready_cap)
        want = d->ready_cap;
    while (d->nready > want && (uint32_t)made < n) {
        vp_close(&d->ready[--d->nready]); /* the capacity went down */
        made++;
    }
    while (d->nready < want && (uint32_t)made < n) {
        vp_handle m;
        if (vp_mem_create(d->chunk_bytes, "vramd-chunk", &m) < 0)
            return made;
        d->ready[d->nready++] = m;
        made++;
    }
    return made;
}

static size_t host_fds_held(struct vd_backend *b)
{
    struct host_backend *h = (struct host_backend *)b;
    size_t n = 0;
    for (uint32_t i = 0; i < b->ndev; i++)
        n += h->dev[i].nready;
    return n;
}

static uint64_t host_chunk_mem_id(struct vd_backend *b, uint32_t dev,
                                  uint32_t idx)
{
    struct host_backend *h = (struct host_backend *)b;
    return dev < b->ndev && idx < h->dev[dev].nchunks ? h->dev[dev].mem_id[idx]
                                                      : 0;
}

static uint32_t host_pool_ready(struct vd_backend *b, uint32_t dev)
{
    struct host_backend *h = (struct host_backend *)b;
    return dev < b->ndev ? h->dev[dev].nready : 0;
}

static void host_destroy(struct vd_backend *b)
{
    struct host_backend *h = (struct host_backend *)b;
    for (uint32_t i = 0; i < b->ndev; i++) {
        struct host_dev *d = &h->dev[i];
        for (uint32_t k = 0; k < d->nready; k++)
            vp_close(&d->ready[k]);
        free(d->mem_id);
        free(d->ready);
    }
    free(h);
}

/* R17: a weight set's allocations, memory objects that can be sealed
 * read-only once written. */
static int host_wset_alloc(struct vd_backend *b, uint32_t dev, uint64_t bytes,
                           uint32_t n, vp_handle *out, char *why, size_t whylen)
{
    if (dev >= b->ndev) {
        snprintf(why, whylen, "no device %u", dev);
        return -ENODEV;
    }
    for (uint32_t k = 0; k < n; k++) {
        int e = vp_mem_create_sealable(bytes, "vramd-weights", &out[k]);
        if (e < 0) {
            snprintf(why, whylen, "allocation %u of %u (%llu MiB): %s", k + 1,
                     n, (unsigned long long)(bytes >> 20), strerror(-e));
            while (k--)
                vp_close(&out[k]);
            return e;
        }
    }
    return 0;
}

static int host_wset_seal(struct vd_backend *b, uint32_t dev, vp_handle h,
                          char *why, size_t whylen)
{
    (void)b;
    (void)dev;
    int e = vp_mem_seal_write(h);
    if (e == -EBUSY)
        snprintf(why, whylen, "an allocation is still mapped writable (the "
                 "writer unmaps every allocation before it seals)");
    else if (e < 0)
        snprintf(why, whylen, "sealing an allocation: %s", strerror(-e));
    return e;
}

static const struct vd_backend_ops host_ops = {
    .name = "host",
    .chunk_handle = host_chunk_handle,
    .chunk_drop = host_chunk_drop,
    .prefill = host_prefill,
    .fds_held = host_fds_held,
    .pool_ready = host_pool_ready,
    .wset_alloc = host_wset_alloc,
    .wset_seal = host_wset_seal,
    .chunk_mem_id = host_chunk_mem_id,
    .destroy = host_destroy,
};

/* Each configured device is a pool of its capacity (16 GiB when none is
 * given), in its chunk size. */
int vd_backend_host_create(struct vd_config *cfg,
                           const struct vd_backend_conf *conf,
                           struct vd_backend **out, char *why, size_t whylen)
{
    (void)conf; /* host has no section of its own */
    if (cfg->ndev == 0 || cfg->ndev > 64) {
        snprintf(why, whylen, "between 1 and 64 devices");
        return -EINVAL;
    }
    for (uint32_t i = 0; i < cfg->ndev; i++) {
        uint64_t cap = cfg->dev[i].has_capacity ? cfg->dev[i].l.capacity_bytes
                                                : 16ull << 30;
        if (cap / cfg->dev[i].l.chunk_bytes == 0) {
            snprintf(why, whylen, "devices[%u].capacity: below one chunk", i);
            return -EINVAL;
        }
    }
    struct host_backend *h = calloc(1, sizeof(*h));
    if (!h) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    h->base.ops = &host_ops;
    /* Sections on Windows: pushed with map access only (backend.h). */
    h->base.handles = VD_HANDLES_SECTIONS;
    h->base.ndev = cfg->ndev;
    for (uint32_t i = 0; i < cfg->ndev; i++) {
        struct host_dev *d = &h->dev[i];
        const struct vd_device_conf *dc = &cfg->dev[i];
        uint64_t cap = dc->has_capacity ? dc->l.capacity_bytes : 16ull << 30;
        d->chunk_bytes = dc->l.chunk_bytes;
        d->nchunks = (uint32_t)(cap / d->chunk_bytes);
        d->mem_id = calloc(d->nchunks, sizeof(uint64_t));
        /* Each ready chunk is an fd: the host pool stays small unless the
         * configuration asks (VD_POOL_AUTO means the default here). */
        d->ready_cap = cfg->pool_prefill == VD_POOL_AUTO && !cfg->pool_standby
                           ? VD_POOL_HOST
                           : vd_standby_chunks(cfg->pool_prefill,
                                               cfg->pool_standby, cap, false,
                                               d->chunk_bytes, d->nchunks);
        if (d->ready_cap > d->nchunks)
            d->ready_cap = d->nchunks;
        d->ready = malloc((d->ready_cap ? d->ready_cap : 1) * sizeof(vp_handle));
        if (!d->mem_id || !d->ready) {
            h->base.ndev = i + 1;
            host_destroy(&h->base);
            snprintf(why, whylen, "out of memory");
            return -ENOMEM;
        }
        struct vd_device_info *info = &h->base.info[i];
        info->id = dc->l.id;
        snprintf(info->name, sizeof(info->name), "host memory pool %u", dc->l.id);
        info->total_bytes = (uint64_t)d->nchunks * d->chunk_bytes;
        info->granularity = vp_page_size();
        info->posix_fd = true;
        info->standby_chunks = d->ready_cap;
    }
    *out = &h->base;
    return 0;
}
