/* The status object: what vramctl status --json prints and what the status
 * request returns. Keys are stable; new keys may be added. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "message.h"
#include "platform.h"
#include "session.h"

cJSON *vd_region_json(struct vd_server *srv, const struct vl_region *r)
{
    struct vl_device *d = vd_device(srv, r->device);
    cJSON *o = cJSON_CreateObject();
    vram_json_add_u64(o, "id", r->id);
    vram_json_add_u64(o, "stage", r->stage);
    cJSON_AddStringToObject(o, "kind", vl_kind_name(r->kind));
    vram_json_add_u64(o, "device", r->device);
    vram_json_add_u64(o, "base", r->base);
    vram_json_add_u64(o, "lane_stride", r->lane_stride);
    vram_json_add_u64(o, "va_bytes", r->va_bytes);
    vram_json_add_u64(o, "lanes", r->lanes);
    vram_json_add_u64(o, "lane_slots", r->lane_slots[0]);
    cJSON *ls = cJSON_AddArrayToObject(o, "lane_slot_counts");
    bool varied = false;
    for (uint32_t l = 1; l < r->lanes; l++)
        varied |= r->lane_slots[l] != r->lane_slots[0];
    if (varied)
        for (uint32_t l = 0; l < r->lanes; l++)
            cJSON_AddItemToArray(ls, cJSON_CreateNumber(r->lane_slots[l]));
    vram_json_add_u64(o, "stride_slots", r->stride_slots);
    vram_json_add_u64(o, "chunk_bytes", d ? d->cfg.chunk_bytes : 0);
    vram_json_add_u64(o, "chunks", r->used);
    return o;
}

static cJSON *device_json(struct vd_server *srv, uint32_t i)
{
    struct vl_device *d = &srv->ledger.dev[i];
    uint64_t cb = d->cfg.chunk_bytes;
    cJSON *o = cJSON_CreateObject();
    vram_json_add_u64(o, "id", d->cfg.id);
    cJSON_AddStringToObject(o, "backend", srv->backend->ops->name);
    const struct vd_device_info *info = &srv->backend->info[i];
    cJSON_AddStringToObject(o, "name", info->name);
    if (info->uuid[0])
        cJSON_AddStringToObject(o, "uuid", info->uuid);
    vram_json_add_u64(o, "chunk_bytes", cb);
    vram_json_add_u64(o, "capacity_bytes", (uint64_t)vl_capacity(d) * cb);
    vram_json_add_u64(o, "free_bytes", (uint64_t)(d->count[VL_FREE] - d->withheld) * cb);
    vram_json_add_u64(o, "max_capacity_bytes", (uint64_t)d->nchunks * cb);
    vram_json_add_u64(o, "granted_bytes", (uint64_t)(d->fixed + d->kv) * cb);
    vram_json_add_u64(o, "fixed_bytes", (uint64_t)d->fixed * cb);
    vram_json_add_u64(o, "kv_bytes", (uint64_t)d->kv * cb);
    vram_json_add_u64(o, "loaned_bytes", (uint64_t)d->loaned * cb);
    vram_json_add_u64(o, "recalling_bytes", (uint64_t)d->count[VL_RECALLING] * cb);
    vram_json_add_u64(o, "quarantined_bytes",
                      (uint64_t)d->count[VL_QUARANTINED] * cb);
    vram_json_add_u64(o, "reserved_bytes", (uint64_t)d->reserved * cb);
    vram_json_add_u64(o, "total_bytes", info->total_bytes);
    vram_json_add_u64(o, "pool_ready_chunks", srv->backend->ops->pool_ready(srv->backend, i));
    if (strcmp(srv->backend->ops->name, "cuda") == 0) {
        vram_json_add_u64(o, "granularity_bytes", info->granularity);
        cJSON_AddBoolToObject(o, "vmm", info->vmm);
        cJSON_AddBoolToObject(o, "posix_fd", info->posix_fd);
        cJSON *peers = cJSON_AddArrayToObject(o, "peer_access");
        for (uint32_t k = 0; k < 64; k++)
            if (info->peers & (1ull << k))
                cJSON_AddItemToArray(peers, cJSON_CreateNumber(k));
    }
    cJSON_AddBoolToObject(o, "lend_unreserved", d->cfg.lend_unreserved);
    return o;
}

cJSON *vd_stage_json(struct vd_server *srv, uint32_t id)
{
    struct vl_stage *s = &srv->ledger.stage[id];
    uint64_t cb = 0;
    for (uint32_t i = 0; i < srv->ledger.ndev; i++)
        if (srv->ledger.dev[i].cfg.id == s->cfg.device)
            cb = srv->ledger.dev[i].cfg.chunk_bytes;
    cJSON *o = cJSON_CreateObject();
    vram_json_add_u64(o, "id", id);
    vram_json_add_u64(o, "device", s->cfg.device);
    vram_json_add_u64(o, "first_layer", s->cfg.first_layer);
    vram_json_add_u64(o, "last_layer", s->cfg.last_layer);
    cJSON_AddBoolToObject(o, "configured", s->configured);
    if (s->owner)
        vram_json_add_u64(o, "owner", s->owner);
    else
        cJSON_AddNullToObject(o, "owner");
    vram_json_add_u64(o, "kv_mapped_bytes", (uint64_t)s->kv_chunks * cb);
    vram_json_add_u64(o, "kv_needed_bytes", s->kv_needed_bytes);
    vram_json_add_u64(o, "kv_max_bytes", (uint64_t)s->window_chunks * cb);
    vram_json_add_u64(o, "expert_loaned_bytes",
                      (uint64_t)(s->loan_chunks - s->recalling) * cb);
    vram_json_add_u64(o, "expert_slots_backed",
                      vl_expert_slots_backed(&srv->ledger, id));
    vram_json_add_u64(o, "expert_slot_bytes", s->cfg.expert_slot_bytes);
    vram_json_add_u64(o, "recalls_pending", s->recalling);
    vram_json_add_u64(o, "residency_version", s->residency_version);
    vram_json_add_u64(o, "fixed_bytes", (uint64_t)s->fixed_chunks * cb);
    vram_json_add_u64(o, "fixed_reserved_bytes", (uint64_t)s->fixed_reserved * cb);
    if (s->configured) {
        vram_json_add_u64(o, "kv_lanes", s->cfg.lanes);
        vram_json_add_u64(o, "native_context", s->cfg.native_context);
        vram_json_add_u64(o, "initial_tokens", s->cfg.initial_tokens);
        vram_json_add_u64(o, "step_tokens", s->cfg.step_tokens);
        cJSON_AddBoolToObject(o, "lend", s->cfg.lend);
        cJSON_AddBoolToObject(o, "keep_window", s->keep_window);
        vram_json_add_u64(o, "headroom_bytes", (uint64_t)s->headroom_chunks * cb);
        vram_json_add_u64(o, "hold_ms", s->cfg.hold_ms);
        vram_json_add_u64(o, "recall_deadline_ms", s->cfg.recall_deadline_ms);
    }
    cJSON *regions = cJSON_AddArrayToObject(o, "regions");
    for (size_t i = 0; i < srv->ledger.nregion; i++)
        if (srv->ledger.region[i]->stage == id)
            cJSON_AddItemToArray(regions,
                                 vd_region_json(srv, srv->ledger.region[i]));
    return o;
}

static cJSON *clients_json(struct vd_server *srv)
{
    struct vl_ledger *L = &srv->ledger;
    size_t n = L->nclient;
    uint64_t *bytes = calloc(n ? n : 1, sizeof(uint64_t));
    uint64_t *quar = calloc(n ? n : 1, sizeof(uint64_t));
    for (uint32_t di = 0; bytes && quar && di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        for (uint32_t k = 0; k < d->nchunks; k++) {
            uint32_t h = d->chunks[k].holder;
            if (!h)
                continue;
            for (size_t c = 0; c < n; c++)
                if (L->client[c].id == h) {
                    if (d->chunks[k].state == VL_QUARANTINED)
                        quar[c] += d->cfg.chunk_bytes;
                    else
                        bytes[c] += d->cfg.chunk_bytes;
                    break;
                }
        }
    }
    cJSON *arr = cJSON_CreateArray();
    for (size_t c = 0; c < n; c++) {
        struct vl_client *cl = &L->client[c];
        struct vd_session *s = NULL;
        for (struct vd_session *x = srv->sessions; x; x = x->next)
            if (x->id == cl->id)
                s = x;
        /* A gone client's process, while it may still map its memory. */
        struct vd_reaper *rp = s ? NULL : vd_reaper_find(srv, cl->id);
        cJSON *o = cJSON_CreateObject();
        vram_json_add_u64(o, "id", cl->id);
        cJSON_AddStringToObject(o, "name", s ? s->name : "");
        cJSON_AddNumberToObject(o, "pid", (double)(s ? s->pid : rp ? rp->pid : 0));
        if (rp)
            cJSON_AddBoolToObject(o, "resumable", rp->resumable && !cl->resumed);
        if (s)
            vram_json_add_u64(o, "uid", s->peer.uid);
        cJSON_AddStringToObject(o, "role", s && s->ctl ? "ctl" : "engine");
        cJSON_AddStringToObject(o, "state", cl->gone ? "quarantined" : "connected");
        vram_json_add_u64(o, "held_bytes", bytes ? bytes[c] : 0);
        vram_json_add_u64(o, "quarantined_bytes", quar ? quar[c] : 0);
        cJSON_AddBoolToObject(o, "delinquent", cl->delinquent);
        vram_json_add_u64(o, "missed_recalls", cl->missed_recalls);
        cJSON *st = cJSON_AddArrayToObject(o, "stages");
        for (uint32_t i = 0; i < VL_MAX_STAGES; i++)
            if (L->stage[i].used && L->stage[i].owner == cl->id)
                cJSON_AddItemToArray(st, cJSON_CreateNumber(i));
        cJSON_AddItemToArray(arr, o);
    }
    free(bytes);
    free(quar);
    return arr;
}

cJSON *vd_status_build(struct vd_server *srv)
{
    cJSON *o = cJSON_CreateObject();
    vram_json_add_u64(o, "protocol_version", VRAM_PROTOCOL_VERSION);
    cJSON_AddStringToObject(o, "backend", srv->backend->ops->name);
    cJSON *dm = cJSON_AddObjectToObject(o, "daemon");
    cJSON_AddNumberToObject(dm, "pid", (double)vp_self_pid());
    cJSON_AddStringToObject(dm, "version", VRAM_VERSION);
    vram_json_add_u64(dm, "uptime_ms", (vp_now_ns() - srv->started_ns) / 1000000);
    vram_json_add_u64(dm, "chunk_fds", srv->backend->ops->fds_held(srv->backend));
    cJSON *ct = cJSON_AddObjectToObject(o, "counters");
    vram_json_add_u64(ct, "grants", srv->counters.grants);
    vram_json_add_u64(ct, "moves", srv->counters.moves);
    vram_json_add_u64(ct, "recalls", srv->counters.recalls);
    vram_json_add_u64(ct, "recalls_missed", srv->counters.recalls_missed);
    vram_json_add_u64(ct, "releases", srv->counters.releases);
    vram_json_add_u64(ct, "errors", srv->counters.errors);
    vram_json_add_u64(ct, "protocol_errors", srv->counters.protocol_errors);
    vram_json_add_u64(ct, "disconnects", srv->counters.disconnects);
    vram_json_add_u64(ct, "kept_after_release", srv->counters.kept_after_release);
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    for (uint32_t i = 0; i < srv->ledger.ndev; i++)
        cJSON_AddItemToArray(devs, device_json(srv, i));
    cJSON *stages = cJSON_AddArrayToObject(o, "stages");
    for (uint32_t i = 0; i < VL_MAX_STAGES; i++)
        if (srv->ledger.stage[i].used)
            cJSON_AddItemToArray(stages, vd_stage_json(srv, i));
    cJSON_AddItemToObject(o, "clients", clients_json(srv));
    return o;
}
