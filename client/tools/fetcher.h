/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's status, fetched off the libuv loop (on its thread pool), so
 * a loop that serves a terminal or HTTP peers never waits for vramd. The
 * connection is kept between fetches and made again when it broke (vramd
 * restarted): one fetch tries a kept connection, then a new one. At most
 * one fetch runs at a time. */
#ifndef VRAM_TOOLS_FETCHER_H
#define VRAM_TOOLS_FETCHER_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "client/tools/snapshot.h"
#include "client/include/vram.h"

struct tool_fetcher;

/* Called on the loop's thread when a fetch ended, well or not. */
typedef void (*tool_fetch_fn)(struct tool_fetcher *f, void *ud);

struct tool_fetcher_options {
    const char *socket;  /* the daemon's socket (not NULL) */
    const char *name;    /* the client's name vramd shows */
    int timeout_ms;      /* per request */
    vram_client *adopt;  /* a connection to use first (taken over), or NULL */
    tool_fetch_fn done;
    void *ud;
};

int tool_fetcher_new(uv_loop_t *loop, const struct tool_fetcher_options *o,
                     struct tool_fetcher **out);
/* Starts a fetch. -EBUSY while one runs (its result will do), -ESHUTDOWN
 * once freed. */
int tool_fetcher_start(struct tool_fetcher *f);
bool tool_fetcher_busy(const struct tool_fetcher *f);
/* The last fetch's outcome, valid until the next start: 0 and its snapshot
 * (*snap; the fetcher keeps it unless taken), or a negative errno and why
 * in words (a connect's errno: -ENOENT and -ECONNREFUSED when no vramd
 * listens, -EACCES or -EPERM when refused). */
int tool_fetcher_result(const struct tool_fetcher *f,
                        const struct tool_snapshot **snap, const char **why);
/* Takes the last snapshot out of the fetcher (0), -ENOENT when there is
 * none. */
int tool_fetcher_take(struct tool_fetcher *f, struct tool_snapshot *out);
/* How long the last fetch took, in seconds. */
double tool_fetcher_seconds(const struct tool_fetcher *f);
/* NULL-tolerant. A fetch still running cannot be stopped: the fetcher goes
 * once it ends (without calling done), so the loop must run until then. */
void tool_fetcher_free(struct tool_fetcher *f);

#endif
