/* SPDX-License-Identifier: Apache-2.0 */
/* resume (R13): a process that was a client, after a reconnect, declares
 * what it still holds and takes it back with the same ids at the same
 * addresses. The declaration may come in parts ("more") when it does not
 * fit one frame (resume_declaration.c gathers them). */
#include <errno.h>
#include <string.h>

#include "daemon/core/requests/resume_declaration.h"
#include "daemon/core/requests/apply_effects.h"
#include "proto/errnames.h"
#include "daemon/core/requests/lifecycle.h"
#include "daemon/log.h"
#include "daemon/core/requests/request.h"
#include "daemon/core/requests/status.h"
#include "gen/vd_dispatch.h"

/* Most regions and slot claims one declaration may carry. */
#define RESUME_MAX_REGIONS 4096
#define RESUME_MAX_CLAIMS (1u << 20)

static void drop_parts(struct vd_client *c)
{
    vd_resume_acc_free(c->resume);
    c->resume = NULL;
}

/* Why something declared was not taken back: the operator's (and a test's)
 * only way to tell a stale declaration from a bug. Chunks are summed up by
 * reason, with the first one named. */
static void log_lost(const struct vd_client *c, const struct vl_resume *rs)
{
    for (size_t i = 0; i < rs->nstages; i++)
        if (rs->stages[i].lost)
            vlog(VLOG_WARNING, "client %u (%s): stage %u not taken back: %s",
                 c->id, c->name, rs->stages[i].id,
                 vw_errno_name(rs->stages[i].lost));
    for (size_t i = 0; i < rs->nregions; i++)
        if (rs->regions[i].lost)
            vlog(VLOG_WARNING, "client %u (%s): region %u (stage %u) not "
                 "taken back: %s", c->id, c->name, rs->regions[i].id,
                 rs->regions[i].stage, vw_errno_name(rs->regions[i].lost));
    static const int why[] = {-ENOENT, -EEXIST, -EXDEV, -EINVAL, -ESTALE,
                              -EBUSY, -EADDRINUSE};
    for (size_t w = 0; w < sizeof(why) / sizeof(why[0]); w++) {
        size_t n = 0, first = 0;
        for (size_t i = 0; i < rs->nchunks; i++)
            if (rs->chunks[i].lost == why[w] && !n++)
                first = i;
        if (n)
            vlog(VLOG_WARNING, "client %u (%s): %zu chunks not taken back: %s "
                 "(first: chunk %llu, region %u, slot %u)", c->id, c->name, n,
                 vw_errno_name(why[w]),
                 (unsigned long long)rs->chunks[first].chunk,
                 rs->chunks[first].region, rs->chunks[first].slot);
    }
}

/* What was lost, for the reply. */
static int lost_fill(const struct vl_resume *rs, struct vw_t_lost *o,
                     struct vw_arena *a)
{
    o->stages.v = vw_arena_alloc(a, (rs->nstages + 1) * sizeof(*o->stages.v));
    o->regions.v = vw_arena_alloc(a, (rs->nregions + 1) * sizeof(*o->regions.v));
    o->chunks.v = vw_arena_alloc(a, (rs->nchunks + 1) * sizeof(*o->chunks.v));
    if (!o->stages.v || !o->regions.v || !o->chunks.v)
        return -ENOMEM;
    for (size_t i = 0; i < rs->nstages; i++)
        if (rs->stages[i].lost)
            o->stages.v[o->stages.n++] = (struct vw_t_lost_item){
                rs->stages[i].id, vw_errno_name(rs->stages[i].lost)};
    for (size_t i = 0; i < rs->nregions; i++)
        if (rs->regions[i].lost)
            o->regions.v[o->regions.n++] = (struct vw_t_lost_item){
                rs->regions[i].id, vw_errno_name(rs->regions[i].lost)};
    for (size_t i = 0; i < rs->nchunks; i++)
        if (rs->chunks[i].lost)
            o->chunks.v[o->chunks.n++] = rs->chunks[i].chunk;
    return 0;
}

struct also {
    struct vd_reaper *rp;
    uint32_t ids[64];
    size_t n;
};

static void same_process(void *ud, struct vd_reaper *o)
{
    struct also *a = ud;
    if (o != a->rp && a->n < 64 && vd_reaper_pid(o) == vd_reaper_pid(a->rp) &&
        vd_reaper_start_time(o) == vd_reaper_start_time(a->rp) &&
        vd_reaper_resumable(o))
        a->ids[a->n++] = vd_reaper_client(o);
}

static uint32_t chunks_of(struct vd_core *core, uint32_t client)
{
    struct vl_client_view v;
    return vl_client_view(core->ledger, client, &v) ? v.chunks : 0;
}

int vd_handle_resume(struct vd_request *rq, const struct vw_req_resume *m,
                     struct vw_rep_resume *rep)
{
    struct vd_core *core = rq->core;
    struct vd_client *c = rq->client;
    uint32_t from = m->client;
    if (c->resumed_from)
        return vd_fail(rq, -EALREADY, "this connection already resumed client "
                       "%u", c->resumed_from);
    /* Only the very process that was the client, and not after eviction. */
    struct vd_reaper *rp = vd_reapers_find(core, from);
    if (!rp || vd_reaper_pid(rp) != c->peer.pid || !vd_reaper_start_time(rp) ||
        vd_reaper_start_time(rp) != c->peer.start_time) {
        drop_parts(c);
        return vd_fail(rq, -ENOENT, "client %u is not a gone client of this "
                       "process (pid %lld)", from, (long long)c->peer.pid);
    }
    if (!vd_reaper_resumable(rp)) {
        drop_parts(c);
        return vd_fail(rq, -EPERM, "client %u was evicted: its memory stays "
                       "quarantined until pid %lld exits", from,
                       (long long)c->peer.pid);
    }
    /* Parts accumulate; the last one completes the declaration. */
    int e = vd_declaration_add(&c->resume, m, rq->why, sizeof(rq->why));
    if (e < 0) {
        drop_parts(c);
        return e == -ENOMEM ? vd_fail(rq, e, "out of memory") : e;
    }
    struct vd_resume_acc *a = c->resume;
    /* Parts must not pile up beyond what a client may hold. */
    const char *over =
        a->nchunks > core->cfg.max_chunks_per_client ? "chunks (the quota)"
        : a->nregions > RESUME_MAX_REGIONS ||
                a->nregions > core->cfg.max_regions_per_client +
                                  a->nstages * (2 + VL_MAX_FIXED)
            ? "regions"
        : a->nstages > VL_MAX_STAGES ||
                a->nstages > core->cfg.max_stages_per_client
            ? "stages"
        : a->nclaims > RESUME_MAX_CLAIMS ? "claims"
                                         : NULL;
    if (over) {
        e = vd_fail(rq, -EDQUOT, "resume declares too many %s: %zu chunks, %zu "
                    "regions, %zu stages, %zu claims", over, a->nchunks,
                    a->nregions, a->nstages, a->nclaims);
        drop_parts(c);
        return e;
    }
    if (m->has_more && m->more) {
        rep->has_pending = true;
        rep->pending = true;
        return 0;
    }
    c->resume = NULL;
    struct vl_resume rs = {
        .from = from,
        .stages = a->stages, .nstages = a->nstages,
        .regions = a->regions, .nregions = a->nregions,
        .chunks = a->chunks, .nchunks = a->nchunks,
        .claims = a->claims, .nclaims = a->nclaims,
    };
    /* The process's other gone clients: a resume that broke half-way left
     * some of its chunks under the id of the connection that sent it. */
    struct also also = {.rp = rp};
    vd_reapers_each(core, same_process, &also);
    rs.also = also.ids;
    rs.nalso = also.n;
    uint32_t before = chunks_of(core, from);
    struct vl_fxlist fx = {0};
    e = vl_client_resume(core->ledger, c->id, &rs, &fx);
    if (e < 0) {
        vl_fx_free(&fx);
        vd_resume_acc_free(a);
        return vd_fail_ledger(rq, e);
    }
    size_t freed = fx.n;
    vd_effects_apply(core, &fx, NULL, NULL); /* what it no longer has: freed */
    vl_fx_free(&fx);
    c->resumed_from = from;
    uint32_t kept = chunks_of(core, c->id);
    vlog(VLOG_NOTICE, "client %u (%s, pid %lld) resumed client %u: %u of %u "
         "chunks kept, %zu freed, %zu lost", c->id, c->name,
         (long long)c->peer.pid, from, kept, before, freed, rs.lost_chunks);
    log_lost(c, &rs);

    rep->has_from = rep->has_kept_chunks = rep->has_freed_chunks = true;
    rep->from = from;
    rep->kept_chunks = kept;
    rep->freed_chunks = freed;
    rep->stages.v = vw_arena_alloc(&rq->arena,
                                     (rs.nstages + 1) * sizeof(*rep->stages.v));
    rep->has_lost = true;
    e = rep->stages.v ? lost_fill(&rs, &rep->lost, &rq->arena) : -ENOMEM;
    for (size_t i = 0; e == 0 && i < rs.nstages; i++)
        if (!rs.stages[i].lost)
            e = vd_status_stage(core, rs.stages[i].id,
                                &rep->stages.v[rep->stages.n++], &rq->arena);
    vd_resume_acc_free(a);
    /* Nothing left to wait for: the gone client goes, and with it whatever
     * address ranges and stage ids it did not take back. */
    if (chunks_of(core, from) == 0)
        vd_lifecycle_reap_now(core, rp);
    for (size_t i = 0; i < also.n; i++) {
        struct vd_reaper *o = vd_reapers_find(core, also.ids[i]);
        if (o && chunks_of(core, also.ids[i]) == 0)
            vd_lifecycle_reap_now(core, o);
    }
    rq->freed_memory = true; /* freed chunks may serve a held reserve */
    return e < 0 ? vd_fail(rq, e, "out of memory") : 0;
}
