/* SPDX-License-Identifier: Apache-2.0 */
/* One connection: a link of the platform's endpoint (platform/endpoint.h)
 * with the codec above it: bytes and handles in, frames handed to the core,
 * what the core sends queued and written, and its end, always deferred to
 * the end of the loop turn (never inside a send), after which the core
 * hears of it. The rules every session obeys are session_rules.h's. */
#ifndef VRAMD_SESSION_H
#define VRAMD_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/endpoint.h"
#include "platform/handle.h"
#include "daemon/io/session_rules.h"

/* What the rules call back (vd_sessions_init). */
extern const struct vd_session_calls vd_session_calls;

/* A new connection: admitted by the core or turned away with one error
 * frame. */
void vd_session_accept(struct vd_sessions *ss, struct vp_link *link);
/* The port's calls (core.h). */
int vd_session_send(void *session, const char *payload, size_t len,
                    vp_handle *hs, int n, unsigned flags);
void vd_session_close(void *session, const char *why, bool after_flush);
int vd_session_room(void *session);
void vd_session_speak(void *session, uint16_t version);
int vd_session_pin(void *session, const struct vp_peer *peer, vp_handle *pin,
                   uint64_t *start_time);

#endif
