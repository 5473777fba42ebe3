/* SPDX-License-Identifier: Apache-2.0 */
/* Writing JSON text, fast: integers are written digit by digit (no printf
 * per field), strings escaped. The messages' encoder (msg.c) writes through
 * this; so do the daemon's log escaping and vramctl's output of status. */
#ifndef VW_PROTO_JSON_H
#define VW_PROTO_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

struct vw_jw {
    char *p;
    size_t len, cap;
    bool oom; /* a write failed: the text is incomplete */
};

/* Room for n more bytes and the NUL after them: the text's end, or NULL
 * (oom set) when out of memory. The caller writes there and adds to len. */
char *vw_jw_grow(struct vw_jw *w, size_t n);
static inline char *vw_jw_room(struct vw_jw *w, size_t n)
{
    if (w->len + n + 1 <= w->cap)
        return w->p + w->len;
    return vw_jw_grow(w, n);
}
void vw_jw_raw(struct vw_jw *w, const char *s, size_t n);
void vw_jw_lit(struct vw_jw *w, const char *s); /* NUL-terminated raw */
/* An object key, "name": (a name needs no escapes: the catalogue's field
 * names), with a comma before it unless first. */
void vw_jw_key(struct vw_jw *w, const char *name, bool first);
/* A JSON string: quotes, escapes for quotes, backslashes and control
 * characters. */
void vw_jw_str(struct vw_jw *w, const char *s);
void vw_jw_u64(struct vw_jw *w, uint64_t v);
void vw_jw_i64(struct vw_jw *w, int64_t v);
/* Any cJSON value (numbers written exactly when whole and below 10^15). */
void vw_jw_value(struct vw_jw *w, const cJSON *v);
/* The text (NUL-terminated, caller frees) and its length; NULL when a write
 * failed. The writer is empty afterwards. */
char *vw_jw_take(struct vw_jw *w, size_t *len);
void vw_jw_free(struct vw_jw *w);

/* Compact JSON text of v (free() it); NULL when out of memory. */
char *vw_json_print(const cJSON *v, size_t *len_out);

#endif
