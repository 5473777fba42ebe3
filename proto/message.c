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
    {EALREADY, "EALREADY"}, {ESTALE, "ESTALE"},
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

/* A JSON writer for our messages. cJSON's printer formats every number
 * with printf and reads it back to choose a precision, which made up 40% of
 * the daemon's work on a small request; ours writes integers directly. */
struct jbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void jput(struct jbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void jput_str(struct jbuf *b, const char *s)
{
    jput(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        jput(b, run, (size_t)(s - run));
        char esc[8];
        switch (c) {
        case '"': jput(b, "\\\"", 2); break;
        case '\\': jput(b, "\\\\", 2); break;
        case '\n': jput(b, "\\n", 2); break;
        case '\t': jput(b, "\\t", 2); break;
        case '\r': jput(b, "\\r", 2); break;
        default:
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            jput(b, esc, 6);
        }
        run = s + 1;
    }
    jput(b, run, (size_t)(s - run));
    jput(b, "\"", 1);
}

static void jput_num(struct jbuf *b, double d)
{
    char tmp[32];
    if (isnan(d) || isinf(d)) {
        jput(b, "null", 4);
        return;
    }
    if (d == floor(d) && fabs(d) < 1e15) {
        long long v = (long long)d;
        unsigned long long u = v < 0 ? 0ull - (unsigned long long)v
                                     : (unsigned long long)v;
        char *e = tmp + sizeof(tmp), *q = e;
        do {
            *--q = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (v < 0)
            *--q = '-';
        jput(b, q, (size_t)(e - q));
        return;
    }
    int n = snprintf(tmp, sizeof(tmp), "%.17g", d);
    jput(b, tmp, (size_t)n);
}

static void jput_value(struct jbuf *b, const cJSON *v)
{
    if (cJSON_IsRaw(v)) {
        jput(b, v->valuestring, strlen(v->valuestring));
    } else if (cJSON_IsString(v)) {
        jput_str(b, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        jput_num(b, v->valuedouble);
    } else if (cJSON_IsTrue(v)) {
        jput(b, "true", 4);
    } else if (cJSON_IsFalse(v)) {
        jput(b, "false", 5);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v);
        jput(b, obj ? "{" : "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child)
                jput(b, ",", 1);
            if (obj) {
                jput_str(b, c->string ? c->string : "");
                jput(b, ":", 1);
            }
            jput_value(b, c);
        }
        jput(b, obj ? "}" : "]", 1);
    } else {
        jput(b, "null", 4);
    }
}

char *vram_json_print(const cJSON *v, size_t *len_out)
{
    struct jbuf b = {0};
    jput_value(&b, v);
    if (b.oom || !b.p) {
        free(b.p);
        return NULL;
    }
    if (len_out)
        *len_out = b.len;
    return b.p;
}

int vram_msg_queue(struct vram_wire *w, const cJSON *msg, vp_handle *hs,
                   int n)
{
    size_t len = 0;
    char *s = vram_json_print(msg, &len);
    if (!s) {
        for (int i = 0; i < n; i++)
            vp_close(&hs[i]);
        return -ENOMEM;
    }
    int r = vram_wire_queue(w, s, len, hs, n);
    free(s);
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
