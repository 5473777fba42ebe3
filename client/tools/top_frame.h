/* SPDX-License-Identifier: Apache-2.0 */
/* One frame of vramctl top, as text: per device a bar of fixed, KV,
 * weights, loaned, recalling, quarantined and free memory; per stage its KV against its
 * window and its expert residency, and whether it sleeps (with the bytes
 * its owner keeps in host memory); per client the memory it holds. No
 * system calls: top.c draws it on a terminal, and prints it once where
 * standard output is not one. */
#ifndef VRAM_TOOLS_TOP_FRAME_H
#define VRAM_TOOLS_TOP_FRAME_H

#include <stdbool.h>

#include "textbuf.h"
#include "vram_msg.h"

struct tool_top_view {
    int cols;          /* the terminal's width */
    int rows;          /* its height; 0: as many lines as the frame has */
    bool ansi;         /* a live terminal: lines end in "erase to the end
                          of line" and CR LF, the last one in nothing */
    bool color;        /* SGR colours (with ansi only) */
    const char *socket;
    long interval_ms;
    const char *clock; /* "HH:MM:SS" of the status */
    const char *error; /* the last fetch failed: why (st may be older) */
};

/* Appends the frame of st (NULL when none was read yet) to t. */
void tool_top_frame(struct tool_text *t, const struct vram_rep_status *st,
                    const struct tool_top_view *v);

/* The glyphs of a device's bar, in its order: fixed, KV, weights (where
 * the device holds weight sets), loaned, recalling, quarantined, free (the
 * legend says the same). */
extern const char tool_top_glyphs[7];

#endif
