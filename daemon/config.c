/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/hexkey.h"
#include "proto/message.h"
#include "platform/peer.h"
#include "daemon/backends/registry.h"
#include "proto/units.h"

struct ctx {
    char (*errs)[256];
    int n;
};

static void err(struct ctx *x, const char *fmt, ...)
{
    if (x->n >= VD_MAX_CONFIG_ERRORS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->errs[x->n++], 256, fmt, ap);
    va_end(ap);
}

void vd_config_default(struct vd_config *c)
{
    memset(c, 0, sizeof(*c));
    c->ndev = 2;
    for (uint32_t i = 0; i < 2; i++) {
        c->dev[i].l.id = i;
        c->dev[i].l.chunk_bytes = 2u << 20;
        c->dev[i].l.capacity_bytes = 16ull << 30;
        c->dev[i].has_capacity = true;
    }
    c->pool_prefill = VD_POOL_AUTO;
    c->pool_idle_release_ms = 10000;
    vd_backend_conf_defaults(c->backend_conf);
    c->max_clients = 256;
    c->max_chunks_per_client = 1u << 20;
    c->max_regions_per_client = 256;
    c->max_stages_per_client = 16;
    c->admin_connections = 4;
    c->connections_per_user = 64;
    c->hello_timeout_ms = 5000;
    c->frame_timeout_ms = 10000;
    c->queued_bytes = 256ull << 20;
    c->va_bytes_per_client = 2ull << 40;
    c->va_bytes_per_user = 4ull << 40;
    c->stages_per_user = 64;
    c->gone_per_user = 64;
    c->wsets_per_user = 16;
    c->weights_alloc = 1ull << 30;
    c->socket_mode = 0660;
}

void vd_config_free(struct vd_config *c)
{
    if (!c)
        return;
    free(c->stages);
    c->stages = NULL;
    c->nstages = 0;
}

/* A backend's section's errors, as the file's own (section.h). */
static void report_line(void *ctx, const char *line)
{
    err(ctx, "%s", line);
}

/* Checks that obj has only the listed keys, or keys also_ok accepts (NULL:
 * none): a typo must not pass silently. */
static void known_keys_or(struct ctx *x, const cJSON *obj, const char *path,
                          const char *const *keys, bool (*also_ok)(const char *))
{
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        bool ok = also_ok && also_ok(it->string);
        for (const char *const *k = keys; *k; k++)
            ok |= strcmp(*k, it->string) == 0;
        if (!ok)
            err(x, "%s%s%s: unknown key", path, *path ? "." : "", it->string);
    }
}

static void known_keys(struct ctx *x, const cJSON *obj, const char *path,
                       const char *const *keys)
{
    known_keys_or(x, obj, path, keys, NULL);
}

static bool get_size(struct ctx *x, const cJSON *obj, const char *key,
                     const char *path, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return false;
    if (vw_json_uint(v, VW_JSON_MAX_UINT, out))
        return true;
    int e = cJSON_IsString(v) ? vw_size_parse(v->valuestring, out) : -EINVAL;
    if (e == 0)
        return true;
    err(x, "%s.%s: expected a size (bytes, or a string such as \"2MiB\")%s%s",
        path, key, e == -EDOM ? ": " : "", e == -EDOM ? vw_size_why(e) : "");
    return false;
}

static bool get_uint(struct ctx *x, const cJSON *obj, const char *key,
                     const char *path, uint64_t max, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return false;
    if (!vw_json_uint(v, max < VW_JSON_MAX_UINT ? max : VW_JSON_MAX_UINT,
                        out)) {
        err(x, "%s.%s: expected an integer from 0 to %llu", path, key,
            (unsigned long long)max);
        return false;
    }
    return true;
}

static bool get_bool(struct ctx *x, const cJSON *obj, const char *key,
                     const char *path, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return false;
    if (!cJSON_IsBool(v)) {
        err(x, "%s.%s: expected true or false", path, key);
        return false;
    }
    *out = cJSON_IsTrue(v);
    return true;
}

static uint64_t parse_hex_or_size(const cJSON *v, bool *ok)
{
    uint64_t r = 0;
    *ok = false;
    if (cJSON_IsNumber(v)) {
        *ok = vw_json_uint(v, VW_JSON_MAX_UINT, &r);
        return r;
    }
    if (cJSON_IsString(v)) {
        char *end;
        if (strncmp(v->valuestring, "0x", 2) == 0) {
            errno = 0;
            r = strtoull(v->valuestring, &end, 16);
            *ok = !errno && *end == '\0';
            return r;
        }
        *ok = vw_size_parse(v->valuestring, &r) == 0;
    }
    return r;
}

static void parse_devices(struct ctx *x, const cJSON *arr, struct vd_config *c)
{
    static const char *const keys[] = {"id", "backend", "capacity", "chunk",
                                       "reserve", "lend_unreserved", NULL};
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0 ||
        cJSON_GetArraySize(arr) > VL_MAX_DEVICES) {
        err(x, "devices: expected an array of 1 to %d devices", VL_MAX_DEVICES);
        return;
    }
    c->ndev = 0;
    c->devices_given = true;
    const cJSON *d;
    cJSON_ArrayForEach(d, arr) {
        char p[32];
        snprintf(p, sizeof(p), "devices[%u]", c->ndev);
        struct vd_device_conf *dc = &c->dev[c->ndev];
        memset(dc, 0, sizeof(*dc));
        if (!cJSON_IsObject(d)) {
            err(x, "%s: expected an object", p);
            c->ndev++;
            continue;
        }
        known_keys(x, d, p, keys);
        uint64_t v = c->ndev;
        if (!get_uint(x, d, "id", p, 1023, &v) &&
            cJSON_GetObjectItemCaseSensitive(d, "id"))
            v = c->ndev;
        dc->l.id = (uint32_t)v;
        for (uint32_t i = 0; i < c->ndev; i++)
            if (c->dev[i].l.id == dc->l.id)
                err(x, "%s.id: device %u defined twice", p, dc->l.id);
        const char *be = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(d, "backend"));
        if (cJSON_GetObjectItemCaseSensitive(d, "backend") &&
            (!be || !vd_backend_exists(be)))
            err(x, "%s.backend: expected %s", p, vd_backend_names_quoted(false));
        else if (be && c->backend[0] && strcmp(be, c->backend) &&
                 strcmp(c->backend, "auto"))
            err(x, "%s.backend: \"%s\" differs from the daemon's backend "
                "\"%s\" (one backend per daemon)", p, be, c->backend);
        dc->l.chunk_bytes = 2u << 20;
        get_size(x, d, "chunk", p, &dc->l.chunk_bytes);
        if (dc->l.chunk_bytes == 0 || dc->l.chunk_bytes % (2u << 20))
            err(x, "%s.chunk: must be a positive multiple of 2 MiB (the "
                "allocation granularity)", p);
        dc->has_capacity = get_size(x, d, "capacity", p, &dc->l.capacity_bytes);
        get_size(x, d, "reserve", p, &dc->reserve_bytes);
        get_bool(x, d, "lend_unreserved", p, &dc->l.lend_unreserved);
        c->ndev++;
    }
}

static void parse_lanes(struct ctx *x, const cJSON *arr, const char *p,
                        struct vl_stage_cfg *s)
{
    if (!cJSON_IsArray(arr)) {
        err(x, "%s.kv_lanes: expected an array of bytes-per-token numbers or "
            "{\"bytes_per_token\": N, \"count\": N} objects", p);
        return;
    }
    const cJSON *l;
    int i = 0;
    cJSON_ArrayForEach(l, arr) {
        char lp[96];
        snprintf(lp, sizeof(lp), "%s.kv_lanes[%d]", p, i++);
        uint64_t bpt = 0, count = 1;
        if (vw_json_uint(l, VW_JSON_MAX_UINT, &bpt) && bpt >= 1) {
            /* bytes per token */
        } else if (cJSON_IsObject(l)) {
            static const char *const keys[] = {"bytes_per_token", "count",
                                               "name", NULL};
            known_keys(x, l, lp, keys);
            if (!get_uint(x, l, "bytes_per_token", lp, 1u << 30, &bpt))
                err(x, "%s.bytes_per_token: required", lp);
            get_uint(x, l, "count", lp, VL_MAX_LANES, &count);
        } else {
            err(x, "%s: expected a positive integer or an object", lp);
            continue;
        }
        if (bpt == 0) {
            err(x, "%s: bytes per token must be positive", lp);
            continue;
        }
        for (uint64_t k = 0; k < count; k++) {
            if (s->lanes >= VL_MAX_LANES) {
                err(x, "%s: more than %d lanes", lp, VL_MAX_LANES);
                return;
            }
            s->lane_bytes_per_token[s->lanes++] = bpt;
        }
    }
    if (s->lanes == 0)
        err(x, "%s.kv_lanes: at least one lane", p);
}

static void parse_fixed(struct ctx *x, const cJSON *arr, const char *p,
                        struct vl_stage_cfg *s)
{
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > VL_MAX_FIXED) {
        err(x, "%s.fixed: expected an array of at most %d reservations", p,
            VL_MAX_FIXED);
        return;
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, arr) {
        char fp[96];
        snprintf(fp, sizeof(fp), "%s.fixed[%u]", p, s->nfixed);
        static const char *const keys[] = {"name", "kind", "bytes", "set",
                                           "alloc", "key", NULL};
        struct vl_fixed_cfg *fc = &s->fixed[s->nfixed++];
        if (!cJSON_IsObject(f)) {
            err(x, "%s: expected an object", fp);
            continue;
        }
        known_keys(x, f, fp, keys);
        const char *name = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(f, "name"));
        snprintf(fc->name, sizeof(fc->name), "%s", name ? name : "fixed");
        const char *kind = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(f, "kind"));
        fc->kind = VL_FIXED;
        if (kind && strcmp(kind, "draft_kv") == 0)
            fc->kind = VL_DRAFT_KV;
        else if (kind && strcmp(kind, "fixed") != 0)
            err(x, "%s.kind: expected \"fixed\" or \"draft_kv\"", fp);
        if (!get_size(x, f, "bytes", fp, &fc->bytes) || fc->bytes == 0)
            err(x, "%s.bytes: a positive size is required", fp);
        /* R17: a weight set backs this reservation. */
        const cJSON *sv = cJSON_GetObjectItemCaseSensitive(f, "set");
        const char *set = cJSON_GetStringValue(sv);
        struct vl_set_cfg *sc = NULL;
        if (sv) {
            size_t n = set ? strlen(set) : 0;
            bool ok = n > 0 && n <= VL_WSET_NAME_MAX;
            for (size_t i = 0; ok && i < n; i++)
                ok = (unsigned char)set[i] > 0x20 && (unsigned char)set[i] < 0x7f;
            if (!ok) {
                err(x, "%s.set: a weight set's name, 1 to %d printable bytes "
                    "without spaces", fp, VL_WSET_NAME_MAX);
            } else if (s->nsets >= VL_MAX_STAGE_SETS) {
                err(x, "%s.set: at most %d reservations of a stage name "
                    "weight sets", fp, VL_MAX_STAGE_SETS);
            } else {
                for (uint32_t i = 0; i < s->nsets; i++)
                    if (strcmp(s->sets[i].name, set) == 0)
                        err(x, "%s.set: '%s' backs another reservation of the "
                            "stage", fp, set);
                /* (a duplicate is an error already: kept, so that each
                 * entry's own mistakes are still reported) */
                sc = &s->sets[s->nsets++];
                snprintf(sc->name, sizeof(sc->name), "%s", set);
                fc->set = (uint8_t)s->nsets;
            }
        }
        uint64_t a;
        if (get_size(x, f, "alloc", fp, &a)) {
            if (!sv)
                err(x, "%s.alloc: only for a reservation that names a set", fp);
            else if (a < (2u << 20) || a % (2u << 20))
                err(x, "%s.alloc: a multiple of 2 MiB, at least 2 MiB", fp);
            else if (sc)
                sc->alloc = a;
        }
        const cJSON *kv = cJSON_GetObjectItemCaseSensitive(f, "key");
        uint8_t key[VL_WSET_KEY];
        if (kv && (!sv || vw_hex_decode(cJSON_GetStringValue(kv), key,
                                          VL_WSET_KEY) < 0)) {
            err(x, "%s.key: 64 hex digits (the set's 32-byte key), with a "
                "set", fp);
        } else if (kv && sc) {
            memcpy(sc->key, key, VL_WSET_KEY);
            sc->has_key = true;
        }
    }
}

static void parse_stages(struct ctx *x, const cJSON *arr, struct vd_config *c)
{
    static const char *const keys[] = {
        "id", "device", "first_layer", "last_layer", "kv_lanes",
        "native_context", "initial_tokens", "step_tokens", "fixed",
        "expert_slot", "expert_region", "loan", "name", NULL};
    static const char *const loan_keys[] = {"enabled", "headroom",
                                            "recall_deadline_ms", "hold_ms",
                                            "on_missed_recall",
                                            NULL};
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > VL_CONFIG_STAGES) {
        err(x, "stages: expected an array of at most %d stages", VL_CONFIG_STAGES);
        return;
    }
    int n = cJSON_GetArraySize(arr);
    c->stages = calloc((size_t)(n ? n : 1), sizeof(*c->stages));
    if (!c->stages) {
        err(x, "stages: out of memory");
        return;
    }
    const cJSON *o;
    cJSON_ArrayForEach(o, arr) {
        char p[32];
        snprintf(p, sizeof(p), "stages[%u]", c->nstages);
        struct vl_stage_cfg *s = &c->stages[c->nstages++];
        if (!cJSON_IsObject(o)) {
            err(x, "%s: expected an object", p);
            continue;
        }
        known_keys(x, o, p, keys);
        uint64_t v;
        s->id = c->nstages - 1;
        if (get_uint(x, o, "id", p, VL_CONFIG_STAGES - 1, &v))
            s->id = (uint32_t)v;
        for (uint32_t i = 0; i + 1 < c->nstages; i++)
            if (c->stages[i].id == s->id)
                err(x, "%s.id: stage %u defined twice", p, s->id);
        if (get_uint(x, o, "device", p, 1023, &v))
            s->device = (uint32_t)v;
        else if (!cJSON_GetObjectItemCaseSensitive(o, "device"))
            err(x, "%s.device: required", p);
        bool found = false;
        for (uint32_t i = 0; i < c->ndev; i++)
            found |= c->dev[i].l.id == s->device;
        if (!found)
            err(x, "%s.device: no device %u is configured", p, s->device);
        uint64_t first = 0, last = 0;
        if (!get_uint(x, o, "first_layer", p, 65534, &first))
            err(x, "%s.first_layer: required", p);
        if (!get_uint(x, o, "last_layer", p, 65534, &last))
            err(x, "%s.last_layer: required", p);
        if (last < first)
            err(x, "%s.last_layer: %llu is below first_layer %llu", p,
                (unsigned long long)last, (unsigned long long)first);
        s->first_layer = (uint32_t)first;
        s->last_layer = (uint32_t)last;
        const cJSON *lanes = cJSON_GetObjectItemCaseSensitive(o, "kv_lanes");
        if (lanes)
            parse_lanes(x, lanes, p, s);
        else
            err(x, "%s.kv_lanes: required", p);
        s->native_context = 262144;
        get_uint(x, o, "native_context", p, 1u << 30, &s->native_context);
        if (!s->native_context)
            err(x, "%s.native_context: must be positive", p);
        s->initial_tokens = s->native_context < 16384 ? s->native_context : 16384;
        get_uint(x, o, "initial_tokens", p, 1u << 30, &s->initial_tokens);
        if (s->initial_tokens > s->native_context)
            err(x, "%s.initial_tokens: %llu exceeds native_context %llu", p,
                (unsigned long long)s->initial_tokens,
                (unsigned long long)s->native_context);
        s->step_tokens = 8192;
        get_uint(x, o, "step_tokens", p, 1u << 30, &s->step_tokens);
        if (!s->step_tokens)
            err(x, "%s.step_tokens: must be positive", p);
        const cJSON *fixed = cJSON_GetObjectItemCaseSensitive(o, "fixed");
        if (fixed)
            parse_fixed(x, fixed, p, s);
        if (!get_size(x, o, "expert_slot", p, &s->expert_slot_bytes))
            err(x, "%s.expert_slot: required (a size such as \"1.5MiB\")", p);
        else if (!s->expert_slot_bytes)
            err(x, "%s.expert_slot: must be positive", p);
        get_size(x, o, "expert_region", p, &s->expert_region_bytes);
        s->lend = true;
        s->recall_deadline_ms = 2000;
        s->hold_ms = 10000;
        const cJSON *loan = cJSON_GetObjectItemCaseSensitive(o, "loan");
        if (loan && !cJSON_IsObject(loan)) {
            err(x, "%s.loan: expected an object", p);
        } else if (loan) {
            char lp[48];
            snprintf(lp, sizeof(lp), "%s.loan", p);
            known_keys(x, loan, lp, loan_keys);
            get_bool(x, loan, "enabled", lp, &s->lend);
            get_size(x, loan, "headroom", lp, &s->headroom_bytes);
            if (get_uint(x, loan, "recall_deadline_ms", lp, 3600000, &v))
                s->recall_deadline_ms = (uint32_t)v;
            if (get_uint(x, loan, "hold_ms", lp, 3600000, &v))
                s->hold_ms = (uint32_t)v;
            const cJSON *om = cJSON_GetObjectItemCaseSensitive(loan, "on_missed_recall");
            const char *oms = cJSON_GetStringValue(om);
            if (om && (!oms || (strcmp(oms, "deny_loans") && strcmp(oms, "kill"))))
                err(x, "%s.on_missed_recall: expected \"deny_loans\" or \"kill\"", lp);
            else if (oms)
                s->kill_on_missed_recall = strcmp(oms, "kill") == 0;
        }
    }
}

/* {"users": ["alice"], "uids": [1000], "groups": ["vramd"], "gids": [44]} */
static void parse_who(struct ctx *x, const cJSON *o, const char *path,
                      struct vd_access_list *l)
{
    static const char *const keys[] = {"users", "uids", "groups", "gids", NULL};
    if (!cJSON_IsObject(o)) {
        err(x, "%s: expected an object with users, uids, groups, gids", path);
        return;
    }
    known_keys(x, o, path, keys);
    for (int k = 0; k < 4; k++) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, keys[k]);
        if (!arr)
            continue;
        if (!cJSON_IsArray(arr)) {
            err(x, "%s.%s: expected an array", path, keys[k]);
            continue;
        }
        bool user = k < 2;
        uint32_t *v = user ? l->uids : l->gids, *n = user ? &l->nuids : &l->ngids;
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, arr) {
            char ep[96];
            snprintf(ep, sizeof(ep), "%s.%s[%d]", path, keys[k], i++);
            uint32_t id;
            if (k % 2 == 1 && !vp_ids_numeric()) {
                err(x, "%s: uids and gids are POSIX numbers; on this system "
                    "name users and groups by account name or SID (\"users\", "
                    "\"groups\")", ep);
                continue;
            }
            if (k % 2 == 1) { /* numeric */
                uint64_t num;
                if (!vw_json_uint(e, UINT32_MAX, &num)) {
                    err(x, "%s: expected a numeric id", ep);
                    continue;
                }
                id = (uint32_t)num;
            } else { /* a name, resolved now */
                const char *name = cJSON_GetStringValue(e);
                if ((user ? vp_user_id(name, &id) : vp_group_id(name, &id)) < 0) {
                    err(x, "%s: no %s named '%s'", ep, user ? "user" : "group",
                        name ? name : "(not a string)");
                    continue;
                }
            }
            if (*n >= 32) {
                err(x, "%s: at most 32 entries", ep);
                break;
            }
            v[(*n)++] = id;
        }
    }
}

static void parse_access(struct ctx *x, const cJSON *o, struct vd_config *c)
{
    static const char *const keys[] = {"allow", "admin", "weights",
                                       "socket_group", "socket_mode", NULL};
    if (!cJSON_IsObject(o)) {
        err(x, "access: expected an object");
        return;
    }
    known_keys(x, o, "access", keys);
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "allow"))) {
        parse_who(x, v, "access.allow", &c->allow);
        c->allow_given = true;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "admin")))
        parse_who(x, v, "access.admin", &c->admin);
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "weights")))
        parse_who(x, v, "access.weights", &c->weights);
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "socket_group"))) {
        const char *g = cJSON_GetStringValue(v);
        uint32_t gid;
        if (!g || vp_group_id(g, &gid) < 0)
            err(x, "access.socket_group: no group named '%s'", g ? g : "(not a string)");
        else
            snprintf(c->socket_group, sizeof(c->socket_group), "%s", g);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "socket_mode"))) {
        const char *m = cJSON_GetStringValue(v);
        char *end = NULL;
        unsigned long mode = m ? strtoul(m, &end, 8) : 0;
        if (!m || *end || mode > 0777 || (mode & 0007))
            err(x, "access.socket_mode: expected an octal string such as "
                "\"0660\", with no rights for others");
        else
            c->socket_mode = (uint32_t)mode;
    }
}

static void parse_limits(struct ctx *x, const cJSON *o, struct vd_config *c)
{
    static const char *const keys[] = {"clients", "chunks_per_client",
                                       "regions_per_client",
                                       "stages_per_client", "admin_connections",
                                       "connections_per_user",
                                       "hello_timeout_ms", "frame_timeout_ms",
                                       "queued_bytes", "address_space_per_client",
                                       "address_space_per_user",
                                       "stages_per_user",
                                       "gone_clients_per_user",
                                       "weight_sets_per_user", NULL};
    if (!cJSON_IsObject(o)) {
        err(x, "limits: expected an object");
        return;
    }
    known_keys(x, o, "limits", keys);
    uint64_t v;
    if (get_uint(x, o, "clients", "limits", 65536, &v))
        c->max_clients = (uint32_t)v;
    if (get_uint(x, o, "chunks_per_client", "limits", 1u << 24, &v))
        c->max_chunks_per_client = (uint32_t)v;
    if (get_uint(x, o, "regions_per_client", "limits", 65536, &v))
        c->max_regions_per_client = (uint32_t)v;
    if (get_uint(x, o, "stages_per_client", "limits", VL_MAX_STAGES, &v))
        c->max_stages_per_client = (uint32_t)v;
    if (get_uint(x, o, "admin_connections", "limits", 64, &v))
        c->admin_connections = (uint32_t)v;
    if (get_uint(x, o, "connections_per_user", "limits", 65536, &v)) {
        if (v == 0)
            err(x, "limits.connections_per_user: must be at least 1");
        c->connections_per_user = (uint32_t)v;
    }
    if (get_uint(x, o, "hello_timeout_ms", "limits", 600000, &v)) {
        if (v < 100)
            err(x, "limits.hello_timeout_ms: at least 100");
        c->hello_timeout_ms = (uint32_t)v;
    }
    if (get_size(x, o, "address_space_per_client", "limits", &v))
        c->va_bytes_per_client = v;
    if (get_size(x, o, "address_space_per_user", "limits", &v))
        c->va_bytes_per_user = v;
    if (get_uint(x, o, "stages_per_user", "limits", 65536, &v))
        c->stages_per_user = (uint32_t)v;
    if (get_uint(x, o, "gone_clients_per_user", "limits", 65536, &v))
        c->gone_per_user = (uint32_t)v;
    if (get_uint(x, o, "weight_sets_per_user", "limits", VL_MAX_WSETS, &v))
        c->wsets_per_user = (uint32_t)v;
    if (get_size(x, o, "queued_bytes", "limits", &v)) {
        if (v < (1u << 20))
            err(x, "limits.queued_bytes: at least 1 MiB");
        c->queued_bytes = v;
    }
    if (get_uint(x, o, "frame_timeout_ms", "limits", 600000, &v)) {
        if (v < 100)
            err(x, "limits.frame_timeout_ms: at least 100");
        c->frame_timeout_ms = (uint32_t)v;
    }
}

/* A JSON syntax error, at the line and column (1-based, columns counted in
 * characters) of where cJSON stopped (at, a pointer into text), with the
 * text found there. Every caller prefixes the file's name. */
static void json_syntax_error(struct ctx *x, const char *text, size_t len,
                              const char *at)
{
    if (!at || at < text || at > text + len)
        at = text + len; /* not known: the end */
    unsigned line = 1, col = 1;
    for (const char *p = text; p < at; p++) {
        if (*p == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)*p & 0xC0) != 0x80) {
            col++; /* not a UTF-8 continuation byte: a character */
        }
    }
    char near[24];
    size_t n = 0;
    while (n < 20 && at + n < text + len && (unsigned char)at[n] >= 0x20 &&
           at[n] != 0x7f)
        n++;
    if (at + n < text + len && (unsigned char)at[n] >= 0x20)
        while (n > 0 && ((unsigned char)at[n] & 0xC0) == 0x80)
            n--; /* not in the middle of a character */
    memcpy(near, at, n);
    near[n] = '\0';
    if (at >= text + len)
        err(x, "line %u, column %u: not valid JSON (the text ends there)", line, col);
    else if (n == 0)
        err(x, "line %u, column %u: not valid JSON", line, col);
    else
        err(x, "line %u, column %u: not valid JSON (at '%s')", line, col, near);
}

int vd_config_load(const char *path, struct vd_config *c, char errs[][256],
                   int *nerrs)
{
    struct ctx x = {.errs = errs};
    vd_config_default(c);
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        err(&x, "%s", strerror(e));
        *nerrs = x.n;
        return -e;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap + 1);
            if (!nb || cap > (16u << 20)) {
                free(nb ? nb : buf);
                fclose(f);
                err(&x, "larger than 16 MiB");
                *nerrs = x.n;
                return -EFBIG;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    /* On a syntax error, where is cJSON_GetErrorPtr()'s pointer into buf
     * (this way without cJSON's global, which another thread may change). */
    const char *where = NULL;
    cJSON *root = cJSON_ParseWithOpts(buf, &where, 1);
    if (!root) {
        json_syntax_error(&x, buf, len, where);
        free(buf);
        *nerrs = x.n;
        return -EINVAL;
    }
    free(buf);
    if (!cJSON_IsObject(root)) {
        err(&x, "(top level): expected an object");
        goto out;
    }
    static const char *const keys[] = {"backend", "devices", "stages",
                                       "address_window", "pool", "limits",
                                       "scenario", "doc", "access",
                                       "weights", NULL};
    known_keys_or(&x, root, "", keys, vd_backend_conf_key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "backend");
    if (v) {
        const char *be = cJSON_GetStringValue(v);
        if (!be || !vd_backend_known(be))
            err(&x, "backend: expected %s", vd_backend_names_quoted(true));
        else
            snprintf(c->backend, sizeof(c->backend), "%s", be);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "devices")))
        parse_devices(&x, v, c);
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "address_window"))) {
        static const char *const wk[] = {"base", "size", NULL};
        bool ok1, ok2;
        known_keys(&x, v, "address_window", wk);
        c->va_base = parse_hex_or_size(cJSON_GetObjectItemCaseSensitive(v, "base"), &ok1);
        c->va_size = parse_hex_or_size(cJSON_GetObjectItemCaseSensitive(v, "size"), &ok2);
        if (!ok1 || !ok2 || c->va_base % (2u << 20) || !c->va_size ||
            c->va_base + c->va_size < c->va_base || c->va_base + c->va_size > (1ull << 47))
            err(&x, "address_window: base (\"0x...\", 2 MiB aligned) and size "
                "must describe a range below 128 TiB");
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "pool"))) {
        static const char *const pk[] = {"prefill_chunks", "standby",
                                         "idle_release_ms", NULL};
        uint64_t n;
        known_keys(&x, v, "pool", pk);
        if (get_uint(&x, v, "prefill_chunks", "pool", 65536, &n))
            c->pool_prefill = (uint32_t)n;
        if (get_size(&x, v, "standby", "pool", &n))
            c->pool_standby = n ? n : 1; /* "0": nothing made ahead */
        if (get_uint(&x, v, "idle_release_ms", "pool", 3600000, &n))
            c->pool_idle_release_ms = (uint32_t)n;
        if (cJSON_GetObjectItemCaseSensitive(v, "prefill_chunks") &&
            cJSON_GetObjectItemCaseSensitive(v, "standby"))
            err(&x, "pool: prefill_chunks and standby say the same thing; "
                "give one (standby, in bytes)");
    }
    /* The backends' own sections, each parsed by its backend. */
    struct vd_section_errs se = {.report = report_line, .ctx = &x};
    vd_backend_conf_parse(root, c->backend_conf, &se);
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "weights"))) {
        static const char *const wk[] = {"alloc", NULL};
        known_keys(&x, v, "weights", wk);
        uint64_t a;
        if (get_size(&x, v, "alloc", "weights", &a)) {
            if (a < (2u << 20) || a % (2u << 20))
                err(&x, "weights.alloc: a multiple of 2 MiB (the GPUs' "
                    "allocation granularity), at least 2 MiB");
            else
                c->weights_alloc = a;
        }
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "limits")))
        parse_limits(&x, v, c);
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "access")))
        parse_access(&x, v, c);
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "stages")))
        parse_stages(&x, v, c);
out:
    cJSON_Delete(root);
    *nerrs = x.n;
    if (x.n) {
        vd_config_free(c);
        return -EINVAL;
    }
    return 0;
}
