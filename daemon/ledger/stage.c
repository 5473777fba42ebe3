/* SPDX-License-Identifier: Apache-2.0 */
/* Stages and their owners: ad-hoc stages, the registration of configured
 * ones (their regions and initial KV), release.
 *
 * Enforces R7 (a no-loan stage gets its whole window at registration), R5
 * (pool loans found in a registering stage's window come back as its KV
 * grows), R11 (no registration while the old owner's chunks are
 * quarantined) and R14 (stages per client). */
#include "daemon/ledger/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const struct vl_stage *vli_stage_peek(const struct vl_ledger *L, uint32_t id)
{
    if (id >= L->nstage || !L->stage[id].used)
        return NULL;
    return &L->stage[id];
}

struct vl_stage *vli_stage_get(struct vl_ledger *L, uint32_t id)
{
    return (struct vl_stage *)vli_stage_peek(L, id); /* L is writable */
}

int vli_own_stage(struct vl_ledger *L, uint32_t client, uint32_t stage,
                  struct vl_stage **out)
{
    struct vl_stage *s = vli_stage_get(L, stage);
    if (!s || s->owner != client)
        return vli_fail(L, -ENOENT, "stage %u is not yours", stage);
    if (!s->configured)
        return vli_fail(L, -EPERM, "stage %u is ad-hoc: KV budgets and loans "
                        "need a configured stage", stage);
    int e = vli_stage_awake(L, s); /* R18 */
    if (e < 0)
        return e;
    *out = s;
    return 0;
}

/* Every change of a stage's owner goes through here, so that each client's
 * count of stages (R14) stays right. */
void vli_stage_set_owner(struct vl_ledger *L, struct vl_stage *s,
                         uint32_t client)
{
    struct vl_client *old = s->owner ? vli_client_find(L, s->owner) : NULL;
    if (old && old->stages)
        old->stages--;
    struct vl_client *cl = client ? vli_client_find(L, client) : NULL;
    if (cl)
        cl->stages++;
    s->owner = client;
}

void vli_stage_reset(struct vl_ledger *L, struct vl_stage *s)
{
    vli_stage_set_owner(L, s, 0);
    if (!s->configured) {
        free(s->slot_layer);
        memset(s, 0, sizeof(*s));
        vli_note_stage(L, (uint32_t)(s - L->stage), 0);
        return;
    }
    s->keep_window = false;
    s->kv_region = s->expert_region = 0;
    memset(s->fixed_region, 0, sizeof(s->fixed_region));
    s->kv_needed_bytes = 0;
    s->kv_peak_tokens = 0;
    s->asleep = false; /* R18 */
    s->wake_tokens = s->host_bytes = 0;
    s->sleeps = s->wakes = s->sleep_us = s->wake_us = 0;
    for (uint32_t i = 0; i < s->claim_hi; i++)
        s->slot_layer[i] = VLI_SLOT_LAYER_NONE;
    s->claim_hi = 0;
}

/* R14: checked before anything else of a registration, as the daemon did
 * before it read the request. */
static int stage_limit(struct vl_ledger *L, uint32_t client)
{
    const struct vl_client *cl = vli_client_find(L, client);
    if (cl && cl->stages >= L->limits.stages_per_client)
        return vli_fail(L, -E2BIG, "limit of %u stages per client reached",
                        L->limits.stages_per_client);
    return 0;
}

int vl_stage_register_adhoc(struct vl_ledger *L, uint32_t client,
                            uint32_t device, uint32_t first, uint32_t last,
                            uint32_t *stage_out)
{
    int e = stage_limit(L, client);
    if (e < 0)
        return e;
    struct vl_client *cl = vli_client_find(L, client);
    if (!cl || cl->gone)
        return vli_fail(L, -ENOENT, "no connected client %u", client);
    if ((e = vli_quota_stage(L, client)) < 0) /* R16 */
        return e;
    if (!vli_dev_get(L, device))
        return vli_fail(L, -ENODEV, "no device %u", device);
    if (last < first || last >= VLI_SLOT_LAYER_NONE)
        return vli_fail(L, -EINVAL, "bad layer range %u-%u", first, last);
    /* Ad-hoc stages have ids of their own, above the configured ones: the
     * lowest free, the table growing when all it has are taken. */
    for (uint32_t i = VL_CONFIG_STAGES; i < VL_MAX_STAGES; i++) {
        if (i >= L->nstage && vli_stages_cover(L, i + 1) < 0)
            return vli_fail(L, -ENOMEM, "out of memory");
        struct vl_stage *s = &L->stage[i];
        if (s->used)
            continue;
        memset(s, 0, sizeof(*s));
        s->used = true;
        s->cfg.id = i;
        s->cfg.device = device;
        s->cfg.first_layer = first;
        s->cfg.last_layer = last;
        vli_stage_set_owner(L, s, client);
        vli_note_stage(L, i, client);
        *stage_out = i;
        return 0;
    }
    return vli_fail(L, -E2BIG, "all %d ad-hoc stage ids are in use",
                    VL_MAX_STAGES - VL_CONFIG_STAGES);
}

int vl_stage_register(struct vl_ledger *L, uint32_t client, uint32_t stage,
                      bool keep_window, struct vl_fxlist *fx)
{
    int e = stage_limit(L, client);
    if (e < 0)
        return e;
    struct vl_stage *s = vli_stage_get(L, stage);
    if (!s || !s->configured)
        return vli_fail(L, -ENOENT, "no configured stage %u", stage);
    struct vl_client *cl = vli_client_find(L, client);
    if (!cl || cl->gone)
        return vli_fail(L, -ENOENT, "no connected client %u", client);
    if (s->owner == client)
        return vli_fail(L, -EEXIST, "stage %u is already yours (registered "
                        "on this connection)", stage);
    if (s->owner)
        return vli_fail(L, -EEXIST, "stage %u is owned by client %u", stage,
                        s->owner);
    struct vl_device *d = vli_dev_get(L, s->cfg.device);
    uint64_t cb = d->cfg.chunk_bytes;
    if (s->quarantined) /* R11: not before its old owner is reaped */
        return vli_fail(L, -EAGAIN, "stage %u: %u chunks of its previous owner "
                        "are still quarantined", stage, s->quarantined);

    /* R7: no-loan safety (decided at configuration): how much KV to map
     * now. A no-loan window is a hard promise, always free (but for
     * quarantine elsewhere). R5: the initial window of a lending stage may
     * have been lent as pool loans while it had no owner: then they are
     * recalled and the registration waits (R6: VL_PENDING, nothing
     * changed), as it does for chunks on their way back (recalled, or
     * quarantined until a reap), so a stage always starts with its initial
     * window. */
    uint64_t tokens = s->no_loan ? s->cfg.native_context
                                 : s->cfg.initial_tokens;
    uint32_t need = 0, per_lane[VL_MAX_LANES];
    uint32_t avail = vli_free_for_window(L, d, s);
    for (uint32_t l = 0; l < s->cfg.lanes; l++) {
        per_lane[l] = vl_lane_chunks(&s->cfg, l,
                                     vl_kv_target_tokens(&s->cfg, tokens), cb);
        need += per_lane[l];
    }
    if (need > avail && !s->no_loan &&
        (vli_dev_pool_loans(L, d) || d->count[VL_RECALLING] ||
         d->count[VL_QUARANTINED]))
        return vli_recall_pool_loans(L, s, d, need - avail, fx);
    if (need > avail)
        return vli_fail(L, -EAGAIN, "stage %u: %u chunks needed for its KV "
                        "window, %u free (the rest is quarantined)", stage,
                        need, avail);
    if (vli_fx_reserve(fx, need) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");

    struct vl_region *kv = NULL, *ex = NULL;
    uint64_t eb = (uint64_t)s->nslots * s->cfg.expert_slot_bytes;
    uint32_t one[1] = {s->nslots ? (uint32_t)vli_div_up(eb, cb) : 1};
    vli_stage_set_owner(L, s, client);
    e = vli_region_new(L, client, s, VL_KV, s->cfg.lanes, s->lane_window,
                       &kv);
    if (e < 0)
        goto undo;
    s->kv_region = kv->id;
    e = vli_region_new(L, client, s, VL_EXPERT, 1, one, &ex);
    if (e < 0)
        goto undo;
    s->expert_region = ex->id;
    for (uint32_t f = 0; f < s->cfg.nfixed; f++) {
        struct vl_region *fr = NULL;
        if (s->cfg.fixed[f].set)
            continue; /* R17: its weight set is the memory */
        uint32_t slots[1] = {(uint32_t)vli_div_up(s->cfg.fixed[f].bytes, cb)};
        e = vli_region_new(L, client, s, s->cfg.fixed[f].kind, 1, slots, &fr);
        if (e < 0)
            goto undo;
        fr->fixed_index = f;
        s->fixed_region[f] = fr->id;
    }
    s->keep_window = keep_window;
    vli_grant_lanes(L, kv, per_lane, VL_GRANTED, fx);
    s->grants_total += need;
    s->kv_peak_tokens = vl_kv_target_tokens(&s->cfg, tokens);
    s->kv_needed_bytes = 0;
    return 0;
undo:
    vli_drop_regions(L, client, stage, false, NULL);
    vli_stage_reset(L, s);
    return e;
}

int vl_stage_release(struct vl_ledger *L, uint32_t client, uint32_t stage,
                     struct vl_fxlist *fx)
{
    struct vl_stage *s = vli_stage_get(L, stage);
    if (!s || s->owner != client)
        return vli_fail(L, -ENOENT, "stage %u is not yours", stage);
    size_t held = 0;
    for (size_t i = 0; i < L->nregion; i++)
        if (L->region[i]->stage == stage)
            held += L->region[i]->used;
    if (vli_fx_reserve(fx, held + 1) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    vli_drop_regions(L, client, stage, false, fx);
    vli_stage_reset(L, s);
    return 0;
}
