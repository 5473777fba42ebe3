/* One connection: its bytes and handles through the wire, frames handed to
 * the core, what the core sends queued and flushed, and its end, always
 * deferred to the end of the loop turn (never inside a send), after which
 * the core hears of it. */
#ifndef VRAMD_SESSION_H
#define VRAMD_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "handle.h"
#include "watch.h"
#include "wire.h"

struct vd_sessions {
    uv_loop_t *loop;
    struct vd_core *core;
    struct vd_session *list;
    struct vd_session *closing; /* to be closed at the end of this turn */
    uv_idle_t closer;
    uv_timer_t deadlines;      /* silent peers and half-sent frames */
    size_t queued;             /* bytes queued towards all peers */
    bool stopping;             /* stop the loop once every session is gone */
};

void vd_sessions_init(struct vd_sessions *ss, uv_loop_t *loop,
                      struct vd_core *core);
/* A new connection: admitted by the core or turned away with one error
 * frame. */
void vd_session_accept(struct vd_sessions *ss, vp_handle h);
#ifdef _WIN32
#include "pipe_listener.h"
/* Windows (session_pipe.c): a connected pipe instance, identified by its
 * client's token, then a libuv stream. */
void vd_session_accept_pipe(struct vd_sessions *ss, struct vp_pipe_conn conn);
#endif
/* The port's calls (core.h). */
int vd_session_send(void *session, const char *payload, size_t len,
                    vp_handle *hs, int n);
void vd_session_close(void *session, const char *why, bool after_flush);
int vd_session_room(void *session);
int vd_session_pin(void *session, const struct vp_peer *peer, vp_handle *pin,
                   uint64_t *start_time);
/* Closes every session, then stops the loop. */
void vd_sessions_stop(struct vd_sessions *ss);

#endif
