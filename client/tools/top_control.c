/* SPDX-License-Identifier: Apache-2.0 */
/* The keys' effects. Scrolling only moves the offsets: the frame clamps
 * them to what it has (top_frame.c returns the one it used), so holding
 * Down past the end does not pile up lines to come back through. */
#include "client/tools/top_control.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Columns a Left or Right moves the view by. */
#define HSTEP 8
#define MAX_DELAY_MS 3600000L

const char *const tool_top_help[] = {
    "Keys",
    "  h or ?         this help; any key closes it",
    "  s              sort the clients by the next column (held, quarantined,",
    "                 name, pid, client, state)",
    "  S              reverse the order",
    "  d              set the delay between refreshes, in milliseconds",
    "  p              pause the refreshes; p again resumes",
    "  Up Down, j k   scroll a line",
    "  PgUp PgDn      scroll a page",
    "  Home End       the top, the bottom",
    "  Left Right     scroll sideways",
    "  q or ^C        quit",
    NULL,
};

const char *tool_top_sort_name(enum tool_top_sort s)
{
    static const char *const names[TOOL_TOP_SORT_N] = {
        "held", "quarantined", "name", "pid", "client", "state"};
    return s < TOOL_TOP_SORT_N ? names[s] : "?";
}

void tool_top_control_init(struct tool_top_control *c, long interval_ms)
{
    memset(c, 0, sizeof(*c));
    c->interval_ms = interval_ms;
    c->page = 1;
}

/* A key at the delay's prompt. */
static int prompt_key(struct tool_top_control *c, const struct tool_key *k)
{
    size_t n = strlen(c->typed);
    if (k->kind == TOOL_KEY_ESC) {
        c->prompting = false;
    } else if (k->kind == TOOL_KEY_BACKSPACE) {
        if (n)
            c->typed[n - 1] = '\0';
    } else if (k->kind == TOOL_KEY_ENTER) {
        char *end = NULL;
        long v = strtol(c->typed, &end, 10);
        c->prompting = false;
        if (!c->typed[0])
            return TOOL_TOP_REDRAW; /* nothing typed: unchanged */
        if (*end || v < 1 || v > MAX_DELAY_MS) {
            snprintf(c->note, sizeof(c->note), "delay '%s': milliseconds, 1 to %ld; "
                     "unchanged", c->typed, MAX_DELAY_MS);
            return TOOL_TOP_REDRAW;
        }
        c->interval_ms = v;
        snprintf(c->note, sizeof(c->note), "refreshing every %ld ms", v);
        return TOOL_TOP_REDRAW | TOOL_TOP_RETIME;
    } else if (k->kind == TOOL_KEY_CHAR && k->ch >= '0' && k->ch <= '9') {
        if (n + 1 < sizeof(c->typed)) {
            c->typed[n] = k->ch;
            c->typed[n + 1] = '\0';
        }
    } else if (k->kind == TOOL_KEY_CHAR && k->ch == 3) {
        return TOOL_TOP_QUIT; /* ^C quits from anywhere */
    }
    return TOOL_TOP_REDRAW;
}

static void scroll_by(struct tool_top_control *c, long lines)
{
    long s = (long)c->scroll + lines;
    c->scroll = s < 0 ? 0 : s > INT_MAX / 2 ? INT_MAX / 2 : (int)s;
}

int tool_top_control_key(struct tool_top_control *c, const struct tool_key *k)
{
    if (c->prompting)
        return prompt_key(c, k);
    bool had_note = c->note[0] != '\0';
    c->note[0] = '\0';
    bool was_help = c->help;
    char ch = k->kind == TOOL_KEY_CHAR ? k->ch : 0;
    if (ch == 'q' || ch == 'Q' || ch == 3)
        return TOOL_TOP_QUIT;
    if (was_help) { /* any other key closes the help, and does nothing else */
        c->help = false;
        return TOOL_TOP_REDRAW;
    }
    int page = c->page > 1 ? c->page - 1 : 1; /* a line kept for context */
    switch (k->kind) {
    case TOOL_KEY_UP: scroll_by(c, -1); break;
    case TOOL_KEY_DOWN: scroll_by(c, 1); break;
    case TOOL_KEY_PGUP: scroll_by(c, -page); break;
    case TOOL_KEY_PGDN: scroll_by(c, page); break;
    case TOOL_KEY_HOME: c->scroll = 0; break;
    case TOOL_KEY_END: c->scroll = INT_MAX / 2; break; /* clamped by the frame */
    case TOOL_KEY_LEFT: c->hscroll = c->hscroll > HSTEP ? c->hscroll - HSTEP : 0; break;
    case TOOL_KEY_RIGHT: c->hscroll = c->hscroll < 4096 ? c->hscroll + HSTEP : 4096; break;
    case TOOL_KEY_CHAR:
        switch (ch) {
        case 'h': case '?': c->help = true; break;
        case 'j': scroll_by(c, 1); break;
        case 'k': scroll_by(c, -1); break;
        case 's':
            c->sort = (enum tool_top_sort)((c->sort + 1) % TOOL_TOP_SORT_N);
            c->reverse = false;
            break;
        case 'S': c->reverse = !c->reverse; break;
        case 'd':
            c->prompting = true;
            c->typed[0] = '\0';
            break;
        case 'p':
            c->paused = !c->paused;
            /* Resumed: read at once rather than at the next tick. */
            return TOOL_TOP_REDRAW | (c->paused ? 0 : TOOL_TOP_FETCH);
        default: return had_note ? TOOL_TOP_REDRAW : 0; /* means nothing */
        }
        break;
    default: return had_note ? TOOL_TOP_REDRAW : 0;
    }
    return TOOL_TOP_REDRAW;
}
