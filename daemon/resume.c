/* The resume request: a process that was a client (before vramd restarted,
 * or before its connection broke) connects again and declares what it
 * holds; the ledger gives it back its stages, regions and chunks, with the
 * same ids at the same addresses (rule 13 in ledger.c). The declaration may
 * come in parts ("more": true) when it does not fit one frame. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "message.h"
#include "session.h"
#include "state.h"

/* Most regions and slot claims one declaration may carry. */
#define RESUME_MAX_REGIONS 4096
#define RESUME_MAX_CLAIMS (1u << 20)

static int u32_of(const cJSON *o, const char *key, uint32_t *out)
{
    uint64_t v;
    if (vram_json_u64(o, key, &v) < 0 || v > UINT32_MAX)
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

static int u64_at(const cJSON *a, int i, uint64_t *out)
{
    const cJSON *x = cJSON_GetArrayItem(a, i);
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 ||
        x->valuedouble != (double)(uint64_t)x->valuedouble)
        return -EINVAL;
    *out = (uint64_t)x->valuedouble;
    return 0;
}

/* Moves the items of array key of src to the end of the same array of dst. */
static int append(cJSON *dst, cJSON *src, const char *key)
{
    cJSON *from = cJSON_GetObjectItemCaseSensitive(src, key);
    if (!from)
        return 0;
    if (!cJSON_IsArray(from))
        return -EINVAL;
    cJSON *to = cJSON_GetObjectItemCaseSensitive(dst, key);
    if (!to) {
        to = cJSON_AddArrayToObject(dst, key);
        if (!to)
            return -ENOMEM;
    }
    cJSON *it;
    while ((it = cJSON_DetachItemFromArray(from, 0)))
        cJSON_AddItemToArray(to, it);
    return 0;
}

struct decl {
    struct vl_resume rs;
    char why[160];
};

static void decl_free(struct decl *d)
{
    free(d->rs.stages);
    free(d->rs.regions);
    free(d->rs.chunks);
    free((void *)d->rs.claims);
}

static int bad(struct decl *d, const char *fmt, size_t i)
{
    snprintf(d->why, sizeof(d->why), fmt, i);
    return -EINVAL;
}

static int parse(struct vd_server *srv, const cJSON *m, struct decl *d)
{
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(m, "stages");
    const cJSON *rg = cJSON_GetObjectItemCaseSensitive(m, "regions");
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(m, "chunks");
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(m, "claims");
    size_t ns = (size_t)cJSON_GetArraySize(st), nr = (size_t)cJSON_GetArraySize(rg);
    size_t nc = (size_t)cJSON_GetArraySize(ch), nk = (size_t)cJSON_GetArraySize(cl);
    if (ns > srv->cfg.max_stages_per_client || ns > VL_MAX_STAGES)
        return bad(d, "%zu stages declared: over the per-client limit", ns);
    if (nr > RESUME_MAX_REGIONS)
        return bad(d, "%zu regions declared: at most 4096", nr);
    if (nc > srv->cfg.max_chunks_per_client)
        return bad(d, "%zu chunks declared: over the per-client quota", nc);
    struct vl_resume *rs = &d->rs;
    rs->stages = calloc(ns + 1, sizeof(*rs->stages));
    rs->regions = calloc(nr + 1, sizeof(*rs->regions));
    rs->chunks = calloc(nc + 1, sizeof(*rs->chunks));
    struct vl_resume_claim *claims = calloc(nk + 1, sizeof(*claims));
    rs->claims = claims;
    if (!rs->stages || !rs->regions || !rs->chunks || !claims)
        return -ENOMEM;
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, st) {
        struct vl_resume_stage *x = &rs->stages[i];
        if (u32_of(it, "id", &x->id) < 0)
            return bad(d, "stages[%zu].id: an integer", i);
        vram_json_bool(it, "configured", &x->configured);
        vram_json_bool(it, "keep_window", &x->keep_window);
        if (!x->configured &&
            (u32_of(it, "device", &x->device) < 0 ||
             u32_of(it, "first_layer", &x->first_layer) < 0 ||
             u32_of(it, "last_layer", &x->last_layer) < 0))
            return bad(d, "stages[%zu]: an ad-hoc stage needs device, "
                       "first_layer and last_layer", i);
        i++;
    }
    rs->nstages = i;
    i = 0;
    cJSON_ArrayForEach(it, rg) {
        struct vl_resume_region *x = &rs->regions[i];
        const char *kind = vram_json_str(it, "kind");
        const cJSON *slots = cJSON_GetObjectItemCaseSensitive(it, "lane_slots");
        if (u32_of(it, "id", &x->id) < 0 || u32_of(it, "stage", &x->stage) < 0 ||
            vram_json_u64(it, "base", &x->base) < 0 ||
            vram_json_u64(it, "lane_stride", &x->lane_stride) < 0 ||
            vram_json_u64(it, "va_bytes", &x->va_bytes) < 0 ||
            (x->kind = vl_kind_parse(kind)) < 0 || !cJSON_IsArray(slots) ||
            cJSON_GetArraySize(slots) < 1 ||
            cJSON_GetArraySize(slots) > VL_MAX_LANES)
            return bad(d, "regions[%zu]: id, stage, kind, base, lane_stride, "
                       "va_bytes and lane_slots (1 to 256 integers) are "
                       "required", i);
        x->lanes = (uint32_t)cJSON_GetArraySize(slots);
        for (uint32_t l = 0; l < x->lanes; l++) {
            uint64_t v;
            if (u64_at(slots, (int)l, &v) < 0 || v > UINT32_MAX)
                return bad(d, "regions[%zu].lane_slots: integers", i);
            x->lane_slots[l] = (uint32_t)v;
        }
        i++;
    }
    rs->nregions = i;
    i = 0;
    cJSON_ArrayForEach(it, ch) {
        uint64_t c, r, s;
        if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 3 ||
            u64_at(it, 0, &c) < 0 || u64_at(it, 1, &r) < 0 ||
            u64_at(it, 2, &s) < 0 || r > UINT32_MAX || s > UINT32_MAX)
            return bad(d, "chunks[%zu]: [chunk, region, slot]", i);
        rs->chunks[i++] = (struct vl_resume_chunk){
            .chunk = c, .region = (uint32_t)r, .slot = (uint32_t)s};
    }
    rs->nchunks = i;
    i = 0;
    cJSON_ArrayForEach(it, cl) {
        uint64_t a, b, c;
        if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 3 ||
            u64_at(it, 0, &a) < 0 || u64_at(it, 1, &b) < 0 ||
            u64_at(it, 2, &c) < 0 || a > UINT32_MAX || b > UINT32_MAX ||
            c > UINT32_MAX)
            return bad(d, "claims[%zu]: [stage, slot, layer]", i);
        claims[i++] = (struct vl_resume_claim){(uint32_t)a, (uint32_t)b,
                                               (uint32_t)c};
    }
    rs->nclaims = i;
    return 0;
}

static cJSON *lost_json(const struct vl_resume *rs)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *st = cJSON_AddArrayToObject(o, "stages");
    for (size_t i = 0; i < rs->nstages; i++)
        if (rs->stages[i].lost) {
            cJSON *x = cJSON_CreateObject();
            vram_json_add_u64(x, "id", rs->stages[i].id);
            cJSON_AddStringToObject(x, "error",
                                    vram_errno_name(rs->stages[i].lost));
            cJSON_AddItemToArray(st, x);
        }
    cJSON *rg = cJSON_AddArrayToObject(o, "regions");
    for (size_t i = 0; i < rs->nregions; i++)
        if (rs->regions[i].lost) {
            cJSON *x = cJSON_CreateObject();
            vram_json_add_u64(x, "id", rs->regions[i].id);
            cJSON_AddStringToObject(x, "error",
                                    vram_errno_name(rs->regions[i].lost));
            cJSON_AddItemToArray(rg, x);
        }
    cJSON *ch = cJSON_AddArrayToObject(o, "chunks");
    for (size_t i = 0; i < rs->nchunks; i++)
        if (rs->chunks[i].lost)
            cJSON_AddItemToArray(ch, cJSON_CreateNumber(
                                         (double)rs->chunks[i].chunk));
    return o;
}

/* Why something declared was not taken back: the operator's (and a test's)
 * only way to tell a stale declaration from a bug. Chunks are summed up by
 * reason, with the first one named. */
static void log_lost(const struct vd_session *s, const struct vl_resume *rs)
{
    for (size_t i = 0; i < rs->nstages; i++)
        if (rs->stages[i].lost)
            vlog(VLOG_WARNING, "client %u (%s): stage %u not taken back: %s",
                 s->id, s->name, rs->stages[i].id,
                 vram_errno_name(rs->stages[i].lost));
    for (size_t i = 0; i < rs->nregions; i++)
        if (rs->regions[i].lost)
            vlog(VLOG_WARNING, "client %u (%s): region %u (stage %u) not "
                 "taken back: %s", s->id, s->name, rs->regions[i].id,
                 rs->regions[i].stage, vram_errno_name(rs->regions[i].lost));
    static const int why[] = {-ENOENT, -EEXIST, -EXDEV, -EINVAL, -ESTALE,
                              -EBUSY, -EADDRINUSE};
    for (size_t w = 0; w < sizeof(why) / sizeof(why[0]); w++) {
        size_t n = 0, first = 0;
        for (size_t i = 0; i < rs->nchunks; i++)
            if (rs->chunks[i].lost == why[w] && !n++)
                first = i;
        if (n)
            vlog(VLOG_WARNING, "client %u (%s): %zu chunks not taken back: %s "
                 "(first: chunk %llu, region %u, slot %u)", s->id, s->name, n,
                 vram_errno_name(why[w]),
                 (unsigned long long)rs->chunks[first].chunk,
                 rs->chunks[first].region, rs->chunks[first].slot);
    }
}

int vd_handle_resume(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t from;
    bool more = false;
    vram_json_bool(msg, "more", &more);
    if (u32_of(msg, "client", &from) < 0)
        return vd_reply_err(s, id, -EINVAL, "field 'client' must be an integer "
                            "below 2^32");
    if (s->resumed_from)
        return vd_reply_err(s, id, -EALREADY, "this connection already "
                            "resumed client %u", s->resumed_from);
    /* Only the very process that was the client, and not after eviction. */
    struct vd_reaper *rp = vd_reaper_find(srv, from);
    if (!rp || rp->pid != s->pid || !rp->starttime ||
        rp->starttime != s->starttime) {
        cJSON_Delete(s->resume_acc);
        s->resume_acc = NULL;
        return vd_reply_err(s, id, -ENOENT, "client %u is not a gone client "
                            "of this process (pid %d)", from, (int)s->pid);
    }
    if (!rp->resumable) {
        cJSON_Delete(s->resume_acc);
        s->resume_acc = NULL;
        return vd_reply_err(s, id, -EPERM, "client %u was evicted: its "
                            "memory stays quarantined until pid %d exits",
                            from, (int)s->pid);
    }
    /* Parts accumulate; the last one carries the whole declaration. */
    if (!s->resume_acc) {
        s->resume_acc = cJSON_CreateObject();
        if (!s->resume_acc)
            return vd_reply_err(s, id, -ENOMEM, "out of memory");
    }
    static const char *keys[] = {"stages", "regions", "chunks", "claims"};
    for (size_t k = 0; k < 4; k++)
        if (append(s->resume_acc, msg, keys[k]) < 0) {
            cJSON_Delete(s->resume_acc);
            s->resume_acc = NULL;
            return vd_reply_err(s, id, -EINVAL, "field '%s' must be an array",
                                keys[k]);
        }
    /* Parts must not pile up beyond what a client may hold. */
    size_t nc = (size_t)cJSON_GetArraySize(
        cJSON_GetObjectItemCaseSensitive(s->resume_acc, "chunks"));
    size_t nr = (size_t)cJSON_GetArraySize(
        cJSON_GetObjectItemCaseSensitive(s->resume_acc, "regions"));
    size_t ns = (size_t)cJSON_GetArraySize(
        cJSON_GetObjectItemCaseSensitive(s->resume_acc, "stages"));
    size_t nk = (size_t)cJSON_GetArraySize(
        cJSON_GetObjectItemCaseSensitive(s->resume_acc, "claims"));
    const char *over = nc > srv->cfg.max_chunks_per_client ? "chunks (the quota)"
                       : nr > RESUME_MAX_REGIONS ||
                               nr > srv->cfg.max_regions_per_client +
                                        ns * (2 + VL_MAX_FIXED)
                           ? "regions"
                       : ns > VL_MAX_STAGES                 ? "stages"
                       : nk > RESUME_MAX_CLAIMS             ? "claims"
                                                            : NULL;
    if (over) {
        cJSON_Delete(s->resume_acc);
        s->resume_acc = NULL;
        return vd_reply_err(s, id, -EDQUOT, "resume declares too many %s: "
                            "%zu chunks, %zu regions, %zu stages, %zu claims",
                            over, nc, nr, ns, nk);
    }
    if (more) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddBoolToObject(f, "pending", true);
        vl_fx_clear(&srv->fx);
        return vd_finish(s, id, f);
    }
    struct decl d = {0};
    d.rs.from = from;
    int e = parse(srv, s->resume_acc, &d);
    cJSON_Delete(s->resume_acc);
    s->resume_acc = NULL;
    if (e < 0) {
        decl_free(&d);
        return vd_reply_err(s, id, e, "%s", d.why[0] ? d.why : "out of memory");
    }
    /* The process's other gone clients: a resume that broke half-way left
     * some of its chunks under the id of the connection that sent it. */
    uint32_t also[64];
    size_t nalso = 0;
    for (struct vd_reaper *o = srv->reapers; o && nalso < 64; o = o->next)
        if (o != rp && o->pid == rp->pid && o->starttime == rp->starttime &&
            o->resumable)
            also[nalso++] = o->client;
    d.rs.also = also;
    d.rs.nalso = nalso;
    uint32_t before = vd_client_chunks(srv, from);
    vl_fx_clear(&srv->fx);
    e = vl_client_resume(&srv->ledger, s->id, &d.rs, &srv->fx);
    if (e < 0) {
        decl_free(&d);
        return vd_reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    }
    size_t freed = srv->fx.n;
    vd_apply_background_fx(srv); /* chunks it no longer has: freed */
    vl_fx_clear(&srv->fx);
    s->resumed_from = from;
    uint32_t kept = vd_client_chunks(srv, s->id);
    for (size_t i = 0; i < d.rs.nregions; i++)
        if (!d.rs.regions[i].lost && d.rs.regions[i].stage < VL_MAX_STAGES &&
            !srv->ledger.stage[d.rs.regions[i].stage].configured)
            s->regions++;
    vlog(VLOG_NOTICE, "client %u (%s, pid %d) resumed client %u: %u of %u "
         "chunks kept, %zu freed, %zu lost", s->id, s->name, (int)s->pid, from,
         kept, before, freed, d.rs.lost_chunks);
    log_lost(s, &d.rs);

    cJSON *f = cJSON_CreateObject();
    vram_json_add_u64(f, "from", from);
    vram_json_add_u64(f, "kept_chunks", kept);
    vram_json_add_u64(f, "freed_chunks", freed);
    cJSON *sts = cJSON_AddArrayToObject(f, "stages");
    for (size_t i = 0; i < d.rs.nstages; i++)
        if (!d.rs.stages[i].lost)
            cJSON_AddItemToArray(sts, vd_stage_json(srv, d.rs.stages[i].id));
    cJSON_AddItemToObject(f, "lost", lost_json(&d.rs));
    decl_free(&d);
    /* Nothing left to wait for: the gone client goes, and with it whatever
     * address ranges and stage ids it did not take back. */
    if (vd_client_chunks(srv, from) == 0)
        vd_reaper_end(rp); /* applies its own effects */
    for (size_t i = 0; i < nalso; i++) {
        struct vd_reaper *o = vd_reaper_find(srv, also[i]);
        if (o && vd_client_chunks(srv, also[i]) == 0)
            vd_reaper_end(o);
    }
    vl_fx_clear(&srv->fx);
    int r = vd_finish(s, id, f);
    vd_held_retry_all(srv); /* freed chunks may serve a held reserve */
    return r;
}
