/* SPDX-License-Identifier: Apache-2.0 */
/* Resume: the process of a gone client comes back as a new client and takes
 * back what it declares, judged whole before anything changes.
 *
 * Enforces R13 (restart: same ids, addresses and slots; nothing a live
 * process may map goes to anyone else) and keeps R4 and R11 across it (a
 * configured stage comes back whole or stays quarantined). */
#include "daemon/ledger/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Which fixed reservation of configured stage s a declared region is: the
 * first of its kind and size not taken yet. */
static uint32_t fixed_match(const struct vl_stage *s, const struct vl_device *d,
                            const struct vl_resume_region *rr, uint32_t taken)
{
    for (uint32_t f = 0; f < s->cfg.nfixed; f++)
        if (!(taken & (1u << f)) && !s->cfg.fixed[f].set &&
            s->cfg.fixed[f].kind == rr->kind &&
            rr->lanes == 1 &&
            rr->lane_slots[0] == vli_div_up(s->cfg.fixed[f].bytes,
                                            d->cfg.chunk_bytes))
            return f;
    return VL_NONE;
}

/* The gone clients the resuming process was: from, and others of the same
 * process (a resume that broke half-way leaves its chunks under two ids). */
static bool of_process(const struct vl_resume *rs, uint32_t client)
{
    if (client && client == rs->from)
        return true;
    for (size_t i = 0; client && i < rs->nalso; i++)
        if (rs->also[i] == client)
            return true;
    return false;
}

/* Declared stages by id (resume_judge fills the index first), over the
 * rs_nstage ids of the stage table. */
static int32_t *rs_stage_at;
static uint32_t rs_nstage;

static struct vl_resume_stage *rs_stage(struct vl_resume *rs, uint32_t id)
{
    if (rs_stage_at)
        return id < rs_nstage && rs_stage_at[id] >= 0
                   ? &rs->stages[rs_stage_at[id]]
                   : NULL;
    for (size_t i = 0; i < rs->nstages; i++)
        if (rs->stages[i].id == id)
            return &rs->stages[i];
    return NULL;
}

/* The hold of one of the process's gone clients on exactly this range. */
static struct vl_va_hold *held_range(struct vl_ledger *L,
                                     const struct vl_resume *rs, uint64_t base,
                                     uint64_t size)
{
    for (size_t i = 0; i < L->nva_hold; i++)
        if (of_process(rs, L->va_hold[i].client) && L->va_hold[i].base == base &&
            L->va_hold[i].size == size)
            return &L->va_hold[i];
    return NULL;
}

/* A region id is taken by a live region, or held for another process. */
static bool region_id_taken(struct vl_ledger *L, const struct vl_resume *rs,
                            uint32_t id)
{
    if (vli_region_find(L, id))
        return true;
    for (size_t i = 0; i < L->nva_hold; i++)
        if (L->va_hold[i].region == id && !of_process(rs, L->va_hold[i].client))
            return true;
    return false;
}

/* Working state of one resume: per declared region, the region made ready
 * before anything changes; declared regions by id. */
struct resume_work {
    struct vl_region **pre;
    struct vl_region **made; /* per declared region, once adopted */
    uint32_t *by_id; /* indexes of rs->regions, sorted by id */
    /* per stage id of the table: */
    int32_t *stage_at;     /* index in rs->stages, or -1 */
    uint32_t *qmine;       /* quarantined chunks of the process */
    uint32_t *fixed_taken; /* fixed regions taken back */
    uint8_t *have_kv, *have_ex, *partial;
    uint8_t *seen[VL_MAX_DEVICES];
};

static struct vl_resume *sort_rs; /* qsort has no context argument */

static int by_region_id(const void *a, const void *b)
{
    uint32_t x = sort_rs->regions[*(const uint32_t *)a].id;
    uint32_t y = sort_rs->regions[*(const uint32_t *)b].id;
    return x < y ? -1 : x > y;
}

static int find_region(const struct vl_resume *rs, const struct resume_work *w,
                       uint32_t id)
{
    size_t lo = 0, hi = rs->nregions;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t x = rs->regions[w->by_id[mid]].id;
        if (x == id)
            return (int)w->by_id[mid];
        if (x < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static void work_free(struct vl_ledger *L, struct vl_resume *rs,
                      struct resume_work *w)
{
    for (size_t i = 0; w->pre && i < rs->nregions; i++)
        vli_region_free(w->pre[i]);
    free(w->pre);
    free(w->made);
    free(w->by_id);
    for (uint32_t d = 0; d < L->ndev; d++)
        free(w->seen[d]);
    free(w->stage_at);
    rs_stage_at = NULL;
    rs_nstage = 0;
}

/* R13: a configured stage's chunk comes back as what it counted as, or
 * across the stage's KV and its loans: a kv_reserve (loan to KV) or a
 * kv_trim (KV to loan) that vramd committed but whose reply died with it
 * leaves the process mapping the chunk where it was before, and the mapping
 * is where its data is. That crossing changes none of the stage's promises
 * (R4): KV plus loans stays the same, KV stays inside the window (the KV
 * region holds no more), and pool loans are what exceeds the window, so no
 * recallable loan becomes KV (a no-loan stage's window_free, its hard
 * promise, is the window less KV and loans: the same). Fixed chunks never
 * move. */
static bool comes_back_as(const struct vl_chunk *c, int kind)
{
    int cat = vli_cat_of_kind(&(struct vl_region){.kind = (uint8_t)kind});
    return c->qcat == cat ||
           ((c->qcat == VL_CAT_KV || c->qcat == VL_CAT_LOAN) &&
            (cat == VL_CAT_KV || cat == VL_CAT_LOAN));
}

/* Phase one: what of the declaration can be taken back (sets lost), and
 * everything the second phase will need allocated. Changes no state. R13:
 * nothing is taken back that another client holds or may still map. */
static int resume_judge(struct vl_ledger *L, struct vl_resume *rs,
                        struct resume_work *w)
{
    for (size_t i = 0; i < rs->nstages; i++) {
        struct vl_resume_stage *st = &rs->stages[i];
        st->lost = 0;
        for (size_t j = 0; j < i; j++)
            if (rs->stages[j].id == st->id)
                return vli_fail(L, -EINVAL, "stage %u declared twice", st->id);
        if (st->id >= L->nstage) { /* no stage this process could hold */
            st->lost = st->id >= VL_MAX_STAGES ? -EINVAL : -ENOENT;
            continue;
        }
        struct vl_stage *s = &L->stage[st->id];
        if (st->configured) {
            if (!s->used || !s->configured)
                st->lost = -ENOENT; /* no longer in the configuration */
            else if (s->owner)
                st->lost = -EEXIST;
        } else if (s->used && (s->configured || s->owner ||
                               !of_process(rs, s->held_by))) {
            st->lost = -EEXIST; /* its id went to someone else */
        } else if (!vli_dev_get(L, st->device) ||
                   st->last_layer < st->first_layer ||
                   st->last_layer >= VLI_SLOT_LAYER_NONE) {
            st->lost = -EINVAL;
        }
    }
    /* A configured stage's quarantine must all be the process's. */
    uint32_t *qmine = w->qmine;
    for (uint32_t di = 0; di < L->ndev; di++)
        for (uint32_t k = 0; k < L->dev[di].nchunks; k++) {
            struct vl_chunk *c = &L->dev[di].chunks[k];
            if (c->qstage != VL_QSTAGE_NONE && of_process(rs, c->holder))
                qmine[c->qstage]++;
        }
    for (size_t i = 0; i < rs->nstages; i++) {
        struct vl_resume_stage *st = &rs->stages[i];
        if (!st->lost && st->configured &&
            L->stage[st->id].quarantined != qmine[st->id])
            st->lost = -EBUSY;
    }

    for (uint32_t i = 0; i < L->nstage; i++)
        w->stage_at[i] = -1;
    for (size_t i = 0; i < rs->nstages; i++)
        if (rs->stages[i].id < L->nstage)
            w->stage_at[rs->stages[i].id] = (int32_t)i;
    rs_stage_at = w->stage_at;
    rs_nstage = L->nstage;
    w->pre = calloc(rs->nregions + 1, sizeof(*w->pre));
    w->made = calloc(rs->nregions + 1, sizeof(*w->made));
    w->by_id = malloc((rs->nregions + 1) * sizeof(*w->by_id));
    if (!w->pre || !w->made || !w->by_id)
        return vli_fail(L, -ENOMEM, "out of memory");
    for (size_t i = 0; i < rs->nregions; i++)
        w->by_id[i] = (uint32_t)i;
    sort_rs = rs;
    qsort(w->by_id, rs->nregions, sizeof(*w->by_id), by_region_id);
    for (size_t i = 1; i < rs->nregions; i++)
        if (rs->regions[w->by_id[i]].id == rs->regions[w->by_id[i - 1]].id)
            return vli_fail(L, -EINVAL, "region %u declared twice",
                            rs->regions[w->by_id[i]].id);

    uint32_t *fixed_taken = w->fixed_taken;
    uint8_t *have_kv = w->have_kv, *have_ex = w->have_ex;
    for (size_t i = 0; i < rs->nregions; i++) {
        struct vl_resume_region *rr = &rs->regions[i];
        rr->lost = 0;
        struct vl_resume_stage *st = rs_stage(rs, rr->stage);
        if (!st)
            return vli_fail(L, -EINVAL, "region %u: stage %u is not declared",
                            rr->id, rr->stage);
        if (st->lost) {
            rr->lost = st->lost;
            continue;
        }
        struct vl_device *d = vli_dev_get(L, st->configured
                                                 ? L->stage[st->id].cfg.device
                                                 : st->device);
        bool sane = rr->kind >= 0 && rr->kind < VL_NKINDS && rr->id &&
                    rr->id < UINT32_MAX && rr->lanes &&
                    rr->lanes <= VL_MAX_LANES;
        /* An ad-hoc lane is at most the device (as region_create says); a
         * configured stage's regions are checked against its configuration
         * below. */
        uint64_t most = st->configured ? UINT32_MAX
                                       : vli_div_up(d->cfg.capacity_bytes,
                                                    d->cfg.chunk_bytes);
        for (uint32_t l = 0; sane && l < rr->lanes; l++)
            sane = rr->lane_slots[l] && rr->lane_slots[l] <= most;
        struct vli_geometry g = {0};
        if (!sane) {
            rr->lost = -EINVAL;
        } else if (region_id_taken(L, rs, rr->id)) {
            rr->lost = -EEXIST;
        } else if (vli_region_geometry(L, d, rr->lanes, rr->lane_slots,
                                       &g) < 0 ||
                   g.lane_stride != rr->lane_stride ||
                   g.va_bytes != rr->va_bytes || rr->base % g.unit) {
            rr->lost = -ESTALE; /* not what this vramd would make */
        } else if (!held_range(L, rs, rr->base, rr->va_bytes) &&
                   vli_va_find(L, rr->base, rr->va_bytes) < 0) {
            rr->lost = -EADDRINUSE;
        }
        for (size_t j = 0; !rr->lost && j < i; j++) { /* two on one range */
            struct vl_resume_region *o = &rs->regions[j];
            if (!o->lost && rr->base < o->base + o->va_bytes &&
                o->base < rr->base + rr->va_bytes)
                rr->lost = -EADDRINUSE;
        }
        if (rr->lost || !st->configured)
            continue;
        /* A configured stage's regions are what its configuration makes. */
        struct vl_stage *s = &L->stage[st->id];
        bool ok = false;
        if (rr->kind == VL_KV) {
            ok = !have_kv[st->id]++ && rr->lanes == s->cfg.lanes &&
                 !memcmp(rr->lane_slots, s->lane_window,
                         rr->lanes * sizeof(uint32_t));
        } else if (rr->kind == VL_EXPERT) {
            uint64_t eb = (uint64_t)s->nslots * s->cfg.expert_slot_bytes;
            uint32_t one =
                s->nslots ? (uint32_t)vli_div_up(eb, d->cfg.chunk_bytes) : 1;
            ok = !have_ex[st->id]++ && rr->lanes == 1 &&
                 rr->lane_slots[0] == one;
        } else {
            uint32_t f = fixed_match(s, d, rr, fixed_taken[st->id]);
            ok = f != VL_NONE;
            if (ok)
                fixed_taken[st->id] |= 1u << f;
        }
        if (!ok)
            rr->lost = -ESTALE; /* the configuration changed */
    }
    /* A configured stage comes back whole or not at all. */
    for (size_t i = 0; i < rs->nstages; i++) {
        struct vl_resume_stage *st = &rs->stages[i];
        if (st->lost || !st->configured)
            continue;
        struct vl_stage *s = &L->stage[st->id];
        uint32_t all = s->cfg.nfixed >= 32 ? UINT32_MAX
                                           : (1u << s->cfg.nfixed) - 1;
        for (uint32_t f = 0; f < s->cfg.nfixed; f++)
            if (s->cfg.fixed[f].set) /* R17: a set, no region */
                fixed_taken[st->id] |= 1u << f;
        if (have_kv[st->id] != 1 || have_ex[st->id] != 1 ||
            fixed_taken[st->id] != all)
            st->lost = -ESTALE;
        for (size_t j = 0; !st->lost && j < rs->nregions; j++)
            if (rs->regions[j].stage == st->id && rs->regions[j].lost)
                st->lost = rs->regions[j].lost;
    }
    /* The regions that come back, made now (nothing may fail later). */
    for (size_t i = 0; i < rs->nregions; i++) {
        struct vl_resume_region *rr = &rs->regions[i];
        struct vl_resume_stage *st = rs_stage(rs, rr->stage);
        if (!rr->lost && st->lost)
            rr->lost = st->lost;
        if (rr->lost)
            continue;
        struct vl_device *d = vli_dev_get(L, st->configured
                                                 ? L->stage[st->id].cfg.device
                                                 : st->device);
        struct vl_region *r = calloc(1, sizeof(*r));
        size_t slots = (size_t)rr->lanes * (rr->lane_stride / d->cfg.chunk_bytes);
        if (r)
            r->slot_chunk = malloc((slots ? slots : 1) * sizeof(uint64_t));
        if (!r || !r->slot_chunk) {
            free(r);
            return vli_fail(L, -ENOMEM, "out of memory");
        }
        for (size_t k = 0; k < slots; k++)
            r->slot_chunk[k] = VL_CHUNK_NONE;
        r->stride_slots = (uint32_t)(rr->lane_stride / d->cfg.chunk_bytes);
        w->pre[i] = r;
    }

    /* Chunks: the process's, each once, in a slot of its region, and where
     * it counted before (a configured stage's chunk of one kind may not turn
     * into another's, or an ad-hoc region's). */
    for (uint32_t di = 0; di < L->ndev; di++)
        if (!(w->seen[di] = calloc(L->dev[di].nchunks + 1, 1)))
            return vli_fail(L, -ENOMEM, "out of memory");
    rs->lost_chunks = 0;
    for (size_t i = 0; i < rs->nchunks; i++) {
        struct vl_resume_chunk *rc = &rs->chunks[i];
        struct vl_device *d = NULL;
        uint32_t idx = 0;
        struct vl_chunk *c = vli_chunk_get(L, rc->chunk, &d, &idx);
        int ri = find_region(rs, w, rc->region);
        if (ri < 0)
            return vli_fail(L, -EINVAL, "chunk %llu: region %u is not declared",
                            (unsigned long long)rc->chunk, rc->region);
        struct vl_resume_region *rr = &rs->regions[ri];
        struct vl_resume_stage *st = rs_stage(rs, rr->stage);
        rc->lost = 0;
        if (!c || c->state != VL_QUARANTINED || !of_process(rs, c->holder))
            rc->lost = -ENOENT;
        else if (w->seen[vli_dev_index(L, d)][idx] & 2)
            rc->lost = -EEXIST; /* declared twice */
        else if (rr->lost)
            rc->lost = rr->lost;
        else if (d->cfg.id != (st->configured ? L->stage[st->id].cfg.device
                                              : st->device))
            rc->lost = -EXDEV;
        else if (st->configured ? c->qstage != st->id ||
                                      !comes_back_as(c, rr->kind)
                                : c->qstage != VL_QSTAGE_NONE)
            rc->lost = -EINVAL; /* it was not that stage's, or not that kind */
        else {
            struct vl_region *r = w->pre[ri];
            uint32_t stride = r->stride_slots;
            if (rc->slot >= rr->lanes * stride ||
                rc->slot % stride >= rr->lane_slots[rc->slot / stride])
                rc->lost = -EINVAL;
            else if (r->slot_chunk[rc->slot] != VL_CHUNK_NONE)
                rc->lost = -EEXIST; /* two chunks in one slot */
            else
                r->slot_chunk[rc->slot] = rc->chunk; /* cleared before use */
        }
        /* 1: the process says it has it (not freed); 2: it goes back. */
        if (c && of_process(rs, c->holder) && c->state == VL_QUARANTINED)
            w->seen[vli_dev_index(L, d)][idx] |= rc->lost ? 1 : 3;
        rs->lost_chunks += rc->lost != 0;
    }
    for (size_t i = 0; i < rs->nregions; i++)
        if (w->pre[i]) {
            size_t n = (size_t)rs->regions[i].lanes * w->pre[i]->stride_slots;
            for (size_t k = 0; k < n; k++)
                w->pre[i]->slot_chunk[k] = VL_CHUNK_NONE;
        }
    /* R11: a configured stage comes back whole: if a chunk of it the
     * process declared cannot be placed, it would stay quarantined outside
     * the stage while the stage's promise counted on it. Then the stage
     * stays away, all of it quarantined, until the process exits. */
    uint8_t *partial = w->partial;
    for (uint32_t di = 0; di < L->ndev; di++)
        for (uint32_t k = 0; k < L->dev[di].nchunks; k++) {
            struct vl_chunk *c = &L->dev[di].chunks[k];
            /* Declared but not placed; or not declared and not from's (so
             * not freed either: another gone client of the process). */
            bool kept = w->seen[di][k] == 1 ||
                        (w->seen[di][k] == 0 && c->holder != rs->from &&
                         of_process(rs, c->holder));
            if (kept && c->qstage != VL_QSTAGE_NONE &&
                rs_stage(rs, c->qstage) && !rs_stage(rs, c->qstage)->lost)
                partial[c->qstage] = true;
        }
    for (size_t i = 0; i < rs->nstages; i++)
        if (rs->stages[i].id < L->nstage && partial[rs->stages[i].id])
            rs->stages[i].lost = -EBUSY;
    for (size_t i = 0; i < rs->nregions; i++) {
        struct vl_resume_region *rr = &rs->regions[i];
        if (rr->lost || !partial[rr->stage])
            continue;
        rr->lost = -EBUSY;
        vli_region_free(w->pre[i]);
        w->pre[i] = NULL;
    }
    for (size_t i = 0; i < rs->nchunks; i++) {
        struct vl_resume_chunk *rc = &rs->chunks[i];
        int ri = find_region(rs, w, rc->region);
        if (rc->lost || !rs->regions[ri].lost)
            continue;
        rc->lost = rs->regions[ri].lost;
        rs->lost_chunks++;
        w->seen[rc->chunk >> 32][(uint32_t)rc->chunk] = 1; /* kept, not placed */
    }
    /* Room in the ledger's arrays, so the second phase cannot fail. */
    size_t nreg = 0;
    for (size_t i = 0; i < rs->nregions; i++)
        nreg += w->pre[i] != NULL;
    if (vli_region_reserve(L, nreg) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    struct vl_va_range *v = realloc(L->va_free, (L->nva_free + nreg + 1) *
                                                    sizeof(*v));
    if (!v)
        return vli_fail(L, -ENOMEM, "out of memory");
    L->va_free = v;
    return 0;
}

/* A declared region comes back: at its address (its hold's record moves to
 * the new client in place, so a crash never leaves the range unrecorded),
 * with its id. */
static struct vl_region *region_adopt(struct vl_ledger *L, uint32_t client,
                                      struct vl_resume *rs,
                                      const struct vl_resume_region *rr,
                                      struct vl_region *r)
{
    struct vl_stage *s = &L->stage[rr->stage];
    struct vl_va_hold *h = held_range(L, rs, rr->base, rr->va_bytes);
    if (h) {
        r->tag = h->tag;
        if (L->obs.va_move)
            L->obs.va_move(L->obs.ctx, h->tag, rr->id, client);
        vli_client_va(L, h->client, -(int64_t)h->size); /* R16 */
        *h = L->va_hold[--L->nva_hold];
    } else {
        /* judged free, room made */
        vli_va_take_exact(L, rr->base, rr->va_bytes);
        r->tag = vli_note_va_take(L, rr->id, client, rr->base, rr->va_bytes);
    }
    r->id = rr->id;
    if (r->id >= L->next_region_id && r->id < UINT32_MAX)
        L->next_region_id = r->id + 1;
    r->client = client;
    r->stage = rr->stage;
    r->kind = (uint8_t)rr->kind;
    r->device = s->cfg.device;
    r->base = rr->base;
    r->lane_stride = rr->lane_stride;
    r->va_bytes = rr->va_bytes;
    r->lanes = rr->lanes;
    memcpy(r->lane_slots, rr->lane_slots, rr->lanes * sizeof(uint32_t));
    r->fixed_index = VL_NONE;
    vli_region_add(L, r); /* room made in the first phase */
    vli_region_count(L, r, true);
    vli_client_va(L, client, (int64_t)r->va_bytes);
    return r;
}

int vl_client_resume(struct vl_ledger *L, uint32_t client, struct vl_resume *rs,
                     struct vl_fxlist *fx)
{
    struct vl_client *cl = vli_client_find(L, client);
    struct vl_client *from = vli_client_find(L, rs->from);
    if (!cl || cl->gone)
        return vli_fail(L, -ENOENT, "no connected client %u", client);
    if (!from || !from->gone || from->resumed)
        return vli_fail(L, -ENOENT, "client %u is not a gone client that can "
                        "be resumed", rs->from);
    for (size_t i = 0; i < rs->nalso; i++) {
        struct vl_client *o = vli_client_find(L, rs->also[i]);
        if (!o || !o->gone || rs->also[i] == client)
            return vli_fail(L, -EINVAL, "client %u is not a gone client",
                            rs->also[i]);
    }
    if (rs->nstages > VL_MAX_STAGES || rs->nregions > 65536)
        return vli_fail(L, -EINVAL, "%zu stages and %zu regions declared: at "
                        "most %d and 65536", rs->nstages, rs->nregions,
                        VL_MAX_STAGES);
    if (cl->chunks)
        return vli_fail(L, -EBUSY, "resume before anything else: this client "
                        "already holds %u chunks", cl->chunks);
    for (uint32_t i = 0; i < L->nstage; i++)
        if (L->stage[i].used && L->stage[i].owner == client)
            return vli_fail(L, -EBUSY, "resume before anything else: this "
                            "client already owns stage %u", i);
    /* The per-stage work arrays cover the stage table, which holds every
     * stage a process may take back (configured ones, and the ad-hoc ones
     * its gone clients hold): a declaration never grows it. */
    struct resume_work w = {0};
    size_t ns = L->nstage;
    char *block = calloc(ns, 3 * sizeof(uint32_t) + 3);
    if (!block)
        return vli_fail(L, -ENOMEM, "out of memory");
    w.stage_at = (int32_t *)(void *)block;
    w.qmine = (uint32_t *)(void *)(block + ns * 4);
    w.fixed_taken = (uint32_t *)(void *)(block + ns * 8);
    w.have_kv = (uint8_t *)block + ns * 12;
    w.have_ex = w.have_kv + ns;
    w.partial = w.have_ex + ns;
    int e = resume_judge(L, rs, &w);
    if (e == 0 && vli_fx_reserve(fx, from->chunks) < 0)
        e = vli_fail(L, -ENOMEM, "out of memory");
    if (e < 0) {
        work_free(L, rs, &w);
        return e;
    }

    /* R13: chunks of from it does not declare: its process does not have
     * them, they are freed (those of its other gone clients stay theirs). */
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        for (uint32_t k = 0; k < d->nchunks; k++)
            if (d->chunks[k].holder == from->id &&
                d->chunks[k].state == VL_QUARANTINED && !(w.seen[di][k] & 1))
                vli_to_free(L, d, k, fx);
    }
    /* Stages. */
    for (size_t i = 0; i < rs->nstages; i++) {
        struct vl_resume_stage *st = &rs->stages[i];
        if (st->lost)
            continue;
        struct vl_stage *s = &L->stage[st->id];
        if (st->configured) {
            vli_stage_set_owner(L, s, client);
            s->keep_window = st->keep_window;
            s->kv_peak_tokens = 0;
            s->kv_needed_bytes = 0;
        } else {
            free(s->slot_layer);
            memset(s, 0, sizeof(*s));
            s->used = true;
            s->cfg.id = st->id;
            s->cfg.device = st->device;
            s->cfg.first_layer = st->first_layer;
            s->cfg.last_layer = st->last_layer;
            vli_stage_set_owner(L, s, client);
            vli_note_stage(L, st->id, client);
        }
        /* R18: a stage that slept before the restart sleeps on (its
         * process declares no chunk of it). */
        s->asleep = st->asleep;
        s->wake_tokens = st->asleep ? st->wake_tokens : 0;
        s->host_bytes = st->asleep ? st->host_bytes : 0;
    }
    /* Regions. */
    for (size_t i = 0; i < rs->nregions; i++) {
        struct vl_resume_region *rr = &rs->regions[i];
        if (rr->lost || !w.pre[i])
            continue;
        struct vl_region *r = region_adopt(L, client, rs, rr, w.pre[i]);
        w.pre[i] = NULL; /* the ledger's now */
        w.made[i] = r;
        struct vl_stage *s = &L->stage[rr->stage];
        if (!s->configured)
            continue;
        if (rr->kind == VL_KV) {
            s->kv_region = r->id;
        } else if (rr->kind == VL_EXPERT) {
            s->expert_region = r->id;
        } else {
            uint32_t taken = 0;
            for (uint32_t f = 0; f < s->cfg.nfixed; f++)
                if (s->fixed_region[f])
                    taken |= 1u << f;
            struct vl_device *sd = vli_dev_get(L, s->cfg.device);
            uint32_t f = fixed_match(s, sd, rr, taken);
            if (f != VL_NONE) { /* judged: always one */
                r->fixed_index = f;
                s->fixed_region[f] = r->id;
            }
        }
    }
    /* Chunks, in their slots. */
    for (size_t i = 0; i < rs->nchunks; i++) {
        struct vl_resume_chunk *rc = &rs->chunks[i];
        if (rc->lost)
            continue;
        struct vl_device *d = NULL;
        uint32_t idx = 0;
        struct vl_chunk *c = vli_chunk_get(L, rc->chunk, &d, &idx);
        struct vl_region *r = w.made[find_region(rs, &w, rc->region)];
        vli_qstage_clear(L, c);
        vli_client_lose(vli_client_find(L, c->holder), d, c->state);
        struct vl_stage *s = vli_stage_get(L, r->stage);
        int state = s->configured && r->kind == VL_EXPERT ? VL_LOANED
                                                          : VL_GRANTED;
        vli_place(L, d, idx, r, rc->slot, state);
        vli_client_gain(cl, d, state);
    }
    /* Chunks left with the process's gone clients no longer stand for a
     * stage that is owned again. */
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        for (uint32_t k = 0; k < d->nchunks; k++) {
            struct vl_chunk *c = &d->chunks[k];
            if (c->qstage == VL_QSTAGE_NONE || !of_process(rs, c->holder) ||
                !L->stage[c->qstage].owner)
                continue;
            vli_qstage_clear(L, c);
            vli_note_chunk(L, d, k, NULL);
        }
    }
    /* Expert slot claims, where their slots are backed again (R9). */
    for (size_t i = 0; i < rs->nclaims; i++) {
        const struct vl_resume_claim *k = &rs->claims[i];
        struct vl_stage *s = vli_stage_get(L, k->stage);
        if (!s || s->owner != client || !s->configured ||
            k->layer < s->cfg.first_layer || k->layer > s->cfg.last_layer ||
            k->slot >= vl_expert_slots_backed(L, k->stage))
            continue;
        s->slot_layer[k->slot] = (uint16_t)k->layer;
        if (k->slot >= s->claim_hi)
            s->claim_hi = k->slot + 1;
    }
    for (size_t i = 0; i < rs->nstages; i++)
        if (!rs->stages[i].lost && rs->stages[i].configured)
            L->stage[rs->stages[i].id].residency_version++;
    /* R17: the sets the process maps are mapped by the client now. */
    vli_weights_client_move(L, rs->from, client);
    for (size_t i = 0; i < rs->nalso; i++)
        vli_weights_client_move(L, rs->also[i], client);
    from->resumed = true;
    cl->admitted = true; /* R16: it came back for a gone client */
    work_free(L, rs, &w);
    return 0;
}
