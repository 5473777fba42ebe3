/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl weights: every weight set of vramd (vram_weights_list), as a
 * table for people or in the catalogue's terms for JSON. */
#ifndef VRAM_TOOLS_WEIGHTS_VIEW_H
#define VRAM_TOOLS_WEIGHTS_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/include/vram.h"
#include "gen/vram_msg.h"

struct tool_weights {
    struct vram_weights_entry *v;
    size_t n;
};

/* Every set, into *out (overwritten on success only). A list that grew
 * between two reads is read again with room for it. On failure a negative
 * errno (vram_weights_list's) and why says what failed. */
int tool_weights_fetch(vram_client *c, struct tool_weights *out, char *why,
                       size_t why_len);
/* NULL-tolerant; the list is empty afterwards. */
void tool_weights_free(struct tool_weights *w);

/* The table, each set's last use as an age from now_ms (Unix time). Names
 * from vramd are escaped as every view escapes them (textbuf.h) and shown
 * whole: vramctl weights drop takes them. */
void tool_weights_table(const struct tool_weights *w, bool legend,
                        int64_t now_ms);

/* e as the catalogue's weights_entry (the wire's names and values, so that
 * --json has the keys vramd sends): its strings point into e and into key
 * (2 x VRAM_WEIGHTS_KEY_BYTES + 1 bytes: the key in hex). */
void tool_weights_wire(const struct vram_weights_entry *e,
                       char key[2 * VRAM_WEIGHTS_KEY_BYTES + 1],
                       struct vw_t_weights_entry *out);

/* "writing", "sealed", "cached" ("?" for none of them). */
const char *tool_weights_state_name(enum vram_weights_state s);

/* How long ago then_ms was, at now_ms (both Unix time): "45s ago",
 * "12m ago", "3h ago", "9d ago"; "-" when then_ms is 0. */
const char *tool_age(char *buf, size_t len, int64_t now_ms, uint64_t then_ms);

#endif
