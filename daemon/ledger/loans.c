/* SPDX-License-Identifier: Apache-2.0 */
/* Expert loans: what a stage may borrow from its own window and from the
 * pool, recalls of pool loans for another stage's KV, and clients that
 * missed a recall deadline.
 *
 * Enforces R5 (loans), R6 (hold: recalls are issued, nothing else
 * changes), the recall side of R4, R14 (loans count against the chunk
 * quota) and R15 (missed recalls: deadline, delinquency, policy). */
#include "daemon/ledger/internal.h"

#include <errno.h>

/* R5: loans the stage may still take from its own window: its unused part
 * less the headroom kept unlent. */
static uint32_t window_lendable(const struct vl_stage *s)
{
    if (!s->cfg.lend)
        return 0;
    uint32_t used = s->kv_chunks + s->loan_chunks + s->headroom_chunks;
    return used < s->window_chunks ? s->window_chunks - used : 0;
}

uint32_t vli_expert_room(struct vl_ledger *L, struct vl_stage *s)
{
    struct vl_region *ex = vli_region_find(L, s->expert_region);
    return ex->lane_slots[0] - vli_lane_used(ex, 0);
}

/* R6: a KV grow that needs other clients' recalls changes nothing of its
 * own: the recalls are issued and it answers VL_PENDING, to be called again
 * as chunks come back. R4: what is recalled are pool loans of other stages on
 * the device (beyond their own windows), the highest slots first so that
 * each keeps a backed prefix; chunks already on their way count. */
int vli_recall_pool_loans(struct vl_ledger *L, struct vl_stage *s,
                          struct vl_device *d, uint32_t short_by,
                          struct vl_fxlist *fx)
{
    uint32_t stage = (uint32_t)(s - L->stage);
    uint32_t pending = d->count[VL_RECALLING];
    uint32_t ask = short_by > pending ? short_by - pending : 0;
    if (vli_fx_reserve(fx, ask + L->nstage) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < L->nstage && ask; i++) {
        struct vl_stage *o = &L->stage[i];
        if (!o->used || o == s || o->cfg.device != s->cfg.device ||
            !o->expert_region)
            continue;
        uint32_t excess = vli_pool_loans(o);
        excess = excess > o->recalling ? excess - o->recalling : 0;
        struct vl_region *ex = vli_region_find(L, o->expert_region);
        bool changed = false;
        uint32_t below = ex->lane_hi[0]; /* one walk down the lane */
        while (excess && ask) {
            uint32_t k = vli_lane_last_below(L, ex, 0, VL_LOANED, below);
            if (k == VL_NONE)
                break;
            below = k;
            struct vl_device *cd = NULL;
            uint32_t idx = 0;
            struct vl_chunk *c = vli_chunk_get(L, ex->slot_chunk[k], &cd, &idx);
            vli_set_state(cd, c, VL_RECALLING);
            vli_expert_unloaned(ex, k);
            o->recalling++;
            o->recalls_total++;
            vli_fx_push(fx, (struct vl_fx){.kind = VL_FX_UNMAP,
                                           .client = c->holder,
                                           .chunk = ex->slot_chunk[k],
                                           .region = ex->id, .slot = k,
                                           .stage = i});
            excess--;
            ask--;
            changed = true;
        }
        if (changed)
            vli_budget_changed(L, o, fx);
    }
    return vli_fail(L, VL_PENDING, "stage %u: %u chunks must come back from "
                    "other clients' recalls or quarantine first", stage,
                    short_by);
}

int vl_expert_request(struct vl_ledger *L, uint32_t client, uint32_t stage,
                      uint64_t max_bytes, struct vl_fxlist *fx)
{
    /* R14: loans count against the client's quota like any other chunk;
     * judged first, as the daemon did before it read the request. */
    struct vl_client *cl = vli_client_find(L, client);
    uint32_t held = cl ? cl->chunks : 0, quota = L->limits.chunks_per_client;
    if (held >= quota)
        return vli_fail(L, -EDQUOT, "quota of %u chunks per client reached",
                        quota);
    struct vl_stage *s = NULL;
    int e = vli_own_stage(L, client, stage, &s);
    if (e < 0)
        return e;
    if (cl && cl->delinquent) /* R15 */
        return vli_fail(L, -EPERM, "client %u missed a recall deadline: no new "
                        "loans", client);
    struct vl_device *d = vli_dev_get(L, s->cfg.device);
    uint64_t cb = d->cfg.chunk_bytes;
    uint32_t n = window_lendable(s);
    uint32_t avail = vli_free_for_window(L, d, s);
    if (n > avail)
        n = avail;
    if (d->cfg.lend_unreserved) {
        /* R5: pool loans, only under this policy, out of what no promise
         * claims. The stage's own free window is claimed (by it), so the two
         * parts don't overlap. */
        n += vli_dev_unclaimed(L, d);
        if (n > vli_dev_free(d))
            n = vli_dev_free(d);
    }
    if (max_bytes && n > max_bytes / cb)
        n = (uint32_t)(max_bytes / cb);
    if (n > quota - held) /* R14: the client ends at most at its quota */
        n = quota - held;
    uint32_t room = vli_expert_room(L, s);
    if (n > room)
        n = room;
    if (!n)
        return 0;
    if (vli_fx_reserve(fx, n + 1) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    struct vl_region *ex = vli_region_find(L, s->expert_region);
    uint32_t per_lane[1] = {n};
    vli_grant_lanes(L, ex, per_lane, VL_LOANED, fx);
    s->grants_total += n;
    vli_budget_changed(L, s, fx);
    return 0;
}

/* R15: a recall is due within the stage's deadline. */
uint32_t vl_recall_deadline_ms(const struct vl_ledger *L, uint32_t stage)
{
    const struct vl_stage *s = vli_stage_peek(L, stage);
    return s && s->cfg.recall_deadline_ms ? s->cfg.recall_deadline_ms
                                          : VL_RECALL_DEADLINE_MS;
}

/* R15: the chunks stay the client's (a recalled chunk goes to nobody else
 * before it is released or its holder reaped); it only borrows no more, and
 * the stage's policy may have its process killed. */
enum vl_missed vl_recall_missed(struct vl_ledger *L, uint32_t client,
                                uint32_t stage)
{
    struct vl_client *cl = vli_client_find(L, client);
    if (cl) {
        cl->delinquent = true;
        cl->missed_recalls++;
    }
    const struct vl_stage *s = vli_stage_peek(L, stage);
    return s && s->cfg.kill_on_missed_recall ? VL_MISSED_KILL
                                             : VL_MISSED_DENY_LOANS;
}
