/* SPDX-License-Identifier: Apache-2.0 */
/* What a client does with chunks it holds: gives them back, moves one
 * between its ad-hoc regions, offers one to a region.
 *
 * Enforces R10 (foreign chunks) and the release side of R11 (a recalled
 * or trimmed chunk is free only once its holder gave it back). */
#include "daemon/ledger/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* R10: a chunk only ever goes to a region of its own device. */
int vl_chunk_check_region(struct vl_ledger *L, uint64_t chunk, uint32_t region)
{
    struct vl_device *d = NULL;
    if (!vli_chunk_get(L, chunk, &d, NULL))
        return vli_fail(L, -ENOENT, "no chunk %llu", (unsigned long long)chunk);
    struct vl_region *r = vli_region_find(L, region);
    if (!r)
        return vli_fail(L, -ENOENT, "no region %u", region);
    if (d->cfg.id != r->device)
        return vli_fail(L, -EXDEV, "foreign chunk: chunk %llu belongs to "
                        "device %u, region %u to device %u",
                        (unsigned long long)chunk, d->cfg.id, region,
                        r->device);
    return 0;
}

int vl_chunk_move(struct vl_ledger *L, uint32_t client, uint64_t chunk,
                  uint32_t region, uint32_t slot, struct vl_fxlist *fx)
{
    struct vl_device *d = NULL;
    uint32_t idx = 0;
    struct vl_chunk *c = vli_chunk_get(L, chunk, &d, &idx);
    if (!c || c->holder != client || c->state != VL_GRANTED || !c->region)
        return vli_fail(L, -ENOENT, "chunk %llu is not a granted chunk of "
                        "yours", (unsigned long long)chunk);
    struct vl_region *r = vli_own_region(L, client, region);
    if (!r)
        return vli_fail(L, -ENOENT, "region %u is not yours", region);
    int e = vl_chunk_check_region(L, chunk, region); /* R10 */
    if (e < 0)
        return e;
    struct vl_region *from = vli_region_find(L, c->region);
    struct vl_stage *sf = vli_stage_get(L, from->stage);
    struct vl_stage *st = vli_stage_get(L, r->stage);
    if (sf->configured || st->configured)
        return vli_fail(L, -EPERM, "the regions of configured stages are "
                        "arranged by kv_reserve, kv_trim and expert_request");
    if ((e = vli_stage_awake(L, st)) < 0) /* R18 */
        return e;
    if (slot >= r->lanes * r->stride_slots ||
        slot % r->stride_slots >= r->lane_slots[slot / r->stride_slots])
        return vli_fail(L, -EINVAL, "slot %u is outside region %u", slot,
                        region);
    if (r->slot_chunk[slot] != VL_CHUNK_NONE) /* R1: one chunk a slot */
        return vli_fail(L, -EBUSY, "slot %u of region %u is taken", slot,
                        region);
    if (vli_fx_reserve(fx, 1) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    vli_place(L, d, idx, r, slot, VL_GRANTED);
    vli_fx_push(fx, (struct vl_fx){.kind = VL_FX_MOVE, .client = client,
                                   .chunk = chunk, .region = region,
                                   .slot = slot, .stage = r->stage});
    return 0;
}

/* R11: a recalled or trimmed chunk goes free only here, once its holder
 * unmapped it and gave it back (or at the reap); a quarantined one can't be
 * given back by anyone. */
int vl_chunks_release(struct vl_ledger *L, uint32_t client,
                      const uint64_t *ids, size_t n, struct vl_fxlist *fx)
{
    /* Duplicates are seen by a mark on each chunk met (cleared before
     * returning): O(n) for the 16K-chunk releases that answer a large
     * recall. */
    size_t i = 0, marked = 0;
    int e = 0;
    for (; i < n && !e; i++) {
        struct vl_chunk *c = vli_chunk_get(L, ids[i], NULL, NULL);
        if (!c || c->holder != client ||
            (c->state != VL_GRANTED && c->state != VL_LOANED &&
             c->state != VL_RECALLING))
            e = vli_fail(L, -ENOENT, "chunk %llu is not held by you",
                         (unsigned long long)ids[i]);
        else if (c->mark)
            e = vli_fail(L, -EINVAL, "chunk %llu listed twice",
                         (unsigned long long)ids[i]);
        else {
            c->mark = 1;
            marked++;
        }
    }
    if (!e && vli_fx_reserve(fx, 2 * n + 8) < 0)
        e = vli_fail(L, -ENOMEM, "out of memory");
    if (e) {
        /* the first marked ids were marked, each once */
        for (size_t k = 0; k < marked; k++)
            vli_chunk_get(L, ids[k], NULL, NULL)->mark = 0;
        return e;
    }
    /* One residency change per stage whose loans came back, not one per
     * chunk (each walks the stage's backed slots). */
    uint32_t changed[8], nchanged = 0;
    for (i = 0; i < n; i++) {
        struct vl_device *d = NULL;
        uint32_t idx = 0;
        struct vl_chunk *c = vli_chunk_get(L, ids[i], &d, &idx);
        c->mark = 0;
        struct vl_region *r = c->region ? vli_region_find(L, c->region) : NULL;
        bool loan = r && r->kind == VL_EXPERT && c->state != VL_GRANTED;
        uint32_t stage = r ? r->stage : VL_NONE;
        vli_to_free(L, d, idx, fx);
        if (!loan)
            continue;
        uint32_t k = 0;
        while (k < nchanged && changed[k] != stage)
            k++;
        if (k < nchanged)
            continue;
        if (nchanged < 8) {
            changed[nchanged++] = stage;
        } else {
            struct vl_stage *s = vli_stage_get(L, stage);
            if (s)
                vli_budget_changed(L, s, fx);
        }
    }
    for (uint32_t k = 0; k < nchanged; k++) {
        struct vl_stage *s = vli_stage_get(L, changed[k]);
        if (s)
            vli_budget_changed(L, s, fx);
    }
    return 0;
}
