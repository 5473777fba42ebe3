/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl top on libuv: the terminal through uv_tty_t (raw mode for keys,
 * the window's size), a timer for the refresh, signals for ^C from
 * elsewhere, SIGTERM, SIGHUP and resizes, and status fetches off the loop
 * (fetcher.c), so a key is answered at once even while vramd is slow.
 * Frames are drawn over the previous one (cursor home, each line erased
 * to its end, the rest of the screen erased), which does not flicker the
 * way clearing the screen first does.
 *
 * Escape codes, not ncurses (6.4 on Debian 12) or PDCurses (the Windows
 * build): the view needs a handful of sequences (home, erase, SGR, the
 * alternate screen) that every terminal since the VT100 and the Windows
 * 10 console obey, and libuv already gives it raw mode, the window's size
 * and the keys on both systems (on Windows it turns console key events
 * into the same sequences, top_keys.c reads them). curses would be a
 * second owner of the terminal and its input beside libuv's loop (its
 * getch blocks, or wants its own polling, and it installs signal
 * handlers), a new dependency for the package and a third-party build in
 * the Windows dependencies, for redrawing that the frame does in place
 * already; the frame stays plain text (top_frame.c) that the tests read. */
#include "client/tools/top.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "client/tools/exits.h"
#include "client/tools/fetcher.h"
#include "platform/platform.h"
#include "client/tools/snapshot.h"
#include "client/tools/textbuf.h"
#include "client/tools/top_control.h"
#include "client/tools/top_frame.h"
#include "client/tools/top_keys.h"

/* Alternate screen and hidden cursor on; and off, colours reset. */
#define SCREEN_ENTER "\033[?1049h\033[?25l\033[H\033[2J"
#define SCREEN_LEAVE "\033[0m\033[?25h\033[?1049l"

struct top {
    uv_loop_t loop;
    uv_tty_t out, in;
    bool have_in, raw, entered, quitting;
    uv_timer_t tick;
    uv_timer_t esc; /* a lone ESC: Escape, once no sequence follows it */
    uv_signal_t sig[4];
    struct tool_fetcher *fetcher;
    bool have_snap;
    struct tool_snapshot snap;
    char error[700];
    char clock[16];
    char down_since[16]; /* HH:MM:SS of the first failed fetch since a good one */
    const char *socket;
    bool color;
    struct tool_top_control ctl;
    char keys[32]; /* bytes of a key sequence not yet whole */
    size_t nkeys;
};

/* Milliseconds a key sequence may take to arrive whole (as curses's
 * ESCDELAY, shorter: the bytes of one key come in one write). */
#define ESC_WAIT_MS 50

static void out_str(const char *s, size_t n)
{
    fwrite(s, 1, n, stdout);
    fflush(stdout);
}

static void draw(struct top *t)
{
    if (t->quitting)
        return;
    int cols = 80, rows = 24;
    if (uv_tty_get_winsize(&t->out, &cols, &rows) != 0 || cols < 20 || rows < 3) {
        cols = cols < 20 ? 20 : cols;
        rows = rows < 3 ? 3 : rows;
    }
    struct tool_top_shown shown = {0};
    struct tool_top_view v = {.cols = cols, .rows = rows, .ansi = true,
                              .color = t->color, .socket = t->socket,
                              .interval_ms = t->ctl.interval_ms, .clock = t->clock,
                              .error = t->error[0] ? t->error : NULL,
                              .down_since = t->down_since[0] ? t->down_since : NULL,
                              .ctl = &t->ctl, .shown = &shown};
    struct tool_text x = {0};
    tool_text_str(&x, "\033[H");
    tool_top_frame(&x, t->have_snap ? &t->snap.st : NULL, &v);
    /* Scrolled no further than there is to show. */
    t->ctl.scroll = shown.scroll;
    t->ctl.hscroll = shown.hscroll;
    t->ctl.page = shown.page;
    tool_text_str(&x, "\033[J");
    size_t len = 0;
    char *s = tool_text_take(&x, &len);
    if (s)
        out_str(s, len);
    free(s);
}

static void restore(struct top *t)
{
    if (t->entered)
        out_str(SCREEN_LEAVE, strlen(SCREEN_LEAVE));
    t->entered = false;
    if (t->raw)
        uv_tty_reset_mode();
    t->raw = false;
}

static void quit(struct top *t)
{
    if (t->quitting)
        return;
    t->quitting = true;
    restore(t);
    uv_close((uv_handle_t *)&t->tick, NULL);
    uv_close((uv_handle_t *)&t->esc, NULL);
    for (int i = 0; i < 4; i++)
        uv_close((uv_handle_t *)&t->sig[i], NULL);
    if (t->have_in)
        uv_close((uv_handle_t *)&t->in, NULL);
    uv_close((uv_handle_t *)&t->out, NULL);
    if (tool_fetcher_busy(t->fetcher)) {
        /* A fetch still waits for vramd (up to its timeout): the terminal
         * is back already, and the process need not wait for it. */
        uv_stop(&t->loop);
        return;
    }
    tool_fetcher_free(t->fetcher);
    t->fetcher = NULL;
}

static void on_fetched(struct tool_fetcher *f, void *ud)
{
    struct top *t = ud;
    const char *why = NULL;
    int e = tool_fetcher_result(f, NULL, &why);
    if (e == 0) {
        tool_snapshot_free(&t->snap);
        t->have_snap = tool_fetcher_take(f, &t->snap) == 0;
        t->error[0] = '\0';
        t->down_since[0] = '\0';
        char when[32];
        vp_wall_time(when, sizeof(when));
        snprintf(t->clock, sizeof(t->clock), "%.8s", when); /* HH:MM:SS */
    } else {
        snprintf(t->error, sizeof(t->error), "%s; trying again every %ld ms",
                 why ? why : "status failed", t->ctl.interval_ms);
        if (!t->down_since[0]) {
            char when[32];
            vp_wall_time(when, sizeof(when));
            snprintf(t->down_since, sizeof(t->down_since), "%.8s", when);
        }
    }
    draw(t);
}

static void on_tick(uv_timer_t *h)
{
    struct top *t = h->data;
    if (!t->ctl.paused && !tool_fetcher_busy(t->fetcher))
        tool_fetcher_start(t->fetcher);
}

/* Does what key k asks; false once it quit. */
static bool on_key(struct top *t, const struct tool_key *k)
{
    int does = tool_top_control_key(&t->ctl, k);
    if (does & TOOL_TOP_QUIT) {
        quit(t);
        return false;
    }
    if (does & TOOL_TOP_RETIME)
        uv_timer_start(&t->tick, on_tick, (uint64_t)t->ctl.interval_ms,
                       (uint64_t)t->ctl.interval_ms);
    if ((does & TOOL_TOP_FETCH) && !tool_fetcher_busy(t->fetcher))
        tool_fetcher_start(t->fetcher);
    if (does & TOOL_TOP_REDRAW)
        draw(t);
    return true;
}

static void on_esc(uv_timer_t *h);

/* The keys in t->keys; with final, a sequence cut short is a key too. */
static void take_keys(struct top *t, bool final)
{
    size_t at = 0;
    while (at < t->nkeys) {
        struct tool_key k;
        size_t n = tool_key_decode(t->keys + at, t->nkeys - at, final, &k);
        if (n == 0) { /* the start of a sequence: wait a moment for the rest */
            uv_timer_start(&t->esc, on_esc, ESC_WAIT_MS, 0);
            break;
        }
        at += n;
        if (!on_key(t, &k))
            return;
    }
    memmove(t->keys, t->keys + at, t->nkeys - at);
    t->nkeys -= at;
}

static void on_esc(uv_timer_t *h)
{
    take_keys(h->data, true);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    static char keys[64];
    (void)h;
    (void)hint;
    *buf = uv_buf_init(keys, sizeof(keys));
}

static void on_keys(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct top *t = s->data;
    if (n < 0) { /* the terminal went away */
        quit(t);
        return;
    }
    /* In raw mode ^C is a byte, not a signal: top_control.c quits on it. */
    uv_timer_stop(&t->esc);
    for (ssize_t i = 0; i < n; i++) {
        if (t->nkeys == sizeof(t->keys))
            take_keys(t, true); /* no sequence is this long */
        if (t->quitting)
            return;
        t->keys[t->nkeys++] = buf->base[i];
    }
    take_keys(t, false);
}

static void on_signal(uv_signal_t *h, int sig)
{
    struct top *t = h->data;
    if (sig == SIGWINCH)
        draw(t);
    else
        quit(t);
}

/* Not a terminal: one frame, plain. */
static int one_frame(vram_client *c, const char *socket, long interval_ms)
{
    struct tool_snapshot s = {0};
    char why[512];
    int e = tool_snapshot_fetch(c, &s, why, sizeof(why));
    vram_client_close(c);
    if (e < 0) {
        fprintf(stderr, "vramctl: %s\n", why);
        return tool_exit_request(e);
    }
    const char *env = getenv("COLUMNS");
    long cols = env ? strtol(env, NULL, 10) : 0;
    char when[32];
    vp_wall_time(when, sizeof(when));
    when[8] = '\0';
    struct tool_top_view v = {.cols = cols >= 20 && cols <= 1000 ? (int)cols : 80,
                              .socket = socket, .interval_ms = interval_ms,
                              .clock = when};
    struct tool_text x = {0};
    tool_top_frame(&x, &s.st, &v);
    size_t len = 0;
    char *text = tool_text_take(&x, &len);
    tool_snapshot_free(&s);
    if (!text) {
        fprintf(stderr, "vramctl: out of memory\n");
        return 1;
    }
    fwrite(text, 1, len, stdout);
    free(text);
    return 0;
}

int tool_top_run(vram_client *c, const char *socket, long interval_ms)
{
    if (!vp_stdout_is_tty())
        return one_frame(c, socket, interval_ms);
    struct top *t = calloc(1, sizeof(*t));
    if (!t) {
        vram_client_close(c);
        fprintf(stderr, "vramctl: out of memory\n");
        return 1;
    }
    t->socket = socket;
    tool_top_control_init(&t->ctl, interval_ms);
    const char *nc = getenv("NO_COLOR"), *term = getenv("TERM");
    t->color = !(nc && nc[0]) && !(term && strcmp(term, "dumb") == 0);
    int rc = 1, e = uv_loop_init(&t->loop);
    if (e < 0) {
        vram_client_close(c);
        fprintf(stderr, "vramctl top: %s\n", uv_strerror(e));
        free(t);
        return 1;
    }
    struct tool_fetcher_options fo = {.socket = socket, .name = "vramctl-top",
                                      .timeout_ms = 10000, .adopt = c,
                                      .done = on_fetched, .ud = t};
    if ((e = tool_fetcher_new(&t->loop, &fo, &t->fetcher)) < 0) {
        vram_client_close(c);
        fprintf(stderr, "vramctl top: %s\n", vram_strerror(e));
        goto out_loop;
    }
    if ((e = uv_tty_init(&t->loop, &t->out, 1, 0)) < 0) {
        fprintf(stderr, "vramctl top: the terminal: %s\n", uv_strerror(e));
        tool_fetcher_free(t->fetcher);
        goto out_loop;
    }
    /* Keys, where standard input is the terminal too (else ^C arrives as
     * a signal, the terminal left cooked). */
    if (uv_guess_handle(0) == UV_TTY && uv_tty_init(&t->loop, &t->in, 0, 1) == 0) {
        t->have_in = true;
        t->in.data = t;
        if (uv_tty_set_mode(&t->in, UV_TTY_MODE_RAW) == 0)
            t->raw = true;
        uv_read_start((uv_stream_t *)&t->in, on_alloc, on_keys);
    }
    uv_timer_init(&t->loop, &t->tick);
    t->tick.data = t;
    uv_timer_init(&t->loop, &t->esc);
    t->esc.data = t;
    static const int sigs[4] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH};
    for (int i = 0; i < 4; i++) {
        uv_signal_init(&t->loop, &t->sig[i]);
        t->sig[i].data = t;
        uv_signal_start(&t->sig[i], on_signal, sigs[i]);
    }
    out_str(SCREEN_ENTER, strlen(SCREEN_ENTER));
    t->entered = true;
    tool_fetcher_start(t->fetcher); /* the first frame comes with it */
    uv_timer_start(&t->tick, on_tick, (uint64_t)interval_ms, (uint64_t)interval_ms);
    uv_run(&t->loop, UV_RUN_DEFAULT);
    restore(t); /* already, unless the loop ended some other way */
    rc = 0;
    if (t->fetcher) {
        /* quit() left a fetch running: the process ends without it. */
        tool_snapshot_free(&t->snap);
        return rc;
    }
out_loop:
    uv_run(&t->loop, UV_RUN_DEFAULT); /* the close callbacks */
    uv_loop_close(&t->loop);
    tool_snapshot_free(&t->snap);
    free(t);
    return rc;
}
