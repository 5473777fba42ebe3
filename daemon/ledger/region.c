/* SPDX-License-Identifier: Apache-2.0 */
/* Regions: their geometry and addresses, the lanes of slots their chunks
 * are mapped in, ad-hoc regions (create, grow, release), grants to lanes
 * and dropping every region of a client or stage.
 *
 * Enforces R1 (a slot holds one chunk), R2 (an ad-hoc region only uses
 * memory no promise needs; a fixed region only its reservation), R13 (a
 * gone client's address ranges stay held) and R14 (ad-hoc regions and
 * chunks per client). */
#include "daemon/ledger/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *vl_kind_name(int k)
{
    static const char *n[] = {"kv", "expert", "fixed", "draft_kv"};
    return k >= 0 && k < VL_NKINDS ? n[k] : "?";
}

int vl_kind_parse(const char *s)
{
    for (int k = 0; s && k < VL_NKINDS; k++)
        if (strcmp(s, vl_kind_name(k)) == 0)
            return k;
    return -EINVAL;
}

#define RH_GONE UINT32_MAX

static size_t rh_home(uint32_t id, size_t cap)
{
    return (size_t)((id * 2654435761u) & (uint32_t)(cap - 1));
}

struct vl_region *vli_region_find(const struct vl_ledger *L, uint32_t id)
{
    if (!L->rh_cap)
        return NULL;
    for (size_t i = rh_home(id, L->rh_cap);; i = (i + 1) & (L->rh_cap - 1)) {
        uint32_t v = L->rh[i];
        if (v == 0)
            return NULL;
        if (v != RH_GONE && L->region[v - 1]->id == id)
            return L->region[v - 1];
    }
}

static size_t *rh_slot_of(struct vl_ledger *L, const struct vl_region *r,
                          size_t *slot)
{
    for (size_t i = rh_home(r->id, L->rh_cap);; i = (i + 1) & (L->rh_cap - 1))
        if (L->rh[i] != RH_GONE && L->rh[i] && L->region[L->rh[i] - 1] == r) {
            *slot = i;
            return slot;
        }
}

/* Builds the table again, with room for twice what is there. */
static int rh_rebuild(struct vl_ledger *L, size_t want)
{
    size_t cap = 64;
    while (cap < 2 * want)
        cap *= 2;
    uint32_t *t = calloc(cap, sizeof(*t));
    if (!t)
        return -ENOMEM;
    free(L->rh);
    L->rh = t;
    L->rh_cap = cap;
    L->rh_used = L->nregion;
    for (size_t k = 0; k < L->nregion; k++) {
        size_t i = rh_home(L->region[k]->id, cap);
        while (t[i])
            i = (i + 1) & (cap - 1);
        t[i] = (uint32_t)k + 1;
    }
    return 0;
}

int vli_region_reserve(struct vl_ledger *L, size_t n)
{
    if (L->nregion + n > L->region_cap) {
        size_t cap = L->region_cap ? L->region_cap : 16;
        while (cap < L->nregion + n)
            cap *= 2;
        struct vl_region **v = realloc(L->region, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        L->region = v;
        L->region_cap = cap;
    }
    if (2 * (L->rh_used + n) > L->rh_cap)
        return rh_rebuild(L, L->nregion + n);
    return 0;
}

int vli_region_add(struct vl_ledger *L, struct vl_region *r)
{
    if (vli_region_reserve(L, 1) < 0)
        return -ENOMEM;
    r->index = L->nregion;
    L->region[L->nregion++] = r;
    size_t i = rh_home(r->id, L->rh_cap);
    while (L->rh[i] && L->rh[i] != RH_GONE)
        i = (i + 1) & (L->rh_cap - 1);
    L->rh_used += L->rh[i] == 0;
    L->rh[i] = (uint32_t)r->index + 1;
    return 0;
}

void vli_region_remove(struct vl_ledger *L, struct vl_region *r)
{
    size_t slot;
    rh_slot_of(L, r, &slot);
    L->rh[slot] = RH_GONE;
    size_t last = L->nregion - 1;
    if (r->index != last) {
        struct vl_region *m = L->region[last];
        rh_slot_of(L, m, &slot);
        L->region[r->index] = m;
        m->index = r->index;
        L->rh[slot] = (uint32_t)m->index + 1;
    }
    L->nregion--;
}

/* R14: a client's count of ad-hoc regions, kept as regions come (in) and
 * go; a configured stage's regions are part of the stage. */
void vli_region_count(struct vl_ledger *L, const struct vl_region *r, bool in)
{
    struct vl_client *cl = vli_client_find(L, r->client);
    if (!cl || L->stage[r->stage].configured)
        return;
    if (in)
        cl->regions++;
    else if (cl->regions)
        cl->regions--;
}

void vli_region_free(struct vl_region *r)
{
    if (r) {
        free(r->slot_chunk);
        free(r);
    }
}

int vli_region_geometry(struct vl_ledger *L, const struct vl_device *d,
                        uint32_t lanes, const uint32_t *lane_slots,
                        struct vli_geometry *g)
{
    uint64_t cb = d->cfg.chunk_bytes;
    uint32_t stride = 0;
    for (uint32_t l = 0; l < lanes; l++)
        if (lane_slots[l] > stride)
            stride = lane_slots[l];
    if (stride == 0)
        return vli_fail(L, -EINVAL, "a region needs at least one chunk per "
                        "lane");
    uint64_t align = cb > (2u << 20) ? cb : (2u << 20);
    g->lane_stride = ((uint64_t)stride * cb + align - 1) / align * align;
    g->total = (uint64_t)lanes * g->lane_stride;
    /* The address space a client reserves: whole alignment units, so that a
     * region is never a small reservation (the CUDA driver serves those from
     * its own pool and ignores the address) and never overlaps the next. */
    g->unit = L->region_align > align ? L->region_align : align;
    g->va_bytes = vli_div_up(g->total, g->unit) * g->unit;
    return 0;
}

/* A new region, at a free address (base 0) with the next id (id 0), or at
 * the address and with the id a resuming client had (R13). */
static int region_new_at(struct vl_ledger *L, uint32_t client,
                         struct vl_stage *s, int kind, uint32_t lanes,
                         const uint32_t *lane_slots, uint64_t base, uint32_t id,
                         struct vl_region **out)
{
    struct vl_device *d = vli_dev_get(L, s->cfg.device);
    uint64_t cb = d->cfg.chunk_bytes;
    struct vli_geometry g = {0}; /* set on success; gcc -O2 for mingw cannot see that */
    int ge = vli_region_geometry(L, d, lanes, lane_slots, &g);
    if (ge < 0)
        return ge;
    uint64_t lane_stride = g.lane_stride, total = g.total, va_bytes = g.va_bytes,
             unit = g.unit;
    /* R16: new address space counts against the client's and its tenant's
     * quotas; a range taken back on a resume was counted already. */
    int qe = base ? 0 : vli_quota_va(L, client, va_bytes);
    if (qe < 0)
        return qe;

    struct vl_region *r = calloc(1, sizeof(*r));
    if (!r)
        return vli_fail(L, -ENOMEM, "out of memory");
    r->stride_slots = (uint32_t)(lane_stride / cb);
    r->slot_chunk = malloc((size_t)lanes * r->stride_slots * sizeof(uint64_t));
    if (!r->slot_chunk) {
        free(r);
        return vli_fail(L, -ENOMEM, "out of memory");
    }
    int e = base ? vli_va_take_exact(L, base, va_bytes)
                 : vli_va_alloc(L, va_bytes, unit, &r->base);
    if (e < 0) {
        vli_region_free(r);
        if (base)
            return vli_fail(L, e, "address %#llx (+%llu MiB) is taken",
                            (unsigned long long)base,
                            (unsigned long long)(va_bytes >> 20));
        return vli_fail(L, e, "no room for %llu MiB in the address window",
                        (unsigned long long)(total >> 20));
    }
    if (base)
        r->base = base;
    for (size_t k = 0; k < (size_t)lanes * r->stride_slots; k++)
        r->slot_chunk[k] = VL_CHUNK_NONE;
    if (id) {
        r->id = id;
        if (id >= L->next_region_id && id < UINT32_MAX)
            L->next_region_id = id + 1;
    } else {
        r->id = L->next_region_id++;
    }
    r->client = client;
    r->stage = (uint32_t)(s - L->stage);
    r->kind = (uint8_t)kind;
    r->device = s->cfg.device;
    r->lane_stride = lane_stride;
    r->va_bytes = va_bytes;
    r->lanes = lanes;
    memcpy(r->lane_slots, lane_slots, lanes * sizeof(uint32_t));
    r->fixed_index = VL_NONE;
    if (vli_region_add(L, r) < 0) {
        vli_va_release(L, r->base, r->va_bytes);
        vli_region_free(r);
        return vli_fail(L, -ENOMEM, "out of memory");
    }
    r->tag = vli_note_va_take(L, r->id, client, r->base, r->va_bytes);
    vli_region_count(L, r, true);
    vli_client_va(L, client, (int64_t)va_bytes);
    *out = r;
    return 0;
}

int vli_region_new(struct vl_ledger *L, uint32_t client, struct vl_stage *s,
                   int kind, uint32_t lanes, const uint32_t *lane_slots,
                   struct vl_region **out)
{
    return region_new_at(L, client, s, kind, lanes, lane_slots, 0, 0, out);
}

struct vl_region *vli_own_region(struct vl_ledger *L, uint32_t client,
                                 uint32_t region)
{
    struct vl_region *r = vli_region_find(L, region);
    return r && r->client == client ? r : NULL;
}

uint32_t vli_lane_used(const struct vl_region *r, uint32_t lane)
{
    return r->lane_count[lane];
}

/* Lowest empty slot of a lane, or VL_NONE. */
uint32_t vli_lane_first_empty(const struct vl_region *r, uint32_t lane)
{
    for (uint32_t i = r->lane_lo[lane]; i < r->lane_slots[lane]; i++) {
        uint32_t k = lane * r->stride_slots + i;
        if (r->slot_chunk[k] == VL_CHUNK_NONE)
            return k;
    }
    return VL_NONE;
}

/* Highest occupied slot of a lane holding a chunk in state st, or VL_NONE. */
uint32_t vli_lane_last_in(struct vl_ledger *L, const struct vl_region *r,
                          uint32_t lane, int st)
{
    return vli_lane_last_below(L, r, lane, st, r->lane_hi[lane]);
}

/* The same, below index below of the lane: a caller taking many chunks from
 * the top walks the lane once (below = the index it took last). */
uint32_t vli_lane_last_below(struct vl_ledger *L, const struct vl_region *r,
                             uint32_t lane, int st, uint32_t below)
{
    if (below > r->lane_hi[lane])
        below = r->lane_hi[lane];
    for (uint32_t i = below; i-- > 0;) {
        uint32_t k = lane * r->stride_slots + i;
        if (r->slot_chunk[k] == VL_CHUNK_NONE)
            continue;
        struct vl_chunk *c = vli_chunk_get(L, r->slot_chunk[k], NULL, NULL);
        if (c->state == st)
            return k;
    }
    return VL_NONE;
}

/* Grants free chunks to the first empty slots of each lane. The caller has
 * checked that enough are free. */
void vli_grant_lanes(struct vl_ledger *L, struct vl_region *r,
                     const uint32_t *per_lane, int state,
                     struct vl_fxlist *fx)
{
    struct vl_device *d = vli_dev_get(L, r->device);
    struct vl_client *cl = vli_client_find(L, r->client);
    for (uint32_t l = 0; l < r->lanes; l++)
        for (uint32_t n = 0; n < per_lane[l]; n++) {
            uint32_t slot = vli_lane_first_empty(r, l);
            uint32_t idx = vli_take_free(d);
            vli_place(L, d, idx, r, slot, state);
            vli_client_gain(cl, d, state);
            uint64_t id = vl_chunk_id(vli_dev_index(L, d), idx);
            vli_fx_push(fx, (struct vl_fx){.kind = VL_FX_MAP,
                                           .client = r->client, .chunk = id,
                                           .region = r->id, .slot = slot,
                                           .stage = r->stage});
        }
}

/* A region goes; its address range is free again, or with hold still
 * reserved by its (gone) client's process (R13). */
static void region_drop(struct vl_ledger *L, struct vl_region *r, bool hold)
{
    struct vl_va_hold h = {.client = r->client, .region = r->id,
                           .base = r->base, .size = r->va_bytes, .tag = r->tag};
    if (!hold || vli_hold_add(L, &h) < 0) {
        vli_va_release(L, r->base, r->va_bytes);
        vli_note_va_give(L, r->tag);
        vli_client_va(L, r->client, -(int64_t)r->va_bytes);
    }
    vli_region_count(L, r, false);
    vli_region_remove(L, r);
    vli_region_free(r);
}

int vl_region_create(struct vl_ledger *L, uint32_t client, uint32_t stage,
                     int kind, uint64_t lane_bytes, uint32_t lanes,
                     uint32_t *region_out)
{
    /* R14: first, as the daemon did before it read the request. */
    const struct vl_client *cl = vli_client_find(L, client);
    if (cl && cl->regions >= L->limits.regions_per_client)
        return vli_fail(L, -E2BIG, "limit of %u regions per client reached",
                        L->limits.regions_per_client);
    struct vl_stage *s = vli_stage_get(L, stage);
    if (!s || s->owner != client)
        return vli_fail(L, -ENOENT, "stage %u is not yours", stage);
    if (kind < 0 || kind >= VL_NKINDS)
        return vli_fail(L, -EINVAL, "kind must be kv, expert, fixed or "
                        "draft_kv");
    if (s->configured)
        return vli_fail(L, -EPERM, "stage %u is configured: its regions are "
                        "made at registration", stage);
    int ae = vli_stage_awake(L, s); /* R18 */
    if (ae < 0)
        return ae;
    if (lanes == 0 || lanes > VL_MAX_LANES)
        return vli_fail(L, -E2BIG, "lanes must be 1..%d", VL_MAX_LANES);
    struct vl_device *d = vli_dev_get(L, s->cfg.device);
    uint64_t cb = d->cfg.chunk_bytes;
    if (lane_bytes == 0 || lane_bytes > d->cfg.capacity_bytes)
        return vli_fail(L, -E2BIG, "region lane of %llu bytes: must be 1..%llu "
                        "(the device's capacity)",
                        (unsigned long long)lane_bytes,
                        (unsigned long long)d->cfg.capacity_bytes);
    uint32_t slots[VL_MAX_LANES];
    for (uint32_t l = 0; l < lanes; l++)
        slots[l] = (uint32_t)vli_div_up(lane_bytes, cb);
    struct vl_region *r;
    int e = vli_region_new(L, client, s, kind, lanes, slots, &r);
    if (e < 0)
        return e;
    *region_out = r->id;
    return 0;
}

int vl_region_grow(struct vl_ledger *L, uint32_t client, uint32_t region,
                   uint32_t n, struct vl_fxlist *fx)
{
    /* R14: the quota first, counting every lane (n alone when there is no
     * such region: the refusal that follows is the ledger's own). */
    const struct vl_region *any = vli_region_find(L, region);
    const struct vl_client *cl = vli_client_find(L, client);
    uint64_t ask = any ? (uint64_t)n * any->lanes : n;
    uint32_t holding = cl ? cl->chunks : 0;
    if (holding + ask > L->limits.chunks_per_client)
        return vli_fail(L, -EDQUOT, "quota of %u chunks per client: holding "
                        "%u, asked %llu more", L->limits.chunks_per_client,
                        holding, (unsigned long long)ask);
    struct vl_region *r = vli_own_region(L, client, region);
    if (!r)
        return vli_fail(L, -ENOENT, "region %u is not yours", region);
    struct vl_stage *s = vli_stage_get(L, r->stage);
    if (s->configured && (r->kind == VL_KV || r->kind == VL_EXPERT))
        return vli_fail(L, -EPERM, "region %u: the %s region of a configured "
                        "stage grows through %s", region, vl_kind_name(r->kind),
                        r->kind == VL_KV ? "kv_reserve" : "expert_request");
    int ae = vli_stage_awake(L, s); /* R18 */
    if (ae < 0)
        return ae;
    uint32_t per_lane[VL_MAX_LANES];
    uint64_t total = 0;
    for (uint32_t l = 0; l < r->lanes; l++) {
        uint32_t used = vli_lane_used(r, l);
        if (n > r->lane_slots[l] - used)
            return vli_fail(L, -E2BIG, "region %u lane %u: %u chunks asked, "
                            "room for %u", region, l, n,
                            r->lane_slots[l] - used);
        per_lane[l] = n;
        total += n;
    }
    struct vl_device *d = vli_dev_get(L, r->device);
    /* R2: a fixed region of a configured stage draws on its reservation (a
     * hard promise: free unless quarantine elsewhere broke it), an ad-hoc
     * region on what no promise needs. Never more than is free. */
    uint64_t avail = s->configured ? vli_free_for_fixed(L, d, s)
                                   : vli_dev_unpromised(L, d);
    /* R17: cached weight sets make room for a live engine's grant. */
    uint32_t di = vli_dev_index(L, d);
    if (!s->configured && total > avail && total <= UINT32_MAX &&
        avail + vli_weights_cached(L, di) >= total &&
        vl_weights_make_room(L, di, (uint32_t)total, fx))
        avail = vli_dev_unpromised(L, d);
    if (s->configured && total > vli_fixed_free(s))
        return vli_fail(L, -EDQUOT, "region %u: %llu chunks asked, %u left of "
                        "the stage's fixed reservation", region,
                        (unsigned long long)total, vli_fixed_free(s));
    if (total > avail)
        return vli_fail(L, -ENOSPC, "device %u: %llu chunks asked, %llu "
                        "available", d->cfg.id, (unsigned long long)total,
                        (unsigned long long)avail);
    if (vli_fx_reserve(fx, total) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    vli_grant_lanes(L, r, per_lane, VL_GRANTED, fx);
    if (s->configured)
        s->grants_total += total;
    return 0;
}

int vl_region_release(struct vl_ledger *L, uint32_t client, uint32_t region,
                      struct vl_fxlist *fx)
{
    struct vl_region *r = vli_own_region(L, client, region);
    if (!r)
        return vli_fail(L, -ENOENT, "region %u is not yours", region);
    struct vl_stage *s = vli_stage_get(L, r->stage);
    if (s->configured)
        return vli_fail(L, -EPERM, "region %u belongs to configured stage %u: "
                        "release the stage", region, r->stage);
    if (vli_fx_reserve(fx, r->used) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    struct vl_device *d = vli_dev_get(L, r->device);
    for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++)
        if (r->slot_chunk[k] != VL_CHUNK_NONE)
            vli_to_free(L, d, (uint32_t)r->slot_chunk[k], fx);
    region_drop(L, r, false);
    return 0;
}

/* Every region of client (or of one stage of it when stage != VL_NONE):
 * chunks go free (released) or, R11, quarantined (holder gone: its process
 * may still map them); regions go. */
void vli_drop_regions(struct vl_ledger *L, uint32_t client, uint32_t stage,
                      bool quarantine, struct vl_fxlist *fx)
{
    for (size_t i = 0; i < L->nregion;) {
        struct vl_region *r = L->region[i];
        if (r->client != client || (stage != VL_NONE && r->stage != stage)) {
            i++;
            continue;
        }
        struct vl_device *d = vli_dev_get(L, r->device);
        for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++) {
            uint64_t id = r->slot_chunk[k];
            if (id == VL_CHUNK_NONE)
                continue;
            uint32_t idx = (uint32_t)id;
            struct vl_chunk *c = &d->chunks[idx];
            if (quarantine) {
                struct vl_stage *qs = vli_stage_get(L, r->stage);
                vli_unplace(L, c);
                vli_set_cat(d, c, VL_CAT_NONE);
                vli_set_state(d, c, VL_QUARANTINED);
                if (qs && qs->configured) /* R11: stands for its promise */
                    vli_qstage_set(L, c, r->stage, vli_cat_of_kind(r));
            } else {
                vli_to_free(L, d, idx, fx);
            }
        }
        region_drop(L, r, quarantine); /* swaps the last region into i */
    }
}
