/* SPDX-License-Identifier: Apache-2.0 */
/* vl_check: every invariant of the ledger, recomputed from scratch.
 *
 * Checks R1 (pools, holders, counters), R2 and R4 (promises), R9 (claims),
 * R10 (no foreign chunk in a region), R11 (quarantine counted per stage),
 * R13 (held address ranges) and R14 (what each client holds, as its
 * quotas and views count it). */
#include "daemon/ledger/internal.h"

#include <string.h>

#include <errno.h>
#include <stdlib.h>

/* What each client holds, recounted; indexed as L->client. */
struct tally {
    uint32_t chunks, regions, stages;
    uint64_t held_bytes, quarantined_bytes, va_bytes;
};

/* The index of client id in L->client, or L->nclient: through the id
 * index (which vl_check relies on, then, as every operation does), so a
 * check costs the chunks, not chunks times clients. */
static size_t client_index(const struct vl_ledger *L, uint32_t id)
{
    const struct vl_client *c = vli_client_find(L, id);
    return c ? (size_t)(c - L->client) : L->nclient;
}

/* R1: every chunk in one state, held by one known client (R11: a gone one
 * only in quarantine), mapped in one (region, slot) that points back, of
 * its own device (R10); the counters add up to the capacity (R12: less what
 * is withheld). */
static int check_chunks(struct vl_ledger *L, struct tally *t,
                        uint32_t *qstage)
{
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        uint32_t cnt[VL_NSTATES] = {0}, cat[VL_CAT_LOAN + 1] = {0};
        for (uint32_t k = 0; k < d->nchunks; k++) {
            struct vl_chunk *c = &d->chunks[k];
            if (c->state >= VL_NSTATES || c->cat > VL_CAT_LOAN)
                return vli_fail(L, -EFAULT, "device %u chunk %u: bad state or "
                                "category", d->cfg.id, k);
            if (c->mark)
                return vli_fail(L, -EFAULT, "device %u chunk %u: marked "
                                "between operations", d->cfg.id, k);
            cnt[c->state]++;
            cat[c->cat]++;
            bool is_held = c->state != VL_FREE;
            if (is_held != (c->holder != 0))
                return vli_fail(L, -EFAULT, "device %u chunk %u: %s with "
                                "holder %u", d->cfg.id, k,
                                vl_state_name(c->state), c->holder);
            if (is_held) {
                size_t ci = client_index(L, c->holder);
                if (ci == L->nclient)
                    return vli_fail(L, -EFAULT, "device %u chunk %u: held by "
                                    "unknown client %u", d->cfg.id, k,
                                    c->holder);
                t[ci].chunks++;
                if (c->state == VL_QUARANTINED)
                    t[ci].quarantined_bytes += d->cfg.chunk_bytes;
                else
                    t[ci].held_bytes += d->cfg.chunk_bytes;
                if (L->client[ci].gone && c->state != VL_QUARANTINED)
                    return vli_fail(L, -EFAULT, "device %u chunk %u: %s, held "
                                    "by gone client %u", d->cfg.id, k,
                                    vl_state_name(c->state), c->holder);
            }
            if ((c->state == VL_FREE || c->state == VL_QUARANTINED) &&
                (c->region || c->cat != VL_CAT_NONE))
                return vli_fail(L, -EFAULT, "device %u chunk %u: %s but mapped",
                                d->cfg.id, k, vl_state_name(c->state));
            if (c->state != VL_FREE && c->state != VL_QUARANTINED &&
                (!c->region || c->cat == VL_CAT_NONE))
                return vli_fail(L, -EFAULT, "device %u chunk %u: %s but in no "
                                "region", d->cfg.id, k,
                                vl_state_name(c->state));
            if (c->qstage != VL_QSTAGE_NONE) {
                if (c->state != VL_QUARANTINED || c->qstage >= L->nstage ||
                    !L->stage[c->qstage].configured)
                    return vli_fail(L, -EFAULT, "device %u chunk %u: %s, "
                                    "counted as quarantine of stage %u",
                                    d->cfg.id, k, vl_state_name(c->state),
                                    c->qstage);
                qstage[c->qstage]++;
                qstage[L->nstage + c->qstage] += c->qcat == VL_CAT_FIXED;
            } else if (c->qcat) {
                return vli_fail(L, -EFAULT, "device %u chunk %u: a quarantine "
                                "category without a stage", d->cfg.id, k);
            }
            if (c->region) {
                struct vl_region *r = vli_region_find(L, c->region);
                if (!r || c->slot >= r->lanes * r->stride_slots ||
                    r->slot_chunk[c->slot] != vl_chunk_id(di, k))
                    return vli_fail(L, -EFAULT, "device %u chunk %u: region %u "
                                    "slot %u does not point back", d->cfg.id, k,
                                    c->region, c->slot);
                if (r->client != c->holder)
                    return vli_fail(L, -EFAULT, "device %u chunk %u: two "
                                    "holders (%u, region of %u)", d->cfg.id, k,
                                    c->holder, r->client);
                if (r->device != d->cfg.id) /* R10 */
                    return vli_fail(L, -EFAULT, "chunk %u of device %u in a "
                                    "region of device %u", k, d->cfg.id,
                                    r->device);
                if (c->cat != vli_cat_of_kind(r))
                    return vli_fail(L, -EFAULT, "device %u chunk %u: wrong "
                                    "category", d->cfg.id, k);
                struct vl_stage *rs = vli_stage_get(L, r->stage);
                bool loan = rs && rs->configured && r->kind == VL_EXPERT;
                if (c->state == VL_LOANED && !loan)
                    return vli_fail(L, -EFAULT, "device %u chunk %u: loaned "
                                    "outside a stage's expert region",
                                    d->cfg.id, k);
                if (c->state == VL_GRANTED && loan)
                    return vli_fail(L, -EFAULT, "device %u chunk %u: granted "
                                    "in a stage's expert region", d->cfg.id, k);
            }
        }
        for (int st = 0; st < VL_NSTATES; st++)
            if (cnt[st] != d->count[st])
                return vli_fail(L, -EFAULT, "device %u: %u %s chunks counted "
                                "as %u", d->cfg.id, cnt[st], vl_state_name(st),
                                d->count[st]);
        if (cat[VL_CAT_FIXED] != d->fixed || cat[VL_CAT_KV] != d->kv ||
            cat[VL_CAT_LOAN] != d->loaned)
            return vli_fail(L, -EFAULT, "device %u: category counters drifted",
                            d->cfg.id);
        if ((uint64_t)d->withheld + d->weights > cnt[VL_FREE])
            return vli_fail(L, -EFAULT, "device %u: %u chunks withheld and %u "
                            "charged to weight sets, %u free", d->cfg.id,
                            d->withheld, d->weights, cnt[VL_FREE]);
        /* R17: what the sets are charged is what the device keeps out. */
        uint64_t units = 0;
        for (size_t w = 0; w < L->nwset; w++)
            if (L->wset[w]->dev == di)
                units += L->wset[w]->units;
        if (units != d->weights)
            return vli_fail(L, -EFAULT, "device %u: weight sets hold %llu "
                            "chunks, %u counted", d->cfg.id,
                            (unsigned long long)units, d->weights);
        uint32_t avail = cnt[VL_FREE] - d->withheld - d->weights;
        if ((uint64_t)d->fixed + d->kv + d->loaned + avail +
                cnt[VL_QUARANTINED] + d->weights != vl_capacity(d))
            return vli_fail(L, -EFAULT, "device %u: fixed %u + kv %u + loaned "
                            "%u + free %u + quarantined %u + weights %u != "
                            "capacity %u", d->cfg.id, d->fixed, d->kv,
                            d->loaned, avail, cnt[VL_QUARANTINED], d->weights,
                            vl_capacity(d));
        if (d->nfree != cnt[VL_FREE])
            return vli_fail(L, -EFAULT, "device %u: free stack holds %u, %u "
                            "free", d->cfg.id, d->nfree, cnt[VL_FREE]);
        for (uint32_t i = 0; i < d->nfree; i++)
            if (d->free_stack[i] >= d->nchunks ||
                d->chunks[d->free_stack[i]].state != VL_FREE)
                return vli_fail(L, -EFAULT, "device %u: entry %u of the free "
                                "stack is not a free chunk", d->cfg.id, i);
        if (d->reserved > vl_capacity(d))
            return vli_fail(L, -EFAULT, "device %u: reservations exceed "
                            "capacity", d->cfg.id);
    }
    return 0;
}

static int check_regions(struct vl_ledger *L, struct tally *t)
{
    for (size_t i = 0; i < L->nregion; i++) {
        struct vl_region *r = L->region[i];
        uint32_t used = 0;
        size_t ci = client_index(L, r->client);
        struct vl_stage *s = vli_stage_get(L, r->stage);
        if (ci == L->nclient || L->client[ci].gone || !s ||
            s->owner != r->client)
            return vli_fail(L, -EFAULT, "region %u: client %u or its stage %u "
                            "is gone", r->id, r->client, r->stage);
        t[ci].regions += !s->configured;
        t[ci].va_bytes += r->va_bytes;
        for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++) {
            if (r->slot_chunk[k] == VL_CHUNK_NONE)
                continue;
            if (k % r->stride_slots >= r->lane_slots[k / r->stride_slots])
                return vli_fail(L, -EFAULT, "region %u: slot %u beyond its "
                                "lane", r->id, k);
            struct vl_chunk *c = vli_chunk_get(L, r->slot_chunk[k], NULL, NULL);
            if (!c || c->region != r->id || c->slot != k)
                return vli_fail(L, -EFAULT, "region %u slot %u: chunk does not "
                                "point back", r->id, k);
            used++;
        }
        if (used != r->used)
            return vli_fail(L, -EFAULT, "region %u: %u used, counted %u", r->id,
                            used, r->used);
        if (r->kind == VL_EXPERT &&
            vli_loaned_prefix_count(L, r) != r->loaned_prefix)
            return vli_fail(L, -EFAULT, "region %u: %u loaned slots lead, "
                            "counted %u", r->id, vli_loaned_prefix_count(L, r),
                            r->loaned_prefix);
        for (uint32_t l = 0; l < r->lanes; l++) {
            const uint64_t *lc = r->slot_chunk + (size_t)l * r->stride_slots;
            uint32_t n = 0, first_empty = r->lane_slots[l], hi = 0;
            for (uint32_t k = 0; k < r->stride_slots; k++) {
                if (lc[k] == VL_CHUNK_NONE) {
                    if (first_empty == r->lane_slots[l] && k < first_empty)
                        first_empty = k;
                    continue;
                }
                n++;
                hi = k + 1;
            }
            if (n != r->lane_count[l] || r->lane_lo[l] > first_empty ||
                r->lane_hi[l] != hi)
                return vli_fail(L, -EFAULT, "region %u lane %u: hints drifted "
                                "(count %u/%u, lo %u > %u, hi %u/%u)", r->id, l,
                                n, r->lane_count[l], r->lane_lo[l], first_empty,
                                r->lane_hi[l], hi);
        }
        uint64_t a0 = r->base, a1 = r->base + r->va_bytes;
        if (a0 < L->va_base || a1 > L->va_base + L->va_size || a1 <= a0)
            return vli_fail(L, -EFAULT, "region %u: outside the address window",
                            r->id);
        for (size_t j = i + 1; j < L->nregion; j++) {
            struct vl_region *o = L->region[j];
            uint64_t b0 = o->base, b1 = o->base + o->va_bytes;
            if (a0 < b1 && b0 < a1)
                return vli_fail(L, -EFAULT, "regions %u and %u overlap", r->id,
                                o->id);
            if (r->id == o->id)
                return vli_fail(L, -EFAULT, "two regions with id %u", r->id);
        }
    }
    return 0;
}

/* Address ranges held for gone clients' processes (R13). */
static int check_holds(struct vl_ledger *L, struct tally *t)
{
    for (size_t i = 0; i < L->nva_hold; i++) {
        struct vl_va_hold *h = &L->va_hold[i];
        struct vl_client *cl = vli_client_find(L, h->client);
        if (!cl || !cl->gone)
            return vli_fail(L, -EFAULT, "address range %#llx held for client "
                            "%u, which is not gone",
                            (unsigned long long)h->base, h->client);
        t[client_index(L, h->client)].va_bytes += h->size;
        uint64_t a0 = h->base, a1 = h->base + h->size;
        if (a0 < L->va_base || a1 > L->va_base + L->va_size || a1 <= a0)
            return vli_fail(L, -EFAULT, "held range %#llx: outside the address "
                            "window", (unsigned long long)a0);
        for (size_t j = 0; j < L->nregion; j++) {
            struct vl_region *o = L->region[j];
            if (a0 < o->base + o->va_bytes && o->base < a1)
                return vli_fail(L, -EFAULT, "held range %#llx overlaps region "
                                "%u", (unsigned long long)a0, o->id);
        }
        for (size_t j = i + 1; j < L->nva_hold; j++) {
            struct vl_va_hold *o = &L->va_hold[j];
            if (a0 < o->base + o->size && o->base < a1)
                return vli_fail(L, -EFAULT, "held ranges %#llx and %#llx "
                                "overlap", (unsigned long long)a0,
                                (unsigned long long)o->base);
        }
        for (size_t j = 0; j < L->nva_free; j++) {
            struct vl_va_range *f = &L->va_free[j];
            if (f->size && a0 < f->base + f->size && f->base < a1)
                return vli_fail(L, -EFAULT, "held range %#llx is also free",
                                (unsigned long long)a0);
        }
    }
    for (uint32_t i = 0; i < L->nstage; i++) {
        struct vl_stage *s = &L->stage[i];
        if (!s->used || s->configured || s->owner)
            continue;
        struct vl_client *cl = vli_client_find(L, s->held_by);
        if (!cl || !cl->gone || !cl->holds_ids)
            return vli_fail(L, -EFAULT, "ad-hoc stage %u has no owner and no "
                            "gone client holds it", i);
    }
    return 0;
}

static int check_stages(struct vl_ledger *L, const uint32_t *qstage,
                        struct tally *t)
{
    for (uint32_t i = 0; i < L->nstage; i++) {
        struct vl_stage *s = &L->stage[i];
        if (!s->used)
            continue;
        if (s->owner) {
            size_t ci = client_index(L, s->owner);
            if (ci == L->nclient || L->client[ci].gone)
                return vli_fail(L, -EFAULT, "stage %u: owner %u is gone", i,
                                s->owner);
            t[ci].stages++;
        }
        uint32_t kv = 0, loan = 0, fixed = 0, rec = 0;
        for (size_t j = 0; j < L->nregion; j++) {
            struct vl_region *r = L->region[j];
            if (r->stage != i)
                continue;
            uint32_t *p = r->kind == VL_KV ? &kv : r->kind == VL_EXPERT ? &loan : &fixed;
            *p += r->used;
            if (r->kind == VL_EXPERT)
                for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++)
                    if (r->slot_chunk[k] != VL_CHUNK_NONE &&
                        vli_chunk_get(L, r->slot_chunk[k], NULL, NULL)->state ==
                            VL_RECALLING)
                        rec++;
        }
        if (kv != s->kv_chunks || loan != s->loan_chunks ||
            fixed != s->fixed_chunks || rec != s->recalling)
            return vli_fail(L, -EFAULT, "stage %u: counters drifted (kv %u/%u, "
                            "loans %u/%u, fixed %u/%u, recalling %u/%u)", i, kv,
                            s->kv_chunks, loan, s->loan_chunks, fixed,
                            s->fixed_chunks, rec, s->recalling);
        if (s->asleep && (kv || loan || fixed)) /* R18 */
            return vli_fail(L, -EFAULT, "stage %u sleeps holding %u chunks", i,
                            kv + loan + fixed);
        if (qstage[i] != s->quarantined ||
            qstage[L->nstage + i] != s->q_fixed)
            return vli_fail(L, -EFAULT, "stage %u: %u quarantined chunks (%u "
                            "fixed), counted %u (%u)", i, qstage[i],
                            qstage[L->nstage + i], s->quarantined,
                            s->q_fixed);
        if (!s->configured)
            continue;
        if (s->quarantined && s->owner) /* R11 */
            return vli_fail(L, -EFAULT, "stage %u: registered while its old "
                            "chunks are quarantined", i);
        /* R4: the native-context guarantee: KV never outgrows the window,
         * and fixed regions never their reservation. */
        if (s->kv_chunks > s->window_chunks)
            return vli_fail(L, -EFAULT, "stage %u: KV %u chunks over its "
                            "window %u", i, s->kv_chunks, s->window_chunks);
        if (s->fixed_chunks > s->fixed_reserved)
            return vli_fail(L, -EFAULT, "stage %u: fixed %u chunks over its "
                            "reservation %u", i, s->fixed_chunks,
                            s->fixed_reserved);
        /* R9: claims only on backed slots, by layers of the stage. */
        uint32_t backed = vl_expert_slots_backed(L, i);
        for (uint32_t k = 0; k < s->nslots; k++) {
            uint16_t o = s->slot_layer[k];
            if (o == VLI_SLOT_LAYER_NONE)
                continue;
            if (k >= backed || o < s->cfg.first_layer || o > s->cfg.last_layer)
                return vli_fail(L, -EFAULT, "stage %u: slot %u claimed by "
                                "layer %u (%u slots backed, layers %u-%u)", i,
                                k, o, backed, s->cfg.first_layer,
                                s->cfg.last_layer);
        }
    }
    /* Promises (R2 and R4), per device. */
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        struct vli_promises p = vli_dev_promises(L, d);
        uint64_t full = 0, pool = 0;
        for (uint32_t i = 0; i < L->nstage; i++) {
            struct vl_stage *s = &L->stage[i];
            if (s->used && s->configured && s->cfg.device == d->cfg.id) {
                full += vli_stage_full(s);
                pool += vli_pool_loans(s);
            }
        }
        if (vli_dev_free(d) < p.hard)
            return vli_fail(L, -EFAULT, "device %u: %u chunks free, %u "
                            "promised hard", d->cfg.id, vli_dev_free(d),
                            p.hard);
        if ((uint64_t)vli_dev_free(d) + pool + d->count[VL_QUARANTINED] < full)
            return vli_fail(L, -EFAULT, "device %u: free %u + pool loans %llu "
                            "+ quarantined %u do not cover the %llu chunks "
                            "promised", d->cfg.id, vli_dev_free(d),
                            (unsigned long long)pool, d->count[VL_QUARANTINED],
                            (unsigned long long)full);
    }
    return 0;
}

/* R14: the counters quotas and views read, against the recount. */
static int check_clients(struct vl_ledger *L, const struct tally *t)
{
    for (size_t ci = 0; ci < L->nclient; ci++) {
        const struct vl_client *c = &L->client[ci];
        if (t[ci].chunks != c->chunks)
            return vli_fail(L, -EFAULT, "client %u holds %u chunks, counted "
                            "%u", c->id, t[ci].chunks, c->chunks);
        if (t[ci].held_bytes != c->held_bytes ||
            t[ci].quarantined_bytes != c->quarantined_bytes)
            return vli_fail(L, -EFAULT, "client %u holds %llu bytes and %llu "
                            "quarantined, counted %llu and %llu", c->id,
                            (unsigned long long)t[ci].held_bytes,
                            (unsigned long long)t[ci].quarantined_bytes,
                            (unsigned long long)c->held_bytes,
                            (unsigned long long)c->quarantined_bytes);
        if (t[ci].regions != c->regions)
            return vli_fail(L, -EFAULT, "client %u has %u ad-hoc regions, "
                            "counted %u", c->id, t[ci].regions, c->regions);
        if (t[ci].stages != c->stages)
            return vli_fail(L, -EFAULT, "client %u owns %u stages, counted %u",
                            c->id, t[ci].stages, c->stages);
        /* Its chunk lists hold exactly its chunks, linked both ways. */
        uint32_t listed = 0;
        for (uint32_t di = 0; di < L->ndev; di++) {
            const struct vl_device *d = &L->dev[di];
            uint32_t prev = VL_NONE;
            for (uint32_t k = c->hfirst[di]; k != VL_NONE;
                 prev = k, k = d->chunks[k].hnext) {
                if (k >= d->nchunks || d->chunks[k].holder != c->id ||
                    d->chunks[k].hprev != prev || ++listed > c->chunks)
                    return vli_fail(L, -EFAULT, "client %u: its list of device "
                                    "%u's chunks is broken at chunk %u", c->id,
                                    d->cfg.id, k);
            }
        }
        if (listed != c->chunks)
            return vli_fail(L, -EFAULT, "client %u holds %u chunks, %u listed",
                            c->id, c->chunks, listed);
        if (t[ci].va_bytes != c->va_bytes) /* R16 */
            return vli_fail(L, -EFAULT, "client %u reserves %llu bytes of "
                            "address space, counted %llu", c->id,
                            (unsigned long long)t[ci].va_bytes,
                            (unsigned long long)c->va_bytes);
    }
    return 0;
}

/* The id index finds every client, and holds nothing else. */
static int check_index(struct vl_ledger *L)
{
    size_t live = 0, gone = 0;
    for (size_t i = 0; i < L->ch_cap; i++)
        live += L->ch[i] && L->ch[i] != UINT32_MAX;
    for (size_t ci = 0; ci < L->nclient; ci++)
        gone += L->client[ci].gone;
    if (gone != L->ngone)
        return vli_fail(L, -EFAULT, "%zu clients are gone, counted %zu", gone,
                        L->ngone);
    if (live != L->nclient)
        return vli_fail(L, -EFAULT, "the client index holds %zu clients, "
                        "there are %zu", live, L->nclient);
    for (size_t ci = 0; ci < L->nclient; ci++)
        if (vli_client_find(L, L->client[ci].id) != &L->client[ci])
            return vli_fail(L, -EFAULT, "client %u is not found by its id",
                            L->client[ci].id);
    return 0;
}

/* R17: each set's writer maps it while it is unsealed, and only then has
 * one; its users are known clients, each once; names are unique. */
static int check_weights(struct vl_ledger *L)
{
    for (size_t i = 0; i < L->nwset; i++) {
        const struct vl_wset *w = L->wset[i];
        if (w->dev >= L->ndev || !w->units)
            return vli_fail(L, -EFAULT, "weight set %u: bad device or size",
                            w->id);
        if (w->sealed == (w->writer != 0))
            return vli_fail(L, -EFAULT, "weight set %u: %s with writer %u",
                            w->id, w->sealed ? "sealed" : "unsealed", w->writer);
        bool writer_maps = !w->writer;
        for (uint32_t k = 0; k < w->nuser; k++) {
            if (!vli_client_find(L, w->user[k]))
                return vli_fail(L, -EFAULT, "weight set %u: unknown user %u",
                                w->id, w->user[k]);
            writer_maps |= w->user[k] == w->writer;
            for (uint32_t j = 0; j < k; j++)
                if (w->user[j] == w->user[k])
                    return vli_fail(L, -EFAULT, "weight set %u: user %u "
                                    "twice", w->id, w->user[k]);
        }
        if (w->stage != VL_NONE &&
            (w->stage >= L->nstage || w->fixed >= VL_MAX_FIXED ||
             L->stage[w->stage].fixed_set[w->fixed] != w->id))
            return vli_fail(L, -EFAULT, "weight set %u: backs stage %u's "
                            "reservation %u, which does not know it", w->id,
                            w->stage, w->fixed);
        if (!writer_maps)
            return vli_fail(L, -EFAULT, "weight set %u: its writer %u does "
                            "not map it", w->id, w->writer);
        for (size_t j = 0; j < i; j++)
            if (strcmp(L->wset[j]->name, w->name) == 0 ||
                L->wset[j]->id == w->id)
                return vli_fail(L, -EFAULT, "weight set %u: name or id twice",
                                w->id);
    }
    /* Each stage's charge is its sets' units. */
    for (uint32_t i = 0; i < L->nstage; i++) {
        const struct vl_stage *s = &L->stage[i];
        uint64_t units = 0;
        for (uint32_t f = 0; s->used && f < VL_MAX_FIXED; f++)
            for (size_t k = 0; s->fixed_set[f] && k < L->nwset; k++)
                if (L->wset[k]->id == s->fixed_set[f])
                    units += L->wset[k]->units;
        if (s->used && units != s->set_chunks)
            return vli_fail(L, -EFAULT, "stage %u: its weight sets hold %llu "
                            "chunks, %u counted", i, (unsigned long long)units,
                            s->set_chunks);
        if (s->used && s->configured &&
            s->set_chunks + s->fixed_chunks > s->fixed_reserved)
            return vli_fail(L, -EFAULT, "stage %u: %u chunks of sets and %u "
                            "fixed over its reservation of %u", i,
                            s->set_chunks, s->fixed_chunks, s->fixed_reserved);
    }
    return 0;
}

int vl_check(struct vl_ledger *L)
{
    /* Per stage: quarantined chunks, then those of them fixed. */
    uint32_t *qstage = calloc(2 * (size_t)L->nstage, sizeof(*qstage));
    struct tally *t = calloc(L->nclient ? L->nclient : 1, sizeof(*t));
    if (!t || !qstage) {
        free(t);
        free(qstage);
        return vli_fail(L, -ENOMEM, "out of memory");
    }
    int e = check_index(L);
    if (e == 0)
        e = check_chunks(L, t, qstage);
    if (e == 0)
        e = check_regions(L, t);
    if (e == 0)
        e = check_holds(L, t);
    if (e == 0)
        e = check_stages(L, qstage, t);
    if (e == 0)
        e = check_clients(L, t);
    if (e == 0)
        e = check_weights(L);
    free(t);
    free(qstage);
    return e;
}
