/* SPDX-License-Identifier: Apache-2.0 */
/* One request and its reply on the current connection: encoded from its
 * typed struct, the reply decoded against the catalogue (a reply that does
 * not match it is an error, never half-read), map entries gathered over
 * the reply's frames, and the events that arrive meanwhile decoded and
 * handed up through the port. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/client_record.h"
#include "proto/errnames.h"
#include "client/lib/error.h"
#include "proto/msg.h"
#include "platform/platform.h"
#include "client/lib/protocol.h"
#include "proto/text.h"
#include "client/lib/transport.h"

static int send_request(vram_client *c, int type, const void *req, uint64_t *id)
{
    /* Its reply, or the events before it, may touch chunks still being
     * mapped in the background: they are mapped first. */
    c->port->settle(c);
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
    r = vc_transport_send(c, text, len);
    free(text);
    if (r < 0)
        return r;
    *id = n;
    return 0;
}

static int gather_map(vram_client *c, struct vram_t_map_entry *map, size_t n);

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
        x->c->port->event(x->c, evt, &ev);
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
        if (gather_map(c, map, n) < 0 && !x->err)
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

static bool reply_done(void *ud)
{
    struct frame_ctx *x = ud;
    return x->c->await_done;
}

/* Reads until the reply to id is complete (or, with id 0, until the
 * connection has nothing more). */
static int pump(vram_client *c, uint64_t id, int *events)
{
    struct frame_ctx x = {.c = c};
    c->await_id = id;
    c->await_done = false;
    c->await_parts = 0;
    struct vc_receiver rx = {.frame = on_frame, .done = reply_done, .ud = &x,
                             .err = &x.err};
    vc_transport_receive(c, id != 0, &rx);
    c->await_id = 0;
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
    c->port->settle(c);
    return pump(c, 0, events);
}

bool vc_rpc_buffered(const vram_client *c)
{
    return vc_transport_buffered(c);
}

int vc_rpc_async(vram_client *c, int type, const void *req)
{
    uint64_t id;
    int e = send_request(c, type, req, &id);
    if (e == 0 && c->nasync < 64)
        c->async_ids[c->nasync++] = id;
    return e;
}

/* ---- map entries, gathered over a reply's frames ------------------------- */

void vc_clear_pending(vram_client *c)
{
    for (size_t i = 0; i < c->npend; i++)
        vp_close(&c->pend[i].h);
    c->npend = 0;
}

/* Takes the map entries of one reply frame (their handles move). */
static int gather_map(vram_client *c, struct vram_t_map_entry *map, size_t n)
{
    if (c->npend + n > c->cappend) {
        size_t cap = c->cappend ? c->cappend : 64;
        while (cap < c->npend + n)
            cap *= 2;
        struct pending_map *v = realloc(c->pend, cap * sizeof(*v));
        if (!v) {
            for (size_t i = 0; i < n; i++)
                if (map[i].has_fd)
                    vp_close(&map[i].fd);
            return -ENOMEM;
        }
        c->pend = v;
        c->cappend = cap;
    }
    for (size_t i = 0; i < n; i++) {
        c->pend[c->npend++] = (struct pending_map){
            .chunk = map[i].chunk, .region = map[i].region, .slot = map[i].slot,
            .h = map[i].has_fd ? map[i].fd : VP_NONE};
        map[i].has_fd = false; /* the handle is the pending entry's now */
        map[i].fd = VP_NONE;
    }
    return 0;
}

/* ---- releases answering recalls (fire and forget) ------------------------ */

void vc_release_queue(vram_client *c, uint64_t id)
{
    if (c->nrelease == c->caprelease) {
        size_t cap = c->caprelease ? c->caprelease * 2 : 64;
        uint64_t *v = realloc(c->release_q, cap * sizeof(*v));
        if (!v)
            return; /* the recall's deadline passes; the daemon says so */
        c->release_q = v;
        c->caprelease = cap;
    }
    c->release_q[c->nrelease++] = id;
}

void vc_send_releases(vram_client *c)
{
    if (!c->nrelease || c->broken)
        return;
    struct vram_req_chunk_release m = {
        .chunks = {.v = c->release_q, .n = c->nrelease}};
    vc_rpc_async(c, VRAM_REQ_CHUNK_RELEASE, &m);
    c->nrelease = 0;
}
