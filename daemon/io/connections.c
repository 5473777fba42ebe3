/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/io/connections.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/log.h"

static struct vlog_limit accept_limit = {.interval_ms = 10000};

static void on_accept(void *data, struct vp_link *link)
{
    struct vd_io *io = data;
    if (!io->listening) {
        vp_link_close(link, NULL);
        return;
    }
    vd_session_accept(&io->sessions, link);
}

/* The endpoint goes on by itself: logged, rate-limited. */
static void on_accept_error(void *data, int err, int paused_ms)
{
    struct vd_io *io = data;
    io->accept_pauses++;
    if (paused_ms > 0)
        vlog_limited(&accept_limit, VLOG_ERR, "cannot accept connections: "
                     "%s; accepting again in %d ms (paused %llu times)",
                     strerror(-err), paused_ms,
                     (unsigned long long)io->accept_pauses);
    else
        vlog_limited(&accept_limit, VLOG_ERR, "cannot accept a connection on "
                     "%s: %s", io->path, strerror(-err));
}

int vd_io_prepare(struct vd_io *io, uv_loop_t *loop, struct vd_core *core,
                  const char *path)
{
    io->loop = loop;
    io->core = core;
    io->ep = NULL;
    vd_sessions_init(&io->sessions, loop, core, &vd_session_calls);
    char why[256] = "";
    unsigned how = 0;
    int r = vp_endpoint_prepare(loop, path, &io->ep, &how, why, sizeof(why));
    if (r < 0) {
        vlog(VLOG_ERR, "%s", why);
        return r;
    }
    snprintf(io->path, sizeof(io->path), "%s", vp_endpoint_path(io->ep));
    if (how & VP_ENDPOINT_PASSED) {
        /* The service manager owns the path, its mode and its group. */
        io->activated = true;
        vlog(VLOG_INFO, "using the socket passed by the service manager (%s)",
             io->path);
    }
    if (how & VP_ENDPOINT_DIR_MADE)
        vlog(VLOG_INFO, "created the socket's directory for %s", io->path);
    return 0;
}

/* Who the endpoint itself lets in besides the system's administrators and
 * vramd's user (where it can say: Windows' pipe): access.allow's users and
 * groups, or by default the group vramd where there is one (the core's
 * default); and the socket file's group and mode. The core still judges
 * every client (core/access.c): that is what refuses a user taken off the
 * list, even if the endpoint could not follow. */
static void endpoint_access(const struct vd_config *cfg,
                            struct vp_endpoint_access *acc)
{
    memset(acc, 0, sizeof(*acc));
    acc->group = cfg->socket_group;
    acc->mode = cfg->socket_mode;
    uint32_t gid;
    if (!cfg->allow_given) {
        if (vp_group_id("vramd", &gid) == 0)
            acc->gids[acc->ngids++] = gid;
        return;
    }
    for (uint32_t i = 0; i < cfg->allow.nuids && i < VP_ENDPOINT_ALLOW_MAX; i++)
        acc->uids[acc->nuids++] = cfg->allow.uids[i];
    for (uint32_t i = 0; i < cfg->allow.ngids && i < VP_ENDPOINT_ALLOW_MAX; i++)
        acc->gids[acc->ngids++] = cfg->allow.gids[i];
}

int vd_io_listen(struct vd_io *io)
{
    char why[256] = "";
    struct vp_endpoint_access acc;
    endpoint_access(&io->core->cfg, &acc);
    io->listening = true;
    int e = vp_endpoint_listen(io->ep, &acc, on_accept, on_accept_error, io,
                               why, sizeof(why));
    if (e < 0) {
        io->listening = false;
        if (e == -EADDRINUSE)
            vlog(VLOG_ERR, "%s is served already (another vramd, or someone "
                 "else's endpoint of that name): %s", io->path, why);
        else
            vlog(VLOG_ERR, "%s", why);
        return e;
    }
    const char *text = vp_endpoint_access_text(io->ep);
    if (text)
        vlog(VLOG_INFO, "%s: %s", io->path, text);
    return 0;
}

void vd_io_reload(struct vd_io *io)
{
    if (!io->ep || !io->listening)
        return; /* stopping: no new client is taken anyway */
    char why[512] = "";
    struct vp_endpoint_access acc;
    endpoint_access(&io->core->cfg, &acc);
    int e = vp_endpoint_set_access(io->ep, &acc, why, sizeof(why));
    const char *text = vp_endpoint_access_text(io->ep);
    if (e < 0)
        vlog(VLOG_ERR, "SIGHUP: %s: %s; its %s stays", io->path, why,
             text ? text : "access");
    else if (e > 0 && text)
        vlog(VLOG_INFO, "SIGHUP: %s: %s", io->path, text);
    else if (text)
        vlog(VLOG_DEBUG, "SIGHUP: %s: unchanged", io->path);
}

void vd_io_stop(struct vd_io *io)
{
    io->listening = false;
    vp_endpoint_stop(io->ep);
    vd_sessions_stop(&io->sessions);
}

void vd_io_fini(struct vd_io *io)
{
    io->listening = false;
    vp_endpoint_close(&io->ep);
}
