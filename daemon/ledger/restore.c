/* SPDX-License-Identifier: Apache-2.0 */
/* Restore: a restarted vramd rebuilds, from its state file, the gone
 * clients of processes that still run, as if each had just disconnected.
 *
 * Enforces R13 (restart); the resume that follows is resume_claims.c. */
#include "daemon/ledger/internal.h"

#include <errno.h>

/* R13: what each process held stays its own while it lives: its chunks
 * quarantined, its address ranges and ad-hoc stage ids held. */
int vl_restore(struct vl_ledger *L, const uint32_t *clients, size_t nclients,
               const struct vl_restore_chunk *chunks, size_t nchunks,
               const struct vl_va_hold *va, size_t nva,
               const uint32_t *adhoc_stage_holder)
{
    if (L->nclient || L->nregion || L->nva_hold)
        return vli_fail(L, -EBUSY, "restore into a ledger already in use");
    for (size_t i = 0; i < nclients; i++) {
        int e = vl_client_add(L, clients[i]);
        if (e < 0)
            return e;
        vli_client_find(L, clients[i])->gone = true;
        L->ngone++;
    }
    for (size_t i = 0; i < nchunks; i++) {
        struct vl_device *d = NULL;
        uint32_t idx = 0;
        struct vl_chunk *c = vli_chunk_get(L, chunks[i].chunk, &d, &idx);
        struct vl_client *cl = vli_client_find(L, chunks[i].client);
        if (!c || !cl)
            return vli_fail(L, -EINVAL, "chunk %llu of client %u: no such %s",
                            (unsigned long long)chunks[i].chunk,
                            chunks[i].client, c ? "client" : "chunk");
        if (c->state != VL_FREE)
            return vli_fail(L, -EINVAL, "chunk %llu is held twice",
                            (unsigned long long)chunks[i].chunk);
        /* What the file says a chunk counted as is checked, not trusted. */
        if (chunks[i].cat > VL_CAT_LOAN ||
            (chunks[i].stage != VL_QSTAGE_NONE && chunks[i].stage >= VL_CONFIG_STAGES))
            return vli_fail(L, -EINVAL, "chunk %llu: category %u of stage %u "
                            "is no chunk's", (unsigned long long)chunks[i].chunk,
                            chunks[i].cat, chunks[i].stage);
        vli_set_state(d, c, VL_QUARANTINED);
        vli_holder_set(L, d, idx, cl->id);
        vli_client_gain(cl, d, VL_QUARANTINED);
        /* R11: it stands for a configured stage's promise only where that
         * stage still is, on this chunk's device (the configuration may have
         * changed between the two daemons). */
        uint16_t st = chunks[i].stage;
        if (st < L->nstage && L->stage[st].configured &&
            L->stage[st].cfg.device == d->cfg.id) {
            vli_qstage_set(L, c, st, chunks[i].cat);
        }
        vli_note_chunk(L, d, idx, NULL);
    }
    /* The free stacks again, low indexes on top as at start. */
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        d->nfree = 0;
        for (uint32_t k = d->nchunks; k-- > 0;)
            if (d->chunks[k].state == VL_FREE)
                d->free_stack[d->nfree++] = k;
        if (d->withheld > d->nfree)
            d->withheld = d->nfree;
    }
    for (size_t i = 0; i < nva; i++) {
        struct vl_va_hold h = va[i];
        if (!vli_client_find(L, h.client))
            return vli_fail(L, -EINVAL, "address range of unknown client %u",
                            h.client);
        int e = vli_va_take_exact(L, h.base, h.size);
        if (e < 0)
            return vli_fail(L, -EINVAL, "address range %#llx+%llu of client "
                            "%u: outside the window or held twice",
                            (unsigned long long)h.base,
                            (unsigned long long)h.size, h.client);
        h.tag = vli_note_va_take(L, h.region, h.client, h.base, h.size);
        if (vli_hold_add(L, &h) < 0)
            return vli_fail(L, -ENOMEM, "out of memory");
        vli_client_va(L, h.client, (int64_t)h.size);
        if (h.region >= L->next_region_id && h.region < UINT32_MAX)
            L->next_region_id = h.region + 1;
    }
    for (uint32_t i = 0; adhoc_stage_holder && i < VL_MAX_STAGES; i++) {
        uint32_t who = adhoc_stage_holder[i];
        if (!who || !vli_client_find(L, who))
            continue;
        if (vli_stages_cover(L, i + 1) < 0)
            return vli_fail(L, -ENOMEM, "out of memory");
        struct vl_stage *s = &L->stage[i];
        if (s->used)
            continue; /* a configured stage now: its id is not ad-hoc */
        s->used = true;
        s->cfg.id = i;
        s->held_by = who;
        vli_client_find(L, who)->holds_ids = true;
        vli_note_stage(L, i, who);
    }
    return 0;
}
