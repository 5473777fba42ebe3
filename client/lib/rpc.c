/* SPDX-License-Identifier: Apache-2.0 */
/* One request and its reply on the current connection: encoded from its
 * typed struct, the reply decoded against the catalogue (a reply that does
 * not match it is an error, never half-read), map entries gathered over
 * the reply's frames, and the events that arrive meanwhile handled. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errnames.h"
#include "internal.h"
#include "msg.h"
#include "platform.h"
#include "text.h"

void vc_conn_setup(vram_client *c)
{
    vram_wire_init(&c->wire, c->h);
    c->blocking = vp_conn_blocking(c->h);
    if (c->blocking) /* bounds each blocking receive; deadlines are ours */
        vp_conn_set_recv_timeout(c->h, 200);
}

static int flush_blocking(vram_client *c)
{
    int64_t deadline = vp_now_ms() + c->timeout_ms;
    for (;;) {
        int r = vram_wire_flush(&c->wire);
        if (r == 0)
            return 0;
        if (r != -EAGAIN) {
            c->broken = true;
            return vc_set_error(c, r, "lost the connection to vramd: %s",
                                strerror(-r));
        }
        int64_t left = deadline - vp_now_ms();
        if (left <= 0)
            return vc_set_error(c, -ETIMEDOUT, "timed out sending to vramd");
        vp_conn_wait(c->h, VP_WRITABLE, (int)left);
    }
}

static int send_request(vram_client *c, int type, const void *req, uint64_t *id)
{
    /* Its reply, or the events before it, may touch chunks still being
     * mapped in the background: they are mapped first. */
    if (c->bg.n)
        vc_bg_finish(c);
    if (c->broken)
        return vc_set_error(c, -ENOTCONN, "the connection to vramd is closed");
    if (c->version && !vram_since_in(vram_requests[type].since, c->version))
        return vc_set_error(c, -EPROTONOSUPPORT, "%s came with protocol version "
                            "%u; the vramd on this connection speaks version %u",
                            vram_requests[type].name,
                            (unsigned)vram_requests[type].since, c->version);
    struct vram_jw w = {0};
    struct vram_enc e = {.w = &w, .version = c->version};
    uint64_t n = ++c->next_id;
    int r = vram_encode_request(&e, &vram_requests[type], n, req);
    size_t len = 0;
    char *text = r == 0 ? vram_jw_take(&w, &len) : NULL;
    vram_jw_free(&w);
    if (!text)
        return vc_set_error(c, r < 0 ? r : -ENOMEM, "cannot encode a %s request",
                            vram_requests[type].name);
    r = vram_wire_queue(&c->wire, text, len, NULL, 0);
    free(text);
    if (r < 0)
        return vc_set_error(c, r, "cannot queue a request: %s", strerror(-r));
    if ((r = flush_blocking(c)) < 0)
        return r;
    *id = n;
    return 0;
}

/* The pump's state over one reply (pump() reads it whole). */
struct frame_ctx {
    vram_client *c;
    int events;
    int err;
    /* The reply waited for, over its frames. */
    struct vram_merge merge;
    size_t frames, wire_bytes; /* its frames, headers included */
    size_t arena_from;         /* the arena's bytes before it */
    size_t map_entries;        /* gathered from it */
};

static void on_event(struct frame_ctx *x, const struct vram_envelope *env,
                     const cJSON *msg)
{
    int evt = vram_evt_lookup(env->type);
    if (evt < 0)
        return; /* unknown events are tolerated */
    union vram_evt_any ev;
    struct vram_arena a = {0};
    struct vram_dec d = {.arena = &a, .version = x->c->version};
    if (vram_decode(vram_events[evt].req, msg, &ev, &d) == 0) {
        vc_event(x->c, evt, &ev);
        x->events++;
    }
    vram_arena_free(&a);
}

/* The daemon's words (a refusal's message) as the caller will show them:
 * control characters escaped (proto/text.h). */
static int set_daemon_error(vram_client *c, int err, const char *message)
{
    char text[sizeof(c->last_error)]; /* cut between whole escapes */
    vram_text_escape(text, sizeof(text), message);
    return vc_set_error(c, err, "%s", text);
}

/* A reply past VRAM_MAX_REPLY_BYTES, on the wire or decoded, is refused
 * and the connection given up: the daemon might never end it, and nothing
 * after it could be trusted to be in step. */
static bool over_bounds(struct frame_ctx *x)
{
    vram_client *c = x->c;
    size_t held = c->await_arena->bytes - x->arena_from +
                  x->map_entries * sizeof(struct vram_t_map_entry);
    if (x->wire_bytes <= VRAM_MAX_REPLY_BYTES && held <= VRAM_MAX_REPLY_BYTES)
        return false;
    c->broken = true;
    int e = vc_set_error(c, -EPROTO, "the daemon's %s reply is over %u MiB "
                         "(%llu frames, %llu bytes, %llu bytes decoded), more "
                         "than any reply may be: refused, and the connection "
                         "closed", vram_requests[c->await_type].name,
                         VRAM_MAX_REPLY_BYTES >> 20,
                         (unsigned long long)x->frames,
                         (unsigned long long)x->wire_bytes,
                         (unsigned long long)held);
    if (!x->err)
        x->err = e;
    return true;
}

/* A frame of the reply waited for: its map entries, and the fields of the
 * last one. */
static void on_reply(struct frame_ctx *x, const struct vram_envelope *env,
                     const cJSON *msg, struct vram_codec_frame *f)
{
    vram_client *c = x->c;
    const struct vram_tdesc *rep = vram_requests[c->await_type].rep;
    const struct vram_fdesc *mapf = vram_field(rep, "map");
    union vram_rep_any part;
    if (x->frames++ == 0)
        x->arena_from = c->await_arena->bytes;
    x->wire_bytes += VRAM_FRAME_HEADER_SIZE + f->len;
    /* A reply of one frame is decoded where the caller reads it; one of
     * several is merged frame by frame (vram_merge_add: arrays grow in
     * place, and are checked against the catalogue as a whole). After a
     * frame was refused, the rest are counted, not read. */
    bool several = env->ok && (env->more || c->await_parts);
    void *into = env->more || !env->ok || several ? &part : c->await_rep;
    struct vram_arena scratch = {0};
    struct vram_dec d = {.arena = several ? c->await_arena
                                  : into == &part ? &scratch : c->await_arena,
                         .frame = f,
                         .partial = env->more || !env->ok,
                         .version = c->version};
    if (several && !c->await_parts)
        vram_merge_begin(&x->merge, rep, c->await_rep, "map", c->await_arena);
    int r = x->err ? -ECANCELED : vram_decode(rep, msg, into, &d);
    if (r == 0 && several && (r = vram_merge_add(&x->merge, into)) < 0) {
        snprintf(d.why, sizeof(d.why), "%s", x->merge.why);
        if (r == -E2BIG) /* a reply that may never end */
            c->broken = true;
        else
            r = -ENOMEM;
    }
    if (env->more)
        c->await_parts++;
    if (r < 0 && r != -ECANCELED) {
        x->err = vc_set_error(c, -EPROTO, "the daemon's reply does not match "
                              "the catalogue: %s", d.why);
    } else if (r == 0 && mapf) {
        struct vram_t_map_entry *map;
        size_t n;
        memcpy(&map, (char *)into + mapf->off, sizeof(map));
        memcpy(&n, (char *)into + mapf->off + sizeof(void *), sizeof(n));
        x->map_entries += n;
        if (vc_gather_map(c, map, n) < 0 && !x->err)
            x->err = vc_set_error(c, -ENOMEM, "out of memory for a reply");
    }
    vram_arena_free(&scratch);
    if (over_bounds(x) || c->broken)
        return;
    if (env->more)
        return;
    if (!env->ok && !x->err) {
        c->await_err = vram_errno_from_name(env->error);
        set_daemon_error(c, c->await_err, env->message ? env->message
                                                       : "request refused");
    }
    c->await_done = true;
}

static int on_frame(void *ud, struct vram_codec_frame *f)
{
    struct frame_ctx *x = ud;
    vram_client *c = x->c;
    /* Before the hello's reply, a frame of any version this library
     * speaks (an old vramd's refusal is of its own); after it, of the one
     * it agreed on. */
    if (c->version ? f->version != c->version
                   : f->version < VRAM_PROTOCOL_OLDEST ||
                         f->version > VRAM_PROTOCOL_VERSION) {
        c->broken = true;
        if (c->version)
            x->err = vc_set_error(c, -EPROTONOSUPPORT, "vramd sent a frame of "
                                  "protocol version %u on a connection that "
                                  "speaks version %u", f->version, c->version);
        else
            x->err = vc_set_error(c, -EPROTONOSUPPORT, "protocol version "
                                  "mismatch: libvram %d to %d, vramd %u",
                                  VRAM_PROTOCOL_OLDEST, VRAM_PROTOCOL_VERSION,
                                  f->version);
        return -EPROTONOSUPPORT;
    }
    /* A NUL in a string would end it in C, what follows unseen: no
     * string of the protocol holds one. */
    if (vram_json_has_nul(f->payload, f->len)) {
        c->broken = true;
        x->err = vc_set_error(c, -EPROTO, "the daemon sent a string holding "
                              "a NUL (\\u0000), which no string of the "
                              "protocol may hold");
        return -EPROTO;
    }
    cJSON *msg = cJSON_ParseWithLength(f->payload, f->len);
    struct vram_envelope env;
    char why[256];
    if (!msg || vram_envelope_read(msg, &env, why, sizeof(why)) < 0) {
        cJSON_Delete(msg);
        x->err = vc_set_error(c, -EPROTO, "the daemon sent a frame that is not "
                              "a message");
        return -EPROTO;
    }
    if (env.kind == VRAM_MSG_EVENT) {
        on_event(x, &env, msg);
    } else if (env.kind == VRAM_MSG_REPLY) {
        if (c->await_id && env.id == c->await_id) {
            on_reply(x, &env, msg, f);
        } else if (env.id == 0 && !env.ok) {
            /* A connection-level error (version, limits): the daemon
             * closes. */
            x->err = set_daemon_error(c, vram_errno_from_name(env.error),
                                      env.message ? env.message : "refused");
            c->broken = true;
        } else {
            for (size_t i = 0; i < c->nasync; i++)
                if (c->async_ids[i] == env.id) {
                    if (!env.ok)
                        c->async_error = vram_errno_from_name(env.error);
                    if (!env.more)
                        c->async_ids[i] = c->async_ids[--c->nasync];
                    break;
                }
        }
    }
    cJSON_Delete(msg);
    if (c->broken)
        return 1;
    /* The reply is whole: what came after it (a recall of a chunk the
     * reply moves, say) waits in the buffer until the caller has applied
     * the reply's map (vc_leave delivers it before the call returns). */
    if (c->await_id && c->await_done)
        return 1;
    return 0;
}

/* Reads until the reply to id is complete (or, with id 0, until the
 * connection has nothing more). */
static int pump(vram_client *c, uint64_t id, int *events)
{
    struct frame_ctx x = {.c = c};
    int64_t deadline = vp_now_ms() + c->timeout_ms;
    c->await_id = id;
    c->await_done = false;
    c->await_parts = 0;
    /* Waiting for a reply on a blocking connection, receives simply wait
     * (up to the receive timeout): no poll before each. */
    c->wire.rx_block = id && c->blocking;
    if (id && !c->blocking)
        vp_conn_wait(c->h, VP_READABLE, c->timeout_ms);
    for (;;) {
        char why[256];
        int r = vram_wire_read(&c->wire, on_frame, &x, why, sizeof(why));
        if (r < 0 && !x.err) {
            c->broken = true;
            x.err = vc_set_error(c, r == -ENOTCONN ? -ECONNRESET : r,
                                 "lost the connection to vramd: %s", why);
        }
        if (x.err && (c->broken || r < 0))
            break;
        if (!id || c->await_done)
            break;
        if (c->wire.rx_block) { /* the receive timed out: check the deadline */
            if (vp_now_ms() >= deadline) {
                x.err = vc_set_error(c, -ETIMEDOUT, "no reply from vramd "
                                     "within %d ms", c->timeout_ms);
                break;
            }
            continue;
        }
        int64_t left = deadline - vp_now_ms();
        if (left <= 0) {
            x.err = vc_set_error(c, -ETIMEDOUT, "no reply from vramd within %d ms",
                                 c->timeout_ms);
            break;
        }
        vp_conn_wait(c->h, VP_READABLE, (int)left);
    }
    c->await_id = 0;
    c->wire.rx_block = false;
    if (events)
        *events = x.events;
    vc_send_releases(c);
    return x.err;
}

int vc_rpc(vram_client *c, int type, const void *req, void *rep,
           struct vram_arena *a)
{
    uint64_t id;
    union vram_rep_any ignored;
    struct vram_arena own = {0};
    c->await_type = type;
    c->await_rep = rep ? rep : &ignored;
    c->await_arena = a ? a : &own;
    c->await_err = 0;
    c->await_parts = 0;
    int e = send_request(c, type, req, &id);
    if (e == 0)
        e = pump(c, id, NULL);
    if (e == 0 && c->await_err)
        e = c->await_err;
    if (!rep && e == 0) /* nothing the caller reads, but handles may be */
        vram_close_handles(vram_requests[type].rep, &ignored);
    vram_arena_free(&own);
    c->await_rep = NULL;
    c->await_arena = NULL;
    return e;
}

int vc_rpc_poll(vram_client *c, int *events)
{
    if (c->bg.n)
        vc_bg_finish(c);
    return pump(c, 0, events);
}

bool vc_rpc_buffered(const vram_client *c)
{
    return vram_codec_rx_buffered(&c->wire.codec) > 0;
}

int vc_rpc_async(vram_client *c, int type, const void *req)
{
    uint64_t id;
    int e = send_request(c, type, req, &id);
    if (e == 0 && c->nasync < 64)
        c->async_ids[c->nasync++] = id;
    return e;
}
