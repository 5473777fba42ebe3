/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/requests/status.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proto/hexkey.h"
#include "daemon/core/clients/orphans.h"
#include "daemon/core/clients/reapers.h"
#include "platform/platform.h"

#define BAD_ALLOC(p) ((p) == NULL)

/* ---- regions and stages ------------------------------------------------- */

static int region_fill(const struct vl_region_view *r, struct vw_t_region *o,
                       struct vw_arena *a)
{
    memset(o, 0, sizeof(*o));
    o->id = r->id;
    o->stage = r->stage;
    o->kind = vl_kind_name(r->kind);
    o->device = r->device;
    o->base = r->base;
    o->lane_stride = r->lane_stride;
    o->va_bytes = r->va_bytes;
    o->lanes = r->lanes;
    o->lane_slots = r->lane_slots[0];
    bool varied = false;
    for (uint32_t l = 1; l < r->lanes; l++)
        varied |= r->lane_slots[l] != r->lane_slots[0];
    if (varied) {
        o->lane_slot_counts.v = vw_arena_alloc(a, r->lanes * sizeof(uint32_t));
        if (BAD_ALLOC(o->lane_slot_counts.v))
            return -ENOMEM;
        memcpy(o->lane_slot_counts.v, r->lane_slots, r->lanes * sizeof(uint32_t));
        o->lane_slot_counts.n = r->lanes;
    }
    o->stride_slots = r->stride_slots;
    o->chunk_bytes = r->chunk_bytes;
    o->chunks = r->used;
    return 0;
}

int vd_status_region(struct vd_core *core, uint32_t region,
                     struct vw_t_region *out, struct vw_arena *a)
{
    struct vl_region_view r;
    if (!vl_region_view(core->ledger, region, &r))
        return -ENOENT;
    return region_fill(&r, out, a);
}

struct region_list {
    const struct vl_stage_view *sv; /* the stage's, for fixed regions' names */
    struct vw_region_array *arr;
    size_t cap;
    struct vw_arena *a;
    int err;
};

static void add_region(void *ud, const struct vl_region_view *r)
{
    struct region_list *l = ud;
    if (l->err)
        return;
    if ((l->err = vw_arena_grow(l->a, (void **)&l->arr->v, l->arr->n, &l->cap,
                                  sizeof(*l->arr->v), 4)) < 0)
        return;
    struct vw_t_region *o = &l->arr->v[l->arr->n++];
    l->err = region_fill(r, o, l->a);
    for (uint32_t f = 0; l->sv && f < l->sv->cfg->nfixed; f++)
        if (l->sv->fixed_region[f] == r->id)
            o->name = l->sv->cfg->fixed[f].name;
}

/* A stage's figures, its regions aside. */
/* A configured set's key as the protocol carries it (in the reply's arena;
 * NULL when out of memory, which leaves it out). */
static const char *key_hex(struct vw_arena *a, const uint8_t *key)
{
    char *hex = vw_arena_alloc(a, 2 * VL_WSET_KEY + 1);
    if (hex)
        vw_hex_encode(key, VL_WSET_KEY, hex);
    return hex;
}

static int stage_fill(struct vd_core *core, uint32_t stage,
                      struct vw_t_stage *o, struct vl_stage_view *sv,
                      struct vw_arena *a)
{
    struct vl_stage_view s;
    if (!vl_stage_view(core->ledger, stage, &s))
        return -ENOENT;
    if (sv)
        *sv = s;
    uint64_t cb = s.chunk_bytes;
    memset(o, 0, sizeof(*o));
    o->id = stage;
    o->device = s.cfg->device;
    o->first_layer = s.cfg->first_layer;
    o->last_layer = s.cfg->last_layer;
    o->configured = s.configured;
    o->has_owner = s.owner != 0;
    o->owner = s.owner;
    o->kv_mapped_bytes = (uint64_t)s.kv_chunks * cb;
    o->kv_needed_bytes = s.kv_needed_bytes;
    o->kv_max_bytes = (uint64_t)s.window_chunks * cb;
    o->expert_loaned_bytes = (uint64_t)(s.loan_chunks - s.recalling) * cb;
    o->expert_slots_backed = s.expert_slots_backed;
    o->expert_slot_bytes = s.cfg->expert_slot_bytes;
    o->recalls_pending = s.recalling;
    o->residency_version = s.residency_version;
    o->fixed_bytes = (uint64_t)s.fixed_chunks * cb;
    o->fixed_reserved_bytes = (uint64_t)s.fixed_reserved * cb;
    if (s.configured) {
        o->has_kv_lanes = o->has_native_context = o->has_initial_tokens = true;
        o->has_step_tokens = o->has_lend = o->has_keep_window = true;
        o->has_headroom_bytes = o->has_hold_ms = o->has_recall_deadline_ms = true;
        o->kv_lanes = s.cfg->lanes;
        o->native_context = s.cfg->native_context;
        o->initial_tokens = s.cfg->initial_tokens;
        o->step_tokens = s.cfg->step_tokens;
        o->lend = s.cfg->lend;
        o->keep_window = s.keep_window;
        o->headroom_bytes = (uint64_t)s.headroom_chunks * cb;
        o->hold_ms = s.cfg->hold_ms;
        o->recall_deadline_ms = s.cfg->recall_deadline_ms;
    }
    /* R18 */
    o->has_asleep = o->asleep = s.asleep;
    o->has_host_bytes = o->has_wake_tokens = s.asleep;
    o->host_bytes = s.host_bytes;
    o->wake_tokens = s.wake_tokens;
    o->has_sleeps = o->has_wakes = o->has_sleep_us = o->has_wake_us = true;
    o->sleeps = s.sleeps;
    o->wakes = s.wakes;
    o->sleep_us = s.sleep_us;
    o->wake_us = s.wake_us;
    if (s.configured) {
        o->has_expert_slots = true;
        o->expert_slots = s.expert_slots;
    }
    /* R17: reservations that weight sets back. */
    for (uint32_t f = 0; s.configured && f < s.cfg->nfixed; f++) {
        const struct vl_fixed_cfg *fc = &s.cfg->fixed[f];
        const struct vl_set_cfg *sc = vl_fixed_set(s.cfg, f);
        if (!sc)
            continue;
        if (!o->weights.v) {
            o->weights.v = vw_arena_alloc(a, VL_MAX_FIXED * sizeof(*o->weights.v));
            if (!o->weights.v)
                return -ENOMEM;
        }
        o->weights.v[o->weights.n++] = (struct vw_t_stage_weights){
            .name = fc->name, .set = sc->name, .bytes = fc->bytes,
            .key = sc->has_key ? key_hex(a, sc->key) : NULL,
            .has_set_id = s.fixed_set[f] != 0, .set_id = s.fixed_set[f]};
    }
    return 0;
}

int vd_status_stage(struct vd_core *core, uint32_t stage,
                    struct vw_t_stage *o, struct vw_arena *a)
{
    struct vl_stage_view s;
    int e = stage_fill(core, stage, o, &s, a);
    if (e < 0)
        return e;
    struct region_list l = {.sv = &s, .arr = &o->regions, .a = a};
    vl_each_region(core->ledger, stage, add_region, &l);
    return l.err;
}

/* Every region of the ledger to its stage's entry, in one walk (a walk per
 * stage would cost stages times regions). */
struct region_sort {
    struct vd_core *core;
    const uint32_t *stage_at; /* stage id -> entry, UINT32_MAX none */
    uint32_t nids;
    struct vw_t_stage *stages;
    size_t *cap;
    struct vw_arena *a;
    int err;
};

static void sort_region(void *ud, const struct vl_region_view *r)
{
    struct region_sort *rs = ud;
    if (rs->err || r->stage >= rs->nids || rs->stage_at[r->stage] == UINT32_MAX)
        return;
    uint32_t k = rs->stage_at[r->stage];
    struct vl_stage_view sv;
    struct region_list l = {.arr = &rs->stages[k].regions, .cap = rs->cap[k],
                            .a = rs->a};
    /* Fixed regions take their names from the stage's configuration. */
    if ((r->kind == VL_FIXED || r->kind == VL_DRAFT_KV) &&
        vl_stage_view(rs->core->ledger, r->stage, &sv))
        l.sv = &sv;
    add_region(&l, r);
    rs->cap[k] = l.cap;
    rs->err = l.err;
}

int vd_status_kv(struct vd_core *core, uint32_t stage, uint32_t recalled,
                 struct vd_kv_summary *out, struct vw_arena *a)
{
    int e = vd_status_stage(core, stage, &out->stage, a);
    if (e < 0)
        return e;
    out->kv_needed_bytes = out->stage.kv_needed_bytes;
    out->kv_mapped_bytes = out->stage.kv_mapped_bytes;
    out->expert_loaned_bytes = out->stage.expert_loaned_bytes;
    out->expert_slots_backed = out->stage.expert_slots_backed;
    out->residency_version = out->stage.residency_version;
    out->recalled_chunks = recalled;
    return 0;
}

/* ---- devices and clients ------------------------------------------------ */

static void device_fill(struct vd_core *core, uint32_t i, struct vw_t_device *o,
                        struct vw_arena *a)
{
    struct vl_device_view d;
    vl_device_view(core->ledger, i, &d);
    const struct vd_device_info *info = &core->backend->info[i];
    uint64_t cb = d.chunk_bytes;
    memset(o, 0, sizeof(*o));
    o->id = d.id;
    o->backend = core->backend->ops->name;
    o->name = info->name;
    o->uuid = info->uuid[0] ? info->uuid : NULL;
    o->chunk_bytes = cb;
    o->capacity_bytes = (uint64_t)d.capacity * cb;
    o->free_bytes = (uint64_t)d.free * cb;
    o->max_capacity_bytes = (uint64_t)d.chunks * cb;
    o->granted_bytes = (uint64_t)(d.fixed + d.kv) * cb;
    o->fixed_bytes = (uint64_t)d.fixed * cb;
    o->kv_bytes = (uint64_t)d.kv * cb;
    o->loaned_bytes = (uint64_t)d.loaned * cb;
    o->recalling_bytes = (uint64_t)d.recalling * cb;
    o->quarantined_bytes = (uint64_t)d.quarantined * cb;
    o->reserved_bytes = (uint64_t)d.reserved * cb;
    o->total_bytes = info->total_bytes;
    o->pool_ready_chunks = core->backend->ops->pool_ready(core->backend, i);
    if (core->backend->gpu) {
        o->has_granularity_bytes = o->has_vmm = o->has_posix_fd = true;
        o->granularity_bytes = info->granularity;
        o->vmm = info->vmm;
        o->posix_fd = info->posix_fd;
        uint32_t *peers = vw_arena_alloc(a, 64 * sizeof(uint32_t));
        for (uint32_t k = 0; peers && k < 64; k++)
            if (info->peers & (1ull << k))
                peers[o->peer_access.n++] = k;
        o->peer_access.v = peers;
    }
    o->lend_unreserved = d.lend_unreserved;
    o->has_weights_bytes = o->has_weights_cached_bytes = true;
    o->weights_bytes = (uint64_t)d.weights * cb;
    o->weights_cached_bytes = (uint64_t)d.weights_cached * cb;
    o->has_standby_bytes = o->has_standby_max_bytes = o->has_held_bytes = true;
    o->standby_bytes = (uint64_t)o->pool_ready_chunks * cb;
    o->standby_max_bytes = (uint64_t)info->standby_chunks * cb;
    o->held_bytes = o->granted_bytes + o->loaned_bytes + o->quarantined_bytes +
                    o->weights_bytes + o->standby_bytes;
}

struct client_list {
    struct vd_core *core;
    struct vw_client_array *arr;
    size_t cap;
    uint32_t *room; /* per entry: stage ids it has room for */
    struct vw_arena *a;
    int err;
};

/* Client id -> its entry, for the stages' owners (open addressing). */
struct client_index {
    uint32_t *id, *at;
    size_t cap;
};

static size_t ci_home(uint32_t id, size_t cap)
{
    return (size_t)((id * 2654435761u) & (uint32_t)(cap - 1));
}

static void ci_put(struct client_index *x, uint32_t id, uint32_t at)
{
    size_t i = ci_home(id, x->cap);
    while (x->id[i])
        i = (i + 1) & (x->cap - 1);
    x->id[i] = id;
    x->at[i] = at;
}

static uint32_t ci_get(const struct client_index *x, uint32_t id)
{
    for (size_t i = ci_home(id, x->cap); x->id[i]; i = (i + 1) & (x->cap - 1))
        if (x->id[i] == id)
            return x->at[i];
    return UINT32_MAX;
}

static void add_client(void *ud, const struct vl_client_view *cv)
{
    struct client_list *l = ud;
    if (l->err)
        return;
    if ((l->err = vw_arena_grow(l->a, (void **)&l->arr->v, l->arr->n, &l->cap,
                                  sizeof(*l->arr->v), 16)) < 0)
        return;
    struct vw_t_client *o = &l->arr->v[l->arr->n++];
    memset(o, 0, sizeof(*o));
    struct vd_client *c = vd_clients_find(&l->core->clients, cv->id);
    /* A gone client's process, while it may still map its memory. */
    struct vd_reaper *rp = c ? NULL : vd_reapers_find(l->core, cv->id);
    o->id = cv->id;
    o->name = c ? c->name : rp ? vd_reaper_name(rp) : "";
    o->pid = c ? c->peer.pid : rp ? vd_reaper_pid(rp) : 0;
    if (rp) {
        o->has_resumable = true;
        o->resumable = vd_reaper_resumable(rp) && !cv->resumed;
    }
    if (c) {
        o->has_uid = true;
        o->uid = c->peer.uid;
    }
    o->role = c && c->ctl ? "ctl" : "engine";
    o->state = vd_handoff_is_orphan(l->core, cv->id) ? "handed-off"
               : cv->gone                             ? "quarantined"
                                                      : "connected";
    o->held_bytes = cv->held_bytes;
    o->quarantined_bytes = cv->quarantined_bytes;
    o->delinquent = cv->delinquent;
    o->missed_recalls = cv->missed_recalls;
    /* Its stage ids come from one walk over the stages (vd_status_build):
     * room for as many as it owns. */
    if (cv->stages) {
        uint32_t *ids = vw_arena_alloc(l->a, cv->stages * sizeof(uint32_t));
        if (!ids) {
            l->err = -ENOMEM;
            return;
        }
        o->stages.v = ids;
        o->stages.n = 0;
        l->room[l->arr->n - 1] = cv->stages;
    }
}

static void count_client(void *ud, const struct vl_client_view *cv)
{
    (void)cv;
    (*(size_t *)ud)++;
}

int vd_status_build(struct vd_core *core, struct vw_rep_status *o,
                    struct vw_arena *a)
{
    memset(o, 0, sizeof(*o));
    o->protocol_version = VW_PROTOCOL_VERSION;
    o->has_protocol_oldest = true;
    o->protocol_oldest = VW_PROTOCOL_OLDEST;
    o->has_schema = true;
    o->schema = VW_STATUS_SCHEMA;
    o->backend = core->backend->ops->name;
    o->daemon.pid = vp_self_pid();
    o->daemon.version = VRAM_VERSION;
    o->daemon.uptime_ms = (vp_now_ns() - core->started_ns) / 1000000;
    o->daemon.chunk_fds = core->backend->ops->fds_held(core->backend);
    const struct vd_counters *k = &core->counters;
    o->counters = (struct vw_t_counters){
        .grants = k->grants, .moves = k->moves, .recalls = k->recalls,
        .recalls_missed = k->recalls_missed, .releases = k->releases,
        .errors = k->errors, .protocol_errors = k->protocol_errors,
        .disconnects = k->disconnects, .kept_after_release = k->kept_after_release,
        .has_weights_hits = true, .weights_hits = k->weights_hits,
        .has_weights_misses = true, .weights_misses = k->weights_misses,
        .has_weights_evictions = true, .weights_evictions = k->weights_evictions};
    uint32_t nd = vl_device_count(core->ledger);
    o->devices.v = vw_arena_alloc(a, nd * sizeof(*o->devices.v));
    if (!o->devices.v)
        return -ENOMEM;
    for (uint32_t i = 0; i < nd; i++)
        device_fill(core, i, &o->devices.v[o->devices.n++], a);
    size_t ns = 0;
    uint32_t nids = 0;
    for (uint32_t s = vl_stage_next(core->ledger, 0); s != VL_NONE;
         s = vl_stage_next(core->ledger, s + 1)) {
        ns++;
        nids = s + 1;
    }
    o->stages.v = vw_arena_alloc(a, (ns ? ns : 1) * sizeof(*o->stages.v));
    uint32_t *stage_at = vw_arena_alloc(a, (nids ? nids : 1) * sizeof(uint32_t));
    uint32_t *owner = vw_arena_alloc(a, (ns ? ns : 1) * sizeof(uint32_t));
    size_t *rcap = vw_arena_alloc(a, (ns ? ns : 1) * sizeof(size_t));
    if (!o->stages.v || !stage_at || !owner || !rcap)
        return -ENOMEM;
    for (uint32_t i = 0; i < nids; i++)
        stage_at[i] = UINT32_MAX;
    for (uint32_t s = vl_stage_next(core->ledger, 0); s != VL_NONE;
         s = vl_stage_next(core->ledger, s + 1)) {
        struct vl_stage_view sv;
        int e = stage_fill(core, s, &o->stages.v[o->stages.n], &sv, a);
        if (e < 0)
            return e;
        owner[o->stages.n] = sv.owner;
        rcap[o->stages.n] = 0;
        stage_at[s] = (uint32_t)o->stages.n++;
    }
    struct region_sort rs = {.core = core, .stage_at = stage_at, .nids = nids,
                             .stages = o->stages.v, .cap = rcap, .a = a};
    vl_each_region(core->ledger, VL_NONE, sort_region, &rs);
    if (rs.err)
        return rs.err;
    /* Clients, then each stage's id to its owner's entry: one walk each. */
    size_t nc = 0;
    vl_each_client(core->ledger, count_client, &nc);
    struct client_list l = {.core = core, .arr = &o->clients, .a = a};
    l.room = vw_arena_alloc(a, (nc ? nc : 1) * sizeof(uint32_t));
    struct client_index x = {.cap = 16};
    while (x.cap < 2 * nc)
        x.cap *= 2;
    x.id = vw_arena_alloc(a, x.cap * sizeof(uint32_t));
    x.at = vw_arena_alloc(a, x.cap * sizeof(uint32_t));
    if (!l.room || !x.id || !x.at)
        return -ENOMEM;
    memset(x.id, 0, x.cap * sizeof(uint32_t));
    memset(l.room, 0, (nc ? nc : 1) * sizeof(uint32_t));
    vl_each_client(core->ledger, add_client, &l);
    if (l.err)
        return l.err;
    for (size_t i = 0; i < o->clients.n; i++)
        ci_put(&x, o->clients.v[i].id, (uint32_t)i);
    for (size_t j = 0; j < o->stages.n; j++) {
        uint32_t at = owner[j] ? ci_get(&x, owner[j]) : UINT32_MAX;
        if (at == UINT32_MAX)
            continue;
        struct vw_t_client *c = &o->clients.v[at];
        if (c->stages.n < l.room[at])
            c->stages.v[c->stages.n++] = o->stages.v[j].id;
    }
    return 0;
}

uint32_t vd_status_blocker(struct vd_core *core, uint32_t stage, char *out,
                           size_t len)
{
    struct vl_blocker b;
    *out = 0;
    if (!vl_stage_blocker(core->ledger, stage, &b))
        return 0;
    const char *name = "";
    long long pid = 0;
    const struct vd_client *c = vd_clients_find(&core->clients, b.client);
    struct vd_reaper *rp = c ? NULL : vd_reapers_find(core, b.client);
    if (c) {
        name = c->name;
        pid = (long long)c->peer.pid;
    } else if (rp) {
        name = vd_reaper_name(rp);
        pid = (long long)vd_reaper_pid(rp);
    }
    char who[128];
    snprintf(who, sizeof(who), "client %u (%s%spid %lld)", b.client, name,
             *name ? ", " : "", pid);
    if (b.quarantined)
        snprintf(out, len, "blocked by gone client %s, whose %u chunks on the "
                 "device stay quarantined until its process exits (an admin "
                 "may end the process; vramctl evict %u stops it from "
                 "resuming)", who, b.chunks, b.client);
    else
        snprintf(out, len, "blocked by %s, which has not given back %u "
                 "recalled chunks of stage %u; its stage's on_missed_recall is "
                 "%s%s", who, b.chunks, b.stage,
                 b.kill_on_missed_recall ? "kill (it is killed at its deadline)"
                                         : "deny_loans (it keeps them and gets no "
                                           "new loans)",
                 b.kill_on_missed_recall ? ""
                                         : "; an admin can run vramctl evict "
                                           "and end the process");
    return b.client;
}
