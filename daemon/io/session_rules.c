/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/io/session_rules.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/clock.h"
#include "daemon/core/requests/lifecycle.h"
#include "platform/mem.h"
#include "proto/msg.h"

/* What the core may queue before it waits for the peer to read: a reply's
 * handles are made only as they fit here (the connection holds more in
 * flight, up to its buffer). Handles that do not wait in the codec (pushed
 * at once on Windows) leave bytes to bound it. */
#define ROOM_HANDLES 1024
#define ROOM_BYTES (4u << 20)

static void on_closer(uv_idle_t *idle);

void vd_rules_start(struct vd_session_state *st, struct vd_sessions *ss,
                    void *owner, struct vw_codec *codec)
{
    st->ss = ss;
    st->owner = owner;
    st->codec = codec;
    st->accepted_ms = vp_now_ms();
}

void vd_rules_list(struct vd_session_state *st)
{
    st->next = st->ss->list;
    st->ss->list = st;
}

void vd_rules_schedule(struct vd_session_state *st)
{
    if (st->listed)
        return;
    st->listed = true;
    st->next_closing = st->ss->closing;
    st->ss->closing = st;
    if (!uv_is_active((uv_handle_t *)&st->ss->closer))
        uv_idle_start(&st->ss->closer, on_closer);
}

bool vd_rules_pending(const struct vd_session_state *st)
{
    return vw_codec_tx_pending(st->codec) || st->inflight;
}

bool vd_rules_close(struct vd_session_state *st, const char *why,
                    bool after_flush)
{
    if (st->closing && !(st->drain && !after_flush))
        return false;
    if (!st->closing)
        snprintf(st->why, sizeof(st->why), "%s", why);
    st->closing = true;
    st->drain = after_flush && vd_rules_pending(st);
    if (!st->drain)
        vd_rules_schedule(st);
    return true;
}

int vd_rules_send_refused(const struct vd_session_state *st, vp_handle *hs,
                          int n)
{
    if (!st->closing || st->drain)
        return 0;
    /* The port takes the handles, sent or not. */
    for (int i = 0; i < n; i++)
        vp_close(&hs[i]);
    return -ECONNABORTED;
}

void vd_rules_account(struct vd_session_state *st)
{
    size_t now = vw_codec_tx_bytes(st->codec) + st->inflight;
    st->ss->queued = st->ss->queued - st->queued + now;
    st->queued = now;
    if (now > st->queued_peak)
        st->queued_peak = now;
}

/* Over the cap on all peers' queued output: the peer with the most queued
 * (one that does not read) is dropped, so memory stays bounded whatever
 * the number of such peers. */
void vd_rules_enforce_queue_cap(struct vd_sessions *ss)
{
    size_t cap = ss->core->cfg.queued_bytes;
    while (ss->queued > cap) {
        struct vd_session_state *big = NULL;
        for (struct vd_session_state *x = ss->list; x; x = x->next)
            if (!x->closing && (!big || x->queued > big->queued))
                big = x;
        if (!big || !big->queued)
            return;
        char why[192];
        snprintf(why, sizeof(why), "the peers' queued output passed "
                 "limits.queued_bytes (%zu MiB); this one did not read %zu "
                 "KiB", cap >> 20, big->queued >> 10);
        big->drain = false;
        ss->calls->close(big->owner, why, false);
        /* Its queue will never go out: freed now, not at the end of the
         * loop turn (one turn may drop many such peers). What a stream
         * holds in flight goes when the stream is closed. */
        vw_codec_tx_drop(big->codec);
        ss->queued -= big->queued;
        big->queued = 0;
    }
}

int vd_rules_sent(struct vd_session_state *st)
{
    vd_rules_account(st);
    vd_rules_enforce_queue_cap(st->ss);
    return st->closing && !st->drain ? -ECONNABORTED : 0;
}

int vd_rules_room(const struct vd_session_state *st)
{
    if (st->closing)
        return 0;
    if (vw_codec_tx_bytes(st->codec) + st->inflight > ROOM_BYTES)
        return 0;
    int n = ROOM_HANDLES - st->codec->tx_handles;
    return n > 0 ? n : 0;
}

void vd_rules_received(struct vd_session_state *st)
{
    if (vw_codec_rx_idle(st->codec))
        st->partial_since_ms = 0;
    else if (!st->partial_since_ms)
        st->partial_since_ms = vp_now_ms();
}

int vd_rules_queue_refusal(struct vw_codec *c, int err, const char *message)
{
    struct vw_jw jw = {0};
    struct vw_enc e = {.w = &jw};
    int r = vw_encode_reply(&e, NULL, 0, err, message, false, NULL, NULL);
    if (r == 0)
        r = vw_codec_tx(c, jw.p, jw.len, NULL, 0);
    vw_jw_free(&jw);
    return r;
}

void vd_rules_free(const struct vd_session_state *st, void *mem)
{
    bool heavy = st->queued_peak > (1u << 20);
    free(mem);
    if (heavy)
        vp_heap_trim(); /* what its queue held goes back to the system */
}

/* The end of the loop turn: sessions asked to close are closed, and the
 * core hears of each it knew. */
static void on_closer(uv_idle_t *idle)
{
    struct vd_sessions *ss = idle->data;
    while (ss->closing) {
        struct vd_session_state *st = ss->closing;
        ss->closing = st->next_closing;
        struct vd_session_state **pp = &ss->list;
        while (*pp && *pp != st)
            pp = &(*pp)->next;
        if (*pp)
            *pp = st->next;
        ss->queued -= st->queued;
        st->queued = 0;
        /* Copies: from its release on, the session is the platform's to
         * free. */
        bool admitted = st->admitted;
        uint32_t client = st->client;
        char why[sizeof(st->why)];
        snprintf(why, sizeof(why), "%s", st->why);
        ss->calls->release(st->owner);
        /* Closes, even of sessions the core's reaction asks for, wait for
         * the next turn. */
        if (admitted)
            vd_core_client_closed(ss->core, client, why);
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
    for (struct vd_session_state *st = ss->list; st; st = st->next) {
        if (st->closing || !st->admitted)
            continue;
        char why[128];
        if (now - st->accepted_ms > (int64_t)cfg->hello_timeout_ms &&
            !vd_core_client_greeted(ss->core, st->client)) {
            snprintf(why, sizeof(why), "said no hello within %u ms "
                     "(limits.hello_timeout_ms)", cfg->hello_timeout_ms);
            ss->calls->close(st->owner, why, false);
        } else if (st->partial_since_ms &&
                   now - st->partial_since_ms > (int64_t)cfg->frame_timeout_ms) {
            snprintf(why, sizeof(why), "left a frame half-sent for %u ms "
                     "(limits.frame_timeout_ms)", cfg->frame_timeout_ms);
            ss->calls->close(st->owner, why, false);
        }
    }
}

void vd_sessions_init(struct vd_sessions *ss, uv_loop_t *loop,
                      struct vd_core *core, const struct vd_session_calls *calls)
{
    memset(ss, 0, sizeof(*ss));
    ss->loop = loop;
    ss->core = core;
    ss->calls = calls;
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

void vd_sessions_stop(struct vd_sessions *ss)
{
    ss->stopping = true;
    uv_timer_stop(&ss->deadlines);
    for (struct vd_session_state *st = ss->list; st; st = st->next)
        ss->calls->close(st->owner, "daemon shutting down", false);
    if (!ss->list)
        uv_stop(ss->loop);
    else if (!uv_is_active((uv_handle_t *)&ss->closer))
        uv_idle_start(&ss->closer, on_closer);
}

void vd_rules_queue_failed(struct vd_session_state *st, int r, size_t queued)
{
    char why[160];
    if (r == -ENOBUFS)
        snprintf(why, sizeof(why), "the peer does not read its connection "
                 "(%zu KiB queued, at most %u MiB or %u handles)", queued >> 10,
                 VW_CODEC_MAX_TX_BYTES >> 20, VW_CODEC_MAX_TX_HANDLES);
    else
        snprintf(why, sizeof(why), "cannot queue a message: %s", strerror(-r));
    st->ss->calls->close(st->owner, why, false);
}
