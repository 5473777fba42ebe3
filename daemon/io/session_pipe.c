/* SPDX-License-Identifier: Apache-2.0 */
/* One connection on Windows: a connected pipe instance as a libuv stream
 * (platform/stream.h), its bytes through the codec in inline mode, the
 * handles of what the core sends pushed into the client's process first
 * (platform/push.h). The rest is session_rules.c's, as for session.c: the
 * end of a connection is deferred to the end of the loop turn, hello and
 * half-sent frames have deadlines, the peers' queued output has a cap.
 *
 * Why a file of its own rather than a vp_watch for pipes: libuv polls only
 * sockets on Windows, and a stream moves the bytes itself (uv_read_start
 * into the codec's receive buffer, uv_write of owned copies). */
#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "dispatch.h"
#include "identity.h"
#include "lifecycle.h"
#include "log.h"
#include "peer_map.h"
#include "push.h"
#include "send.h"
#include "stream.h"

struct vd_session {
    struct vd_session_state st; /* st.inflight: bytes handed to uv_write */
    uv_pipe_t pipe;
    vp_handle pin; /* the client's process, from its identity: pushes go there */
    struct vram_codec codec;
};

struct wreq {
    uv_write_t req;
    struct vd_session *s;
    size_t len;
    uint8_t bytes[];
};

void vd_session_close(void *session, const char *why, bool after_flush)
{
    struct vd_session *s = session;
    if (vd_rules_close(&s->st, why, after_flush))
        uv_read_stop((uv_stream_t *)&s->pipe);
}

/* libuv's error numbers on Windows are its own: in words for the log. */
static const char *uv_words(int status)
{
    switch (status) {
    case UV_EOF: return "disconnected";
    case UV_ECONNRESET: return "the peer reset the connection";
    case UV_EPIPE: return "the peer went away while we were writing";
    default: return uv_strerror(status);
    }
}

static void on_written(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct vd_session *s = w->s;
    s->st.inflight -= w->len;
    free(w);
    if (s->st.listed && !s->st.drain)
        return; /* closing: the stream's close cancels the rest */
    vd_rules_account(&s->st);
    if (status < 0) {
        s->st.drain = false;
        vd_session_close(s, uv_words(status), false);
        return;
    }
    if (s->st.drain && !vd_rules_pending(&s->st)) {
        s->st.drain = false;
        vd_rules_schedule(&s->st);
        return;
    }
    /* Room again: what waits in the core goes on (it may close us). */
    if (!s->st.closing && !s->st.inflight)
        vd_core_client_writable(s->st.ss->core, s->st.client);
}

/* Moves what the codec queued into libuv's write queue (copies: the codec
 * reuses its buffer). */
static int flush(struct vd_session *s)
{
    const uint8_t *p;
    size_t len;
    const vp_handle *hs;
    int nh;
    while (vram_codec_tx_peek(&s->codec, &p, &len, &hs, &nh)) {
        struct wreq *w = malloc(sizeof(*w) + len);
        if (!w)
            return -ENOMEM;
        w->s = s;
        w->len = len;
        memcpy(w->bytes, p, len);
        uv_buf_t b = uv_buf_init((char *)w->bytes, (unsigned)len);
        int e = uv_write(&w->req, (uv_stream_t *)&s->pipe, &b, 1, on_written);
        if (e < 0) {
            free(w);
            return e == UV_EPIPE ? -EPIPE : -EIO;
        }
        s->st.inflight += len;
        vram_codec_tx_sent(&s->codec, len);
    }
    return 0;
}

/* The handles of one frame, into the client's process: their values there
 * go in the frame. Ours are closed (the port takes them). On a failure the
 * copies made so far are taken back: the client never saw them. */
static int push_all(struct vd_session *s, vp_handle *hs, int n, vp_handle *vals,
                    unsigned flags)
{
    int e = 0, i;
    /* Every handle the core sends is of the one backend: the backend says
     * what they are (host: sections, mapped read-write by the client, or
     * read-only for a reader of a weight set; cuda: the driver's objects,
     * imported as they are). */
    unsigned access = vd_handle_push_access(s->st.ss->core->backend->handles,
                                            flags & VD_SEND_READ_ONLY);
    for (i = 0; i < n; i++) {
        uint64_t v;
        e = vp_handle_push(s->pin, hs[i], access, &v);
        if (e < 0)
            break;
        vals[i].v = (intptr_t)v;
    }
    if (e < 0)
        for (int k = 0; k < i; k++)
            vp_handle_close_remote(s->pin, (uint64_t)vals[k].v);
    for (int k = 0; k < n; k++)
        vp_close(&hs[k]);
    return e;
}

int vd_session_send(void *session, const char *payload, size_t len,
                    vp_handle *hs, int n, unsigned flags)
{
    struct vd_session *s = session;
    int r = vd_rules_send_refused(&s->st, hs, n);
    if (r < 0)
        return r;
    vp_handle vals[VRAM_MAX_FDS_PER_FRAME];
    if (n > VRAM_MAX_FDS_PER_FRAME) {
        for (int i = 0; i < n; i++)
            vp_close(&hs[i]);
        vd_session_close(s, "a frame with too many handles", false);
        return -E2BIG;
    }
    r = n ? push_all(s, hs, n, vals, flags) : 0;
    if (r < 0) {
        char why[160];
        snprintf(why, sizeof(why), "cannot push a handle into its process: %s",
                 strerror(-r));
        vd_session_close(s, why, false);
        return r;
    }
    r = vram_codec_tx(&s->codec, payload, len, vals, n);
    if (r < 0) {
        for (int i = 0; i < n; i++)
            vp_handle_close_remote(s->pin, (uint64_t)vals[i].v);
        vd_rules_queue_failed(&s->st, r, vram_codec_tx_bytes(&s->codec) + s->st.inflight);
        return r;
    }
    if ((r = flush(s)) < 0) {
        s->st.drain = false;
        vd_session_close(s, strerror(-r), false);
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
    /* Handles do not wait in the codec here (they are pushed at once):
     * bytes bound it. */
    return vd_rules_room(&s->st);
}

int vd_session_pin(void *session, const struct vp_peer *peer, vp_handle *pin,
                   uint64_t *start_time)
{
    struct vd_session *s = session;
    /* The pin taken at accept, by the pipe (never by pid later): a copy. */
    int e = vp_dup(s->pin, pin);
    if (e < 0)
        return e;
    *start_time = peer->start_time;
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct vd_session *s = h->data;
    size_t room = 0;
    uint8_t *p = vram_codec_rx_space(&s->codec, suggested < 4096 ? 4096 : suggested,
                                     &room);
    *buf = uv_buf_init((char *)p, p ? (unsigned)room : 0);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    struct vd_session *s = st->data;
    if (s->st.closing || nread == 0)
        return;
    if (nread < 0) {
        bool mid = !vram_codec_rx_idle(&s->codec);
        vd_session_close(s, nread == UV_EOF && mid
                                ? "peer closed the connection mid-frame"
                                : uv_words((int)nread),
                         false);
        return;
    }
    vram_codec_rx_wrote(&s->codec, (size_t)nread);
    char why[256] = "";
    for (;;) {
        struct vram_codec_frame *f;
        int r = vram_codec_next(&s->codec, &f, why, sizeof(why));
        if (r < 0) {
            s->st.ss->core->counters.protocol_errors++;
            vd_session_close(s, why, false);
            return;
        }
        if (r == 0)
            break;
        if (f->nhandles > 0) {
            /* A client's inline values name handles in its own process:
             * the codec must never close them here as ours. No request
             * carries handles. */
            for (int i = 0; i < f->nhandles; i++)
                f->handles[i] = VP_NONE;
            f->nhandles = 0;
            s->st.ss->core->counters.protocol_errors++;
            vd_session_close(s, "sent handles (no request carries any)", false);
            return;
        }
        vd_core_client_frame(s->st.ss->core, s->st.client, f);
        if (s->st.closing)
            return;
    }
    vd_rules_received(&s->st);
}

static void session_freed(uv_handle_t *h)
{
    struct vd_session *s = h->data;
    vram_codec_fini(&s->codec);
    vp_close(&s->pin);
    vd_rules_free(&s->st, s);
}

void vd_session_release(struct vd_session *s)
{
    /* Pending writes are cancelled (their callbacks run first, and see
     * the session listed), then session_freed. */
    uv_close((uv_handle_t *)&s->pipe, session_freed);
}

/* Turned away: one error frame, then closed once it is written (the
 * session is not the core's). */
static void refuse(struct vd_session *s, int err, const char *message)
{
    if (vd_rules_queue_refusal(&s->codec, err, message) == 0 && flush(s) == 0 &&
        s->st.inflight) {
        snprintf(s->st.why, sizeof(s->st.why), "refused");
        s->st.closing = s->st.drain = true;
        return;
    }
    vd_session_close(s, "refused", false);
}

void vd_session_accept_pipe(struct vd_sessions *ss, struct vp_pipe_conn conn)
{
    struct vp_identity *id = malloc(sizeof(*id));
    struct vd_session *s = calloc(1, sizeof(*s));
    if (!id || !s) {
        free(id);
        free(s);
        vp_close(&conn.h);
        return;
    }
    char why[256] = "";
    vp_handle pin = VP_NONE;
    int e = vp_identity_of_pipe(conn.h, conn.connected_at, id, &pin, why,
                                sizeof(why));
    if (e < 0) {
        vlog(VLOG_WARNING, "refusing a connection: its client cannot be "
             "identified: %s", why[0] ? why : strerror(-e));
        free(id);
        free(s);
        vp_close(&conn.h);
        return;
    }
    vd_rules_start(&s->st, ss, s, &s->codec);
    s->pin = pin;
    vram_codec_init(&s->codec, true);
    e = vp_stream_open(ss->loop, &s->pipe, &conn.h);
    s->pipe.data = s;
    /* Listed from here on: every way out goes through the end of a turn. */
    vd_rules_list(&s->st);
    if (e < 0) {
        free(id);
        snprintf(why, sizeof(why), "cannot open its pipe: %s", strerror(-e));
        vd_session_close(s, why, false);
        return;
    }
    struct vp_peer peer;
    char refusal[160];
    e = vd_peer_map(id, &peer, refusal, sizeof(refusal));
    if (e < 0) {
        vlog(VLOG_WARNING, "refusing pid %lld: %s", (long long)id->pid, refusal);
        free(id);
        refuse(s, e, refusal);
        return;
    }
    free(id);
    struct vd_refusal ref;
    if (vd_core_client_open(ss->core, s, &peer, &s->st.client, &ref) < 0) {
        refuse(s, ref.err, ref.message);
        return;
    }
    s->st.admitted = true;
    e = uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
    if (e < 0)
        vd_session_close(s, uv_words(e), false);
}

void vd_session_accept(struct vd_sessions *ss, vp_handle h)
{
    (void)ss;
    vp_close(&h); /* Windows: vd_session_accept_pipe */
}
