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
    if (c->version && !vw_since_in(vw_requests[type].since, c->version))
        return vc_set_error(c, -EPROTONOSUPPORT, "%s came with protocol version "
                            "%u; the vramd on this connection speaks version %u",
                            vw_requests[type].name,
                            (unsigned)vw_requests[type].since, c->version);
    struct vw_jw w = {0};
    struct vw_enc e = {.w = &w, .version = c->version};
    uint64_t n = ++c->next_id;
    int r = vw_encode_request(&e, &vw_requests[type], n, req);
    size_t len = 0;
    char *text = r == 0 ? vw_jw_take(&w, &len) : NULL;
    vw_jw_free(&w);
    if (!text)
        return vc_set_error(c, r < 0 ? r : -ENOMEM, "cannot encode a %s request",
                            vw_requests[type].name);
    r = vc_transport_send(c, text, len);
    free(text);
    if (r < 0)
        return r;
    *id = n;
    return 0;
}

static int gather_map(vram_client *c, struct vw_t_map_entry *map, size_t n);

/* The pump's state over one reply (pump() reads it whole). */
struct frame_ctx {
    vram_client *c;
    int events;
    int err;
    /* The reply waited for, over its frames. */
    struct vw_merge merge;
    size_t frames, wire_bytes; /* its frames, headers included */
    size_t arena_from;         /* the arena's bytes before it */
    size_t map_entries;        /* gathered from it */
};

static void on_event(struct frame_ctx *x, const struct vw_envelope *env,
                     const cJSON *msg)
{
    int evt = vw_evt_lookup(env->type);
    if (evt < 0)
        return; /* unknown events are tolerated */
    union vw_evt_any ev;
    struct vw_arena a = {0};
    struct vw_dec d = {.arena = &a, .version = x->c->version};
    if (vw_decode(vw_events[evt].req, msg, &ev, &d) == 0) {
        x->c->port->event(x->c, evt, &ev);
        x->events++;
    }
    vw_arena_free(&a);
}

/* An event read on the background thread, kept for vc_rpc_deliver. One
 * that cannot be kept is lost, as one the daemon could not send would be:
 * a recall's deadline then passes, and vramd says so. */
static void hold_event(vram_client *c, const struct vw_codec_frame *f)
{
    if (c->nheld == c->capheld) {
        size_t cap = c->capheld ? c->capheld * 2 : 16;
        struct vc_held_event *v = realloc(c->held, cap * sizeof(*v));
        if (!v)
            return;
        c->held = v;
        c->capheld = cap;
    }
    char *text = malloc(f->len ? f->len : 1);
    if (!text)
        return;
    memcpy(text, f->payload, f->len);
    c->held[c->nheld++] = (struct vc_held_event){.text = text, .len = f->len};
}

/* The daemon's words (a refusal's message) as the caller will show them:
 * control characters escaped (proto/text.h). */
static int set_daemon_error(vram_client *c, int err, const char *message)
{
    char text[sizeof(c->last_error)]; /* cut between whole escapes */
    vw_text_escape(text, sizeof(text), message);
    return vc_set_error(c, err, "%s", text);
}

/* A reply past VW_MAX_REPLY_BYTES, on the wire or decoded, is refused
 * and the connection given up: the daemon might never end it, and nothing
 * after it could be trusted to be in step. */
static bool over_bounds(struct frame_ctx *x)
{
    vram_client *c = x->c;
    size_t held = c->await_arena->bytes - x->arena_from +
                  x->map_entries * sizeof(struct vw_t_map_entry);
    if (x->wire_bytes <= VW_MAX_REPLY_BYTES && held <= VW_MAX_REPLY_BYTES)
        return false;
    c->broken = true;
    int e = vc_set_error(c, -EPROTO, "the daemon's %s reply is over %u MiB "
                         "(%llu frames, %llu bytes, %llu bytes decoded), more "
                         "than any reply may be: refused, and the connection "
                         "closed", vw_requests[c->await_type].name,
                         VW_MAX_REPLY_BYTES >> 20,
                         (unsigned long long)x->frames,
                         (unsigned long long)x->wire_bytes,
                         (unsigned long long)held);
    if (!x->err)
        x->err = e;
    return true;
}

/* A frame of the reply waited for: its map entries, and the fields of the
 * last one. */
static void on_reply(struct frame_ctx *x, const struct vw_envelope *env,
                     const cJSON *msg, struct vw_codec_frame *f)
{
    vram_client *c = x->c;
    const struct vw_tdesc *rep = vw_requests[c->await_type].rep;
    const struct vw_fdesc *mapf = vw_field(rep, "map");
    union vw_rep_any part;
    if (x->frames++ == 0)
        x->arena_from = c->await_arena->bytes;
    x->wire_bytes += VW_FRAME_HEADER_SIZE + f->len;
    /* A reply of one frame is decoded where the caller reads it; one of
     * several is merged frame by frame (vw_merge_add: arrays grow in
     * place, and are checked against the catalogue as a whole). After a
     * frame was refused, the rest are counted, not read. */
    bool several = env->ok && (env->more || c->await_parts);
    void *into = env->more || !env->ok || several ? &part : c->await_rep;
    struct vw_arena scratch = {0};
    struct vw_dec d = {.arena = several ? c->await_arena
                                  : into == &part ? &scratch : c->await_arena,
                         .frame = f,
                         .partial = env->more || !env->ok,
                         .version = c->version};
    if (several && !c->await_parts)
        vw_merge_begin(&x->merge, rep, c->await_rep, "map", c->await_arena);
    int r = x->err ? -ECANCELED : vw_decode(rep, msg, into, &d);
    if (r == 0 && several && (r = vw_merge_add(&x->merge, into)) < 0) {
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
        struct vw_t_map_entry *map;
        size_t n;
        memcpy(&map, (char *)into + mapf->off, sizeof(map));
        memcpy(&n, (char *)into + mapf->off + sizeof(void *), sizeof(n));
        x->map_entries += n;
        if (gather_map(c, map, n) < 0 && !x->err)
            x->err = vc_set_error(c, -ENOMEM, "out of memory for a reply");
    }
    vw_arena_free(&scratch);
    if (over_bounds(x) || c->broken)
        return;
    if (env->more)
        return;
    if (!env->ok && !x->err) {
        c->await_err = vw_errno_from_name(env->error);
        set_daemon_error(c, c->await_err, env->message ? env->message
                                                       : "request refused");
    }
    c->await_done = true;
}

static int on_frame(void *ud, struct vw_codec_frame *f)
{
    struct frame_ctx *x = ud;
    vram_client *c = x->c;
    /* Before the hello's reply, a frame of any version this library
     * speaks (an old vramd's refusal is of its own); after it, of the one
     * it agreed on. */
    if (c->version ? f->version != c->version
                   : f->version < VW_PROTOCOL_OLDEST ||
                         f->version > VW_PROTOCOL_VERSION) {
        c->broken = true;
        if (c->version)
            x->err = vc_set_error(c, -EPROTONOSUPPORT, "vramd sent a frame of "
                                  "protocol version %u on a connection that "
                                  "speaks version %u", f->version, c->version);
        else
            x->err = vc_set_error(c, -EPROTONOSUPPORT, "protocol version "
                                  "mismatch: libvram %d to %d, vramd %u",
                                  VW_PROTOCOL_OLDEST, VW_PROTOCOL_VERSION,
                                  f->version);
        return -EPROTONOSUPPORT;
    }
    /* A NUL in a string would end it in C, what follows unseen: no
     * string of the protocol holds one. */
    if (vw_json_has_nul(f->payload, f->len)) {
        c->broken = true;
        x->err = vc_set_error(c, -EPROTO, "the daemon sent a string holding "
                              "a NUL (\\u0000), which no string of the "
                              "protocol may hold");
        return -EPROTO;
    }
    cJSON *msg = cJSON_ParseWithLength(f->payload, f->len);
    struct vw_envelope env;
    char why[256];
    if (!msg || vw_envelope_read(msg, &env, why, sizeof(why)) < 0) {
        cJSON_Delete(msg);
        x->err = vc_set_error(c, -EPROTO, "the daemon sent a frame that is not "
                              "a message");
        return -EPROTO;
    }
    if (env.kind == VW_MSG_EVENT) {
        if (c->hold_events)
            hold_event(c, f);
        else
            on_event(x, &env, msg);
    } else if (env.kind == VW_MSG_REPLY) {
        if (c->await_id && env.id == c->await_id) {
            on_reply(x, &env, msg, f);
        } else if (env.id == 0 && !env.ok) {
            /* A connection-level error (version, limits): the daemon
             * closes. */
            x->err = set_daemon_error(c, vw_errno_from_name(env.error),
                                      env.message ? env.message : "refused");
            c->broken = true;
        } else {
            for (size_t i = 0; i < c->nasync; i++)
                if (c->async_ids[i] == env.id) {
                    if (!env.ok)
                        c->async_error = vw_errno_from_name(env.error);
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
    if (!c->hold_events) /* (events kept: none answered yet) */
        vc_send_releases(c);
    return x.err;
}

int vc_rpc(vram_client *c, int type, const void *req, void *rep,
           struct vw_arena *a)
{
    uint64_t id;
    union vw_rep_any ignored;
    struct vw_arena own = {0};
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
        vw_close_handles(vw_requests[type].rep, &ignored);
    vw_arena_free(&own);
    c->await_rep = NULL;
    c->await_arena = NULL;
    return e;
}

int vc_rpc_send(vram_client *c, int type, const void *req)
{
    uint64_t id;
    int e = send_request(c, type, req, &id);
    if (e == 0) {
        c->later_id = id;
        c->later_type = type;
    }
    return e;
}

int vc_rpc_await(vram_client *c, void *rep, struct vw_arena *a, bool *refused)
{
    c->await_type = c->later_type;
    c->await_rep = rep;
    c->await_arena = a;
    c->await_err = 0;
    c->await_parts = 0;
    uint64_t id = c->later_id;
    c->later_id = 0;
    c->hold_events = true;
    int e = id ? pump(c, id, NULL)
               : vc_set_error(c, -EINVAL, "no request waits for its reply");
    c->hold_events = false;
    *refused = e == 0 && c->await_err != 0;
    if (e == 0 && c->await_err)
        e = c->await_err;
    c->await_rep = NULL;
    c->await_arena = NULL;
    return e;
}

int vc_rpc_deliver(vram_client *c)
{
    struct frame_ctx x = {.c = c};
    /* An event's handler may send (releases): what it reads then is read
     * after the kept ones, so they are taken off the list first. */
    struct vc_held_event *v = c->held;
    size_t n = c->nheld;
    c->held = NULL;
    c->nheld = c->capheld = 0;
    for (size_t i = 0; i < n; i++) {
        cJSON *msg = cJSON_ParseWithLength(v[i].text, v[i].len);
        struct vw_envelope env;
        char why[256];
        if (msg && vw_envelope_read(msg, &env, why, sizeof(why)) == 0)
            on_event(&x, &env, msg);
        cJSON_Delete(msg);
        free(v[i].text);
    }
    free(v);
    return x.events;
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
static int gather_map(vram_client *c, struct vw_t_map_entry *map, size_t n)
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
    struct vw_req_chunk_release m = {
        .chunks = {.v = c->release_q, .n = c->nrelease}};
    vc_rpc_async(c, VW_REQ_CHUNK_RELEASE, &m);
    c->nrelease = 0;
}
