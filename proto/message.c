/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/message.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/errnames.h"
#include "proto/json.h"
#include "proto/msg.h"
#include "gen/vram_msg.h"

/* Checks msg as the catalogue's message of that name: decoded into a
 * scratch struct (requests carry no handles) and thrown away. */
static int validate(const cJSON *msg, bool event, char *why, size_t whylen)
{
    if (!cJSON_IsObject(msg)) {
        snprintf(why, whylen, "message is not a JSON object");
        return -EINVAL;
    }
    const char *key = event ? "event" : "type";
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, key));
    if (!name) {
        snprintf(why, whylen, "message has no string field '%s'", key);
        return -EINVAL;
    }
    int id = event ? vw_evt_lookup(name) : vw_req_lookup(name);
    if (id < 0) {
        snprintf(why, whylen, "unknown %s '%.64s'", event ? "event" : "message type",
                 name);
        return -ENOSYS;
    }
    const struct vw_mdesc *m = event ? &vw_events[id] : &vw_requests[id];
    union {
        union vw_req_any r;
        union vw_evt_any e;
    } scratch;
    struct vw_arena arena = {0};
    struct vw_dec d = {.arena = &arena};
    int r = vw_decode(m->req, msg, &scratch, &d);
    vw_arena_free(&arena);
    if (r < 0)
        snprintf(why, whylen, "%s", d.why);
    return r;
}

static bool is_uint(const cJSON *v)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    return d >= 0 && d <= 9007199254740992.0 && floor(d) == d;
}

int vw_msg_validate_request(const cJSON *msg, char *why, size_t whylen)
{
    return validate(msg, false, why, whylen);
}

int vw_msg_validate_event(const cJSON *msg, char *why, size_t whylen)
{
    return validate(msg, true, why, whylen);
}

int vw_msg_queue(struct vw_wire *w, const cJSON *msg, vp_handle *hs,
                   int n)
{
    size_t len = 0;
    char *s = vw_json_print(msg, &len);
    if (!s) {
        for (int i = 0; i < n; i++)
            vp_close(&hs[i]);
        return -ENOMEM;
    }
    int r = vw_wire_queue(w, s, len, hs, n);
    free(s);
    return r;
}

int vw_json_u64(const cJSON *obj, const char *key, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return -ENOENT;
    if (!is_uint(v))
        return -EINVAL;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

int vw_json_bool(const cJSON *obj, const char *key, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return -ENOENT;
    if (!cJSON_IsBool(v))
        return -EINVAL;
    *out = cJSON_IsTrue(v);
    return 0;
}

bool vw_json_uint(const cJSON *v, uint64_t max, uint64_t *out)
{
    if (!is_uint(v) || v->valuedouble > (double)max)
        return false;
    *out = (uint64_t)v->valuedouble;
    return true;
}

const char *vw_json_str(const cJSON *obj, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

cJSON *vw_json_add_u64(cJSON *obj, const char *key, uint64_t v)
{
    return cJSON_AddNumberToObject(obj, key, (double)v);
}
