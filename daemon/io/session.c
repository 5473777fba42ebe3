#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "lifecycle.h"
#include "log.h"
#include "msg.h"
#include "send.h"
#include "clock.h"
#include "mem.h"
#include "peer.h"

struct vd_session {
    struct vd_session *next, *next_closing;
    struct vd_sessions *ss;
    uint32_t client;
    vp_handle h;
    struct vp_watch watch;
    struct vram_wire wire;
    bool closing; /* no more reads; closed once queued (drain) or at once */
    bool drain;   /* close once what is queued went out */
    bool listed;  /* on the closing list */
    int64_t accepted_ms;     /* hello is due within limits.hello_timeout_ms */
    int64_t partial_since_ms; /* a frame begun and not finished, or 0 */
    size_t queued;            /* its bytes counted in ss->queued */
    size_t queued_peak;
    char why[160];
};

static void on_ready(struct vp_watch *w, int status, int events);
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

void vd_session_close(void *session, const char *why, bool after_flush)
{
    struct vd_session *s = session;
    if (s->closing && !(s->drain && !after_flush))
        return;
    if (!s->closing)
        snprintf(s->why, sizeof(s->why), "%s", why);
    s->closing = true;
    s->drain = after_flush && vram_wire_pending(&s->wire);
    if (s->drain) {
        vp_watch_set(&s->watch, VP_WRITABLE, on_ready);
        return;
    }
    /* The watch stays as it is until on_closer closes it, before the loop
     * polls again (on_ready ignores a closing session meanwhile): one
     * epoll_ctl less per connection. */
    schedule(s);
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

/* Keeps the sum of every peer's queued bytes (limits.queued_bytes). */
static void account(struct vd_session *s)
{
    size_t now = vram_codec_tx_bytes(&s->wire.codec);
    s->ss->queued = s->ss->queued - s->queued + now;
    s->queued = now;
    if (now > s->queued_peak)
        s->queued_peak = now;
}

/* Over the cap on all peers' queued output: the peer with the most queued
 * (one that does not read) is dropped, so memory stays bounded whatever
 * the number of such peers. */
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
        /* Its queue will never go out: freed now, not at the end of the
         * loop turn (one turn may drop many such peers). */
        vram_codec_tx_drop(&big->wire.codec);
        ss->queued -= big->queued;
        big->queued = 0;
    }
}

static int flush(struct vd_session *s)
{
    int r = vram_wire_flush(&s->wire);
    if (!s->closing || s->drain)
        account(s);
    if (r < 0 && r != -EAGAIN) {
        s->drain = false;
        vd_session_close(s, conn_error(r), false);
        return r;
    }
    if (r == 0 && s->drain) {
        s->drain = false;
        vp_watch_set(&s->watch, 0, on_ready);
        schedule(s);
        return r;
    }
    vp_watch_set(&s->watch,
                 (s->closing ? 0 : VP_READABLE) | (r == -EAGAIN ? VP_WRITABLE : 0),
                 on_ready);
    return 0;
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
    int r = vram_wire_queue(&s->wire, payload, len, hs, n);
    if (r < 0) {
        char why[160];
        if (r == -ENOBUFS)
            snprintf(why, sizeof(why), "the peer does not read its socket "
                     "(%zu KiB queued, at most %u MiB or %u fds)",
                     vram_codec_tx_bytes(&s->wire.codec) >> 10,
                     VRAM_CODEC_MAX_TX_BYTES >> 20, VRAM_CODEC_MAX_TX_HANDLES);
        else
            snprintf(why, sizeof(why), "cannot queue a message: %s",
                     strerror(-r));
        vd_session_close(s, why, false);
        return r;
    }
    account(s);
    flush(s);
    enforce_queue_cap(s->ss);
    return s->closing && !s->drain ? -ECONNABORTED : 0;
}

/* What the core may queue before it waits for the peer to read: a reply's
 * handles are made only as they fit here (the socket holds more in
 * flight, up to its buffer). */
#define ROOM_HANDLES 1024
#define ROOM_BYTES (4u << 20)

int vd_session_room(void *session)
{
    struct vd_session *s = session;
    if (s->closing)
        return 0;
    if (vram_codec_tx_bytes(&s->wire.codec) > ROOM_BYTES)
        return 0;
    int n = ROOM_HANDLES - s->wire.codec.tx_handles;
    return n > 0 ? n : 0;
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
    if (s->closing)
        return 1;
    vd_core_client_frame(s->ss->core, s->client, f);
    return s->closing ? 1 : 0;
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
    if ((events & VP_WRITABLE) && !s->closing)
        vd_core_client_writable(s->ss->core, s->client);
    if (!(events & VP_READABLE) || s->closing)
        return;
    char why[256];
    int r = vram_wire_read(&s->wire, on_frame, s, why, sizeof(why));
    if (s->closing)
        return;
    if (vram_codec_rx_idle(&s->wire.codec))
        s->partial_since_ms = 0;
    else if (!s->partial_since_ms)
        s->partial_since_ms = vp_now_ms();
    if (r == -ENOTCONN) {
        vd_session_close(s, "disconnected", false);
    } else if (r < 0 && !why[0]) {
        vd_session_close(s, conn_error(r), false);
    } else if (r < 0) {
        s->ss->core->counters.protocol_errors++;
        vd_session_close(s, why, false);
    }
}

static void session_freed(uv_handle_t *h)
{
    struct vd_session *s = ((struct vp_watch *)h->data)->data;
    bool heavy = s->queued_peak > (1u << 20);
    vram_wire_fini(&s->wire);
    free(s);
    if (heavy)
        vp_heap_trim(); /* what its queue held goes back to the system */
}

/* The end of the loop turn: sessions asked to close are closed, and the
 * core hears of each. */
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
        /* The watch goes before the fd (its memory lives until
         * session_freed). */
        vp_watch_close(&s->watch, session_freed);
        vp_close(&s->h);
        ss->queued -= s->queued;
        s->queued = 0;
        /* Closes, even of sessions the core's reaction asks for, wait for
         * the next turn. */
        vd_core_client_closed(ss->core, s->client, s->why);
    }
    uv_idle_stop(idle);
    if (ss->stopping && !ss->list)
        uv_stop(ss->loop);
}

/* Silent peers and half-sent frames hold a slot (and whatever handles
 * came with the frame's first part): both have a deadline. */
static void on_deadlines(uv_timer_t *t)
{
    struct vd_sessions *ss = t->data;
    const struct vd_config *cfg = &ss->core->cfg;
    int64_t now = vp_now_ms();
    for (struct vd_session *s = ss->list; s; s = s->next) {
        if (s->closing)
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

/* Turns a connection away with one error frame (the peer's library reports
 * it as the connect's error), then closes it. */
static void refuse(vp_handle h, int err, const char *message)
{
    struct vram_wire w;
    vram_wire_init(&w, h);
    struct vram_jw jw = {0};
    struct vram_enc e = {.w = &jw};
    if (vram_encode_reply(&e, NULL, 0, err, message, false, NULL, NULL) == 0)
        vram_wire_queue(&w, jw.p, jw.len, NULL, 0);
    vram_jw_free(&jw);
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
    s->ss = ss;
    s->h = h;
    s->accepted_ms = vp_now_ms();
    struct vd_refusal ref;
    if (vd_core_client_open(ss->core, s, &peer, &s->client, &ref) < 0) {
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
        snprintf(s->why, sizeof(s->why), "cannot watch its connection: %s",
                 strerror(-we));
        vd_core_client_closed(ss->core, s->client, s->why);
        vram_wire_fini(&s->wire);
        vp_close(&s->h);
        free(s);
        return;
    }
    s->watch.data = s;
    vp_watch_set(&s->watch, VP_READABLE, on_ready);
    s->next = ss->list;
    ss->list = s;
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
