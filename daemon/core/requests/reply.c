/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/requests/reply.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/requests/apply_effects.h"
#include "daemon/log.h"
#include "platform/platform.h"
#include "daemon/core/requests/send.h"
#include "gen/vram_msg.h"

/* Map entries one frame carries at most, besides its 32 handles: a frame
 * stays well inside the payload limit. */
#define MAP_PER_FRAME 1024

static void set_array(void *fields, const struct vw_fdesc *f, void *v,
                      size_t n)
{
    char *p = (char *)fields + f->off;
    memcpy(p, &v, sizeof(v));
    memcpy(p + sizeof(void *), &n, sizeof(n));
}

/* ---- a reply larger than a frame --------------------------------------- */

/* What one frame of a split reply carries at most: well inside the payload
 * limit, and small enough not to hold a peer's other replies up long. */
#define SPLIT_BUDGET (256u << 10)

static size_t encoded_len(const struct vw_tdesc *t, const void *obj)
{
    struct vw_jw w = {0};
    struct vw_enc e = {.w = &w};
    size_t n = vw_encode_object(&e, t, obj) == 0 && !w.oom ? w.len : SIZE_MAX;
    vw_jw_free(&w);
    return n;
}

struct split {
    struct vd_request *rq;
    const struct vw_tdesc *t;
    const void *rep;   /* the whole reply */
    char frame[sizeof(union vw_rep_any)]; /* the frame being filled */
    struct vw_arena a; /* its arrays */
    size_t *cap;       /* per field of t: room of the frame's array */
    size_t bytes;
    int err;
};

static int split_flush(struct split *sp, bool more)
{
    int r = vd_send_reply(sp->rq->core, sp->rq->client, sp->rq->type,
                          sp->rq->id, 0, NULL, more, sp->frame, NULL, NULL);
    const struct vw_fdesc *fs = sp->t->fields;
    for (uint32_t i = 0; i < sp->t->nfields; i++)
        if (fs[i].kind == VW_K_ARRAY) {
            set_array(sp->frame, &fs[i], NULL, 0);
            sp->cap[i] = 0;
        }
    vw_arena_free(&sp->a);
    sp->bytes = 0;
    return r;
}

/* Appends item (of field f's type) to the frame, sending the frame first
 * when the item would not fit. */
static int split_add(struct split *sp, uint32_t fi, const void *item, size_t len)
{
    const struct vw_fdesc *f = &sp->t->fields[fi];
    if (sp->bytes && sp->bytes + len > SPLIT_BUDGET) {
        int r = split_flush(sp, true);
        if (r < 0)
            return r;
    }
    size_t isz = f->type ? f->type->size : sizeof(uint64_t);
    char *p = sp->frame + f->off;
    void *v;
    size_t n;
    memcpy(&v, p, sizeof(v));
    memcpy(&n, p + sizeof(void *), sizeof(n));
    if (vw_arena_grow(&sp->a, &v, n, &sp->cap[fi], isz, 64) < 0)
        return -ENOMEM;
    memcpy((char *)v + n * isz, item, isz);
    set_array(sp->frame, f, v, n + 1);
    sp->bytes += len;
    return 0;
}

/* An item too large for a frame: copies of it, each with a slice of its
 * array of objects, which the library joins again (vw_merge). */
static int split_item(struct split *sp, uint32_t fi, const void *item)
{
    const struct vw_tdesc *it = sp->t->fields[fi].type;
    const struct vw_fdesc *g = NULL;
    for (uint32_t k = 0; it && k < it->nfields; k++)
        if (it->fields[k].kind == VW_K_ARRAY && it->fields[k].item == VW_K_OBJECT)
            g = &it->fields[k];
    if (!g || it->fields[0].kind != VW_K_U32)
        return -EMSGSIZE;
    char copy[4096];
    if (it->size > sizeof(copy))
        return -EMSGSIZE;
    memcpy(copy, item, it->size);
    char *v;
    size_t n;
    memcpy(&v, copy + g->off, sizeof(v));
    memcpy(&n, copy + g->off + sizeof(void *), sizeof(n));
    set_array(copy, g, NULL, 0);
    size_t base = encoded_len(it, copy), from = 0, bytes = base;
    for (size_t k = 0; k <= n; k++) {
        size_t len = k < n ? encoded_len(g->type, v + k * g->type->size) + 1 : 0;
        if (k < n && len > SPLIT_BUDGET / 2)
            return -EMSGSIZE;
        if (k == n || (bytes + len > SPLIT_BUDGET / 2 && k > from)) {
            set_array(copy, g, v + from * g->type->size, k - from);
            int r = split_add(sp, fi, copy, bytes);
            if (r < 0)
                return r;
            from = k;
            bytes = base;
        }
        bytes += len;
    }
    return 0;
}

/* A reply larger than a frame, in frames of at most SPLIT_BUDGET bytes
 * (more: true on all but the last): its arrays are cut between items, and
 * an item larger than a frame between the items of its own array. Every
 * frame carries the other fields. */
static int send_split(struct vd_request *rq, const void *rep)
{
    const struct vw_tdesc *t = vw_requests[rq->type].rep;
    struct split sp = {.rq = rq, .t = t, .rep = rep};
    size_t caps[64] = {0};
    if (t->nfields > 64 || t->size > sizeof(sp.frame))
        return -EMSGSIZE;
    sp.cap = caps;
    memcpy(sp.frame, rep, t->size);
    for (uint32_t i = 0; i < t->nfields; i++)
        if (t->fields[i].kind == VW_K_ARRAY)
            set_array(sp.frame, &t->fields[i], NULL, 0);
    int r = 0;
    for (uint32_t i = 0; r == 0 && i < t->nfields; i++) {
        const struct vw_fdesc *f = &t->fields[i];
        if (f->kind != VW_K_ARRAY || f->item != VW_K_OBJECT)
            continue;
        char *v;
        size_t n;
        memcpy(&v, (const char *)rep + f->off, sizeof(v));
        memcpy(&n, (const char *)rep + f->off + sizeof(void *), sizeof(n));
        for (size_t k = 0; r == 0 && k < n; k++) {
            const void *item = v + k * f->type->size;
            size_t len = encoded_len(f->type, item) + 1;
            r = len > SPLIT_BUDGET / 2 ? split_item(&sp, i, item)
                                       : split_add(&sp, i, item, len);
        }
    }
    /* Arrays of numbers and strings go whole, in the last frame. */
    for (uint32_t i = 0; i < t->nfields; i++)
        if (t->fields[i].kind == VW_K_ARRAY && t->fields[i].item != VW_K_OBJECT)
            memcpy(sp.frame + t->fields[i].off, (const char *)rep + t->fields[i].off,
                   sizeof(void *) + sizeof(size_t));
    if (r == 0)
        r = split_flush(&sp, false);
    vw_arena_free(&sp.a);
    return r;
}

/* ---- a reply with chunks, sent as the connection takes it --------------- */

/* The entries of the frame that starts at entry i: up to MAP_PER_FRAME, and
 * the frame's handles at most. */
static size_t frame_end(const struct vw_t_map_entry *map, size_t n, size_t i,
                        int *nfd)
{
    size_t k = i;
    int f = 0;
    while (k < n && k - i < MAP_PER_FRAME) {
        if (map[k].has_fd && f++ == VW_MAX_FDS_PER_FRAME) {
            f--;
            break;
        }
        k++;
    }
    *nfd = f;
    return k;
}

/* A reply's map, frame by frame. Each frame's handles are made just before
 * it goes, and only while the connection has room for them (send.h): a
 * grant of 18,000 chunks holds a few hundred fds in the daemon, not 18,000,
 * and a client slower than the daemon waits instead of being dropped for
 * not reading. The last frame, which carries the reply's other fields, was
 * encoded when the reply was made (its handles are filled in as it goes). */
struct stream {
    int type;
    uint64_t id;
    int err;         /* the reply's own error */
    char *message;   /* ... and its message */
    struct vw_t_map_entry *map;
    size_t nmap, next; /* the next entry to send */
    size_t last_from;  /* where the last frame starts */
    char *last_text;   /* the last frame, encoded (success only) */
    size_t last_len;
    int map_error;     /* a chunk's memory could not be made */
    unsigned frames;   /* sent so far */
};

/* A reply of at least this many chunks gives the heap back when it is
 * done: what it made on the way (its effects, frames and map) would
 * otherwise stay resident, freed at the heap's top (about 6 MiB after 256
 * clients' grants at 8 x 141 GiB; a trim costs well under a millisecond). */
#define TRIM_AFTER 1024

static void stream_free(void *p)
{
    struct stream *s = p;
    for (size_t i = s->next; i < s->nmap; i++)
        if (s->map[i].has_fd)
            vp_close(&s->map[i].fd);
    bool big = s->nmap >= TRIM_AFTER;
    free(s->map);
    free(s->message);
    free(s->last_text);
    free(s);
    if (big)
        vp_heap_trim();
}

/* Makes the handles of entries [i, k): those the backend cannot make go
 * back to the pool, and their entries out of the frame (moves stay). */
static size_t make_handles(struct vd_core *core, struct vd_client *c,
                           struct stream *s, size_t i, size_t k)
{
    uint64_t failed[VW_MAX_FDS_PER_FRAME];
    size_t nfailed = 0, w = i;
    bool made = false;
    for (size_t j = i; j < k; j++) {
        struct vw_t_map_entry *e = &s->map[j];
        if (e->has_fd) {
            int r = core->backend->ops->chunk_handle(
                core->backend, (uint32_t)(e->chunk >> 32), (uint32_t)e->chunk,
                &e->fd);
            if (r < 0) {
                s->map_error = r;
                failed[nfailed++] = e->chunk;
                continue;
            }
            core->counters.grants++;
            made = true;
        }
        s->map[w++] = *e;
    }
    if (made) /* the pool refill keeps out of the client's imports */
        core->last_grant_ns = vp_now_ns();
    if (nfailed)
        vd_effects_give_back(core, c, failed, nfailed, s->map_error);
    return w;
}

static int stream_pump(struct vd_core *core, struct vd_client *c, void *p)
{
    struct stream *s = p;
    const struct vw_fdesc *mapf = vw_field(vw_requests[s->type].rep, "map");
    while (s->next < s->nmap) {
        size_t i = s->next;
        int nfd;
        size_t k = frame_end(s->map, s->nmap, i, &nfd);
        if (nfd > vd_send_room(core, c))
            return 0;
        bool last = k == s->nmap;
        /* Entries the backend failed are dropped from [i, k): the frame
         * ends at w, and the next one still starts at k. */
        size_t w = make_handles(core, c, s, i, k);
        int r;
        if (last && s->last_text && !s->map_error) {
            vp_handle hs[VW_MAX_FDS_PER_FRAME];
            int n = 0;
            for (size_t j = i; j < w; j++)
                if (s->map[j].has_fd) {
                    hs[n++] = s->map[j].fd;
                    s->map[j].has_fd = false;
                }
            char *text = s->last_text;
            s->last_text = NULL;
            r = vd_send_text_now(core, c, s->type, text, s->last_len, hs, n);
        } else {
            union vw_rep_any scratch;
            memset(&scratch, 0, sizeof(scratch));
            set_array(&scratch, mapf, s->map + i, w - i);
            int err = s->err ? s->err : last ? s->map_error : 0;
            const char *msg = s->err ? s->message
                              : "the backend could not create chunk memory; "
                                "what was mapped is listed, the rest "
                                "returned to the pool";
            int taken = 0;
            r = vd_send_reply_now(core, c, s->type, s->id, err,
                                  err ? msg : NULL, !last, &scratch, "map",
                                  &taken);
            /* The frame took (or closed) its handles. */
            for (size_t j = i; j < w; j++)
                s->map[j].has_fd = false;
        }
        s->next = k;
        if (r < 0)
            return r;
        if (!last && ++s->frames == 2 && s->type == core->crash_mid_reply) {
            vlog(VLOG_WARNING, "fault injection: killed after two frames of "
                 "a %s reply (%zu of %zu entries sent)",
                 vw_requests[s->type].name, s->next, s->nmap);
            vp_proc_kill_self();
        }
    }
    return 1;
}

/* Sends the reply with map (taken) over as many frames as it needs. */
static int send_mapped(struct vd_request *rq, int err, const char *message,
                       void *fields, struct vw_t_map_entry *map, size_t nmap)
{
    const struct vw_mdesc *m = &vw_requests[rq->type];
    const struct vw_fdesc *mapf = vw_field(m->rep, "map");
    struct stream *s = calloc(1, sizeof(*s));
    if (!s) {
        free(map);
        return -ENOMEM;
    }
    *s = (struct stream){.type = rq->type, .id = rq->id, .err = err,
                         .map = map, .nmap = nmap};
    if (err && message && !(s->message = strdup(message))) {
        stream_free(s);
        return -ENOMEM;
    }
    for (size_t i = 0, k; i < nmap; i = k) {
        int nfd;
        k = frame_end(map, nmap, i, &nfd);
        if (k == nmap)
            s->last_from = i;
    }
    if (!err && fields) {
        set_array(fields, mapf, map + s->last_from, nmap - s->last_from);
        int nh = 0;
        int r = vd_send_encode_reply(rq->client->version, rq->type, rq->id, 0,
                                     NULL, false, fields,
                                     NULL, &s->last_text, &s->last_len, &nh);
        set_array(fields, mapf, NULL, 0);
        if (r < 0) {
            stream_free(s);
            return r;
        }
    }
    return vd_send_part(rq->core, rq->client, s, stream_pump, stream_free);
}

void vd_reply(struct vd_request *rq, int err, void *rep)
{
    struct vd_core *core = rq->core;
    struct vd_effects_out out = {0};
    vd_effects_apply(core, &rq->fx, rq->client, &out);
    const struct vw_mdesc *m = &vw_requests[rq->type];
    const char *message = err ? rq->why : NULL;
    if (!err && out.map_error) {
        err = out.map_error;
        message = "out of memory listing the chunks mapped";
    }
    const struct vw_fdesc *mapf = vw_field(m->rep, "map");
    const struct vw_fdesc *unmapf = vw_field(m->rep, "unmap");
    void *fields = rep;
    if (fields && unmapf)
        set_array(fields, unmapf, out.unmap, out.nunmap);
    if (mapf && out.nmap) {
        int r = send_mapped(rq, err, message, err ? NULL : fields, out.map,
                            out.nmap);
        out.map = NULL;
        out.nmap = 0;
        if (r < 0 && r != -ECONNABORTED)
            vlog(VLOG_ERR, "client %u: a %s reply could not be sent: %s",
                 rq->client->id, m->name, strerror(-r));
    } else {
        int r = vd_send_reply_flags(core, rq->client, rq->type, rq->id, err,
                                    message, false, fields,
                                    err && mapf ? "map" : err ? "" : NULL, NULL,
                                    err ? 0 : rq->send_flags);
        if (r == -EMSGSIZE && !mapf && fields && !err) {
            /* status at the scale of hundreds of clients and regions */
            r = send_split(rq, fields);
            if (r == -EMSGSIZE || r == -ENOMEM) {
                vlog(VLOG_ERR, "client %u: a %s reply could not be split into "
                     "frames: %s", rq->client->id, m->name, strerror(-r));
                vd_send_reply(core, rq->client, rq->type, rq->id, r,
                              "the reply is too large for the protocol's frames",
                              false, NULL, "", NULL);
            }
        }
    }
    if (fields && unmapf)
        set_array(fields, unmapf, NULL, 0);
    vd_effects_out_free(&out);
    vd_effects_flush_budget(core);
    if (rq->close_after && rq->client->conn && !rq->client->closing) {
        if (vd_send_pending(rq->client)) {
            rq->client->close_when_sent = true; /* once the outbox went */
        } else {
            rq->client->closing = true;
            core->port.close(core->port.ctx, rq->client->conn,
                             "closed after a fatal error reply", true);
        }
    }
}
