/* The daemon's endpoint on Windows: its own named pipe (platform/
 * pipe_listener.h), accepted on by a thread that hands connected instances
 * to the loop (platform/stream.h), each made a session (session_pipe.c).
 * io.c is the POSIX side (a socket watched on the loop). */
#include "io.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "pipe_listener.h"
#include "stream.h"

static struct vlog_limit accept_limit = {.interval_ms = 10000};

static void on_conn(void *data, struct vp_pipe_conn conn)
{
    struct vd_io *io = data;
    if (!io->listening) {
        vp_close(&conn.h);
        return;
    }
    vd_session_accept_pipe(&io->sessions, conn);
}

/* The acceptor pauses by itself when out of handles or memory; anything
 * else is logged (rate-limited) and it goes on. */
static void on_accept_error(void *data, int err)
{
    struct vd_io *io = data;
    io->accept_pauses++;
    vlog_limited(&accept_limit, VLOG_ERR, "cannot accept a connection on %s: %s",
                 io->path, strerror(-err));
}

int vd_io_prepare(struct vd_io *io, uv_loop_t *loop, struct vd_core *core,
                  const char *path)
{
    io->loop = loop;
    io->core = core;
    io->pipe = NULL;
    io->acceptor = NULL;
    vd_sessions_init(&io->sessions, loop, core);
    if (strlen(path) >= sizeof(io->path)) {
        vlog(VLOG_ERR, "pipe name %s is longer than %u bytes", path,
             (unsigned)sizeof(io->path) - 1);
        return -ENAMETOOLONG;
    }
    snprintf(io->path, sizeof(io->path), "%s", path);
    return 0;
}

int vd_io_listen(struct vd_io *io)
{
    char why[256] = "";
    /* No allow list: SYSTEM, Administrators and vramd's own user only, as
     * daemon/io/peer_map.c admits (access lists of SIDs: docs/windows.md). */
    struct vp_pipe_listen_cfg lc = {.name = io->path};
    int e = vp_pipe_listen(&lc, &io->pipe, why, sizeof(why));
    if (e < 0) {
        if (e == -EADDRINUSE)
            vlog(VLOG_ERR, "%s is served already (another vramd, or someone "
                 "else's pipe of that name): %s", io->path, why);
        else
            vlog(VLOG_ERR, "%s", why);
        return e;
    }
    io->listening = true;
    e = vp_acceptor_start(io->loop, io->pipe, on_conn, on_accept_error, io,
                          &io->acceptor);
    if (e < 0) {
        io->listening = false;
        vlog(VLOG_ERR, "cannot start accepting on %s: %s", io->path, strerror(-e));
        vp_pipe_listen_close(&io->pipe);
        return e;
    }
    return 0;
}

void vd_io_stop(struct vd_io *io)
{
    if (io->listening) {
        io->listening = false;
        vp_acceptor_stop(io->acceptor);
        io->acceptor = NULL;
    }
    vd_sessions_stop(&io->sessions);
}

void vd_io_fini(struct vd_io *io)
{
    if (io->acceptor) {
        io->listening = false;
        vp_acceptor_stop(io->acceptor);
        io->acceptor = NULL;
    }
    vp_pipe_listen_close(&io->pipe);
}
