/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *vw_jw_grow(struct vw_jw *w, size_t n)
{
    if (w->oom)
        return NULL;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n + 1)
            cap *= 2;
        char *p = realloc(w->p, cap);
        if (!p) {
            w->oom = true;
            return NULL;
        }
        w->p = p;
        w->cap = cap;
    }
    return w->p + w->len;
}

/* Text is kept NUL-terminated: every write ends with this. */
static inline void done(struct vw_jw *w, size_t n)
{
    w->len += n;
    w->p[w->len] = '\0';
}

void vw_jw_raw(struct vw_jw *w, const char *s, size_t n)
{
    char *p = vw_jw_room(w, n);
    if (!p)
        return;
    memcpy(p, s, n);
    done(w, n);
}

void vw_jw_key(struct vw_jw *w, const char *name, bool first)
{
    size_t n = strlen(name);
    char *p = vw_jw_room(w, n + 4);
    if (!p)
        return;
    char *q = p;
    if (!first)
        *q++ = ',';
    *q++ = '"';
    memcpy(q, name, n);
    q += n;
    *q++ = '"';
    *q++ = ':';
    done(w, (size_t)(q - p));
}

void vw_jw_lit(struct vw_jw *w, const char *s)
{
    vw_jw_raw(w, s, strlen(s));
}

void vw_jw_str(struct vw_jw *w, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    vw_jw_raw(w, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        vw_jw_raw(w, run, (size_t)(s - run));
        switch (c) {
        case '"': vw_jw_raw(w, "\\\"", 2); break;
        case '\\': vw_jw_raw(w, "\\\\", 2); break;
        case '\n': vw_jw_raw(w, "\\n", 2); break;
        case '\t': vw_jw_raw(w, "\\t", 2); break;
        case '\r': vw_jw_raw(w, "\\r", 2); break;
        default: {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            vw_jw_raw(w, esc, 6);
        }
        }
        run = s + 1;
    }
    vw_jw_raw(w, run, (size_t)(s - run));
    vw_jw_raw(w, "\"", 1);
}

void vw_jw_u64(struct vw_jw *w, uint64_t v)
{
    char tmp[24], *e = tmp + sizeof(tmp), *q = e;
    do {
        *--q = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    size_t n = (size_t)(e - q);
    char *p = vw_jw_room(w, n);
    if (!p)
        return;
    memcpy(p, q, n);
    done(w, n);
}

void vw_jw_i64(struct vw_jw *w, int64_t v)
{
    if (v < 0) {
        vw_jw_raw(w, "-", 1);
        vw_jw_u64(w, 0ull - (uint64_t)v);
    } else {
        vw_jw_u64(w, (uint64_t)v);
    }
}

static void jw_num(struct vw_jw *w, double d)
{
    if (isnan(d) || isinf(d)) {
        vw_jw_raw(w, "null", 4);
        return;
    }
    if (d == floor(d) && fabs(d) < 1e15) {
        vw_jw_i64(w, (int64_t)d);
        return;
    }
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%.17g", d);
    vw_jw_raw(w, tmp, (size_t)n);
}

void vw_jw_value(struct vw_jw *w, const cJSON *v)
{
    if (cJSON_IsRaw(v)) {
        vw_jw_lit(w, v->valuestring);
    } else if (cJSON_IsString(v)) {
        vw_jw_str(w, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        jw_num(w, v->valuedouble);
    } else if (cJSON_IsTrue(v)) {
        vw_jw_raw(w, "true", 4);
    } else if (cJSON_IsFalse(v)) {
        vw_jw_raw(w, "false", 5);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v);
        vw_jw_raw(w, obj ? "{" : "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child)
                vw_jw_raw(w, ",", 1);
            if (obj) {
                vw_jw_str(w, c->string ? c->string : "");
                vw_jw_raw(w, ":", 1);
            }
            vw_jw_value(w, c);
        }
        vw_jw_raw(w, obj ? "}" : "]", 1);
    } else {
        vw_jw_raw(w, "null", 4);
    }
}

char *vw_jw_take(struct vw_jw *w, size_t *len)
{
    if (w->oom || !w->p) {
        vw_jw_free(w);
        return NULL;
    }
    char *p = w->p;
    if (len)
        *len = w->len;
    *w = (struct vw_jw){0};
    return p;
}

void vw_jw_free(struct vw_jw *w)
{
    if (!w)
        return;
    free(w->p);
    *w = (struct vw_jw){0};
}

char *vw_json_print(const cJSON *v, size_t *len_out)
{
    struct vw_jw w = {0};
    vw_jw_value(&w, v);
    return vw_jw_take(&w, len_out);
}
