/* SPDX-License-Identifier: Apache-2.0 */
/* Promises: what each configured stage reserved and was not granted yet,
 * the part that must always be free chunks ("hard"), and what a device can
 * hand out without breaking any promise.
 *
 * Enforces R2 (promises and hard promises), R4 (the window stays covered),
 * R5 (pool loans leave every promise alone), R7 (a no-loan window is hard)
 * and R11 (quarantined chunks stand for their stage's promise). */
#include "daemon/ledger/internal.h"

static uint32_t sub0(uint32_t a, uint32_t b)
{
    return a > b ? a - b : 0;
}

/* Window memory of a configured stage that is neither KV nor lent. */
uint32_t vli_window_free(const struct vl_stage *s)
{
    uint32_t used = s->kv_chunks + s->loan_chunks;
    return s->configured && used < s->window_chunks ? s->window_chunks - used
                                                    : 0;
}

uint32_t vli_fixed_free(const struct vl_stage *s)
{
    uint32_t used = s->fixed_chunks + s->set_chunks;
    return used < s->fixed_reserved ? s->fixed_reserved - used : 0;
}

/* R2, R17: what a fixed reservation takes: its bytes in chunks, or the
 * allocations of the weight set it names. */
uint32_t vli_fixed_entry_chunks(const struct vl_stage_cfg *c, uint32_t f,
                                uint64_t cb)
{
    uint64_t b = c->fixed[f].bytes;
    const struct vl_set_cfg *sc = vl_fixed_set(c, f);
    if (sc && sc->alloc)
        b = vli_div_up(b, sc->alloc) * sc->alloc;
    return (uint32_t)vli_div_up(b, cb);
}

/* Loans beyond the stage's own window: these came from the pool. */
uint32_t vli_pool_loans(const struct vl_stage *s)
{
    uint32_t room = s->window_chunks > s->kv_chunks
                        ? s->window_chunks - s->kv_chunks
                        : 0;
    return s->loan_chunks > room ? s->loan_chunks - room : 0;
}

/* Pool loans of every stage on device d. */
uint32_t vli_dev_pool_loans(struct vl_ledger *L, const struct vl_device *d)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < L->nstage; i++) {
        const struct vl_stage *s = &L->stage[i];
        if (s->used && s->configured && s->cfg.device == d->cfg.id)
            n += vli_pool_loans(s);
    }
    return n;
}

/* R2: what a configured stage reserved and was not granted yet: its
 * promise. */
uint32_t vli_stage_full(const struct vl_stage *s)
{
    return vli_window_free(s) + vli_fixed_free(s);
}

/* R11: quarantined chunks of a stage's old owner stand for its promise
 * until the reap (the stage can't be registered before). */
static uint32_t stage_credit(const struct vl_stage *s)
{
    uint32_t f = vli_stage_full(s);
    return s->quarantined < f ? s->quarantined : f;
}

/* R2: the promise that must be free chunks now, because nothing could be
 * recalled for it in time: fixed reservations (fixed regions grow at once),
 * and, R7, the window of a no-loan stage (mapped whole at registration). */
static uint32_t stage_hard(const struct vl_stage *s)
{
    /* Quarantined chunks cover it as they will when given back: fixed ones
     * the fixed part, the others the window part. */
    uint32_t qw = s->quarantined - s->q_fixed;
    return sub0(vli_fixed_free(s), s->q_fixed) +
           (s->no_loan ? sub0(vli_window_free(s), qw) : 0);
}

/* R4: the promise free chunks and recallable pool loans must cover; never
 * less than the hard part (quarantined pool loans may outnumber the
 * promise). */
static uint32_t stage_need(const struct vl_stage *s)
{
    uint32_t n = vli_stage_full(s) - stage_credit(s), h = stage_hard(s);
    return n > h ? n : h;
}

/* R5: what pool loans must leave free: everything promised, except the
 * window of a lending stage no client has registered, under
 * lend_unreserved; its initial window stays free all the same, so that
 * its registration never waits on another client's recall (a lender that
 * does not answer would keep the stage from starting at all). */
static uint32_t stage_claim(const struct vl_device *d, const struct vl_stage *s)
{
    uint32_t need = stage_need(s);
    /* R18: a sleeping stage's window is lent as an unregistered one's. */
    if ((s->owner && !s->asleep) || !d->cfg.lend_unreserved || s->no_loan)
        return need;
    uint32_t w = vli_window_free(s);
    uint32_t n = stage_hard(s) + (s->register_chunks < w ? s->register_chunks : w);
    return n < need ? n : need;
}

struct vli_promises vli_dev_promises(struct vl_ledger *L,
                                     const struct vl_device *d)
{
    struct vli_promises p = {0, 0, 0};
    for (uint32_t i = 0; i < L->nstage; i++) {
        struct vl_stage *s = &L->stage[i];
        if (!s->used || !s->configured || s->cfg.device != d->cfg.id)
            continue;
        p.hard += stage_hard(s);
        p.need += stage_need(s);
        p.claim += stage_claim(d, s);
    }
    return p;
}

/* R2: free chunks no promise needs: ad-hoc regions, KV beyond the
 * window. */
uint32_t vli_dev_unpromised(struct vl_ledger *L, struct vl_device *d)
{
    return sub0(vli_dev_free(d), vli_dev_promises(L, d).need);
}

/* Free chunks pool loans may take. */
uint32_t vli_dev_unclaimed(struct vl_ledger *L, struct vl_device *d)
{
    return sub0(vli_dev_free(d), vli_dev_promises(L, d).claim);
}

/* R4: free chunks stage s may take for its KV window or its own loans: all
 * but the hard promises of other stages and its own fixed one. */
uint32_t vli_free_for_window(struct vl_ledger *L, struct vl_device *d,
                             const struct vl_stage *s)
{
    struct vli_promises p = vli_dev_promises(L, d);
    return sub0(vli_dev_free(d), p.hard - stage_hard(s) + vli_fixed_free(s));
}

/* Free chunks stage s may take for its fixed regions. */
uint32_t vli_free_for_fixed(struct vl_ledger *L, struct vl_device *d,
                            const struct vl_stage *s)
{
    struct vli_promises p = vli_dev_promises(L, d);
    uint32_t h = stage_hard(s);
    return sub0(vli_dev_free(d), p.hard - h + sub0(h, vli_fixed_free(s)));
}
