/* SPDX-License-Identifier: Apache-2.0 */
/* Status fetches on libuv's thread pool. The work function and the loop
 * never touch the fetcher at once: the loop only reads it while no work is
 * queued (busy is false), and the work only runs while busy. */
#include "client/tools/fetcher.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/tools/connect_why.h"

struct tool_fetcher {
    uv_loop_t *loop;
    uv_work_t work;
    char *socket, *name;
    int timeout_ms;
    tool_fetch_fn done;
    void *ud;
    vram_client *client; /* kept between fetches; NULL after a failure */
    bool busy, dying;
    /* The last outcome. */
    int err;
    bool have_snap;
    struct tool_snapshot snap;
    char why[640];
    uint64_t took_ns;
};

int tool_fetcher_new(uv_loop_t *loop, const struct tool_fetcher_options *o,
                     struct tool_fetcher **out)
{
    if (!o->socket || !o->done)
        return -EINVAL;
    struct tool_fetcher *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->socket = strdup(o->socket);
    f->name = strdup(o->name ? o->name : "vramctl");
    if (!f->socket || !f->name) {
        free(f->socket);
        free(f->name);
        free(f);
        return -ENOMEM;
    }
    f->loop = loop;
    f->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000;
    f->done = o->done;
    f->ud = o->ud;
    f->client = o->adopt;
    f->err = -ENODATA;
    snprintf(f->why, sizeof(f->why), "no status fetched yet");
    f->work.data = f;
    *out = f;
    return 0;
}

/* On a pool thread. */
static void fetch_work(uv_work_t *w)
{
    struct tool_fetcher *f = w->data;
    uint64_t t0 = uv_hrtime();
    /* A kept connection may have broken since (vramd restarted): then one
     * more try, on a new connection. */
    for (int tries = f->client ? 2 : 1; tries > 0; tries--) {
        if (!f->client) {
            char err[512] = "";
            struct vram_client_options co = {
                .name = f->name, .ctl = 1, .timeout_ms = f->timeout_ms,
                .error = err, .error_len = sizeof(err), .reconnect_ms = -1};
            int e = vram_client_connect(f->socket, &co, &f->client);
            if (e < 0) {
                f->client = NULL;
                f->err = e;
                tool_connect_why(f->why, sizeof(f->why), e, f->socket, err);
                break;
            }
        }
        char why[512];
        int e = tool_snapshot_fetch(f->client, &f->snap, why, sizeof(why));
        if (e == 0) {
            f->err = 0;
            f->have_snap = true;
            break;
        }
        f->err = e;
        snprintf(f->why, sizeof(f->why), "vramd on %s: %s", f->socket, why);
        vram_client_close(f->client);
        f->client = NULL;
    }
    f->took_ns = uv_hrtime() - t0;
}

static void fetch_after(uv_work_t *w, int status)
{
    struct tool_fetcher *f = w->data;
    f->busy = false;
    if (status < 0 && f->err == 0) { /* cancelled before it ran */
        f->err = status;
        snprintf(f->why, sizeof(f->why), "the fetch was cancelled");
    }
    if (f->dying) {
        f->dying = false;
        tool_fetcher_free(f);
        return;
    }
    f->done(f, f->ud);
}

int tool_fetcher_start(struct tool_fetcher *f)
{
    if (f->dying)
        return -ESHUTDOWN;
    if (f->busy)
        return -EBUSY;
    tool_snapshot_free(&f->snap);
    f->have_snap = false;
    f->err = 0;
    f->why[0] = '\0';
    int e = uv_queue_work(f->loop, &f->work, fetch_work, fetch_after);
    if (e < 0) {
        f->err = e;
        snprintf(f->why, sizeof(f->why), "cannot start a fetch: %s", uv_strerror(e));
        return e;
    }
    f->busy = true;
    return 0;
}

bool tool_fetcher_busy(const struct tool_fetcher *f)
{
    return f->busy;
}

int tool_fetcher_result(const struct tool_fetcher *f,
                        const struct tool_snapshot **snap, const char **why)
{
    if (f->busy)
        return -EBUSY;
    if (f->err < 0) {
        if (why)
            *why = f->why;
        return f->err;
    }
    if (!f->have_snap)
        return -ENOENT;
    if (snap)
        *snap = &f->snap;
    return 0;
}

int tool_fetcher_take(struct tool_fetcher *f, struct tool_snapshot *out)
{
    if (f->busy || !f->have_snap)
        return -ENOENT;
    *out = f->snap;
    memset(&f->snap, 0, sizeof(f->snap));
    f->have_snap = false;
    return 0;
}

double tool_fetcher_seconds(const struct tool_fetcher *f)
{
    return (double)f->took_ns / 1e9;
}

void tool_fetcher_free(struct tool_fetcher *f)
{
    if (!f || f->dying)
        return;
    if (f->busy) {
        f->dying = true; /* fetch_after frees it */
        return;
    }
    vram_client_close(f->client);
    tool_snapshot_free(&f->snap);
    free(f->socket);
    free(f->name);
    free(f);
}
