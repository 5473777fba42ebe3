/* SPDX-License-Identifier: Apache-2.0 */
/* What vramctl top's keys do to the view: h or ? help, s and S the
 * clients' sort column and order, d the delay (typed at a prompt), p
 * pause, the arrows, PgUp/PgDn, Home/End (and j, k) scrolling, q or ^C
 * quit. No terminal here: top.c reads the keys and acts on the result. */
#ifndef VRAM_TOOLS_TOP_CONTROL_H
#define VRAM_TOOLS_TOP_CONTROL_H

#include <stdbool.h>

#include "client/tools/top_keys.h"

/* The clients table's orders, in the order s goes through them. */
enum tool_top_sort {
    TOOL_TOP_SORT_HELD,        /* held and quarantined bytes, most first */
    TOOL_TOP_SORT_QUARANTINED, /* quarantined bytes, most first */
    TOOL_TOP_SORT_NAME,
    TOOL_TOP_SORT_PID,
    TOOL_TOP_SORT_CLIENT, /* the client id */
    TOOL_TOP_SORT_STATE,
    TOOL_TOP_SORT_N,
};

struct tool_top_control {
    long interval_ms;
    bool paused;
    bool help;        /* the help is shown instead of the figures */
    bool prompting;   /* the delay is being typed */
    char typed[12];   /* what was typed at the prompt */
    char note[96];    /* a line said once, until the next key */
    int scroll;       /* the first line of the figures shown */
    int hscroll;      /* the first column shown */
    int page;         /* how many lines of figures the window shows */
    enum tool_top_sort sort;
    bool reverse;
};

/* What a key asks of top.c, as bits. */
enum {
    TOOL_TOP_REDRAW = 1, /* draw again */
    TOOL_TOP_QUIT = 2,
    TOOL_TOP_FETCH = 4,  /* read vramd now (resumed, or a new delay) */
    TOOL_TOP_RETIME = 8, /* interval_ms changed: restart the timer */
};

/* The control of a view refreshed every interval_ms. */
void tool_top_control_init(struct tool_top_control *c, long interval_ms);
/* Applies key k; returns the bits of what top.c has to do. */
int tool_top_control_key(struct tool_top_control *c, const struct tool_key *k);
/* "held", "name", ...: the column a sort orders by, as the view says it. */
const char *tool_top_sort_name(enum tool_top_sort s);
/* The help's lines, NULL-terminated. */
extern const char *const tool_top_help[];

#endif
