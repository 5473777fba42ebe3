/* SPDX-License-Identifier: Apache-2.0 */
/* Expert slots: which are backed by loans, and the layers that claim them.
 *
 * Enforces R9 (slots: layer-scoped claims on backed slots only). */
#include "daemon/ledger/internal.h"

#include <errno.h>

/* Expert slots fully backed by the loaned prefix of the expert region. */
uint32_t vl_expert_slots_backed(const struct vl_ledger *L, uint32_t stage)
{
    struct vl_ledger *ml = (struct vl_ledger *)L;
    struct vl_stage *s = vli_stage_get(ml, stage);
    if (!s || !s->expert_region || !s->cfg.expert_slot_bytes)
        return 0;
    struct vl_region *r = vli_region_find(ml, s->expert_region);
    if (!r)
        return 0;
    struct vl_device *d = vli_dev_get(ml, r->device);
    uint64_t b = (uint64_t)r->loaned_prefix * d->cfg.chunk_bytes /
                 s->cfg.expert_slot_bytes;
    return b < s->nslots ? (uint32_t)b : s->nslots;
}

/* Residency changed: new version, and, R9, claims on slots no longer
 * backed go. */
void vli_budget_changed(struct vl_ledger *L, struct vl_stage *s,
                        struct vl_fxlist *fx)
{
    s->residency_version++;
    uint32_t backed = vl_expert_slots_backed(L, (uint32_t)(s - L->stage));
    for (uint32_t i = backed; i < s->claim_hi; i++)
        s->slot_layer[i] = VLI_SLOT_LAYER_NONE;
    if (s->claim_hi > backed)
        s->claim_hi = backed;
    vli_fx_push(fx, (struct vl_fx){.kind = VL_FX_BUDGET, .client = s->owner,
                                   .stage = (uint32_t)(s - L->stage)});
}

/* R9: a claim names a layer of the stage's own range and backed slots that
 * no other layer owns; all of them or none. */
int vl_expert_claim(struct vl_ledger *L, uint32_t client, uint32_t stage,
                    uint32_t layer, const uint32_t *slots, size_t n)
{
    struct vl_stage *s = NULL;
    int e = vli_own_stage(L, client, stage, &s);
    if (e < 0)
        return e;
    if (layer < s->cfg.first_layer || layer > s->cfg.last_layer)
        return vli_fail(L, -EPERM, "layer %u is outside stage %u's layers "
                        "%u-%u", layer, stage, s->cfg.first_layer,
                        s->cfg.last_layer);
    uint32_t backed = vl_expert_slots_backed(L, stage);
    for (size_t i = 0; i < n; i++) {
        if (slots[i] >= backed)
            return vli_fail(L, -EINVAL, "slot %u is not backed (%u slots are)",
                            slots[i], backed);
        uint16_t o = s->slot_layer[slots[i]];
        if (o != VLI_SLOT_LAYER_NONE && o != layer)
            return vli_fail(L, -EBUSY, "slot %u belongs to layer %u", slots[i],
                            o);
    }
    for (size_t i = 0; i < n; i++) {
        s->slot_layer[slots[i]] = (uint16_t)layer;
        if (slots[i] >= s->claim_hi)
            s->claim_hi = slots[i] + 1;
    }
    return 0;
}
