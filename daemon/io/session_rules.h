/* SPDX-License-Identifier: Apache-2.0 */
/* What every session obeys: the set of sessions, a connection's end
 * deferred to the end of the loop turn (never inside a send), deadlines for
 * hello and for half-sent frames, the cap on all peers' queued output, the
 * room the core may fill, and the one error frame that turns a connection
 * away.
 *
 * Each session (session.c) holds a struct vd_session_state; the rules keep
 * the list of those and call the session back through the calls it gave
 * (struct vd_session_calls), so the rules never call up into session.c. */
#ifndef VRAMD_SESSION_RULES_H
#define VRAMD_SESSION_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/codec.h"
#include "daemon/core/core.h"
#include "platform/handle.h"
#include <uv.h>

/* What the rules ask of a session (its owner): session.c's. */
struct vd_session_calls {
    /* vd_session_close: closed at the end of this turn, or once flushed. */
    void (*close)(void *owner, const char *why, bool after_flush);
    /* At the end of the turn that closes it: the connection goes, and the
     * session is freed once the loop lets go of it. */
    void (*release)(void *owner);
};

struct vd_sessions {
    uv_loop_t *loop;
    struct vd_core *core;
    const struct vd_session_calls *calls;
    struct vd_session_state *list;
    struct vd_session_state *closing; /* to be closed at the end of this turn */
    uv_idle_t closer;
    uv_timer_t deadlines;      /* silent peers and half-sent frames */
    size_t queued;             /* bytes queued towards all peers */
    bool stopping;             /* stop the loop once every session is gone */
};

/* One session as the rules see it. */
struct vd_session_state {
    struct vd_session_state *next, *next_closing;
    void *owner; /* the session this is part of */
    struct vd_sessions *ss;
    struct vw_codec *codec; /* the connection's codec (the owner's) */
    uint32_t client;
    bool closing;  /* no more reads; closed once queued (drain) or at once */
    bool drain;    /* close once what is queued went out */
    bool listed;   /* on the closing list */
    bool admitted; /* the core knows it (it hears of its end) */
    int64_t accepted_ms;      /* hello is due within limits.hello_timeout_ms */
    int64_t partial_since_ms; /* a frame begun and not finished, or 0 */
    size_t inflight;          /* bytes out of the codec, not yet written
                               * (the link's, vp_link_pending) */
    size_t queued;            /* its bytes counted in ss->queued */
    size_t queued_peak;
    char why[160];
};

void vd_sessions_init(struct vd_sessions *ss, uv_loop_t *loop,
                      struct vd_core *core, const struct vd_session_calls *calls);
/* Closes every session, then stops the loop. */
void vd_sessions_stop(struct vd_sessions *ss);

/* A new session's state, accepted now; not listed yet. */
void vd_rules_start(struct vd_session_state *st, struct vd_sessions *ss,
                    void *owner, struct vw_codec *codec);
/* On the list: from here on its end goes through the end of a loop turn. */
void vd_rules_list(struct vd_session_state *st);
/* To be closed at the end of this loop turn. */
void vd_rules_schedule(struct vd_session_state *st);
/* Bytes queued or in flight towards the peer. */
bool vd_rules_pending(const struct vd_session_state *st);
/* The close rules of vd_session_close: the first reason is kept; a close
 * after flushing waits for what is queued (st->drain), one at once
 * overrides it. Returns false when nothing changes; otherwise the platform
 * stops reading, and writes on while st->drain. */
bool vd_rules_close(struct vd_session_state *st, const char *why,
                    bool after_flush);
/* Once it is closing for good, a send is refused: the handles are closed
 * and -ECONNABORTED returned; 0 when the send may go on. */
int vd_rules_send_refused(const struct vd_session_state *st, vp_handle *hs,
                          int n);
/* A frame the codec would not queue (vw_codec_tx's r): the session is
 * closed, saying why; queued is what waits for the peer (codec and
 * transport). */
void vd_rules_queue_failed(struct vd_session_state *st, int r, size_t queued);
/* Counts its queued bytes into the sum of all peers' (limits.queued_bytes). */
void vd_rules_account(struct vd_session_state *st);
/* The end of a send, its frame queued and what fits written: its bytes
 * counted, the cap on all peers' enforced. Returns what the send returns:
 * 0, or -ECONNABORTED when it closed meanwhile. */
int vd_rules_sent(struct vd_session_state *st);
/* Over limits.queued_bytes, the peers that queue most are dropped. */
void vd_rules_enforce_queue_cap(struct vd_sessions *ss);
/* vd_session_room: what the core may queue before it waits. */
int vd_rules_room(const struct vd_session_state *st);
/* After a receive: when a frame began and is not finished (its deadline). */
void vd_rules_received(struct vd_session_state *st);
/* Queues the one error frame that turns a connection away. */
int vd_rules_queue_refusal(struct vw_codec *c, int err, const char *message);
/* Frees the session's memory (mem, which holds st), and gives the heap back
 * to the system after a heavy queue. */
void vd_rules_free(const struct vd_session_state *st, void *mem);

#endif
