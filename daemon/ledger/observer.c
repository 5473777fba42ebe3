/* SPDX-License-Identifier: Apache-2.0 */
/* The observer: every change a restarted vramd needs to rebuild its ledger
 * (who holds each chunk, which address ranges and ad-hoc stage ids are
 * taken), told to the daemon, which mirrors it into its state file.
 *
 * Enforces R13 (what a restart finds is what was held). */
#include "daemon/ledger/internal.h"

/* R13: every change of a chunk's holder is told, so that a restarted vramd
 * knows what each live process may still map. r: the region the chunk was
 * just placed in (NULL when it is free or quarantined), so that a grant
 * never looks a region up. */
void vli_note_chunk(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
                    const struct vl_region *r)
{
    if (!L->obs.chunk)
        return;
    struct vl_chunk *c = &d->chunks[idx];
    uint16_t st = VL_QSTAGE_NONE;
    uint8_t cat = c->cat;
    if (c->state == VL_QUARANTINED) {
        st = c->qstage;
        cat = c->qcat;
    } else if (r && r->stage < L->nstage && L->stage[r->stage].configured) {
        st = (uint16_t)r->stage;
    }
    L->obs.chunk(L->obs.ctx, vli_dev_index(L, d), idx, c->holder, st, cat);
}

uint32_t vli_note_va_take(struct vl_ledger *L, uint32_t region,
                          uint32_t client, uint64_t base, uint64_t size)
{
    return L->obs.va_take ? L->obs.va_take(L->obs.ctx, region, client, base,
                                           size)
                          : 0;
}

void vli_note_va_give(struct vl_ledger *L, uint32_t tag)
{
    if (L->obs.va_give)
        L->obs.va_give(L->obs.ctx, tag);
}

void vli_note_stage(struct vl_ledger *L, uint32_t stage, uint32_t client)
{
    if (L->obs.stage)
        L->obs.stage(L->obs.ctx, stage, client);
}
