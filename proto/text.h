/* SPDX-License-Identifier: Apache-2.0 */
/* Text from a peer (a client's name, a daemon's message, a request's
 * type), made safe to show: one rule for vramd's log and for every view of
 * vramctl (tables, top, metrics). Control characters (C0, DEL, and C1:
 * U+0080 to U+009F, which some terminals obey as escapes) and bytes that
 * are not well-formed UTF-8 are written as the text \xNN, one escape per
 * byte; everything else is kept as it is. So a name cannot move a cursor,
 * clear a screen, end a log line or break a label, and what it held can
 * still be read. JSON output keeps the real string instead, escaped by
 * JSON's rules (vw_json_printable). */
#ifndef VW_PROTO_TEXT_H
#define VW_PROTO_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* The length of the well-formed UTF-8 sequence at p (n bytes left): 1 for
 * ASCII; 0 when there is none (a stray byte, an overlong form, a
 * surrogate, past U+10FFFF, or cut short). */
size_t vw_utf8_len(const unsigned char *p, size_t n);

/* in (NULL: "") escaped into out, of len bytes (len > 0), NUL-terminated:
 * what fits, cut between whole characters and escapes only. Returns the
 * bytes written, the NUL aside. */
size_t vw_text_escape(char *out, size_t len, const char *in);

/* Room vw_text_escape needs for any string of n bytes, its NUL included. */
#define VW_TEXT_ESCAPED(n) (4 * (n) + 1)

/* Whether JSON text of len bytes holds the escape \u0000 in a string: a C
 * string ends at that NUL, so what follows it would be lost unseen. */
bool vw_json_has_nul(const char *text, size_t len);

/* A copy of JSON text (valid, but for what this mends) whose strings can be
 * printed: a raw DEL or C1 character becomes its \u escape (the same
 * string, as JSON reads it), a byte that is not UTF-8 becomes \ufffd (JSON
 * is UTF-8: no escape stands for such a byte). The rest is copied as it
 * is. NULL when out of memory; free() it. */
char *vw_json_printable(const char *text, size_t len, size_t *out_len);

#endif
