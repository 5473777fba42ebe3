/* SPDX-License-Identifier: Apache-2.0 */
/* A growable text buffer. A failed allocation marks the text incomplete
 * (oom) instead of failing each call, so builders check once at the end. */
#include "client/tools/textbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/text.h"

static bool reserve(struct tool_text *t, size_t more)
{
    if (t->oom)
        return false;
    if (more >= (size_t)-1 / 2 - t->len) {
        t->oom = true;
        return false;
    }
    if (t->len + more + 1 <= t->cap)
        return true;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + more + 1)
        cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p) {
        t->oom = true;
        return false;
    }
    t->p = p;
    t->cap = cap;
    return true;
}

void tool_text_raw(struct tool_text *t, const char *s, size_t n)
{
    if (!reserve(t, n))
        return;
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

void tool_text_str(struct tool_text *t, const char *s)
{
    tool_text_raw(t, s, strlen(s));
}

void tool_text_printf(struct tool_text *t, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->oom = true;
        return;
    }
    if ((size_t)n < sizeof(small)) {
        tool_text_raw(t, small, (size_t)n);
        return;
    }
    /* Longer than the stack buffer: format again, in place. */
    if (!reserve(t, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(t->p + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

void tool_text_peer(struct tool_text *t, const char *s)
{
    size_t n = strlen(s ? s : "");
    if (n > ((size_t)-1 / 2 - 1) / 4) {
        t->oom = true;
        return;
    }
    if (!reserve(t, VW_TEXT_ESCAPED(n)))
        return;
    t->len += vw_text_escape(t->p + t->len, VW_TEXT_ESCAPED(n), s);
}

const char *tool_peer_cell(const char *s, const char *none, size_t width,
                           char *buf, size_t len)
{
    if (!s || !*s)
        return none;
    vw_text_escape(buf, width && width < len ? width + 1 : len, s);
    return buf;
}

char *tool_text_take(struct tool_text *t, size_t *len)
{
    char *p = t->oom ? NULL : t->p;
    if (p && len)
        *len = t->len;
    if (!p) {
        free(t->p);
        p = t->oom ? NULL : calloc(1, 1); /* an empty text is "" */
        if (p && len)
            *len = 0;
    }
    *t = (struct tool_text){0};
    return p;
}

void tool_text_free(struct tool_text *t)
{
    if (!t)
        return;
    free(t->p);
    *t = (struct tool_text){0};
}
