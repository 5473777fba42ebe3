/* SPDX-License-Identifier: Apache-2.0 */
/* A session: the codec over a link of the platform's endpoint. The link
 * moves bytes and handles (platform/endpoint.h: beside the bytes on POSIX,
 * pushed into the peer's process and written inline on Windows); the codec
 * turns them into frames and back; the core gets the frames. The rules it
 * obeys are session_rules.c's. */
#include "daemon/io/session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/codec.h"
#include "daemon/core/requests/dispatch.h"
#include "daemon/core/requests/lifecycle.h"
#include "daemon/log.h"
#include "daemon/core/requests/send.h"

struct vd_session {
    struct vd_session_state st; /* st.inflight: what the link holds */
    struct vp_link *link;
    struct vw_codec codec;
};

/* Asked of the codec's receive buffer, at least. */
#define RECV_BYTES 4096

void vd_session_close(void *session, const char *why, bool after_flush)
{
    struct vd_session *s = session;
    /* Draining, the link goes on writing what is queued. */
    if (vd_rules_close(&s->st, why, after_flush))
        vp_link_read(s->link, false);
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

/* Hands the link what the codec queued, as far as it takes it: 0 (the
 * link calls back when it has room again), or a negative errno. */
static int flush(struct vd_session *s)
{
    const uint8_t *p;
    size_t len;
    const vp_handle *hs;
    int nh, r = 0;
    while (vw_codec_tx_peek(&s->codec, &p, &len, &hs, &nh)) {
        long n = vp_link_write(s->link, p, len, hs, nh);
        if (n < 0) {
            r = n == -EAGAIN ? 0 : (int)n;
            break;
        }
        vw_codec_tx_sent(&s->codec, (size_t)n);
    }
    s->st.inflight = vp_link_pending(s->link);
    return r;
}

/* A session that waited to flush before it closes, flushed. */
static void drained(struct vd_session *s)
{
    if (s->st.drain && !vd_rules_pending(&s->st)) {
        s->st.drain = false;
        vd_rules_schedule(&s->st);
    }
}

static void on_written(void *ud, int status)
{
    struct vd_session *s = ud;
    s->st.inflight = vp_link_pending(s->link);
    if (s->st.listed && !s->st.drain)
        return; /* closed at the end of this turn */
    if (status == 0)
        status = flush(s);
    vd_rules_account(&s->st);
    if (status < 0) {
        s->st.drain = false;
        vd_session_close(s, conn_error(status), false);
        return;
    }
    drained(s);
    /* Room again: what waits in the core goes on (it may close us). */
    if (!s->st.closing && !s->st.inflight)
        vd_core_client_writable(s->st.ss->core, s->st.client);
}

int vd_session_send(void *session, const char *payload, size_t len,
                    vp_handle *hs, int n, unsigned flags)
{
    struct vd_session *s = session;
    int r = vd_rules_send_refused(&s->st, hs, n);
    if (r < 0)
        return r;
    if (n > VW_MAX_FDS_PER_FRAME) {
        for (int i = 0; i < n; i++)
            vp_close(&hs[i]);
        vd_session_close(s, "a frame with too many handles", false);
        return -E2BIG;
    }
    /* Every handle the core sends is of the one backend: the backend says
     * what they are (host: memory the client maps read-write, or read-only
     * for a reader of a weight set; cuda: the driver's objects, imported
     * as they are), which is the access a copy given to the peer gets. */
    vp_handle vals[VW_MAX_FDS_PER_FRAME];
    unsigned access = vd_handle_push_access(s->st.ss->core->backend->handles,
                                            flags & VD_SEND_READ_ONLY);
    r = n ? vp_link_give(s->link, hs, n, access, vals) : 0;
    if (r == -EBADF) {
        vd_rules_queue_failed(&s->st, r, vw_codec_tx_bytes(&s->codec) + s->st.inflight);
        return r;
    }
    if (r < 0) {
        char why[160];
        snprintf(why, sizeof(why), "cannot give a handle to its process: %s",
                 strerror(-r));
        vd_session_close(s, why, false);
        return r;
    }
    r = vw_codec_tx(&s->codec, payload, len, vals, n);
    if (r < 0) {
        vp_link_take_back(s->link, vals, n);
        vd_rules_queue_failed(&s->st, r, vw_codec_tx_bytes(&s->codec) + s->st.inflight);
        return r;
    }
    if ((r = flush(s)) < 0) {
        s->st.drain = false;
        vd_session_close(s, conn_error(r), false);
    } else {
        drained(s);
    }
    return vd_rules_sent(&s->st);
}

void vd_session_speak(void *session, uint16_t version)
{
    struct vd_session *s = session;
    s->codec.version = version;
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
    return vp_link_pin(s->link, peer, pin, start_time);
}

static uint8_t *on_alloc(void *ud, size_t want, size_t *room)
{
    struct vd_session *s = ud;
    return vw_codec_rx_space(&s->codec, want < RECV_BYTES ? RECV_BYTES : want,
                               room);
}

/* A broken rule of the protocol or of the transport: counted, and the
 * connection closed saying why. */
static void broken(struct vd_session *s, const char *why)
{
    s->st.ss->core->counters.protocol_errors++;
    vd_session_close(s, why, false);
}

static void on_read(void *ud, long n, vp_handle *hs, int nh, const char *why)
{
    struct vd_session *s = ud;
    if (s->st.closing || n <= 0) {
        bool mid = !vw_codec_rx_idle(&s->codec) || nh;
        for (int i = 0; i < nh; i++)
            vp_close(&hs[i]);
        if (s->st.closing)
            return;
        vw_codec_rx_drop(&s->codec);
        if (n == 0 && !mid)
            vd_session_close(s, "disconnected", false);
        else if (n == 0)
            broken(s, "peer closed the connection mid-frame");
        else if (why && why[0])
            broken(s, why);
        else
            vd_session_close(s, conn_error((int)n), false);
        return;
    }
    vw_codec_rx_wrote(&s->codec, (size_t)n);
    char w[256] = "";
    if (nh && vw_codec_rx_handles(&s->codec, hs, nh, w, sizeof(w)) < 0) {
        broken(s, w);
        return;
    }
    for (;;) {
        struct vw_codec_frame *f;
        int r = vw_codec_next(&s->codec, &f, w, sizeof(w));
        if (r < 0) {
            broken(s, w);
            return;
        }
        if (r == 0)
            break;
        if (f->nhandles > 0 && s->codec.inline_handles) {
            /* A client's inline values name handles in its own process:
             * the codec must never close them here as ours. No request
             * carries handles. */
            for (int i = 0; i < f->nhandles; i++)
                f->handles[i] = VP_NONE;
            f->nhandles = 0;
            broken(s, "sent handles (no request carries any)");
            return;
        }
        vd_core_client_frame(s->st.ss->core, s->st.client, f);
        if (s->st.closing)
            return;
    }
    vd_rules_received(&s->st);
}

static const struct vp_link_cbs link_cbs = {
    .alloc = on_alloc, .read = on_read, .written = on_written};

static void session_freed(void *ud)
{
    struct vd_session *s = ud;
    vw_codec_fini(&s->codec);
    vd_rules_free(&s->st, s);
}

/* At the end of the loop turn that closes it: the link closes (what it
 * had not written is dropped), and the session is freed once the loop lets
 * go of the link. */
static void session_release(void *owner)
{
    struct vd_session *s = owner;
    vp_link_close(s->link, session_freed);
}

const struct vd_session_calls vd_session_calls = {
    .close = vd_session_close, .release = session_release};

/* Turned away: one error frame (the peer's library reports it as the
 * connect's error), then closed once it is written (the session is not
 * the core's). */
static void refuse(struct vd_session *s, int err, const char *message)
{
    if (vd_rules_queue_refusal(&s->codec, err, message) == 0 && flush(s) == 0 &&
        vd_rules_pending(&s->st)) {
        snprintf(s->st.why, sizeof(s->st.why), "refused");
        s->st.closing = s->st.drain = true;
        return;
    }
    vd_session_close(s, "refused", false);
}

void vd_session_accept(struct vd_sessions *ss, struct vp_link *link)
{
    struct vd_session *s = calloc(1, sizeof(*s));
    if (!s) {
        vp_link_close(link, NULL);
        return;
    }
    s->link = link;
    vd_rules_start(&s->st, ss, s, &s->codec);
    vw_codec_init(&s->codec, vp_handles_inline());
    vp_link_start(link, &link_cbs, s);
    /* Listed from here on: every way out goes through the end of a turn. */
    vd_rules_list(&s->st);
    struct vp_peer peer;
    char why[256] = "";
    int e = vp_link_peer(link, &peer, why, sizeof(why));
    if (e < 0) {
        vlog(VLOG_WARNING, "refusing a connection: %s", why);
        refuse(s, e, why);
        return;
    }
    struct vd_refusal ref;
    if (vd_core_client_open(ss->core, s, &peer, &s->st.client, &ref) < 0) {
        refuse(s, ref.err, ref.message);
        return;
    }
    s->st.admitted = true;
    /* Requests are small and carry no handles: one receive takes a whole
     * request (or several), and the link comes back for what is left. */
    e = vp_link_read(link, true);
    if (e < 0)
        vd_session_close(s, conn_error(e), false);
}
