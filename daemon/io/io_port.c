/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/io/io_port.h"

#include "daemon/io/session.h"

/* The sessions need no context of io's: each connection is its session. */
static int port_send(void *ctx, void *conn, const char *payload, size_t len,
                     vp_handle *hs, int n, unsigned flags)
{
    (void)ctx;
    return vd_session_send(conn, payload, len, hs, n, flags);
}

static void port_close(void *ctx, void *conn, const char *why, bool after_flush)
{
    (void)ctx;
    vd_session_close(conn, why, after_flush);
}

static int port_room(void *ctx, void *conn)
{
    (void)ctx;
    return vd_session_room(conn);
}

static int port_pin(void *ctx, void *conn, const struct vp_peer *peer,
                    vp_handle *pin, uint64_t *start_time)
{
    (void)ctx;
    return vd_session_pin(conn, peer, pin, start_time);
}

static void port_speak(void *ctx, void *conn, uint16_t version)
{
    (void)ctx;
    vd_session_speak(conn, version);
}

struct vd_port vd_io_port(struct vd_io *io)
{
    return (struct vd_port){.ctx = io, .send = port_send, .close = port_close,
                            .room = port_room, .pin = port_pin,
                            .speak = port_speak};
}
