/* SPDX-License-Identifier: Apache-2.0 */
/* Text built up piece by piece (a frame of vramctl top, an HTTP response,
 * the metrics exposition): a growable buffer with printf. */
#ifndef VRAM_TOOLS_TEXTBUF_H
#define VRAM_TOOLS_TEXTBUF_H

#include <stdbool.h>
#include <stddef.h>

struct tool_text {
    char *p; /* NUL-terminated when not NULL */
    size_t len, cap;
    bool oom; /* a write failed: the text is incomplete, and stays so */
};

void tool_text_raw(struct tool_text *t, const char *s, size_t n);
void tool_text_str(struct tool_text *t, const char *s);
void tool_text_printf(struct tool_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Text from vramd (a name, a state, a message) appended escaped: control
 * characters and bytes that are not UTF-8 as \xNN (proto/text.h), the one
 * rule of every view. */
void tool_text_peer(struct tool_text *t, const char *s);
/* The same for a table's cell: s escaped into buf (len bytes), at most
 * width bytes of it (0: what buf holds), cut between whole characters;
 * none when s is NULL or empty. */
const char *tool_peer_cell(const char *s, const char *none, size_t width,
                           char *buf, size_t len);
/* The text (caller frees) and its length, or NULL when a write failed; t is
 * empty afterwards either way. */
char *tool_text_take(struct tool_text *t, size_t *len);
void tool_text_free(struct tool_text *t);

#endif
