/* SPDX-License-Identifier: Apache-2.0 */
/* Stages that sleep and wake (R18): a sleeping stage gives every chunk back
 * and keeps its regions (their addresses are in its owner's captured
 * graphs); a wake makes it usable again, and its owner takes the memory
 * back with the usual grants.
 *
 * Enforces R18. */
#include "daemon/ledger/internal.h"

#include <errno.h>

/* R18: the smallest KV target (R3) whose per-lane prefix covers every slot
 * the kv region occupies now: what a wake asks for again. One past the
 * highest occupied slot, not the count, so that a hole (a resume that lost
 * a chunk) is covered too. */
static uint64_t kv_tokens_now(struct vl_ledger *L, const struct vl_stage *s)
{
    const struct vl_region *kv = vli_region_find(L, s->kv_region);
    const struct vl_device *d = vli_dev_get(L, s->cfg.device);
    uint64_t t = 0, cb = d->cfg.chunk_bytes;
    for (uint32_t l = 0; kv && l < s->cfg.lanes; l++) {
        uint64_t hi = kv->lane_hi[l], bpt = s->cfg.lane_bytes_per_token[l];
        if (!hi || !bpt)
            continue;
        /* ceil(t * bpt / cb) >= hi  <=>  t > (hi - 1) * cb / bpt */
        uint64_t need = (hi - 1) * cb / bpt + 1;
        if (need > t)
            t = need;
    }
    if (t > s->cfg.native_context)
        t = s->cfg.native_context;
    return vl_kv_target_tokens(&s->cfg, t);
}

static int own_any_stage(struct vl_ledger *L, uint32_t client, uint32_t stage,
                         struct vl_stage **out)
{
    struct vl_stage *s = vli_stage_get(L, stage);
    if (!s || s->owner != client)
        return vli_fail(L, -ENOENT, "stage %u is not yours", stage);
    *out = s;
    return 0;
}

int vl_stage_sleep(struct vl_ledger *L, uint32_t client, uint32_t stage,
                   uint64_t host_bytes, uint64_t took_us, uint64_t *wake_tokens,
                   uint32_t *freed_out, struct vl_fxlist *fx)
{
    struct vl_stage *s = NULL;
    int e = own_any_stage(L, client, stage, &s);
    if (e < 0)
        return e;
    if (s->asleep)
        return vli_fail(L, -EALREADY, "stage %u is asleep already", stage);
    /* R18: every chunk of the stage's regions, in whatever state (granted,
     * loaned, recalling: a pending recall or trim is answered by the sleep,
     * its owner unmapped them all before asking). */
    size_t held = 0;
    for (size_t i = 0; i < L->nregion; i++)
        if (L->region[i]->stage == stage && L->region[i]->client == client)
            held += L->region[i]->used;
    if (vli_fx_reserve(fx, held + 2) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    uint64_t tokens = s->configured ? kv_tokens_now(L, s) : 0;
    bool loans = s->loan_chunks != 0;
    uint32_t freed = 0;
    for (size_t i = 0; i < L->nregion; i++) {
        struct vl_region *r = L->region[i];
        if (r->stage != stage || r->client != client || !r->used)
            continue;
        struct vl_device *d = vli_dev_get(L, r->device);
        for (uint32_t l = 0; l < r->lanes; l++) {
            /* vli_to_free lowers lane_hi: the bound is read once. */
            size_t k0 = (size_t)l * r->stride_slots;
            uint32_t hi = r->lane_hi[l];
            for (uint32_t k = 0; k < hi; k++) {
                uint64_t id = r->slot_chunk[k0 + k];
                if (id == VL_CHUNK_NONE)
                    continue;
                vli_to_free(L, d, (uint32_t)id, fx);
                freed++;
            }
        }
    }
    if (loans)
        vli_budget_changed(L, s, fx);
    s->asleep = true;
    s->wake_tokens = tokens;
    s->host_bytes = host_bytes;
    s->kv_needed_bytes = 0;
    s->sleeps++;
    s->sleep_us += took_us;
    if (wake_tokens)
        *wake_tokens = tokens;
    if (freed_out)
        *freed_out = freed;
    return 0;
}

int vl_stage_wake(struct vl_ledger *L, uint32_t client, uint32_t stage,
                  uint64_t *wake_tokens)
{
    struct vl_stage *s = NULL;
    int e = own_any_stage(L, client, stage, &s);
    if (e < 0)
        return e;
    if (!s->asleep)
        return vli_fail(L, -EALREADY, "stage %u is awake", stage);
    /* R18: from now on its window is registered again (R5: no pool loan
     * may take it; those that did are recalled by its owner's kv_reserve). */
    s->asleep = false;
    s->host_bytes = 0;
    s->wakes++;
    if (wake_tokens)
        *wake_tokens = s->wake_tokens;
    return 0;
}

int vl_stage_woke(struct vl_ledger *L, uint32_t client, uint32_t stage,
                  uint64_t took_us)
{
    struct vl_stage *s = NULL;
    int e = own_any_stage(L, client, stage, &s);
    if (e < 0)
        return e;
    if (s->asleep)
        return vli_fail(L, -EALREADY, "stage %u is asleep", stage);
    s->wake_us += took_us;
    return 0;
}

int vli_stage_awake(struct vl_ledger *L, const struct vl_stage *s)
{
    if (s->asleep)
        return vli_fail(L, -EBUSY, "stage %u is asleep: wake it first "
                        "(stage_wake)", s->cfg.id);
    return 0;
}
