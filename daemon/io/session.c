/* SPDX-License-Identifier: Apache-2.0 */
#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "lifecycle.h"
#include "log.h"
#include "send.h"
#include "peer.h"

/* The POSIX side of a session: a socket watched on the loop (vp_watch),
 * bytes and handles through the wire (handles as the connection's
 * ancillary data, which platform/ sends and receives). The rules it obeys are
 * session_rules.c's. */
struct vd_session {
    struct vd_session_state st;
    vp_handle h;
    struct vp_watch watch;
    struct vram_wire wire;
};

static void on_ready(struct vp_watch *w, int status, int events);

void vd_session_close(void *session, const char *why, bool after_flush)
{
    struct vd_session *s = session;
    /* Not draining, the watch stays as it is until the end of the turn
     * closes it, before the loop polls again (on_ready ignores a closing
     * session meanwhile): one change of the loop's watch less per
     * connection. */
    if (vd_rules_close(&s->st, why, after_flush) && s->st.drain)
        vp_watch_set(&s->watch, VP_WRITABLE, on_ready);
}

/* What a failed connection's error means, in words for the log. */
static const char *conn_error(int err)
{
    switch (err) {
    case -ECONNRESET: return "the peer reset the connection";
    case -EPIPE: return "the peer went away while we were writing";
    case -ETIMEDOUT: return "the connection timed out";
    default: return strerror(-err);
    }
}

static int flush(struct vd_session *s)
{
    int r = vram_wire_flush(&s->wire);
    if (!s->st.closing || s->st.drain)
        vd_rules_account(&s->st);
    if (r < 0 && r != -EAGAIN) {
        s->st.drain = false;
        vd_session_close(s, conn_error(r), false);
        return r;
    }
    if (r == 0 && s->st.drain) {
        s->st.drain = false;
        vp_watch_set(&s->watch, 0, on_ready);
        vd_rules_schedule(&s->st);
        return r;
    }
    vp_watch_set(&s->watch,
                 (s->st.closing ? 0 : VP_READABLE) | (r == -EAGAIN ? VP_WRITABLE : 0),
                 on_ready);
    return 0;
}

int vd_session_send(void *session, const char *payload, size_t len,
                    vp_handle *hs, int n, unsigned flags)
{
    /* flags: an fd carries no access of its own to lower; a sealed set's
     * memfd refuses a writable shared mapping already (F_SEAL_WRITE). */
    (void)flags;
    struct vd_session *s = session;
    int r = vd_rules_send_refused(&s->st, hs, n);
    if (r < 0)
        return r;
    r = vram_wire_queue(&s->wire, payload, len, hs, n);
    if (r < 0) {
        vd_rules_queue_failed(&s->st, r, vram_codec_tx_bytes(&s->wire.codec));
        return r;
    }
    flush(s); /* counts what it leaves queued */
    return vd_rules_sent(&s->st);
}

void vd_session_speak(void *session, uint16_t version)
{
    struct vd_session *s = session;
    s->wire.codec.version = version;
}

int vd_session_room(void *session)
{
    struct vd_session *s = session;
    return vd_rules_room(&s->st);
}

int vd_session_pin(void *session, const struct vp_peer *peer, vp_handle *pin,
                   uint64_t *start_time)
{
    struct vd_session *s = session;
    return vp_peer_pin(s->h, peer, pin, start_time);
}

static int on_frame(void *ud, struct vram_codec_frame *f)
{
    struct vd_session *s = ud;
    if (s->st.closing)
        return 1;
    vd_core_client_frame(s->st.ss->core, s->st.client, f);
    return s->st.closing ? 1 : 0;
}

static void on_ready(struct vp_watch *w, int status, int events)
{
    struct vd_session *s = w->data;
    if (status < 0) {
        vd_session_close(s, conn_error(status), false);
        return;
    }
    if ((events & VP_WRITABLE) && flush(s) < 0)
        return;
    /* Room again: what waits in the core goes on (it may close us). */
    if ((events & VP_WRITABLE) && !s->st.closing)
        vd_core_client_writable(s->st.ss->core, s->st.client);
    if (!(events & VP_READABLE) || s->st.closing)
        return;
    char why[256];
    int r = vram_wire_read(&s->wire, on_frame, s, why, sizeof(why));
    if (s->st.closing)
        return;
    vd_rules_received(&s->st);
    if (r == -ENOTCONN) {
        vd_session_close(s, "disconnected", false);
    } else if (r < 0 && !why[0]) {
        vd_session_close(s, conn_error(r), false);
    } else if (r < 0) {
        s->st.ss->core->counters.protocol_errors++;
        vd_session_close(s, why, false);
    }
}

static void session_freed(uv_handle_t *h)
{
    struct vd_session *s = ((struct vp_watch *)h->data)->data;
    vram_wire_fini(&s->wire);
    vd_rules_free(&s->st, s);
}

void vd_session_release(struct vd_session *s)
{
    /* The watch goes before the fd (its memory lives until session_freed). */
    vp_watch_close(&s->watch, session_freed);
    vp_close(&s->h);
}

/* Turns a connection away with one error frame (the peer's library reports
 * it as the connect's error), then closes it. */
static void refuse(vp_handle h, int err, const char *message)
{
    struct vram_wire w;
    vram_wire_init(&w, h);
    vd_rules_queue_refusal(&w.codec, err, message);
    vram_wire_flush(&w);
    vram_wire_fini(&w);
    vp_close(&h);
}

void vd_session_accept(struct vd_sessions *ss, vp_handle h)
{
    struct vp_peer peer;
    int e = vp_peer_of(h, &peer);
    if (e < 0) {
        vlog(VLOG_WARNING, "refusing a connection: its peer's credentials "
             "cannot be read: %s", strerror(-e));
        vp_close(&h);
        return;
    }
    struct vd_session *s = calloc(1, sizeof(*s));
    if (!s) {
        vp_close(&h);
        return;
    }
    vd_rules_start(&s->st, ss, s, &s->wire.codec);
    s->h = h;
    struct vd_refusal ref;
    if (vd_core_client_open(ss->core, s, &peer, &s->st.client, &ref) < 0) {
        free(s);
        refuse(h, ref.err, ref.message);
        return;
    }
    vram_wire_init(&s->wire, h);
    /* Requests are small and carry no handles: one receive takes a whole
     * request (or several), and the level-triggered watch brings us back
     * for whatever is left. */
    s->wire.max_recvs = 1;
    int we = vp_watch_init(ss->loop, &s->watch, h);
    if (we < 0) {
        snprintf(s->st.why, sizeof(s->st.why), "cannot watch its "
                 "connection: %s", strerror(-we));
        vd_core_client_closed(ss->core, s->st.client, s->st.why);
        vram_wire_fini(&s->wire);
        vp_close(&s->h);
        free(s);
        return;
    }
    s->watch.data = s;
    vp_watch_set(&s->watch, VP_READABLE, on_ready);
    s->st.admitted = true;
    vd_rules_list(&s->st);
}
