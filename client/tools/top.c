/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl top on libuv: the terminal through uv_tty_t (raw mode for keys,
 * the window's size), a timer for the refresh, signals for ^C from
 * elsewhere, SIGTERM, SIGHUP and resizes, and status fetches off the loop
 * (fetcher.c), so q is answered at once even while vramd is slow.
 * Frames are drawn over the previous one (cursor home, each line erased
 * to its end, the rest of the screen erased), which does not flicker the
 * way clearing the screen first does. */
#include "top.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "exits.h"
#include "fetcher.h"
#include "platform.h"
#include "snapshot.h"
#include "textbuf.h"
#include "top_frame.h"

/* Alternate screen and hidden cursor on; and off, colours reset. */
#define SCREEN_ENTER "\033[?1049h\033[?25l\033[H\033[2J"
#define SCREEN_LEAVE "\033[0m\033[?25h\033[?1049l"

struct top {
    uv_loop_t loop;
    uv_tty_t out, in;
    bool have_in, raw, entered, quitting;
    uv_timer_t tick;
    uv_signal_t sig[4];
    struct tool_fetcher *fetcher;
    bool have_snap;
    struct tool_snapshot snap;
    char error[700];
    char clock[16];
    const char *socket;
    long interval_ms;
    bool color;
};

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
    struct tool_top_view v = {.cols = cols, .rows = rows, .ansi = true,
                              .color = t->color, .socket = t->socket,
                              .interval_ms = t->interval_ms, .clock = t->clock,
                              .error = t->error[0] ? t->error : NULL};
    struct tool_text x = {0};
    tool_text_str(&x, "\033[H");
    tool_top_frame(&x, t->have_snap ? &t->snap.st : NULL, &v);
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
        char when[32];
        vp_wall_time(when, sizeof(when));
        snprintf(t->clock, sizeof(t->clock), "%.8s", when); /* HH:MM:SS */
    } else {
        snprintf(t->error, sizeof(t->error), "%s; trying again every %ld ms",
                 why ? why : "status failed", t->interval_ms);
    }
    draw(t);
}

static void on_tick(uv_timer_t *h)
{
    struct top *t = h->data;
    if (!tool_fetcher_busy(t->fetcher))
        tool_fetcher_start(t->fetcher);
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
    for (ssize_t i = 0; i < n; i++) {
        char c = buf->base[i];
        /* In raw mode ^C is a byte, not a signal. */
        if (c == 'q' || c == 'Q' || c == 3) {
            quit(t);
            return;
        }
    }
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
    t->interval_ms = interval_ms;
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
