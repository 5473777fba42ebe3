/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's connections: the listening endpoint (platform/endpoint.h:
 * made here, or passed by the service manager), accepting, and the
 * sessions (session.c). This is the layer above the core: it calls the
 * core for each connection and frame, and the core answers through the
 * port io registers. */
#ifndef VRAMD_CONNECTIONS_H
#define VRAMD_CONNECTIONS_H

#include <stdbool.h>

#include "daemon/core/core.h"
#include "platform/endpoint.h"
#include "daemon/io/io_port.h"
#include "daemon/io/session.h"

struct vd_io {
    uv_loop_t *loop;
    struct vd_core *core;
    struct vd_sessions sessions;
    struct vp_endpoint *ep;
    uint64_t accept_pauses;
    bool activated; /* the listener came from the service manager */
    bool listening;
    char path[108];
};

/* Takes a listener passed by the service manager, or checks where path is
 * to be made; afterwards io->path is the endpoint's path. Logs why it
 * fails. */
int vd_io_prepare(struct vd_io *io, uv_loop_t *loop, struct vd_core *core,
                  const char *path);
/* Listens (under the core's lock) and accepts from now on. */
int vd_io_listen(struct vd_io *io);
/* After the core reloaded its configuration (vd_core_reload): what the
 * endpoint itself enforces follows it (vp_endpoint_set_access: on Windows
 * the pipe's security descriptor gets access.allow's users and groups,
 * logged; on failure the old one stays, and says so). The socket's group
 * and mode take a restart (the core refuses a reload that changes them). */
void vd_io_reload(struct vd_io *io);
/* Stops accepting, closes every connection, then stops the loop. */
void vd_io_stop(struct vd_io *io);
/* After the loop's last turn: the listener's path goes (unless it is the
 * service manager's). The loop runs once more after it. */
void vd_io_fini(struct vd_io *io);

#endif
