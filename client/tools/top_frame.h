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

#include "client/tools/textbuf.h"
#include "client/tools/top_control.h"
#include "gen/vram_msg.h"

/* What a frame showed, for the keys that move it (top_control.h). */
struct tool_top_shown {
    int scroll;  /* the first line of the figures shown (clamped) */
    int page;    /* how many lines of figures fitted */
    int lines;   /* how many there are */
    int hscroll; /* the first column of the figures shown (clamped) */
    int widest;  /* the widest line of figures, in columns */
};

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
    /* "HH:MM:SS": since when vramd has not answered (NULL while it does):
     * a banner over the last frame says so. */
    const char *down_since;
    /* The keys' state: scrolling, sort, pause, help, the delay's prompt
     * (NULL: none, as for the one frame printed where there is no
     * terminal). */
    const struct tool_top_control *ctl;
    struct tool_top_shown *shown; /* filled when not NULL */
};

/* Appends the frame of st (NULL when none was read yet) to t. */
void tool_top_frame(struct tool_text *t, const struct vw_rep_status *st,
                    const struct tool_top_view *v);

/* The glyphs of a device's bar, in its order: fixed, KV, weights (where
 * the device holds weight sets), loaned, recalling, quarantined, free (the
 * legend says the same). */
extern const char tool_top_glyphs[7];

#endif
