/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/msg.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto/errnames.h"

#define NO_HAS UINT32_MAX

const struct vw_fdesc *vw_field(const struct vw_tdesc *t, const char *name)
{
    for (uint32_t i = 0; t && i < t->nfields; i++)
        if (strcmp(t->fields[i].name, name) == 0)
            return &t->fields[i];
    return NULL;
}

static size_t kind_size(int kind, const struct vw_tdesc *type)
{
    switch (kind) {
    case VW_K_U32: return sizeof(uint32_t);
    case VW_K_U64: return sizeof(uint64_t);
    case VW_K_I64: return sizeof(int64_t);
    case VW_K_BOOL: return sizeof(bool);
    case VW_K_STRING: return sizeof(const char *);
    case VW_K_HANDLE: return sizeof(vp_handle);
    case VW_K_OBJECT: return type->size;
    default: return 0;
    }
}

static const char *kind_what(int kind)
{
    switch (kind) {
    case VW_K_U32: return "a u32 (a whole number from 0 to 4294967295)";
    case VW_K_U64: return "a u64 (a whole number from 0 to 2^53)";
    case VW_K_I64: return "an i64 (a whole number from -2^53 to 2^53)";
    case VW_K_BOOL: return "true or false";
    case VW_K_STRING: return "a string";
    case VW_K_HANDLE: return "a handle index";
    case VW_K_OBJECT: return "an object";
    default: return "an array";
    }
}

/* ---- decoding ----------------------------------------------------------- */

struct dstate {
    struct vw_dec *d;
    int taken[VW_MAX_FDS_PER_FRAME]; /* frame handle indexes taken */
    vp_handle took[VW_MAX_FDS_PER_FRAME];
    int ntaken;
};

/* Where a value is, as a chain up to the message: written out only when
 * something is wrong ("kv_reserve.map[3].slot"), so that decoding a good
 * message formats nothing. */
struct path {
    const struct path *up;
    const char *name; /* a field; NULL: an index */
    size_t index;
};

static size_t path_write(const struct path *p, char *buf, size_t len)
{
    size_t n = p->up ? path_write(p->up, buf, len) : 0;
    if (n >= len)
        return n;
    int w;
    if (p->name)
        w = snprintf(buf + n, len - n, "%s%s", p->up ? "." : "", p->name);
    else
        w = snprintf(buf + n, len - n, "[%zu]", p->index);
    return w < 0 ? n : n + (size_t)w;
}

static int bad(struct dstate *s, const struct path *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "where: what" into why. */
static void vsay(char *why, size_t len, const struct path *path,
                 const char *fmt, va_list ap)
{
    size_t n = path_write(path, why, len);
    if (n + 2 < len) {
        memcpy(why + n, ": ", 3);
        vsnprintf(why + n + 2, len - n - 2, fmt, ap);
    }
}

static int bad(struct dstate *s, const struct path *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(s->d->why, sizeof(s->d->why), path, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static int out_of_memory(struct dstate *s, const struct path *path)
{
    bad(s, path, "out of memory");
    return -ENOMEM;
}

/* A whole number in [lo, hi], checked before it is converted. */
static bool whole(const cJSON *v, double lo, double hi, double *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || floor(d) != d)
        return false;
    *out = d;
    return true;
}

static int dec_value(struct dstate *s, int kind, const struct vw_tdesc *type,
                     uint32_t max, const cJSON *v, void *dst,
                     const struct path *path);

static int dec_object(struct dstate *s, const struct vw_tdesc *t,
                      const cJSON *obj, void *out, const struct path *path)
{
    if (t->tuple ? !cJSON_IsArray(obj) : !cJSON_IsObject(obj))
        return bad(s, path, "must be %s", t->tuple ? "an array" : "an object");
    memset(out, 0, t->size);
    const cJSON *item = t->tuple ? obj->child : NULL;
    for (uint32_t i = 0; i < t->nfields; i++) {
        const struct vw_fdesc *f = &t->fields[i];
        const cJSON *v;
        if (t->tuple) {
            v = item;
            item = item ? item->next : NULL;
        } else {
            v = cJSON_GetObjectItemCaseSensitive(obj, f->name);
        }
        struct path at = {path, t->tuple ? NULL : f->name, i};
        const struct path *sub = &at;
        /* A field the connection's version does not have is unknown to
         * it: ignored, as any unknown field. */
        if (!vw_since_in(f->since, s->d->version))
            v = NULL;
        if (!v || cJSON_IsNull(v)) {
            /* Only the message's own fields may wait for a later frame:
             * the items of its arrays and its objects are whole in each. */
            if (f->required && (!s->d->partial || path->up))
                return bad(s, sub, "missing (a required field)");
            continue;
        }
        int r;
        if (f->kind == VW_K_ARRAY) {
            if (!cJSON_IsArray(v))
                return bad(s, sub, "must be an array");
            size_t n = (size_t)cJSON_GetArraySize(v);
            if (f->max && n > f->max)
                return bad(s, sub, "%zu items, at most %u", n, f->max);
            size_t isz = kind_size(f->item, f->type);
            void *arr = n ? vw_arena_alloc(s->d->arena, n * isz) : NULL;
            if (n && !arr)
                return out_of_memory(s, sub);
            size_t k = 0;
            for (const cJSON *e = v->child; e; e = e->next, k++) {
                struct path ip = {sub, NULL, k};
                r = dec_value(s, f->item, f->type, 0, e, (char *)arr + k * isz, &ip);
                if (r < 0)
                    return r;
            }
            memcpy((char *)out + f->off, &arr, sizeof(arr));
            memcpy((char *)out + f->off + sizeof(void *), &n, sizeof(n));
        } else {
            r = dec_value(s, f->kind, f->type, f->max, v, (char *)out + f->off, sub);
            if (r < 0)
                return r;
        }
        if (f->has_off != NO_HAS)
            *((bool *)((char *)out + f->has_off)) = true;
    }
    if (t->tuple && item)
        return bad(s, path, "has more than its %u items", t->nfields);
    return 0;
}

static int dec_value(struct dstate *s, int kind, const struct vw_tdesc *type,
                     uint32_t max, const cJSON *v, void *dst,
                     const struct path *path)
{
    double d;
    switch (kind) {
    case VW_K_U32:
        if (!whole(v, 0, 4294967295.0, &d))
            return bad(s, path, "must be %s", kind_what(kind));
        *(uint32_t *)dst = (uint32_t)d;
        return 0;
    case VW_K_U64:
        if (!whole(v, 0, 9007199254740992.0, &d))
            return bad(s, path, "must be %s", kind_what(kind));
        *(uint64_t *)dst = (uint64_t)d;
        return 0;
    case VW_K_I64:
        if (!whole(v, -9007199254740992.0, 9007199254740992.0, &d))
            return bad(s, path, "must be %s", kind_what(kind));
        *(int64_t *)dst = (int64_t)d;
        return 0;
    case VW_K_BOOL:
        if (!cJSON_IsBool(v))
            return bad(s, path, "must be %s", kind_what(kind));
        *(bool *)dst = cJSON_IsTrue(v);
        return 0;
    case VW_K_STRING: {
        if (!cJSON_IsString(v))
            return bad(s, path, "must be %s", kind_what(kind));
        size_t n = strlen(v->valuestring);
        if (max && n > max)
            return bad(s, path, "a string of %zu bytes, at most %u", n, max);
        char *c = vw_arena_strdup(s->d->arena, v->valuestring);
        if (!c)
            return out_of_memory(s, path);
        *(const char **)dst = c;
        return 0;
    }
    case VW_K_HANDLE: {
        struct vw_codec_frame *f = s->d->frame;
        if (!whole(v, 0, VW_MAX_FDS_PER_FRAME - 1, &d))
            return bad(s, path, "must be %s", kind_what(kind));
        int i = (int)d;
        if (!f || i >= f->nhandles || !vp_ok(f->handles[i]))
            return bad(s, path, "names fd %d; the frame carried %d", i,
                       f ? f->nhandles : 0);
        *(vp_handle *)dst = f->handles[i];
        s->taken[s->ntaken] = i;
        s->took[s->ntaken++] = f->handles[i];
        f->handles[i] = VP_NONE;
        return 0;
    }
    case VW_K_OBJECT:
        return dec_object(s, type, v, dst, path);
    default:
        return bad(s, path, "arrays of arrays are not in the catalogue");
    }
}

int vw_decode(const struct vw_tdesc *t, const cJSON *obj, void *out,
                struct vw_dec *d)
{
    struct dstate s = {.d = d};
    d->why[0] = '\0';
    struct path top = {NULL, t->name, 0};
    int r = dec_object(&s, t, obj, out, &top);
    if (r < 0) {
        /* The frame keeps its handles: nothing was taken. */
        for (int i = 0; i < s.ntaken; i++)
            d->frame->handles[s.taken[i]] = s.took[i];
        memset(out, 0, t->size);
    }
    return r;
}

static void close_value(int kind, const struct vw_tdesc *type, void *p)
{
    if (kind == VW_K_HANDLE)
        vp_close((vp_handle *)p);
    else if (kind == VW_K_OBJECT)
        vw_close_handles(type, p);
}

void vw_close_handles(const struct vw_tdesc *t, void *obj)
{
    for (uint32_t i = 0; i < t->nfields; i++) {
        const struct vw_fdesc *f = &t->fields[i];
        char *p = (char *)obj + f->off;
        if (f->kind == VW_K_ARRAY) {
            if (f->item != VW_K_HANDLE && f->item != VW_K_OBJECT)
                continue;
            void *v;
            size_t n;
            memcpy(&v, p, sizeof(v));
            memcpy(&n, p + sizeof(void *), sizeof(n));
            size_t isz = kind_size(f->item, f->type);
            for (size_t k = 0; k < n; k++)
                close_value(f->item, f->type, (char *)v + k * isz);
        } else if (f->has_off == NO_HAS || *(bool *)((char *)obj + f->has_off)) {
            close_value(f->kind, f->type, p);
        }
    }
}

/* ---- merging ------------------------------------------------------------ */

static void arr_get(const void *obj, const struct vw_fdesc *f, void **v,
                    size_t *n)
{
    const char *p = (const char *)obj + f->off;
    memcpy(v, p, sizeof(*v));
    memcpy(n, p + sizeof(void *), sizeof(*n));
}

static void arr_set(void *obj, const struct vw_fdesc *f, void *v, size_t n)
{
    char *p = (char *)obj + f->off;
    memcpy(p, &v, sizeof(v));
    memcpy(p + sizeof(void *), &n, sizeof(n));
}

/* The id of an item that can be continued, or -1. */
static int64_t item_id(const struct vw_tdesc *t, const void *item)
{
    if (!t || !t->nfields || t->tuple || t->fields[0].kind != VW_K_U32 ||
        strcmp(t->fields[0].name, "id") != 0)
        return -1;
    uint32_t id;
    memcpy(&id, (const char *)item + t->fields[0].off, sizeof(id));
    return id;
}

/* The room of an array the merge made: each array of the value has one,
 * and an array of objects has, in last, one per field of its last item
 * (the item the next frame may continue). cap 0: the array is not the
 * merge's own (empty, or a part's, shared): it is copied before it grows. */
struct vw_mnode {
    size_t cap;
    struct vw_mnode *last;
};

/* The last item is a new one, whose arrays are its part's. */
static void room_forget(struct vw_mnode *n, const struct vw_tdesc *t)
{
    for (uint32_t i = 0; n && i < t->nfields; i++) {
        n[i].cap = 0;
        if (n[i].last)
            room_forget(n[i].last, t->fields[i].type);
    }
}

static int merge_bad(struct vw_merge *m, const struct path *at,
                     const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int merge_bad(struct vw_merge *m, const struct path *at,
                     const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(m->why, sizeof(m->why), at, fmt, ap);
    va_end(ap);
    return -E2BIG;
}

/* part's items of array f appended to acc's: in place while there is room,
 * else into a block twice as large, so that every item is copied a bounded
 * number of times over the whole reply, however many frames it has. */
static int concat(struct vw_merge *m, const struct vw_fdesc *f, void *acc,
                  const void *part, struct vw_mnode *room,
                  const struct path *at)
{
    void *av, *pv;
    size_t an, pn;
    arr_get(acc, f, &av, &an);
    arr_get(part, f, &pv, &pn);
    if (!pn)
        return 0;
    size_t isz = kind_size(f->item, f->type);
    size_t skip = 0;
    if (an && f->item == VW_K_OBJECT) {
        void *last = (char *)av + (an - 1) * isz;
        int64_t id = item_id(f->type, last);
        if (id >= 0 && id == item_id(f->type, pv)) {
            /* The first item continues the last: its arrays join. */
            const struct vw_tdesc *it = f->type;
            if (!room->last &&
                !(room->last = vw_arena_alloc(m->a, it->nfields * sizeof(*room->last))))
                return -ENOMEM;
            struct path ip = {at, NULL, an - 1};
            for (uint32_t i = 0; i < it->nfields; i++)
                if (it->fields[i].kind == VW_K_ARRAY) {
                    struct path fp = {&ip, it->fields[i].name, 0};
                    int e = concat(m, &it->fields[i], last, pv, &room->last[i], &fp);
                    if (e < 0)
                        return e;
                }
            skip = 1;
        }
    }
    if (pn == skip)
        return 0;
    size_t n = an + pn - skip;
    if (f->max && n > f->max)
        return merge_bad(m, at, "%zu items over the reply's frames, at most %u",
                         n, f->max);
    if (n > room->cap) {
        size_t cap = room->cap * 2 > n ? room->cap * 2 : n;
        if (cap > SIZE_MAX / isz)
            return -ENOMEM;
        void *nv = vw_arena_alloc(m->a, cap * isz);
        if (!nv)
            return -ENOMEM;
        if (an)
            memcpy(nv, av, an * isz);
        av = nv;
        room->cap = cap;
    }
    memcpy((char *)av + an * isz, (const char *)pv + skip * isz,
           (pn - skip) * isz);
    arr_set(acc, f, av, n);
    if (room->last)
        room_forget(room->last, f->type);
    return 0;
}

void vw_merge_begin(struct vw_merge *m, const struct vw_tdesc *t,
                      void *acc, const char *skip, struct vw_arena *a)
{
    memset(acc, 0, t->size);
    *m = (struct vw_merge){.t = t, .acc = acc, .skip = skip, .a = a};
}

int vw_merge_add(struct vw_merge *m, const void *part)
{
    const struct vw_tdesc *t = m->t;
    if (!m->room && !(m->room = vw_arena_alloc(m->a, t->nfields * sizeof(*m->room)))) {
        snprintf(m->why, sizeof(m->why), "out of memory");
        return -ENOMEM;
    }
    struct path top = {NULL, t->name, 0};
    for (uint32_t i = 0; i < t->nfields; i++) {
        const struct vw_fdesc *f = &t->fields[i];
        char *dst = (char *)m->acc + f->off;
        const char *src = (const char *)part + f->off;
        if (f->kind == VW_K_ARRAY && !(m->skip && strcmp(m->skip, f->name) == 0)) {
            struct path at = {&top, f->name, 0};
            int e = concat(m, f, m->acc, part, &m->room[i], &at);
            if (e == -ENOMEM)
                snprintf(m->why, sizeof(m->why), "out of memory");
            if (e < 0)
                return e;
            continue;
        }
        if (f->kind == VW_K_ARRAY) {
            memcpy(dst, src, sizeof(void *) + sizeof(size_t));
            continue;
        }
        bool present = f->has_off == NO_HAS
                           ? (f->kind != VW_K_STRING ||
                              *(const char *const *)src != NULL)
                           : *(const bool *)((const char *)part + f->has_off);
        if (!present)
            continue;
        memcpy(dst, src, kind_size(f->kind, f->type));
        if (f->has_off != NO_HAS)
            *(bool *)((char *)m->acc + f->has_off) = true;
    }
    return 0;
}

/* ---- encoding ----------------------------------------------------------- */

static int enc_value(struct vw_enc *e, int kind, const struct vw_tdesc *type,
                     const void *p);

static bool present(const struct vw_fdesc *f, const void *in)
{
    const char *p = (const char *)in + f->off;
    if (f->kind == VW_K_ARRAY) {
        size_t n;
        memcpy(&n, p + sizeof(void *), sizeof(n));
        return f->required || n > 0;
    }
    if (f->kind == VW_K_STRING)
        return *(const char *const *)p != NULL;
    if (f->has_off != NO_HAS)
        return *(const bool *)((const char *)in + f->has_off);
    return true;
}

static int enc_field(struct vw_enc *e, const struct vw_fdesc *f,
                     const void *in)
{
    const char *p = (const char *)in + f->off;
    if (f->kind != VW_K_ARRAY)
        return enc_value(e, f->kind, f->type, p);
    void *v;
    size_t n;
    memcpy(&v, p, sizeof(v));
    memcpy(&n, p + sizeof(void *), sizeof(n));
    size_t isz = kind_size(f->item, f->type);
    vw_jw_raw(e->w, "[", 1);
    for (size_t k = 0; k < n; k++) {
        if (k)
            vw_jw_raw(e->w, ",", 1);
        int r = enc_value(e, f->item, f->type, (const char *)v + k * isz);
        if (r < 0)
            return r;
    }
    vw_jw_raw(e->w, "]", 1);
    return 0;
}

int vw_encode_fields(struct vw_enc *e, const struct vw_tdesc *t,
                       const void *in, const char *only, bool *first)
{
    for (uint32_t i = 0; i < t->nfields; i++) {
        const struct vw_fdesc *f = &t->fields[i];
        if (only && strcmp(only, f->name) != 0)
            continue;
        if (!t->tuple && (!present(f, in) || !vw_since_in(f->since, e->version)))
            continue;
        if (t->tuple) {
            if (!*first)
                vw_jw_raw(e->w, ",", 1);
        } else {
            vw_jw_key(e->w, f->name, *first);
        }
        *first = false;
        int r = enc_field(e, f, in);
        if (r < 0)
            return r;
    }
    return e->w->oom ? -ENOMEM : 0;
}

int vw_encode_object(struct vw_enc *e, const struct vw_tdesc *t,
                       const void *in)
{
    bool first = true;
    vw_jw_raw(e->w, t->tuple ? "[" : "{", 1);
    int r = vw_encode_fields(e, t, in, NULL, &first);
    vw_jw_raw(e->w, t->tuple ? "]" : "}", 1);
    return r < 0 ? r : e->w->oom ? -ENOMEM : 0;
}

static int enc_value(struct vw_enc *e, int kind, const struct vw_tdesc *type,
                     const void *p)
{
    switch (kind) {
    case VW_K_U32: vw_jw_u64(e->w, *(const uint32_t *)p); return 0;
    case VW_K_U64: vw_jw_u64(e->w, *(const uint64_t *)p); return 0;
    case VW_K_I64: vw_jw_i64(e->w, *(const int64_t *)p); return 0;
    case VW_K_BOOL:
        vw_jw_lit(e->w, *(const bool *)p ? "true" : "false");
        return 0;
    case VW_K_STRING: {
        const char *s = *(const char *const *)p;
        vw_jw_str(e->w, s ? s : "");
        return 0;
    }
    case VW_K_HANDLE:
        if (!e->hs || e->nh >= e->max)
            return -E2BIG;
        e->hs[e->nh] = *(const vp_handle *)p;
        vw_jw_u64(e->w, (uint64_t)e->nh++);
        return 0;
    case VW_K_OBJECT:
        return vw_encode_object(e, type, p);
    default:
        return -EINVAL;
    }
}

/* ---- envelopes ---------------------------------------------------------- */

int vw_envelope_read(const cJSON *o, struct vw_envelope *env, char *why,
                       size_t whylen)
{
    memset(env, 0, sizeof(*env));
    if (!cJSON_IsObject(o)) {
        snprintf(why, whylen, "message is not a JSON object");
        return -EINVAL;
    }
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "type"));
    if (!type) {
        snprintf(why, whylen, "message has no string field 'type'");
        return -EINVAL;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    double d;
    if (id && whole(id, 0, 9007199254740992.0, &d)) {
        env->has_id = true;
        env->id = (uint64_t)d;
    }
    if (strcmp(type, "event") == 0) {
        env->kind = VW_MSG_EVENT;
        env->type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "event"));
        if (!env->type) {
            snprintf(why, whylen, "event has no string field 'event'");
            return -EINVAL;
        }
        return 0;
    }
    if (strcmp(type, "reply") == 0) {
        env->kind = VW_MSG_REPLY;
        env->type = type;
        const cJSON *ok = cJSON_GetObjectItemCaseSensitive(o, "ok");
        if (!env->has_id || !cJSON_IsBool(ok)) {
            snprintf(why, whylen, "reply without an integer 'id' and a boolean 'ok'");
            return -EINVAL;
        }
        env->ok = cJSON_IsTrue(ok);
        env->more = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "more"));
        env->error = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "error"));
        env->message = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "message"));
        return 0;
    }
    env->kind = VW_MSG_REQUEST;
    env->type = type;
    if (!env->has_id) {
        snprintf(why, whylen, "request has no integer field 'id'");
        return -EINVAL;
    }
    return 0;
}

const char *vw_error_name_at(int err, unsigned version)
{
    const char *name = vw_errno_name(err);
    /* A chain of fallbacks, each older: bounded by the table's length. */
    for (int hops = 0; hops < 64; hops++) {
        const struct vw_errdesc *d = vw_errdescs;
        while (d->name && strcmp(d->name, name) != 0)
            d++;
        if (!d->name || vw_since_in(d->since, version) || !d->fallback)
            return name;
        name = d->fallback;
    }
    return name;
}

int vw_encode_request(struct vw_enc *e, const struct vw_mdesc *m,
                        uint64_t id, const void *fields)
{
    vw_jw_lit(e->w, "{\"type\":");
    vw_jw_str(e->w, m->name);
    vw_jw_lit(e->w, ",\"id\":");
    vw_jw_u64(e->w, id);
    bool first = false;
    int r = fields ? vw_encode_fields(e, m->req, fields, NULL, &first) : 0;
    vw_jw_raw(e->w, "}", 1);
    return r < 0 ? r : e->w->oom ? -ENOMEM : 0;
}

int vw_encode_reply(struct vw_enc *e, const struct vw_mdesc *m,
                      uint64_t id, int err, const char *message, bool more,
                      const void *fields, const char *only)
{
    vw_jw_lit(e->w, "{\"type\":\"reply\",\"id\":");
    vw_jw_u64(e->w, id);
    vw_jw_lit(e->w, err ? ",\"ok\":false" : ",\"ok\":true");
    if (more)
        vw_jw_lit(e->w, ",\"more\":true");
    if (err) {
        vw_jw_lit(e->w, ",\"error\":");
        vw_jw_str(e->w, vw_error_name_at(err, e->version));
        vw_jw_lit(e->w, ",\"message\":");
        vw_jw_str(e->w, message ? message : "");
    }
    bool first = false;
    int r = fields && m && m->rep
                ? vw_encode_fields(e, m->rep, fields, only, &first)
                : 0;
    vw_jw_raw(e->w, "}", 1);
    return r < 0 ? r : e->w->oom ? -ENOMEM : 0;
}

int vw_encode_event(struct vw_enc *e, const struct vw_mdesc *m,
                      const void *fields)
{
    vw_jw_lit(e->w, "{\"type\":\"event\",\"event\":");
    vw_jw_str(e->w, m->name);
    bool first = false;
    int r = vw_encode_fields(e, m->req, fields, NULL, &first);
    vw_jw_raw(e->w, "}", 1);
    return r < 0 ? r : e->w->oom ? -ENOMEM : 0;
}
