/* SPDX-License-Identifier: Apache-2.0 */
/* Views: what the rest of the daemon may read of the ledger (status,
 * replies, the state file), copied out of the private state, read-only.
 * Each costs what it returns: a device, stage, region, client or chunk in
 * O(1) (but the lookup of a client or region by id), an iteration O(n) in
 * what it walks.
 *
 * No rule of its own: it shows the counters R1 (pools) and R14 (what a
 * client holds) keep; vl_check verifies those. */
#include "daemon/ledger/internal.h"

#include <errno.h>

uint32_t vl_device_count(const struct vl_ledger *L)
{
    return L->ndev;
}

/* Leaves out alone for an index beyond the devices. */
void vl_device_view(const struct vl_ledger *L, uint32_t index,
                    struct vl_device_view *out)
{
    if (index >= L->ndev)
        return;
    const struct vl_device *d = &L->dev[index];
    *out = (struct vl_device_view){
        .id = d->cfg.id,
        .chunk_bytes = d->cfg.chunk_bytes,
        .chunks = d->nchunks,
        .capacity = vl_capacity(d),
        .free = vli_dev_free(d),
        .fixed = d->fixed,
        .kv = d->kv,
        .loaned = d->loaned,
        .recalling = d->count[VL_RECALLING],
        .quarantined = d->count[VL_QUARANTINED],
        .reserved = d->reserved,
        .weights = d->weights,
        .lend_unreserved = d->cfg.lend_unreserved,
    };
    for (size_t i = 0; i < L->nwset; i++) {
        const struct vl_wset *w = L->wset[i];
        if (w->dev == index && w->sealed && !w->nuser && w->stage == VL_NONE)
            out->weights_cached += w->units;
    }
}

int vl_device_index(const struct vl_ledger *L, uint32_t id)
{
    for (uint32_t i = 0; i < L->ndev; i++)
        if (L->dev[i].cfg.id == id)
            return (int)i;
    return -ENODEV;
}

/* The chunk size of device id; 0 for an unknown one. */
static uint64_t chunk_bytes_of(const struct vl_ledger *L, uint32_t id)
{
    int i = vl_device_index(L, id);
    return i < 0 ? 0 : L->dev[i].cfg.chunk_bytes;
}

bool vl_stage_view(const struct vl_ledger *L, uint32_t id,
                   struct vl_stage_view *out)
{
    const struct vl_stage *s = vli_stage_peek(L, id);
    if (!s)
        return false;
    *out = (struct vl_stage_view){
        .id = id,
        .configured = s->configured,
        .cfg = &s->cfg,
        .owner = s->owner,
        .keep_window = s->keep_window,
        .chunk_bytes = chunk_bytes_of(L, s->cfg.device),
        .kv_chunks = s->kv_chunks,
        .window_chunks = s->window_chunks,
        .loan_chunks = s->loan_chunks,
        .recalling = s->recalling,
        .fixed_chunks = s->fixed_chunks,
        .fixed_reserved = s->fixed_reserved,
        .headroom_chunks = s->headroom_chunks,
        .kv_needed_bytes = s->kv_needed_bytes,
        .residency_version = s->residency_version,
        .expert_slots_backed = vl_expert_slots_backed(L, id),
        .expert_slots = s->nslots,
        .kv_region = s->kv_region,
        .expert_region = s->expert_region,
    };
    for (uint32_t f = 0; f < VL_MAX_FIXED; f++) {
        out->fixed_region[f] = s->fixed_region[f];
        out->fixed_set[f] = s->fixed_set[f];
    }
    out->asleep = s->asleep; /* R18 */
    out->wake_tokens = s->wake_tokens;
    out->host_bytes = s->host_bytes;
    out->sleeps = s->sleeps;
    out->wakes = s->wakes;
    out->sleep_us = s->sleep_us;
    out->wake_us = s->wake_us;
    return true;
}

uint32_t vl_stage_next(const struct vl_ledger *L, uint32_t from)
{
    for (uint32_t i = from; i < L->nstage; i++)
        if (L->stage[i].used)
            return i;
    return VL_NONE;
}

static void region_view(const struct vl_ledger *L, const struct vl_region *r,
                        struct vl_region_view *out)
{
    *out = (struct vl_region_view){
        .id = r->id,
        .client = r->client,
        .stage = r->stage,
        .device = r->device,
        .kind = r->kind,
        .base = r->base,
        .lane_stride = r->lane_stride,
        .va_bytes = r->va_bytes,
        .chunk_bytes = chunk_bytes_of(L, r->device),
        .lanes = r->lanes,
        .stride_slots = r->stride_slots,
        .used = r->used,
        .lane_slots = r->lane_slots,
        .slot_chunk = r->slot_chunk,
    };
}

bool vl_region_view(const struct vl_ledger *L, uint32_t id,
                    struct vl_region_view *out)
{
    const struct vl_region *r = vli_region_find(L, id);
    if (!r)
        return false;
    region_view(L, r, out);
    return true;
}

void vl_each_region(const struct vl_ledger *L, uint32_t stage,
                    void (*fn)(void *ud, const struct vl_region_view *r),
                    void *ud)
{
    for (size_t i = 0; i < L->nregion; i++) {
        if (stage != VL_NONE && L->region[i]->stage != stage)
            continue;
        struct vl_region_view v;
        region_view(L, L->region[i], &v);
        fn(ud, &v);
    }
}

static void client_view(const struct vl_client *c, struct vl_client_view *out)
{
    *out = (struct vl_client_view){
        .id = c->id,
        .gone = c->gone,
        .resumed = c->resumed,
        .delinquent = c->delinquent,
        .chunks = c->chunks,
        .held_bytes = c->held_bytes,
        .quarantined_bytes = c->quarantined_bytes,
        .regions = c->regions,
        .stages = c->stages,
        .missed_recalls = c->missed_recalls,
        .tenant = c->tenant,
        .va_bytes = c->va_bytes,
        .wsets = c->wsets,
    };
}

bool vl_client_view(const struct vl_ledger *L, uint32_t client,
                    struct vl_client_view *out)
{
    const struct vl_client *c = vli_client_find(L, client);
    if (!c)
        return false;
    client_view(c, out);
    return true;
}

void vl_each_client(const struct vl_ledger *L,
                    void (*fn)(void *ud, const struct vl_client_view *c),
                    void *ud)
{
    for (size_t i = 0; i < L->nclient; i++) {
        struct vl_client_view v;
        client_view(&L->client[i], &v);
        fn(ud, &v);
    }
}

/* The count written (at most max); vl_client_view's stages is the whole
 * count. */
uint32_t vl_client_stages(const struct vl_ledger *L, uint32_t client,
                          uint32_t *ids, uint32_t max)
{
    uint32_t n = 0;
    for (uint32_t i = 0; client && i < L->nstage && n < max; i++)
        if (L->stage[i].used && L->stage[i].owner == client)
            ids[n++] = i;
    return n;
}

bool vl_chunk_view(const struct vl_ledger *L, uint64_t chunk,
                   struct vl_chunk_view *out)
{
    /* The lookup only reads. */
    const struct vl_chunk *c = vli_chunk_get((struct vl_ledger *)L, chunk,
                                             NULL, NULL);
    if (!c)
        return false;
    *out = (struct vl_chunk_view){.state = c->state, .holder = c->holder,
                                  .region = c->region, .slot = c->slot};
    return true;
}

size_t vl_client_chunk_ids(const struct vl_ledger *L, uint32_t client,
                           uint64_t *ids, size_t max)
{
    size_t n = 0;
    const struct vl_client *cl = vli_client_find(L, client);
    for (uint32_t di = 0; cl && di < L->ndev; di++) {
        const struct vl_device *d = &L->dev[di];
        for (uint32_t k = cl->hfirst[di]; k != VL_NONE; k = d->chunks[k].hnext)
            if (d->chunks[k].state != VL_FREE) {
                if (n < max)
                    ids[n] = vl_chunk_id(di, k);
                n++;
            }
    }
    return n;
}

/* R6: what a stage's held grow waits for on its device. The lender with
 * the most chunks on their way back first (its stage's policy says what a
 * missed deadline does to it); else the gone client whose quarantined
 * chunks are the most there. A walk of the stages, and of the clients only
 * when no recall is pending: it serves an error and a status line. */
bool vl_stage_blocker(const struct vl_ledger *L, uint32_t stage,
                      struct vl_blocker *out)
{
    const struct vl_stage *s = vli_stage_peek(L, stage);
    if (!s)
        return false;
    int di = vl_device_index(L, s->cfg.device);
    if (di < 0)
        return false;
    struct vl_blocker b = {0};
    for (uint32_t i = 0; i < L->nstage; i++) {
        const struct vl_stage *o = &L->stage[i];
        if (!o->used || o == s || o->cfg.device != s->cfg.device ||
            !o->recalling || o->recalling <= b.chunks)
            continue;
        b = (struct vl_blocker){.client = o->owner, .stage = i,
                                .chunks = o->recalling,
                                .kill_on_missed_recall =
                                    o->cfg.kill_on_missed_recall};
    }
    if (!b.client) {
        const struct vl_device *d = &L->dev[di];
        for (size_t i = 0; i < L->nclient; i++) {
            const struct vl_client *c = &L->client[i];
            if (!c->gone || c->resumed || c->hfirst[di] == VL_NONE)
                continue;
            uint32_t n = 0;
            for (uint32_t k = c->hfirst[di]; k != VL_NONE; k = d->chunks[k].hnext)
                n += d->chunks[k].state == VL_QUARANTINED;
            if (n > b.chunks)
                b = (struct vl_blocker){.client = c->id, .stage = VL_NONE,
                                        .chunks = n, .quarantined = true};
        }
    }
    if (!b.client)
        return false;
    *out = b;
    return true;
}
