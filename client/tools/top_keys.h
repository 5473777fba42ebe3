/* SPDX-License-Identifier: Apache-2.0 */
/* Keys from a terminal in raw mode, as bytes: characters, and the escape
 * sequences of the arrows, PgUp/PgDn and Home/End (xterm's CSI and SS3
 * forms, which libuv's Windows console also sends in raw mode). */
#ifndef VRAM_TOOLS_TOP_KEYS_H
#define VRAM_TOOLS_TOP_KEYS_H

#include <stdbool.h>
#include <stddef.h>

enum tool_key_kind {
    TOOL_KEY_CHAR, /* ch: a byte, ^C (3) among them */
    TOOL_KEY_UP,
    TOOL_KEY_DOWN,
    TOOL_KEY_LEFT,
    TOOL_KEY_RIGHT,
    TOOL_KEY_PGUP,
    TOOL_KEY_PGDN,
    TOOL_KEY_HOME,
    TOOL_KEY_END,
    TOOL_KEY_ESC,       /* Escape alone */
    TOOL_KEY_ENTER,     /* CR or LF */
    TOOL_KEY_BACKSPACE, /* DEL or ^H */
    TOOL_KEY_OTHER,     /* a sequence of another key (F1, Alt+x, ...) */
};

struct tool_key {
    enum tool_key_kind kind;
    char ch;
};

/* Decodes the key at the start of buf[0..n) (n > 0) into *out: returns the
 * bytes it took, or 0 when buf holds only the beginning of an escape
 * sequence. Called again with final (no byte came for a while), that
 * beginning is a key: a lone ESC is Escape, so a user's Esc is not held
 * back waiting for a sequence that never comes. */
size_t tool_key_decode(const char *buf, size_t n, bool final, struct tool_key *out);

#endif
