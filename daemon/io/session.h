/* SPDX-License-Identifier: Apache-2.0 */
/* One connection: its bytes and handles through the wire, frames handed to
 * the core, what the core sends queued and flushed, and its end, always
 * deferred to the end of the loop turn (never inside a send), after which
 * the core hears of it. Each platform has its file (session.c,
 * session_pipe.c); the rules they share are session_rules.h's. */
#ifndef VRAMD_SESSION_H
#define VRAMD_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "handle.h"
#include "session_rules.h"
#include "wire.h"

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
                    vp_handle *hs, int n, unsigned flags);
void vd_session_close(void *session, const char *why, bool after_flush);
int vd_session_room(void *session);
void vd_session_speak(void *session, uint16_t version);
int vd_session_pin(void *session, const struct vp_peer *peer, vp_handle *pin,
                   uint64_t *start_time);
/* For session_rules.c, at the end of the loop turn that closes it: the
 * connection's handle is closed, and the session freed once the loop lets
 * go of it. */
void vd_session_release(struct vd_session *s);

#endif
