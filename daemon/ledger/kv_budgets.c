/* SPDX-License-Identifier: Apache-2.0 */
/* KV budgets: the target of a request, the reserve that maps it and the
 * trim that gives back what is beyond it.
 *
 * Enforces R3 (KV target), R4 (a KV grow is always covered: free window,
 * own loans, then recalls), R6 (a grow needing recalls waits, up to the
 * stage's hold bound), R7, R8 (trim, and a reserve that waits for unmaps
 * after a trim) and R15 (a delinquent client's trim lends nothing). */
#include "daemon/ledger/internal.h"

#include <errno.h>

/* R3: prompt + output tokens, rounded up to the growth step from the
 * initial window, clamped to the native context. */
uint64_t vl_kv_target_tokens(const struct vl_stage_cfg *cfg, uint64_t tokens)
{
    uint64_t native = cfg->native_context;
    uint64_t t = cfg->initial_tokens;
    if (tokens >= native || t >= native)
        return native; /* rounding up can only land beyond it */
    if (tokens > t) {
        uint64_t step = cfg->step_tokens ? cfg->step_tokens : 1;
        uint64_t k = vli_div_up(tokens - t, step);
        if (k > (native - t) / step)
            return native; /* k steps overshoot it (and might wrap) */
        t += k * step;
    }
    return t;
}

/* R3: per lane, rounded up to whole chunks. */
uint32_t vl_lane_chunks(const struct vl_stage_cfg *cfg, uint32_t lane,
                        uint64_t tokens, uint64_t chunk_bytes)
{
    return (uint32_t)vli_div_up(tokens * cfg->lane_bytes_per_token[lane],
                                chunk_bytes);
}

/* R4: moves the highest loaned chunk of the stage's expert region into
 * slot of region dst (same client: it remaps the handle it holds, no fd is
 * sent). */
static void move_last_loan(struct vl_ledger *L, struct vl_stage *s,
                           struct vl_region *dst, uint32_t slot,
                           struct vl_fxlist *fx)
{
    struct vl_region *ex = vli_region_find(L, s->expert_region);
    uint32_t k = vli_lane_last_in(L, ex, 0, VL_LOANED);
    struct vl_device *d = NULL;
    uint32_t idx = 0;
    vli_chunk_get(L, ex->slot_chunk[k], &d, &idx);
    vli_place(L, d, idx, dst, slot, VL_GRANTED);
    vli_fx_push(fx, (struct vl_fx){.kind = VL_FX_MOVE, .client = dst->client,
                                   .chunk = vl_chunk_id(vli_dev_index(L, d), idx),
                                   .region = dst->id, .slot = slot});
}

/* R6: the daemon retries a pending grow as chunks come back, for this long;
 * a bound of 0 still gets one last try. */
uint32_t vl_hold_ms(const struct vl_ledger *L, uint32_t stage)
{
    const struct vl_stage *s = vli_stage_peek(L, stage);
    return s && s->cfg.hold_ms ? s->cfg.hold_ms : 1;
}

static uint32_t stage_loaned_now(const struct vl_stage *s)
{
    return s->loan_chunks - s->recalling;
}

int vl_kv_reserve(struct vl_ledger *L, uint32_t client, uint32_t stage,
                  uint64_t prompt, uint64_t output, uint32_t *recalled_out,
                  struct vl_fxlist *fx)
{
    struct vl_stage *s = NULL;
    int e = vli_own_stage(L, client, stage, &s);
    if (e < 0)
        return e;
    if (prompt > UINT32_MAX || output > UINT32_MAX)
        return vli_fail(L, -E2BIG, "token counts above 2^32");
    struct vl_device *d = vli_dev_get(L, s->cfg.device);
    struct vl_region *kv = vli_region_find(L, s->kv_region);
    uint64_t cb = d->cfg.chunk_bytes;
    uint64_t want = prompt + output;
    if (want > s->cfg.native_context)
        return vli_fail(L, -E2BIG, "stage %u: %llu tokens exceed the native "
                        "context of %llu", stage, (unsigned long long)want,
                        (unsigned long long)s->cfg.native_context);
    uint64_t target = vl_kv_target_tokens(&s->cfg, want);

    /* R8: the budget is the first t slots of each lane: every empty one
     * among them is needed. One still being unmapped after a trim can't
     * count as mapped, nor be refilled before its holder gives it back. */
    uint32_t per_lane[VL_MAX_LANES], need = 0, unmapping = 0;
    uint64_t needed_bytes = 0;
    for (uint32_t l = 0; l < s->cfg.lanes; l++) {
        uint32_t t = vl_lane_chunks(&s->cfg, l, target, cb);
        per_lane[l] = 0;
        for (uint32_t i = 0; i < t; i++) {
            uint64_t id = kv->slot_chunk[(size_t)l * kv->stride_slots + i];
            if (id == VL_CHUNK_NONE)
                per_lane[l]++;
            else if (vli_chunk_get(L, id, NULL, NULL)->state == VL_RECALLING)
                unmapping++;
        }
        need += per_lane[l];
        needed_bytes += want * s->cfg.lane_bytes_per_token[l];
    }
    if (unmapping) /* R8: wait for the unmaps (R6: like a hold) */
        return vli_fail(L, VL_PENDING, "stage %u: %u KV chunks inside the "
                        "request's budget are still being unmapped after a "
                        "trim; retry once they are released", stage, unmapping);

    /* R4: sources, in order: free chunks of the stage's own window, its own
     * loans (moved, no fd), then pool loans of other stages on this device
     * (recalled). */
    uint32_t from_free = vli_window_free(s);
    uint32_t avail = vli_free_for_window(L, d, s);
    if (from_free > avail)
        from_free = avail;
    if (from_free > need)
        from_free = need;
    uint32_t own = stage_loaned_now(s);
    uint32_t from_own = need - from_free < own ? need - from_free : own;
    uint32_t short_by = need - from_free - from_own;
    /* Free memory no promise needs also serves (e.g. while the stage's own
     * loans are being recalled). */
    if (short_by) {
        uint32_t extra = vli_dev_unpromised(L, d);
        uint32_t left = vli_dev_free(d) - from_free;
        if (extra > left)
            extra = left;
        uint32_t use = extra < short_by ? extra : short_by;
        from_free += use;
        short_by -= use;
    }

    if (short_by) /* R6: hold while other stages' pool loans come back */
        return vli_recall_pool_loans(L, s, d, short_by, fx);

    if (vli_fx_reserve(fx, need + 1) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    /* Free chunks first, then moves, lane by lane. */
    uint32_t take_free_left = from_free, moved = 0;
    struct vl_client *cl = vli_client_find(L, client);
    for (uint32_t l = 0; l < s->cfg.lanes; l++)
        for (uint32_t n = 0; n < per_lane[l]; n++) {
            uint32_t slot = vli_lane_first_empty(kv, l);
            if (take_free_left) {
                uint32_t idx = vli_take_free(d);
                vli_place(L, d, idx, kv, slot, VL_GRANTED);
                vli_client_gain(cl, d, VL_GRANTED);
                uint64_t id = vl_chunk_id(vli_dev_index(L, d), idx);
                vli_fx_push(fx, (struct vl_fx){.kind = VL_FX_MAP,
                                               .client = client, .chunk = id,
                                               .region = kv->id, .slot = slot,
                                               .stage = stage});
                take_free_left--;
            } else {
                move_last_loan(L, s, kv, slot, fx);
                moved++;
            }
        }
    if (moved) {
        s->recalls_total += moved;
        vli_budget_changed(L, s, fx);
    }
    s->grants_total += need;
    s->kv_needed_bytes = needed_bytes;
    if (target > s->kv_peak_tokens)
        s->kv_peak_tokens = target;
    if (recalled_out)
        *recalled_out = moved;
    return 0;
}

int vl_kv_trim(struct vl_ledger *L, uint32_t client, uint32_t stage,
               uint64_t tokens, struct vl_fxlist *fx)
{
    struct vl_stage *s = NULL;
    int e = vli_own_stage(L, client, stage, &s);
    if (e < 0)
        return e;
    /* What the stage still needs is the tokens it keeps, exactly, as a
     * reserve counts them (0 after a trim to the initial window). */
    s->kv_needed_bytes = 0;
    for (uint32_t l = 0; l < s->cfg.lanes; l++)
        s->kv_needed_bytes += tokens * s->cfg.lane_bytes_per_token[l];
    if (s->keep_window || s->no_loan)
        return 0; /* the window stays mapped (R7 and R8) */
    struct vl_device *d = vli_dev_get(L, s->cfg.device);
    struct vl_region *kv = vli_region_find(L, s->kv_region);
    struct vl_region *ex = vli_region_find(L, s->expert_region);
    uint64_t target = vl_kv_target_tokens(&s->cfg, tokens);
    /* R8: the surplus: granted chunks beyond the target's prefix. Chunks
     * already being unmapped after an earlier trim are on their way out. */
    uint32_t surplus[VL_MAX_LANES], total = 0;
    for (uint32_t l = 0; l < s->cfg.lanes; l++) {
        uint32_t t = vl_lane_chunks(&s->cfg, l, target, d->cfg.chunk_bytes);
        surplus[l] = 0;
        for (uint32_t i = t; i < kv->lane_slots[l]; i++) {
            uint64_t id = kv->slot_chunk[(size_t)l * kv->stride_slots + i];
            if (id != VL_CHUNK_NONE &&
                vli_chunk_get(L, id, NULL, NULL)->state == VL_GRANTED)
                surplus[l]++;
        }
        total += surplus[l];
    }
    if (!total)
        return 0;
    if (vli_fx_reserve(fx, total + 1) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    struct vl_client *cl = vli_client_find(L, client);
    /* R5: lending is judged after the surplus leaves KV, against the
     * stage's own loans only: pool loans (beyond its window) stay what they
     * are and take none of the window's room. R15: a client that missed a
     * recall deadline borrows no more. */
    uint32_t lend = 0;
    if (s->cfg.lend && !(cl && cl->delinquent)) {
        uint32_t own = s->loan_chunks - vli_pool_loans(s);
        uint32_t used = (s->kv_chunks - total) + own + s->headroom_chunks;
        lend = used < s->window_chunks ? s->window_chunks - used : 0;
        uint32_t room = vli_expert_room(L, s);
        if (lend > room)
            lend = room;
        if (lend > total)
            lend = total;
    }
    uint32_t lent = 0;
    for (uint32_t l = s->cfg.lanes; l-- > 0;) {
        uint32_t below = kv->lane_hi[l]; /* one walk down the lane */
        for (uint32_t n = 0; n < surplus[l]; n++) {
            uint32_t k = vli_lane_last_below(L, kv, l, VL_GRANTED, below);
            below = k - l * kv->stride_slots;
            struct vl_device *cd = NULL;
            uint32_t idx = 0;
            struct vl_chunk *c = vli_chunk_get(L, kv->slot_chunk[k], &cd, &idx);
            if (lent < lend) {
                uint32_t slot = vli_lane_first_empty(ex, 0);
                vli_place(L, cd, idx, ex, slot, VL_LOANED);
                uint64_t id = vl_chunk_id(vli_dev_index(L, cd), idx);
                vli_fx_push(fx, (struct vl_fx){.kind = VL_FX_MOVE,
                                               .client = client, .chunk = id,
                                               .region = ex->id, .slot = slot,
                                               .stage = stage});
                lent++;
            } else {
                /* R8: released: stays in its slot, recalling, until the
                 * client answers with chunk_release (R11: nobody else gets
                 * it before). */
                vli_set_state(cd, c, VL_RECALLING);
                vli_fx_push(fx, (struct vl_fx){.kind = VL_FX_UNMAP,
                                               .client = client,
                                               .chunk = kv->slot_chunk[k],
                                               .region = kv->id, .slot = k,
                                               .stage = stage});
            }
        }
    }
    if (lent)
        vli_budget_changed(L, s, fx);
    return 0;
}
