/* One handler per request of proto/messages.json: check the fields the
 * catalogue cannot (ranges), ask the ledger, and answer (vd_finish carries
 * out the effects). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "message.h"
#include "session.h"
#include "state.h"

static int handle_hello(struct vd_session *s, uint64_t id, cJSON *msg)
{
    uint64_t v = 0;
    vram_json_u64(msg, "version", &v);
    if (v != VRAM_PROTOCOL_VERSION) {
        s->drain_close = true;
        return vd_reply_err(s, id, -EPROTONOSUPPORT,
                         "protocol version mismatch: client %llu, server %d",
                         (unsigned long long)v, VRAM_PROTOCOL_VERSION);
    }
    const char *role = vram_json_str(msg, "role");
    if (role && strcmp(role, "ctl") && strcmp(role, "engine"))
        return vd_reply_err(s, id, -EINVAL, "role must be engine or ctl");
    s->ctl = role && strcmp(role, "ctl") == 0;
    const char *name = vram_json_str(msg, "name");
    if (name)
        snprintf(s->name, sizeof(s->name), "%s", name);
    for (char *p = s->name; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = '?';
    s->hello = true;
    vlog(VLOG_INFO, "client %u (%s, pid %d, uid %u) said hello as %s", s->id,
         s->name, (int)s->pid, (unsigned)s->peer.uid, s->ctl ? "ctl" : "engine");
    cJSON *f = cJSON_CreateObject();
    vram_json_add_u64(f, "version", VRAM_PROTOCOL_VERSION);
    cJSON *caps = cJSON_AddArrayToObject(f, "capabilities");
    cJSON_AddItemToArray(caps, cJSON_CreateString("fd-passing"));
    cJSON_AddItemToArray(caps, cJSON_CreateString("loans"));
    cJSON_AddItemToArray(caps, cJSON_CreateString("hold"));
    vram_json_add_u64(f, "client", s->id);
    cJSON_AddStringToObject(f, "backend", s->srv->backend->ops->name);
    return vd_finish(s, id, f);
}

static int get_u32(struct vd_session *s, uint64_t id, cJSON *msg,
                   const char *key, uint32_t *out, bool required)
{
    uint64_t v;
    int r = vram_json_u64(msg, key, &v);
    if (r == -ENOENT && !required)
        return 1;
    if (r < 0 || v > UINT32_MAX) {
        vd_reply_err(s, id, -EINVAL, "field '%s' must be an integer below 2^32",
                  key);
        return -EINVAL;
    }
    *out = (uint32_t)v;
    return 0;
}

static int handle_stage_register(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage = 0, dev = 0, first = 0, last = 0;
    bool keep = false;
    vram_json_bool(msg, "keep_window", &keep);
    int has_stage = get_u32(s, id, msg, "stage", &stage, false);
    if (has_stage < 0)
        return 0;
    uint32_t owned = 0;
    for (uint32_t i = 0; i < VL_MAX_STAGES; i++)
        owned += srv->ledger.stage[i].used && srv->ledger.stage[i].owner == s->id;
    if (owned >= srv->cfg.max_stages_per_client)
        return vd_reply_err(s, id, -E2BIG, "limit of %u stages per client "
                            "reached", srv->cfg.max_stages_per_client);
    vl_fx_clear(&srv->fx);
    int e;
    if (has_stage == 0) {
        e = vl_stage_register(&srv->ledger, s->id, stage, keep, &srv->fx);
    } else {
        if (get_u32(s, id, msg, "device", &dev, true) < 0 ||
            get_u32(s, id, msg, "first_layer", &first, true) < 0 ||
            get_u32(s, id, msg, "last_layer", &last, true) < 0)
            return 0;
        e = vl_stage_register_adhoc(&srv->ledger, s->id, dev, first, last,
                                    &stage);
    }
    if (e < 0)
        return vd_reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    vlog(VLOG_INFO, "client %u (%s) registered stage %u", s->id, s->name,
         stage);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddItemToObject(f, "stage", vd_stage_json(srv, stage));
    return vd_finish(s, id, f);
}

static int handle_stage_release(struct vd_session *s, uint64_t id, cJSON *msg)
{
    uint32_t stage;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0)
        return 0;
    vl_fx_clear(&s->srv->fx);
    int e = vl_stage_release(&s->srv->ledger, s->id, stage, &s->srv->fx);
    if (e < 0)
        return vd_reply_err(s, id, e, "%s", vl_why(&s->srv->ledger));
    int r = vd_finish(s, id, cJSON_CreateObject());
    vd_held_retry_all(s->srv);
    return r;
}

static int handle_region_create(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage, lanes = 1;
    uint64_t bytes = 0;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0 ||
        get_u32(s, id, msg, "lanes", &lanes, false) < 0)
        return 0;
    vram_json_u64(msg, "bytes", &bytes);
    int kind = vl_kind_parse(vram_json_str(msg, "kind"));
    if (kind < 0)
        return vd_reply_err(s, id, -EINVAL,
                         "kind must be kv, expert, fixed or draft_kv");
    if (s->regions >= srv->cfg.max_regions_per_client)
        return vd_reply_err(s, id, -E2BIG, "limit of %u regions per client "
                         "reached", srv->cfg.max_regions_per_client);
    uint32_t region;
    int e = vl_region_create(&srv->ledger, s->id, stage, kind, bytes, lanes,
                             &region);
    if (e < 0)
        return vd_reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    s->regions++;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddItemToObject(f, "region",
                          vd_region_json(srv, vl_region_find(&srv->ledger, region)));
    vl_fx_clear(&srv->fx);
    return vd_finish(s, id, f);
}

uint32_t vd_client_chunks(struct vd_server *srv, uint32_t client)
{
    struct vl_client *c = vl_client_find(&srv->ledger, client);
    return c ? c->chunks : 0;
}

static int handle_region_grow(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t region, n;
    if (get_u32(s, id, msg, "region", &region, true) < 0 ||
        get_u32(s, id, msg, "chunks", &n, true) < 0)
        return 0;
    struct vl_region *r = vl_region_find(&srv->ledger, region);
    uint64_t total = r ? (uint64_t)n * r->lanes : n;
    if (vd_client_chunks(srv, s->id) + total > srv->cfg.max_chunks_per_client)
        return vd_reply_err(s, id, -EDQUOT, "quota of %u chunks per client: "
                         "holding %u, asked %llu more",
                         srv->cfg.max_chunks_per_client,
                         vd_client_chunks(srv, s->id), (unsigned long long)total);
    vl_fx_clear(&srv->fx);
    int e = vl_region_grow(&srv->ledger, s->id, region, n, &srv->fx);
    if (e < 0)
        return vd_reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    return vd_finish(s, id, cJSON_CreateObject());
}

static int parse_ids(struct vd_session *s, uint64_t id, cJSON *arr,
                     uint64_t **out, size_t *n_out)
{
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (n > 65536) {
        vd_reply_err(s, id, -E2BIG, "at most 65536 chunks per release");
        return -E2BIG;
    }
    uint64_t *v = malloc((n ? n : 1) * sizeof(*v));
    if (!v) {
        vd_reply_err(s, id, -ENOMEM, "out of memory");
        return -ENOMEM;
    }
    size_t i = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) {
        if (!cJSON_IsNumber(c) || c->valuedouble < 0 ||
            c->valuedouble >= 9007199254740992.0 ||
            c->valuedouble != (double)(uint64_t)c->valuedouble) {
            free(v);
            vd_reply_err(s, id, -EINVAL, "chunks[%zu] is not a chunk id", i);
            return -EINVAL;
        }
        v[i++] = (uint64_t)c->valuedouble;
    }
    *out = v;
    *n_out = n;
    return 0;
}

static int handle_chunk_release(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint64_t *ids;
    size_t n;
    if (parse_ids(s, id, cJSON_GetObjectItemCaseSensitive(msg, "chunks"), &ids,
                  &n) < 0)
        return 0;
    vl_fx_clear(&srv->fx);
    int e = vl_chunks_release(&srv->ledger, s->id, ids, n, &srv->fx);
    free(ids);
    if (e < 0)
        return vd_reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    cJSON *f = cJSON_CreateObject();
    vram_json_add_u64(f, "released", n);
    int r = vd_finish(s, id, f);
    vd_held_retry_all(srv);
    return r;
}

static int handle_chunk_move(struct vd_session *s, uint64_t id, cJSON *msg)
{
    uint64_t chunk = 0;
    uint32_t region, slot;
    if (vram_json_u64(msg, "chunk", &chunk) < 0 ||
        get_u32(s, id, msg, "region", &region, true) < 0 ||
        get_u32(s, id, msg, "slot", &slot, true) < 0)
        return 0;
    vl_fx_clear(&s->srv->fx);
    int e = vl_chunk_move(&s->srv->ledger, s->id, chunk, region, slot,
                          &s->srv->fx);
    if (e < 0)
        return vd_reply_err(s, id, e, "%s", vl_why(&s->srv->ledger));
    return vd_finish(s, id, cJSON_CreateObject());
}

static int handle_region_release(struct vd_session *s, uint64_t id, cJSON *msg)
{
    uint32_t region;
    if (get_u32(s, id, msg, "region", &region, true) < 0)
        return 0;
    vl_fx_clear(&s->srv->fx);
    int e = vl_region_release(&s->srv->ledger, s->id, region, &s->srv->fx);
    if (e < 0)
        return vd_reply_err(s, id, e, "%s", vl_why(&s->srv->ledger));
    if (s->regions)
        s->regions--;
    int r = vd_finish(s, id, cJSON_CreateObject());
    vd_held_retry_all(s->srv);
    return r;
}

static int handle_kv_reserve(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage;
    uint64_t prompt = 0, output = 0;
    bool hold = false;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0)
        return 0;
    vram_json_u64(msg, "prompt_tokens", &prompt);
    vram_json_u64(msg, "output_tokens", &output);
    vram_json_bool(msg, "hold", &hold);
    vl_fx_clear(&srv->fx);
    uint32_t recalled = 0;
    int e = vl_kv_reserve(&srv->ledger, s->id, stage, prompt, output,
                          &recalled, &srv->fx);
    if (e == 0)
        return vd_finish(s, id, vd_kv_fields(srv, stage, recalled));
    if (e != -EAGAIN)
        return vd_reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    char why[256];
    snprintf(why, sizeof(why), "%s", vl_why(&srv->ledger));
    vd_apply_background_fx(srv); /* the recalls go out either way */
    if (!hold)
        return vd_reply_err(s, id, -EAGAIN, "%s; ask with hold to wait", why);
    return vd_held_add(s, id, stage, prompt, output, why);
}

static int handle_kv_trim(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage;
    uint64_t tokens = 0;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0)
        return 0;
    vram_json_u64(msg, "tokens", &tokens);
    vl_fx_clear(&srv->fx);
    int e = vl_kv_trim(&srv->ledger, s->id, stage, tokens, &srv->fx);
    if (e < 0)
        return vd_reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    return vd_finish(s, id, vd_kv_fields(srv, stage, 0));
}

static int handle_expert_request(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage;
    uint64_t bytes = 0;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0)
        return 0;
    vram_json_u64(msg, "bytes", &bytes);
    /* Loans count against the client's quota like any other chunk. */
    uint32_t held = vd_client_chunks(srv, s->id);
    if (held >= srv->cfg.max_chunks_per_client)
        return vd_reply_err(s, id, -EDQUOT, "quota of %u chunks per client "
                            "reached", srv->cfg.max_chunks_per_client);
    struct vl_stage *stg = stage < VL_MAX_STAGES ? &srv->ledger.stage[stage] : NULL;
    struct vl_device *dv = stg && stg->used ? vd_device(srv, stg->cfg.device) : NULL;
    uint64_t room = (uint64_t)(srv->cfg.max_chunks_per_client - held) *
                    (dv ? dv->cfg.chunk_bytes : 1);
    if (dv && (!bytes || bytes > room))
        bytes = room;
    vl_fx_clear(&srv->fx);
    int e = vl_expert_request(&srv->ledger, s->id, stage, bytes, &srv->fx);
    if (e < 0)
        return vd_reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    return vd_finish(s, id, vd_kv_fields(srv, stage, 0));
}

static int handle_expert_claim(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage, layer;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0 ||
        get_u32(s, id, msg, "layer", &layer, true) < 0)
        return 0;
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(msg, "slots");
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (n > 65536)
        return vd_reply_err(s, id, -E2BIG, "at most 65536 slots per claim");
    uint32_t *slots = malloc((n ? n : 1) * sizeof(uint32_t));
    if (!slots)
        return vd_reply_err(s, id, -ENOMEM, "out of memory");
    size_t i = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) {
        if (!cJSON_IsNumber(c) || c->valuedouble < 0 ||
            c->valuedouble > UINT32_MAX ||
            c->valuedouble != (double)(uint32_t)c->valuedouble) {
            free(slots);
            return vd_reply_err(s, id, -EINVAL, "slots[%zu] is not a slot index", i);
        }
        slots[i++] = (uint32_t)c->valuedouble;
    }
    int e = vl_expert_claim(&srv->ledger, s->id, stage, layer, slots, n);
    free(slots);
    if (e < 0)
        return vd_reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    cJSON *f = cJSON_CreateObject();
    vram_json_add_u64(f, "claimed", n);
    vl_fx_clear(&srv->fx);
    return vd_finish(s, id, f);
}

static int handle_ping(struct vd_session *s, uint64_t id, cJSON *msg)
{
    (void)msg;
    cJSON *m = vd_reply_new(id, true);
    int r = vd_send(s, m, NULL, 0);
    cJSON_Delete(m);
    return r;
}

static int handle_client_evict(struct vd_session *s, uint64_t id, cJSON *msg)
{
    uint32_t client;
    if (get_u32(s, id, msg, "client", &client, true) < 0)
        return 0;
    if (!s->admin)
        return vd_reply_err(s, id, -EPERM, "evicting a client is for "
                            "administrators (uid %u is not in access.admin)",
                            (unsigned)s->peer.uid);
    struct vd_session *t = vd_session_by_id(s->srv, client);
    if (!t)
        return vd_reply_err(s, id, -ENOENT, "no connected client %u", client);
    if (t == s)
        return vd_reply_err(s, id, -EINVAL, "a client cannot evict itself");
    char why[96];
    snprintf(why, sizeof(why), "evicted by client %u (%s, uid %u)", s->id,
             s->name, (unsigned)s->peer.uid);
    t->evicted = true; /* its process may not take its memory back */
    vd_state_holder_evicted(s->srv->state, t->id);
    vd_session_close(t, why);
    vl_fx_clear(&s->srv->fx);
    return vd_finish(s, id, cJSON_CreateObject());
}

static int handle_device_set_capacity(struct vd_session *s, uint64_t id,
                                      cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t device;
    uint64_t bytes = 0;
    if (get_u32(s, id, msg, "device", &device, true) < 0)
        return 0;
    vram_json_u64(msg, "bytes", &bytes);
    if (!s->admin)
        return vd_reply_err(s, id, -EPERM, "changing a capacity is for "
                            "administrators (uid %u is not in access.admin)",
                            (unsigned)s->peer.uid);
    int e = vl_device_set_capacity(&srv->ledger, device, bytes, false);
    if (e < 0)
        return vd_reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    vlog(VLOG_NOTICE, "client %u (%s, uid %u) set device %u's capacity to %llu "
         "MiB", s->id, s->name, (unsigned)s->peer.uid, device,
         (unsigned long long)(bytes >> 20));
    vl_fx_clear(&srv->fx);
    int r = vd_finish(s, id, cJSON_CreateObject());
    vd_held_retry_all(srv); /* more room may serve a held reserve */
    return r;
}

static int handle_status(struct vd_session *s, uint64_t id, cJSON *msg)
{
    (void)msg;
    vl_fx_clear(&s->srv->fx);
    return vd_finish(s, id, vd_status_build(s->srv));
}

static const struct {
    const char *type;
    int (*fn)(struct vd_session *, uint64_t, cJSON *);
} handlers[] = {
    {"hello", handle_hello},
    {"stage_register", handle_stage_register},
    {"stage_release", handle_stage_release},
    {"region_create", handle_region_create},
    {"region_grow", handle_region_grow},
    {"chunk_release", handle_chunk_release},
    {"region_release", handle_region_release},
    {"chunk_move", handle_chunk_move},
    {"kv_reserve", handle_kv_reserve},
    {"kv_trim", handle_kv_trim},
    {"expert_request", handle_expert_request},
    {"expert_claim", handle_expert_claim},
    {"status", handle_status},
    {"ping", handle_ping},
    {"client_evict", handle_client_evict},
    {"device_set_capacity", handle_device_set_capacity},
    {"resume", vd_handle_resume},
};

bool vd_request_known(const char *type)
{
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
        if (strcmp(handlers[i].type, type) == 0)
            return true;
    return false;
}

int vd_request_handle(struct vd_session *s, uint64_t id, const char *type,
                      cJSON *msg)
{
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
        if (strcmp(handlers[i].type, type) == 0) {
            s->srv->request_type = handlers[i].type;
            int r = handlers[i].fn(s, id, msg);
            s->srv->request_type = NULL;
            return r;
        }
    return vd_reply_err(s, id, -ENOSYS, "no handler for '%s'", type);
}
