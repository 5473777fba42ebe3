/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's endpoint on Windows: its own named pipe (platform/
 * pipe_listener.h), accepted on by a thread that hands connected instances
 * to the loop (platform/stream.h), each made a session (session_pipe.c).
 * io.c is the POSIX side (a socket watched on the loop). */
#include "io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "identity.h"
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

/* Who the pipe's security descriptor lets open it besides SYSTEM,
 * Administrators and vramd's user: access.allow's users and groups, or by
 * default the group vramd where there is one (the core's default). Their
 * numbers are the platform's for SIDs. The descriptor is set when vramd
 * starts listening and again after each reload (vd_io_reload), so someone
 * added to the list can open the pipe at once. The core still judges every
 * client (core/access.c): that is what refuses a user taken off the list,
 * even if setting the pipe's new descriptor failed. */
static int pipe_allow(const struct vd_config *cfg, struct vp_access_list *out)
{
    struct vp_access_list l;
    l.n = 0;
    uint32_t def_gid;
    struct vd_access_list def = {.nuids = 0, .ngids = 0};
    if (!cfg->allow_given && vp_group_id("vramd", &def_gid) == 0) {
        def.gids[0] = def_gid;
        def.ngids = 1;
    }
    const struct vd_access_list *src = cfg->allow_given ? &cfg->allow : &def;
    for (uint32_t i = 0; i < src->nuids + src->ngids; i++) {
        uint32_t id = i < src->nuids ? src->uids[i] : src->gids[i - src->nuids];
        if (l.n >= VP_ACCESS_MAX)
            return -ENOSPC;
        if (vp_id_sid(id, &l.sids[l.n]) < 0)
            return -ENOENT; /* config.c numbered every entry */
        l.n++;
    }
    *out = l;
    return 0;
}

int vd_io_listen(struct vd_io *io)
{
    char why[256] = "";
    struct vp_access_list *allow = malloc(sizeof(*allow));
    int e = allow ? pipe_allow(&io->core->cfg, allow) : -ENOMEM;
    if (e < 0) {
        vlog(VLOG_ERR, "cannot write %s's access list: %s", io->path, strerror(-e));
        free(allow);
        return e;
    }
    struct vp_pipe_listen_cfg lc = {.name = io->path, .allow = allow};
    e = vp_pipe_listen(&lc, &io->pipe, why, sizeof(why));
    free(allow);
    if (e < 0) {
        if (e == -EADDRINUSE)
            vlog(VLOG_ERR, "%s is served already (another vramd, or someone "
                 "else's pipe of that name): %s", io->path, why);
        else
            vlog(VLOG_ERR, "%s", why);
        return e;
    }
    vlog(VLOG_INFO, "%s: security descriptor %s", io->path,
         vp_pipe_listen_sddl(io->pipe));
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

void vd_io_reload(struct vd_io *io)
{
    if (!io->pipe || !io->listening)
        return; /* stopping: no new client is taken anyway */
    char why[512] = "";
    struct vp_access_list *allow = malloc(sizeof(*allow));
    int e = allow ? pipe_allow(&io->core->cfg, allow) : -ENOMEM;
    if (e < 0) {
        vlog(VLOG_ERR, "SIGHUP: cannot write %s's access list: %s; its security "
             "descriptor stays %s", io->path, strerror(-e),
             vp_pipe_listen_sddl(io->pipe));
        free(allow);
        return;
    }
    e = vp_pipe_listen_set_allow(io->pipe, allow, why, sizeof(why));
    free(allow);
    if (e < 0)
        vlog(VLOG_ERR, "SIGHUP: %s: %s; its security descriptor stays %s", io->path,
             why, vp_pipe_listen_sddl(io->pipe));
    else if (e > 0)
        vlog(VLOG_INFO, "SIGHUP: %s: security descriptor %s", io->path,
             vp_pipe_listen_sddl(io->pipe));
    else
        vlog(VLOG_DEBUG, "SIGHUP: %s: security descriptor unchanged", io->path);
}

/* No more connections: the acceptor thread is stopped and joined. */
static void stop_accepting(struct vd_io *io)
{
    if (!io->acceptor)
        return;
    io->listening = false;
    vp_acceptor_stop(io->acceptor);
    io->acceptor = NULL;
}

void vd_io_stop(struct vd_io *io)
{
    stop_accepting(io);
    vd_sessions_stop(&io->sessions);
}

void vd_io_fini(struct vd_io *io)
{
    stop_accepting(io);
    vp_pipe_listen_close(&io->pipe);
}
