#include "message.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char vram_catalogue_json[];

static cJSON *catalogue;

const char *vram_catalogue_text(void)
{
    return vram_catalogue_json;
}

const cJSON *vram_catalogue(void)
{
    if (!catalogue)
        catalogue = cJSON_Parse(vram_catalogue_json);
    return catalogue;
}

static bool is_uint(const cJSON *v)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    return d >= 0 && d <= 9007199254740992.0 && floor(d) == d;
}

static bool type_ok(const cJSON *v, const char *type)
{
    if (strcmp(type, "integer") == 0)
        return is_uint(v);
    if (strcmp(type, "boolean") == 0)
        return cJSON_IsBool(v);
    if (strcmp(type, "string") == 0)
        return cJSON_IsString(v);
    if (strcmp(type, "array") == 0)
        return cJSON_IsArray(v);
    if (strcmp(type, "object") == 0)
        return cJSON_IsObject(v);
    return cJSON_IsNumber(v);
}

static int validate_fields(const cJSON *msg, const cJSON *spec,
                           const char *what, char *why, size_t whylen)
{
    const cJSON *fields = cJSON_GetObjectItemCaseSensitive(spec, "fields");
    const cJSON *f;
    cJSON_ArrayForEach(f, fields) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, f->string);
        const char *type =
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "type"));
        bool required =
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "required"));
        if (!v) {
            if (required) {
                snprintf(why, whylen, "%s: missing required field '%s'", what,
                         f->string);
                return -EINVAL;
            }
            continue;
        }
        if (type && !type_ok(v, type)) {
            snprintf(why, whylen, "%s: field '%s' must be %s %s", what,
                     f->string,
                     strcmp(type, "integer") == 0 ? "a non-negative" : "a",
                     type);
            return -EINVAL;
        }
    }
    return 0;
}

static int validate(const cJSON *msg, const char *section, const char *key,
                    char *why, size_t whylen)
{
    const cJSON *cat = vram_catalogue();
    if (!cJSON_IsObject(msg)) {
        snprintf(why, whylen, "message is not a JSON object");
        return -EINVAL;
    }
    const char *name = vram_json_str(msg, key);
    if (!name) {
        snprintf(why, whylen, "message has no string field '%s'", key);
        return -EINVAL;
    }
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cat, section), name);
    if (!spec) {
        snprintf(why, whylen, "unknown %s '%.64s'",
                 strcmp(section, "events") == 0 ? "event" : "message type",
                 name);
        return -ENOSYS;
    }
    return validate_fields(msg, spec, name, why, whylen);
}

int vram_msg_validate_request(const cJSON *msg, char *why, size_t whylen)
{
    return validate(msg, "requests", "type", why, whylen);
}

int vram_msg_validate_event(const cJSON *msg, char *why, size_t whylen)
{
    return validate(msg, "events", "event", why, whylen);
}

static const struct {
    int err;
    const char *name;
} names[] = {
    {EPROTONOSUPPORT, "EPROTONOSUPPORT"}, {EPROTO, "EPROTO"},
    {EINVAL, "EINVAL"}, {ENOSYS, "ENOSYS"}, {EPERM, "EPERM"},
    {EACCES, "EACCES"}, {ENOENT, "ENOENT"}, {EEXIST, "EEXIST"},
    {ENOSPC, "ENOSPC"}, {EAGAIN, "EAGAIN"}, {EXDEV, "EXDEV"},
    {E2BIG, "E2BIG"}, {EDQUOT, "EDQUOT"}, {EBUSY, "EBUSY"},
    {ENODEV, "ENODEV"}, {ENOMEM, "ENOMEM"}, {ETIMEDOUT, "ETIMEDOUT"},
    {EMSGSIZE, "EMSGSIZE"}, {EBADMSG, "EBADMSG"}, {EIO, "EIO"},
    {ENOTCONN, "ENOTCONN"}, {ECANCELED, "ECANCELED"}, {EADDRINUSE, "EADDRINUSE"},
};

const char *vram_errno_name(int err)
{
    if (err < 0)
        err = -err;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].err == err)
            return names[i].name;
    return "EIO";
}

int vram_errno_from_name(const char *name)
{
    if (name)
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strcmp(names[i].name, name) == 0)
                return -names[i].err;
    return -EPROTO;
}

int vram_msg_queue(struct vram_wire *w, const cJSON *msg, const int *fds,
                   int nfds)
{
    char *s = cJSON_PrintUnformatted(msg);
    if (!s)
        return -ENOMEM;
    int r = vram_wire_queue(w, s, strlen(s), fds, nfds);
    cJSON_free(s);
    return r;
}

int vram_json_u64(const cJSON *obj, const char *key, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return -ENOENT;
    if (!is_uint(v))
        return -EINVAL;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

int vram_json_bool(const cJSON *obj, const char *key, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return -ENOENT;
    if (!cJSON_IsBool(v))
        return -EINVAL;
    *out = cJSON_IsTrue(v);
    return 0;
}

const char *vram_json_str(const cJSON *obj, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

cJSON *vram_json_add_u64(cJSON *obj, const char *key, uint64_t v)
{
    return cJSON_AddNumberToObject(obj, key, (double)v);
}
