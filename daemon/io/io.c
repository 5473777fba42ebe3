/* SPDX-License-Identifier: Apache-2.0 */
#include "io.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "listener.h"
#include "log.h"

static void on_accept(struct vp_watch *w, int status, int events);

/* Out of fds, a listener stays readable: watching it would spin. Accepting
 * pauses instead, and tries again after a while; the connections wait in
 * the backlog meanwhile. */
#define ACCEPT_RETRY_MS 250

static struct vlog_limit accept_limit = {.interval_ms = 10000};

static void on_accept_retry(uv_timer_t *t)
{
    struct vd_io *io = t->data;
    if (io->listening)
        vp_watch_set(&io->lwatch, VP_READABLE, on_accept);
}

static void on_accept(struct vp_watch *w, int status, int events)
{
    (void)events;
    struct vd_io *io = w->data;
    if (status < 0)
        return;
    /* One connection a turn: the watch is level-triggered, so the next
     * turn takes the next one (serving the others in between), and a lone
     * connection costs no accept that finds nothing. */
    for (int once = 1; once--;) {
        vp_handle h;
        int e = vp_accept(io->listener, &h);
        if (e == -EMFILE || e == -ENFILE || e == -ENOBUFS || e == -ENOMEM) {
            io->accept_pauses++;
            vlog_limited(&accept_limit, VLOG_ERR, "cannot accept connections: "
                         "%s; accepting again in %d ms (paused %llu times)",
                         strerror(-e), ACCEPT_RETRY_MS,
                         (unsigned long long)io->accept_pauses);
            vp_watch_set(&io->lwatch, 0, on_accept);
            uv_timer_start(&io->accept_retry, on_accept_retry, ACCEPT_RETRY_MS, 0);
            return;
        }
        if (e < 0)
            return;
        vd_session_accept(&io->sessions, h);
    }
}

int vd_io_prepare(struct vd_io *io, uv_loop_t *loop, struct vd_core *core,
                  const char *path)
{
    io->loop = loop;
    io->core = core;
    io->listener = VP_NONE;
    vd_sessions_init(&io->sessions, loop, core);
    if (strlen(path) >= sizeof(io->path)) {
        vlog(VLOG_ERR, "socket path %s is longer than %zu bytes", path,
             sizeof(io->path) - 1);
        return -ENAMETOOLONG;
    }
    snprintf(io->path, sizeof(io->path), "%s", path);
    char why[256] = "";
    char passed[sizeof(io->path)] = "";
    int r = vp_listen_activated(&io->listener, passed, sizeof(passed), why,
                                sizeof(why));
    if (r < 0) {
        vlog(VLOG_ERR, "%s", why);
        return r;
    }
    if (r > 0) {
        /* The service manager owns the path, its mode and its group. */
        io->activated = true;
        if (passed[0])
            snprintf(io->path, sizeof(io->path), "%s", passed);
        vlog(VLOG_INFO, "using the socket passed by the service manager (%s)",
             io->path);
        return 0;
    }
    r = vp_listen_check_dir(io->path, why, sizeof(why));
    if (r < 0) {
        vlog(VLOG_ERR, "%s", why);
        return r;
    }
    if (r > 0)
        vlog(VLOG_INFO, "created the socket's directory for %s", io->path);
    return 0;
}

int vd_io_listen(struct vd_io *io)
{
    if (!io->activated) {
        char why[256];
        struct vp_listen_cfg lc = {.path = io->path,
                                   .group = io->core->cfg.socket_group,
                                   .mode = io->core->cfg.socket_mode};
        int e = vp_listen(&lc, &io->listener, why, sizeof(why));
        if (e < 0) {
            vlog(VLOG_ERR, "%s", why);
            return e;
        }
    }
    int e = vp_watch_init(io->loop, &io->lwatch, io->listener);
    if (e < 0)
        return -EIO;
    io->lwatch.data = io;
    uv_timer_init(io->loop, &io->accept_retry);
    io->accept_retry.data = io;
    vp_watch_set(&io->lwatch, VP_READABLE, on_accept);
    io->listening = true;
    return 0;
}

/* The socket's group and mode are set when it is made, and a reload that
 * changes them is refused (core/startup.c); the access lists are the
 * core's to judge. */
void vd_io_reload(struct vd_io *io)
{
    (void)io;
}

void vd_io_stop(struct vd_io *io)
{
    if (io->listening) {
        io->listening = false;
        vp_watch_set(&io->lwatch, 0, on_accept);
        uv_timer_stop(&io->accept_retry);
        uv_close((uv_handle_t *)&io->accept_retry, NULL);
    }
    vd_sessions_stop(&io->sessions);
}

void vd_io_fini(struct vd_io *io)
{
    /* An activated socket's path is the service manager's. */
    vp_listen_close(&io->listener, io->path, !io->activated);
}
