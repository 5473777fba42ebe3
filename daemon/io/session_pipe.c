/* One connection on Windows: a connected pipe instance as a libuv stream
 * (platform/stream.h), its bytes through the codec in inline mode, the
 * handles of what the core sends pushed into the client's process first
 * (platform/push.h). The rest is session.c's policy, the same here: the end
 * of a connection is deferred to the end of the loop turn, hello and
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

#include "clock.h"
#include "codec.h"
#include "dispatch.h"
#include "identity.h"
#include "lifecycle.h"
#include "log.h"
#include "mem.h"
#include "msg.h"
#include "peer_map.h"
#include "push.h"
#include "send.h"
#include "stream.h"

struct vd_session {
    struct vd_session *next, *next_closing;
    struct vd_sessions *ss;
    uint32_t client;
    uv_pipe_t pipe;
    vp_handle pin; /* the client's process, from its identity: pushes go there */
    struct vram_codec codec;
    bool closing; /* no more reads; closed once queued (drain) or at once */
    bool drain;   /* close once what is queued went out */
    bool listed;  /* on the closing list */
    bool admitted; /* the core knows it (it hears of its end) */
    int64_t accepted_ms;
    int64_t partial_since_ms;
    size_t inflight;          /* bytes handed to uv_write, not yet written */
    size_t queued;            /* its bytes counted in ss->queued */
    size_t queued_peak;
    char why[160];
};

struct wreq {
    uv_write_t req;
    struct vd_session *s;
    size_t len;
    uint8_t bytes[];
};

static void on_closer(uv_idle_t *idle);

static void schedule(struct vd_session *s)
{
    if (s->listed)
        return;
    s->listed = true;
    s->next_closing = s->ss->closing;
    s->ss->closing = s;
    if (!uv_is_active((uv_handle_t *)&s->ss->closer))
        uv_idle_start(&s->ss->closer, on_closer);
}

static bool pending(const struct vd_session *s)
{
    return vram_codec_tx_pending(&s->codec) || s->inflight;
}

void vd_session_close(void *session, const char *why, bool after_flush)
{
    struct vd_session *s = session;
    if (s->closing && !(s->drain && !after_flush))
        return;
    if (!s->closing)
        snprintf(s->why, sizeof(s->why), "%s", why);
    s->closing = true;
    uv_read_stop((uv_stream_t *)&s->pipe);
    s->drain = after_flush && pending(s);
    if (!s->drain)
        schedule(s);
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

static void account(struct vd_session *s)
{
    size_t now = vram_codec_tx_bytes(&s->codec) + s->inflight;
    s->ss->queued = s->ss->queued - s->queued + now;
    s->queued = now;
    if (now > s->queued_peak)
        s->queued_peak = now;
}

static void enforce_queue_cap(struct vd_sessions *ss)
{
    size_t cap = ss->core->cfg.queued_bytes;
    while (ss->queued > cap) {
        struct vd_session *big = NULL;
        for (struct vd_session *x = ss->list; x; x = x->next)
            if (!x->closing && (!big || x->queued > big->queued))
                big = x;
        if (!big || !big->queued)
            return;
        char why[192];
        snprintf(why, sizeof(why), "the peers' queued output passed "
                 "limits.queued_bytes (%zu MiB); this one did not read %zu "
                 "KiB", cap >> 20, big->queued >> 10);
        big->drain = false;
        vd_session_close(big, why, false);
        vram_codec_tx_drop(&big->codec);
        /* What libuv holds goes when the stream is closed. */
        ss->queued -= big->queued;
        big->queued = 0;
    }
}

static void on_written(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct vd_session *s = w->s;
    s->inflight -= w->len;
    free(w);
    if (s->listed && !s->drain)
        return; /* closing: the stream's close cancels the rest */
    account(s);
    if (status < 0) {
        s->drain = false;
        vd_session_close(s, uv_words(status), false);
        return;
    }
    if (s->drain && !pending(s)) {
        s->drain = false;
        schedule(s);
        return;
    }
    /* Room again: what waits in the core goes on (it may close us). */
    if (!s->closing && !s->inflight)
        vd_core_client_writable(s->ss->core, s->client);
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
        s->inflight += len;
        vram_codec_tx_sent(&s->codec, len);
    }
    return 0;
}

/* The handles of one frame, into the client's process: their values there
 * go in the frame. Ours are closed (the port takes them). On a failure the
 * copies made so far are taken back: the client never saw them. */
static int push_all(struct vd_session *s, vp_handle *hs, int n, vp_handle *vals)
{
    int e = 0, i;
    for (i = 0; i < n; i++) {
        uint64_t v;
        /* Host chunks are sections, mapped read-write by the client. */
        e = vp_handle_push(s->pin, hs[i], VP_PUSH_MAP_READ | VP_PUSH_MAP_WRITE, &v);
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
                    vp_handle *hs, int n)
{
    struct vd_session *s = session;
    if (s->closing && !s->drain) {
        for (int i = 0; i < n; i++)
            vp_close(&hs[i]);
        return -ECONNABORTED;
    }
    vp_handle vals[VRAM_MAX_FDS_PER_FRAME];
    if (n > VRAM_MAX_FDS_PER_FRAME) {
        for (int i = 0; i < n; i++)
            vp_close(&hs[i]);
        vd_session_close(s, "a frame with too many handles", false);
        return -E2BIG;
    }
    int r = n ? push_all(s, hs, n, vals) : 0;
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
        char why[160];
        if (r == -ENOBUFS)
            snprintf(why, sizeof(why), "the peer does not read its pipe "
                     "(%zu KiB queued, at most %u MiB)",
                     (vram_codec_tx_bytes(&s->codec) + s->inflight) >> 10,
                     VRAM_CODEC_MAX_TX_BYTES >> 20);
        else
            snprintf(why, sizeof(why), "cannot queue a message: %s",
                     strerror(-r));
        vd_session_close(s, why, false);
        return r;
    }
    if ((r = flush(s)) < 0) {
        s->drain = false;
        vd_session_close(s, strerror(-r), false);
    }
    account(s);
    enforce_queue_cap(s->ss);
    return s->closing && !s->drain ? -ECONNABORTED : 0;
}

/* As session.c's: what the core may queue before it waits. Handles do not
 * wait in the codec here (they are pushed at once), so bytes bound it. */
#define ROOM_HANDLES 1024
#define ROOM_BYTES (4u << 20)

int vd_session_room(void *session)
{
    struct vd_session *s = session;
    if (s->closing)
        return 0;
    if (vram_codec_tx_bytes(&s->codec) + s->inflight > ROOM_BYTES)
        return 0;
    return ROOM_HANDLES;
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
    if (s->closing || nread == 0)
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
            s->ss->core->counters.protocol_errors++;
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
            s->ss->core->counters.protocol_errors++;
            vd_session_close(s, "sent handles (no request carries any)", false);
            return;
        }
        vd_core_client_frame(s->ss->core, s->client, f);
        if (s->closing)
            return;
    }
    if (vram_codec_rx_idle(&s->codec))
        s->partial_since_ms = 0;
    else if (!s->partial_since_ms)
        s->partial_since_ms = vp_now_ms();
}

static void session_freed(uv_handle_t *h)
{
    struct vd_session *s = h->data;
    bool heavy = s->queued_peak > (1u << 20);
    vram_codec_fini(&s->codec);
    vp_close(&s->pin);
    free(s);
    if (heavy)
        vp_heap_trim();
}

static void on_closer(uv_idle_t *idle)
{
    struct vd_sessions *ss = idle->data;
    while (ss->closing) {
        struct vd_session *s = ss->closing;
        ss->closing = s->next_closing;
        struct vd_session **pp = &ss->list;
        while (*pp && *pp != s)
            pp = &(*pp)->next;
        if (*pp)
            *pp = s->next;
        ss->queued -= s->queued;
        s->queued = 0;
        bool admitted = s->admitted;
        uint32_t client = s->client;
        char why[sizeof(s->why)];
        snprintf(why, sizeof(why), "%s", s->why);
        /* Pending writes are cancelled (their callbacks run first, and see
         * the session listed), then session_freed. */
        uv_close((uv_handle_t *)&s->pipe, session_freed);
        if (admitted)
            vd_core_client_closed(ss->core, client, why);
    }
    uv_idle_stop(idle);
    if (ss->stopping && !ss->list)
        uv_stop(ss->loop);
}

static void on_deadlines(uv_timer_t *t)
{
    struct vd_sessions *ss = t->data;
    const struct vd_config *cfg = &ss->core->cfg;
    int64_t now = vp_now_ms();
    for (struct vd_session *s = ss->list; s; s = s->next) {
        if (s->closing || !s->admitted)
            continue;
        char why[128];
        if (now - s->accepted_ms > (int64_t)cfg->hello_timeout_ms &&
            !vd_core_client_greeted(ss->core, s->client)) {
            snprintf(why, sizeof(why), "said no hello within %u ms "
                     "(limits.hello_timeout_ms)", cfg->hello_timeout_ms);
            vd_session_close(s, why, false);
        } else if (s->partial_since_ms &&
                   now - s->partial_since_ms > (int64_t)cfg->frame_timeout_ms) {
            snprintf(why, sizeof(why), "left a frame half-sent for %u ms "
                     "(limits.frame_timeout_ms)", cfg->frame_timeout_ms);
            vd_session_close(s, why, false);
        }
    }
}

void vd_sessions_init(struct vd_sessions *ss, uv_loop_t *loop,
                      struct vd_core *core)
{
    memset(ss, 0, sizeof(*ss));
    ss->loop = loop;
    ss->core = core;
    uv_idle_init(loop, &ss->closer);
    ss->closer.data = ss;
    uv_timer_init(loop, &ss->deadlines);
    ss->deadlines.data = ss;
    uint32_t every = core->cfg.hello_timeout_ms < core->cfg.frame_timeout_ms
                         ? core->cfg.hello_timeout_ms
                         : core->cfg.frame_timeout_ms;
    every = every / 4 < 50 ? 50 : every / 4 > 1000 ? 1000 : every / 4;
    uv_timer_start(&ss->deadlines, on_deadlines, every, every);
    uv_unref((uv_handle_t *)&ss->deadlines);
}

/* Turned away: one error frame, then closed once it is written (the
 * session is not the core's). */
static void refuse(struct vd_session *s, int err, const char *message)
{
    struct vram_jw jw = {0};
    struct vram_enc e = {.w = &jw};
    if (vram_encode_reply(&e, NULL, 0, err, message, false, NULL, NULL) == 0 &&
        vram_codec_tx(&s->codec, jw.p, jw.len, NULL, 0) == 0 && flush(s) == 0 &&
        s->inflight) {
        vram_jw_free(&jw);
        snprintf(s->why, sizeof(s->why), "refused");
        s->closing = s->drain = true;
        return;
    }
    vram_jw_free(&jw);
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
    s->ss = ss;
    s->pin = pin;
    s->accepted_ms = vp_now_ms();
    vram_codec_init(&s->codec, true);
    e = vp_stream_open(ss->loop, &s->pipe, &conn.h);
    s->pipe.data = s;
    /* Listed from here on: every way out goes through on_closer. */
    s->next = ss->list;
    ss->list = s;
    if (e < 0) {
        free(id);
        snprintf(s->why, sizeof(s->why), "cannot open its pipe: %s", strerror(-e));
        vd_session_close(s, s->why, false);
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
    if (vd_core_client_open(ss->core, s, &peer, &s->client, &ref) < 0) {
        refuse(s, ref.err, ref.message);
        return;
    }
    s->admitted = true;
    e = uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
    if (e < 0)
        vd_session_close(s, uv_words(e), false);
}

void vd_session_accept(struct vd_sessions *ss, vp_handle h)
{
    (void)ss;
    vp_close(&h); /* Windows: vd_session_accept_pipe */
}

void vd_sessions_stop(struct vd_sessions *ss)
{
    ss->stopping = true;
    uv_timer_stop(&ss->deadlines);
    for (struct vd_session *s = ss->list; s; s = s->next)
        vd_session_close(s, "daemon shutting down", false);
    if (!ss->list)
        uv_stop(ss->loop);
    else if (!uv_is_active((uv_handle_t *)&ss->closer))
        uv_idle_start(&ss->closer, on_closer);
}
