/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/requests/send.h"

#include <errno.h>
#include <stdlib.h>

#include "daemon/core/clients/clients.h"
#include "daemon/log.h"
#include "gen/vram_msg.h"

/* Decodes what was encoded, as a peer will: a frame the catalogue does not
 * describe is a bug, caught in every test that runs the daemon. */
static void self_check(const struct vw_tdesc *t, const char *text,
                       vp_handle *hs, int nh, bool partial)
{
    cJSON *o = cJSON_Parse(text);
    struct vw_codec_frame f = {.nhandles = nh};
    for (int i = 0; i < nh; i++)
        f.handles[i] = hs[i];
    union {
        union vw_rep_any r;
        union vw_evt_any e;
    } out;
    struct vw_arena a = {0};
    struct vw_dec d = {.arena = &a, .frame = &f, .partial = partial};
    int r = o ? vw_decode(t, o, &out, &d) : -EINVAL;
    vw_arena_free(&a);
    cJSON_Delete(o);
    if (r < 0) {
        vlog(VLOG_ERR, "a message that proto/messages.json does not describe: "
             "%s (%s)", d.why, text);
        abort();
    }
}

/* ---- the outbox ---------------------------------------------------------- */

struct out_item {
    struct out_item *next;
    char *text; /* a frame without handles, or NULL for a part */
    size_t len;
    void *part;
    vd_part_fn fn;
    vd_part_free_fn free_fn;
};

struct vd_outbox {
    struct out_item *head, *tail;
    size_t bytes;  /* of its text frames */
    bool pumping;  /* sending from it now: what comes meanwhile queues */
};

/* A client that reads nothing while a part waits: its text frames are
 * bounded as a connection's queue is (the peer is dropped past it). */
#define OUTBOX_MAX_BYTES (64u << 20)

static void item_free(struct out_item *it)
{
    free(it->text);
    if (it->part && it->free_fn)
        it->free_fn(it->part);
    free(it);
}

bool vd_send_pending(const struct vd_client *c)
{
    return c->outbox && c->outbox->head;
}

void vd_send_drop(struct vd_client *c)
{
    if (!c || !c->outbox)
        return;
    struct vd_outbox *o = c->outbox;
    c->outbox = NULL;
    while (o->head) {
        struct out_item *it = o->head;
        o->head = it->next;
        item_free(it);
    }
    free(o);
}

static void drop_peer(struct vd_core *core, struct vd_client *c,
                      const char *why)
{
    /* While it is being sent from, pump() drops it, seeing the close. */
    if (!c->outbox->pumping)
        vd_send_drop(c);
    if (c->conn && !c->closing) {
        c->closing = true;
        core->port.close(core->port.ctx, c->conn, why, false);
    }
}

/* Sends from c's outbox until a part waits for room or it is empty. */
static void pump(struct vd_core *core, struct vd_client *c)
{
    struct vd_outbox *o = c->outbox;
    if (!o || o->pumping)
        return;
    o->pumping = true;
    while (o->head) {
        struct out_item *it = o->head;
        int r;
        if (it->part) {
            r = (!c->conn || c->closing) ? -ECONNABORTED
                                         : it->fn(core, c, it->part);
            if (r == 0)
                break; /* io/ says when there is room */
        } else {
            r = (!c->conn || c->closing)
                    ? -ECONNABORTED
                    : core->port.send(core->port.ctx, c->conn, it->text,
                                      it->len, NULL, 0, 0);
            o->bytes -= it->len;
        }
        o->head = it->next;
        if (!o->head)
            o->tail = NULL;
        item_free(it);
        if (r < 0) {
            /* The connection is being closed: the rest can never go. */
            o->pumping = false;
            vd_send_drop(c);
            return;
        }
    }
    o->pumping = false;
    if (!o->head) {
        c->outbox = NULL;
        free(o);
        if (c->close_when_sent && c->conn && !c->closing) {
            c->closing = true;
            core->port.close(core->port.ctx, c->conn,
                             "closed after a fatal error reply", true);
        }
    }
}

static int push(struct vd_core *core, struct vd_client *c,
                struct out_item *it)
{
    if (!c->outbox && !(c->outbox = calloc(1, sizeof(*c->outbox)))) {
        item_free(it);
        return -ENOMEM;
    }
    struct vd_outbox *o = c->outbox;
    if (o->tail)
        o->tail->next = it;
    else
        o->head = it;
    o->tail = it;
    o->bytes += it->len;
    if (o->bytes > OUTBOX_MAX_BYTES) {
        vlog(VLOG_WARNING, "client %u (%s): %zu MiB wait for it behind a "
             "large reply; it does not read: dropped", c->id, c->name,
             o->bytes >> 20);
        drop_peer(core, c, "the peer does not read its socket");
        return -ENOBUFS;
    }
    return 0;
}

int vd_send_part(struct vd_core *core, struct vd_client *c, void *part,
                 vd_part_fn fn, vd_part_free_fn free_fn)
{
    if (!c->conn || c->closing) {
        free_fn(part);
        return -ECONNABORTED;
    }
    struct out_item *it = calloc(1, sizeof(*it));
    if (!it) {
        free_fn(part);
        return -ENOMEM;
    }
    *it = (struct out_item){.part = part, .fn = fn, .free_fn = free_fn};
    int r = push(core, c, it);
    if (r == 0)
        pump(core, c);
    return r;
}

int vd_send_room(struct vd_core *core, struct vd_client *c)
{
    if (!c->conn || c->closing)
        return 0;
    return core->port.room(core->port.ctx, c->conn);
}

void vd_core_client_writable(struct vd_core *core, uint32_t id)
{
    struct vd_client *c = vd_clients_find(&core->clients, id);
    if (c && vd_send_pending(c))
        pump(core, c);
}

/* ---- frames -------------------------------------------------------------- */

/* text (taken) to c: at once, or behind what waits in its outbox (frames
 * without handles only wait; a part's own frames go now). */
static int send_text(struct vd_core *core, struct vd_client *c, char *text,
                     size_t len, vp_handle *hs, int nh, bool now, unsigned flags)
{
    int r;
    if (len > VW_MAX_PAYLOAD) {
        /* Not queued: the caller splits it (reply.c), nothing is closed. */
        for (int i = 0; i < nh; i++)
            vp_close(&hs[i]);
        r = -EMSGSIZE;
    } else if (!c->conn || c->closing) {
        for (int i = 0; i < nh; i++)
            vp_close(&hs[i]);
        r = -ECONNABORTED;
    } else if (!now && vd_send_pending(c)) {
        struct out_item *it = calloc(1, sizeof(*it));
        if (!it)
            r = -ENOMEM;
        else {
            *it = (struct out_item){.text = text, .len = len};
            text = NULL;
            r = push(core, c, it);
        }
    } else {
        r = core->port.send(core->port.ctx, c->conn, text, len, hs, nh, flags);
    }
    free(text);
    return r;
}

static int send_jw(struct vd_core *core, struct vd_client *c,
                   struct vw_jw *w, vp_handle *hs, int nh, bool now,
                   unsigned flags)
{
    size_t len = 0;
    char *text = vw_jw_take(w, &len);
    if (!text) {
        for (int i = 0; i < nh; i++)
            vp_close(&hs[i]);
        return -ENOMEM;
    }
    return send_text(core, c, text, len, hs, nh, now, flags);
}

int vd_send_event(struct vd_core *core, struct vd_client *c, int evt,
                  const void *fields)
{
    /* An event the connection's version does not have is not sent: its
     * client would not know it. */
    if (!vw_since_in(vw_events[evt].since, c->version))
        return 0;
    struct vw_jw w = {0};
    struct vw_enc e = {.w = &w, .version = c->version};
    int r = vw_encode_event(&e, &vw_events[evt], fields);
    if (r < 0) {
        vw_jw_free(&w);
        return r;
    }
    if (core->check_replies) {
        /* The event's fields, as the library reads them. */
        self_check(vw_events[evt].req, w.p, NULL, 0, false);
    }
    return send_jw(core, c, &w, NULL, 0, false, 0);
}

static int reply(struct vd_core *core, struct vd_client *c, int type,
                 uint64_t id, int err, const char *message, bool more,
                 const void *fields, const char *only, int *taken, bool now,
                 unsigned flags)
{
    struct vw_jw w = {0};
    vp_handle hs[VW_MAX_FDS_PER_FRAME];
    struct vw_enc e = {.w = &w, .hs = hs, .max = VW_MAX_FDS_PER_FRAME,
                         .version = c->version};
    const struct vw_mdesc *m = type >= 0 ? &vw_requests[type] : NULL;
    int r = vw_encode_reply(&e, m, id, err, message, more, fields, only);
    if (taken)
        *taken = e.nh;
    if (r < 0) {
        for (int i = 0; i < e.nh; i++)
            vp_close(&hs[i]);
        vw_jw_free(&w);
        return r;
    }
    if (core->check_replies && m && !err)
        self_check(m->rep, w.p, hs, e.nh, more || only);
    if (e.nh && !now && vd_send_pending(c)) {
        /* Handles never wait in the outbox (only parts make them). */
        for (int i = 0; i < e.nh; i++)
            vp_close(&hs[i]);
        vw_jw_free(&w);
        return -EINVAL;
    }
    return send_jw(core, c, &w, hs, e.nh, now, flags);
}

int vd_send_reply(struct vd_core *core, struct vd_client *c, int type,
                  uint64_t id, int err, const char *message, bool more,
                  const void *fields, const char *only, int *taken)
{
    return reply(core, c, type, id, err, message, more, fields, only, taken,
                 false, 0);
}

int vd_send_reply_flags(struct vd_core *core, struct vd_client *c, int type,
                        uint64_t id, int err, const char *message, bool more,
                        const void *fields, const char *only, int *taken,
                        unsigned flags)
{
    return reply(core, c, type, id, err, message, more, fields, only, taken,
                 false, flags);
}

int vd_send_reply_now(struct vd_core *core, struct vd_client *c, int type,
                      uint64_t id, int err, const char *message, bool more,
                      const void *fields, const char *only, int *taken)
{
    return reply(core, c, type, id, err, message, more, fields, only, taken,
                 true, 0);
}

int vd_send_encode_reply(unsigned version, int type, uint64_t id, int err,
                         const char *message, bool more, const void *fields,
                         const char *only, char **text, size_t *len, int *nh)
{
    struct vw_jw w = {0};
    vp_handle hs[VW_MAX_FDS_PER_FRAME];
    struct vw_enc e = {.w = &w, .hs = hs, .max = VW_MAX_FDS_PER_FRAME,
                         .version = version};
    int r = vw_encode_reply(&e, &vw_requests[type], id, err, message, more,
                              fields, only);
    if (r == 0 && w.len > VW_MAX_PAYLOAD)
        r = -EMSGSIZE;
    if (r < 0) {
        vw_jw_free(&w);
        return r;
    }
    *nh = e.nh;
    *text = vw_jw_take(&w, len);
    return *text ? 0 : -ENOMEM;
}

int vd_send_text_now(struct vd_core *core, struct vd_client *c, int type,
                     char *text, size_t len, vp_handle *hs, int n)
{
    if (core->check_replies)
        self_check(vw_requests[type].rep, text, hs, n, false);
    return send_text(core, c, text, len, hs, n, true, 0);
}
