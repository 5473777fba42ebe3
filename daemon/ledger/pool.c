/* SPDX-License-Identifier: Apache-2.0 */
/* Devices and their pools of chunks: set-up (the ledger itself, its
 * observer and limits), lookups, and each chunk's state and category as it
 * is placed in a region slot, taken off it, or freed; the reason of the last
 * refusal (vl_why).
 *
 * Enforces R1 (pools: one holder per held chunk, one (region, slot) while
 * mapped) and the free side of R12 (withheld chunks are out of reach). */
#include "daemon/ledger/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vli_fail(struct vl_ledger *L, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->why, sizeof(L->why), fmt, ap);
    va_end(ap);
    return err;
}

const char *vl_why(const struct vl_ledger *L)
{
    return L->why;
}

const char *vl_state_name(int s)
{
    static const char *n[] = {"free", "granted", "loaned", "recalling",
                              "quarantined"};
    return s >= 0 && s < VL_NSTATES ? n[s] : "?";
}

struct vl_device *vli_dev_get(struct vl_ledger *L, uint32_t id)
{
    int i = vl_device_index(L, id);
    return i < 0 ? NULL : &L->dev[i];
}

uint32_t vli_dev_index(struct vl_ledger *L, const struct vl_device *d)
{
    return (uint32_t)(d - L->dev);
}

struct vl_chunk *vli_chunk_get(struct vl_ledger *L, uint64_t id,
                               struct vl_device **d_out, uint32_t *idx_out)
{
    uint32_t di = (uint32_t)(id >> 32), idx = (uint32_t)id;
    if (di >= L->ndev || idx >= L->dev[di].nchunks)
        return NULL;
    if (d_out)
        *d_out = &L->dev[di];
    if (idx_out)
        *idx_out = idx;
    return &L->dev[di].chunks[idx];
}

void vli_set_state(struct vl_device *d, struct vl_chunk *c, int st)
{
    d->count[c->state]--;
    c->state = (uint8_t)st;
    d->count[st]++;
}

static uint32_t *cat_counter(struct vl_device *d, int cat)
{
    switch (cat) {
    case VL_CAT_FIXED: return &d->fixed;
    case VL_CAT_KV: return &d->kv;
    case VL_CAT_LOAN: return &d->loaned;
    default: return NULL;
    }
}

/* By the region's kind, for ad-hoc stages too (status reports an ad-hoc
 * expert region's chunks as loaned bytes, though they are not recallable). */
int vli_cat_of_kind(const struct vl_region *r)
{
    switch (r->kind) {
    case VL_KV: return VL_CAT_KV;
    case VL_EXPERT: return VL_CAT_LOAN;
    default: return VL_CAT_FIXED;
    }
}

static uint32_t *stage_counter(struct vl_stage *s, const struct vl_region *r)
{
    switch (r->kind) {
    case VL_KV: return &s->kv_chunks;
    case VL_EXPERT: return &s->loan_chunks;
    default: return &s->fixed_chunks;
    }
}

void vli_set_cat(struct vl_device *d, struct vl_chunk *c, int cat)
{
    uint32_t *p = cat_counter(d, c->cat);
    if (p)
        (*p)--;
    c->cat = (uint8_t)cat;
    p = cat_counter(d, cat);
    if (p)
        (*p)++;
}

/* Detaches a chunk from its region slot, keeping counters right. */
void vli_expert_unloaned(struct vl_region *r, uint32_t slot)
{
    if (r->kind == VL_EXPERT && slot < r->loaned_prefix)
        r->loaned_prefix = slot;
}

uint32_t vli_loaned_prefix_count(struct vl_ledger *L, const struct vl_region *r)
{
    uint32_t k = 0;
    while (k < r->lane_slots[0] && r->slot_chunk[k] != VL_CHUNK_NONE) {
        struct vl_chunk *c = vli_chunk_get(L, r->slot_chunk[k], NULL, NULL);
        if (!c || c->state != VL_LOANED)
            break;
        k++;
    }
    return k;
}

/* A loaned chunk came to the slot where the prefix ends: the prefix grows
 * over it and over the loaned chunks already after it. */
static void prefix_grow(struct vl_ledger *L, struct vl_region *r)
{
    while (r->loaned_prefix < r->lane_slots[0] &&
           r->slot_chunk[r->loaned_prefix] != VL_CHUNK_NONE) {
        struct vl_chunk *c =
            vli_chunk_get(L, r->slot_chunk[r->loaned_prefix], NULL, NULL);
        if (!c || c->state != VL_LOANED)
            break;
        r->loaned_prefix++;
    }
}

void vli_unplace(struct vl_ledger *L, struct vl_chunk *c)
{
    if (!c->region)
        return;
    struct vl_region *r = vli_region_find(L, c->region);
    if (r) {
        vli_expert_unloaned(r, c->slot);
        r->slot_chunk[c->slot] = VL_CHUNK_NONE;
        r->used--;
        uint32_t lane = c->slot / r->stride_slots, i = c->slot % r->stride_slots;
        uint64_t *lc = r->slot_chunk + (size_t)lane * r->stride_slots;
        r->lane_count[lane]--;
        if (i < r->lane_lo[lane])
            r->lane_lo[lane] = i;
        while (r->lane_hi[lane] > 0 && lc[r->lane_hi[lane] - 1] == VL_CHUNK_NONE)
            r->lane_hi[lane]--;
        struct vl_stage *s = vli_stage_get(L, r->stage);
        if (s) {
            (*stage_counter(s, r))--;
            if (c->state == VL_RECALLING && r->kind == VL_EXPERT)
                s->recalling--;
        }
    }
    c->region = 0;
    c->slot = 0;
}

void vli_holder_set(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
                    uint32_t holder)
{
    struct vl_chunk *c = &d->chunks[idx];
    if (c->holder == holder)
        return;
    uint32_t di = vli_dev_index(L, d);
    struct vl_client *old = c->holder ? vli_client_find(L, c->holder) : NULL;
    if (old) {
        if (c->hprev != VL_NONE)
            d->chunks[c->hprev].hnext = c->hnext;
        else
            old->hfirst[di] = c->hnext;
        if (c->hnext != VL_NONE)
            d->chunks[c->hnext].hprev = c->hprev;
    }
    c->hnext = c->hprev = VL_NONE;
    c->holder = holder;
    struct vl_client *cl = holder ? vli_client_find(L, holder) : NULL;
    if (cl) {
        c->hnext = cl->hfirst[di];
        if (c->hnext != VL_NONE)
            d->chunks[c->hnext].hprev = idx;
        cl->hfirst[di] = idx;
    }
}

/* R1: a held chunk has one holder, the region's client, and one (region,
 * slot); it leaves the old slot before it takes the new one. */
void vli_place(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
               struct vl_region *r, uint32_t slot, int state)
{
    struct vl_chunk *c = &d->chunks[idx];
    vli_unplace(L, c);
    vli_set_state(d, c, state);
    vli_set_cat(d, c, vli_cat_of_kind(r));
    vli_holder_set(L, d, idx, r->client);
    c->region = r->id;
    c->slot = slot;
    r->slot_chunk[slot] = vl_chunk_id(vli_dev_index(L, d), idx);
    r->used++;
    uint32_t lane = slot / r->stride_slots, i = slot % r->stride_slots;
    uint64_t *lc = r->slot_chunk + (size_t)lane * r->stride_slots;
    r->lane_count[lane]++;
    if (i + 1 > r->lane_hi[lane])
        r->lane_hi[lane] = i + 1;
    while (r->lane_lo[lane] < r->lane_slots[lane] &&
           lc[r->lane_lo[lane]] != VL_CHUNK_NONE)
        r->lane_lo[lane]++;
    struct vl_stage *s = vli_stage_get(L, r->stage);
    if (s)
        (*stage_counter(s, r))++;
    if (r->kind == VL_EXPERT && slot == r->loaned_prefix && state == VL_LOANED)
        prefix_grow(L, r);
    vli_note_chunk(L, d, idx, r);
}

/* Free chunks that may be handed out. R12: a lowered capacity withholds
 * some, which stay free and out of reach. */
uint32_t vli_dev_free(const struct vl_device *d)
{
    uint32_t out = d->withheld + d->weights;
    return d->nfree > out ? d->nfree - out : 0;
}

uint32_t vli_take_free(struct vl_device *d)
{
    return d->free_stack[--d->nfree];
}

/* A chunk leaves its holder for good. R1: a free chunk has no holder. The
 * backend scrubs it (DROP) before anyone else can be granted it. */
void vli_to_free(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
                 struct vl_fxlist *fx)
{
    struct vl_chunk *c = &d->chunks[idx];
    uint32_t holder = c->holder;
    vli_unplace(L, c);
    vli_client_lose(vli_client_find(L, holder), d, c->state);
    vli_qstage_clear(L, c);
    vli_set_cat(d, c, VL_CAT_NONE);
    vli_set_state(d, c, VL_FREE);
    vli_holder_set(L, d, idx, 0);
    d->free_stack[d->nfree++] = idx;
    vli_note_chunk(L, d, idx, NULL);
    uint64_t id = vl_chunk_id(vli_dev_index(L, d), idx);
    vli_fx_push(fx, (struct vl_fx){.kind = VL_FX_DROP, .client = holder,
                                   .chunk = id});
}

int vli_stages_cover(struct vl_ledger *L, uint32_t n)
{
    if (n <= L->nstage)
        return 0;
    if (n > VL_MAX_STAGES)
        return -E2BIG;
    uint32_t cap = L->nstage ? L->nstage : VL_CONFIG_STAGES;
    while (cap < n)
        cap *= 2;
    if (cap > VL_MAX_STAGES)
        cap = VL_MAX_STAGES;
    struct vl_stage *v = realloc(L->stage, (size_t)cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    memset(v + L->nstage, 0, (size_t)(cap - L->nstage) * sizeof(*v));
    L->stage = v;
    L->nstage = cap;
    return 0;
}

int vl_init(struct vl_ledger *L, const struct vl_device_cfg *devs, uint32_t ndev,
            uint64_t va_base, uint64_t va_size)
{
    memset(L, 0, sizeof(*L));
    if (ndev == 0 || ndev > VL_MAX_DEVICES)
        return vli_fail(L, -EINVAL, "between 1 and %d devices", VL_MAX_DEVICES);
    L->next_region_id = 1;
    L->limits = (struct vl_limits){.chunks_per_client = UINT32_MAX,
                                   .regions_per_client = UINT32_MAX,
                                   .stages_per_client = UINT32_MAX};
    for (uint32_t i = 0; i < ndev; i++) {
        struct vl_device *d = &L->dev[i];
        d->cfg = devs[i];
        if (!d->cfg.chunk_bytes || d->cfg.capacity_bytes < d->cfg.chunk_bytes) {
            uint32_t id = d->cfg.id;
            vl_fini(L);
            return vli_fail(L, -EINVAL, "device %u: capacity below one chunk",
                            id);
        }
        /* Chunk ids carry the index in 32 bits, lookups go by id. */
        if (d->cfg.capacity_bytes / d->cfg.chunk_bytes >= UINT32_MAX) {
            uint32_t id = d->cfg.id;
            vl_fini(L);
            return vli_fail(L, -EINVAL, "device %u: more than 2^32 chunks", id);
        }
        for (uint32_t j = 0; j < i; j++)
            if (L->dev[j].cfg.id == d->cfg.id) {
                uint32_t id = d->cfg.id;
                vl_fini(L);
                return vli_fail(L, -EEXIST, "device %u defined twice", id);
            }
        /* R1: capacity / chunk_bytes chunks, all free. */
        d->nchunks = (uint32_t)(d->cfg.capacity_bytes / d->cfg.chunk_bytes);
        d->chunks = calloc(d->nchunks, sizeof(*d->chunks));
        d->free_stack = malloc(d->nchunks * sizeof(uint32_t));
        if (!d->chunks || !d->free_stack) {
            L->ndev = i + 1;
            vl_fini(L);
            return vli_fail(L, -ENOMEM, "out of memory");
        }
        for (uint32_t k = 0; k < d->nchunks; k++) {
            d->free_stack[k] = d->nchunks - 1 - k; /* low indexes first */
            d->chunks[k].qstage = VL_QSTAGE_NONE;
            d->chunks[k].hnext = d->chunks[k].hprev = VL_NONE;
        }
        d->nfree = d->nchunks;
        d->count[VL_FREE] = d->nchunks;
        L->ndev = i + 1;
    }
    L->va_free = malloc(sizeof(*L->va_free));
    if (!L->va_free || vli_stages_cover(L, VL_CONFIG_STAGES) < 0) {
        vl_fini(L);
        return vli_fail(L, -ENOMEM, "out of memory");
    }
    L->va_free[0] = (struct vl_va_range){va_base, va_size};
    L->nva_free = 1;
    L->va_base = va_base;
    L->va_size = va_size;
    return 0;
}

void vl_fini(struct vl_ledger *L)
{
    if (!L)
        return;
    for (uint32_t i = 0; i < L->ndev; i++) {
        free(L->dev[i].chunks);
        free(L->dev[i].free_stack);
    }
    for (size_t i = 0; i < L->nregion; i++)
        vli_region_free(L->region[i]);
    for (uint32_t i = 0; i < L->nstage; i++)
        free(L->stage[i].slot_layer);
    free(L->stage);
    free(L->region);
    free(L->rh);
    free(L->client);
    free(L->ch);
    free(L->va_free);
    free(L->va_hold);
    vli_weights_free_all(L);
    memset(L, 0, sizeof(*L));
}

int vl_new(const struct vl_device_cfg *devs, uint32_t ndev, uint64_t va_base,
           uint64_t va_size, uint64_t region_align, struct vl_ledger **out,
           char *why, size_t whylen)
{
    struct vl_ledger *L = malloc(sizeof(*L));
    if (!L) {
        if (why && whylen)
            snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    int e = vl_init(L, devs, ndev, va_base, va_size);
    if (e < 0) {
        if (why && whylen)
            snprintf(why, whylen, "%s", L->why);
        free(L);
        return e;
    }
    /* The daemon reserves regions at 1 GiB: the CUDA driver ignores the
     * address hint of smaller reservations. */
    L->region_align = region_align;
    *out = L;
    return 0;
}

void vl_free(struct vl_ledger *L)
{
    if (!L)
        return;
    vl_fini(L);
    free(L);
}

void vl_set_observer(struct vl_ledger *L, const struct vl_observer *obs)
{
    L->obs = obs ? *obs : (struct vl_observer){0};
}

/* R14: the daemon's configuration, judged in the ledger so that every
 * request that grows a client meets the same limits. */
void vl_set_limits(struct vl_ledger *L, const struct vl_limits *lim)
{
    L->limits = *lim;
}
