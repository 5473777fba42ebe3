/* One client connection: authenticates the peer, decodes requests, asks the
 * ledger, and carries the ledger's effects out (fds, moves, recalls, budget
 * events, scrubbing). No memory decision is made here. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "message.h"
#include "server.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#define MAP_ENTRIES_PER_FRAME 1024

struct map_entry {
    uint64_t chunk;
    uint32_t region, slot;
    int fd;
    bool close_fd;
};

/* What the effects of one operation mean for the client that asked. */
struct reply_acc {
    struct map_entry *map;
    size_t nmap, capmap;
    cJSON *unmap; /* chunk ids the requester must unmap and release */
    uint32_t failed_maps;
    int map_error;
};

static void acc_free(struct reply_acc *a)
{
    for (size_t i = 0; i < a->nmap; i++)
        if (a->map[i].close_fd && a->map[i].fd >= 0)
            close(a->map[i].fd);
    free(a->map);
    cJSON_Delete(a->unmap);
    memset(a, 0, sizeof(*a));
}

/* ---- sending ------------------------------------------------------------ */

static void on_poll(uv_poll_t *p, int status, int events);

static void update_poll(struct vd_session *s)
{
    if (s->closing)
        return;
    int ev = UV_READABLE | (vram_wire_pending(&s->wire) ? UV_WRITABLE : 0);
    if (ev != s->poll_events) {
        uv_poll_start(&s->poll, ev, on_poll);
        s->poll_events = ev;
    }
}

static int flush(struct vd_session *s)
{
    int r = vram_wire_flush(&s->wire);
    if (r < 0 && r != -EAGAIN) {
        vd_session_close(s, r == -EPIPE || r == -ECONNRESET
                                ? "peer went away while we were writing"
                                : strerror(-r));
        return r;
    }
    if (r == 0 && s->drain_close) {
        vd_session_close(s, "closed after a fatal error reply");
        return -ECONNABORTED;
    }
    update_poll(s);
    return 0;
}

static int send_msg(struct vd_session *s, cJSON *msg, const int *fds, int nfds)
{
    if (s->closing)
        return -ECONNABORTED;
    int r = vram_msg_queue(&s->wire, msg, fds, nfds);
    if (r < 0) {
        char why[128];
        snprintf(why, sizeof(why), "cannot queue a message: %s (the peer does "
                 "not read its socket)", strerror(-r));
        vd_session_close(s, why);
        return r;
    }
    return flush(s);
}

static cJSON *reply_new(uint64_t id, bool ok)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "reply");
    vram_json_add_u64(m, "id", id);
    cJSON_AddBoolToObject(m, "ok", ok);
    return m;
}

static int reply_err(struct vd_session *s, uint64_t id, int err,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int reply_err(struct vd_session *s, uint64_t id, int err,
                     const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    s->srv->counters.errors++;
    vlog(VLOG_INFO, "client %u (%s, pid %d): request %llu refused: %s: %s",
         s->id, s->name, (int)s->pid, (unsigned long long)id,
         vram_errno_name(err), msg);
    cJSON *m = reply_new(id, false);
    cJSON_AddStringToObject(m, "error", vram_errno_name(err));
    cJSON_AddStringToObject(m, "message", msg);
    int r = send_msg(s, m, NULL, 0);
    cJSON_Delete(m);
    return r;
}

/* Sends the reply; map entries are split over frames of at most
 * VRAM_MAX_FDS_PER_FRAME fds, all but the last marked more:true. */
static int send_reply(struct vd_session *s, uint64_t id, struct reply_acc *a,
                      cJSON *fields, int err, const char *errmsg)
{
    size_t i = 0;
    int r = 0;
    /* Map entries are written as text: cJSON formats each number with
     * printf and reads it back to check, which dominated a large move. */
    size_t cap = 96 * (a->nmap < MAP_ENTRIES_PER_FRAME ? a->nmap : MAP_ENTRIES_PER_FRAME) + 16;
    char *text = malloc(cap);
    if (!text)
        return -ENOMEM;
    do {
        cJSON *m = reply_new(id, err == 0);
        int fds[VRAM_MAX_FDS_PER_FRAME], nfds = 0;
        size_t k = 0, len = 0;
        text[len++] = '[';
        for (; i < a->nmap && k < MAP_ENTRIES_PER_FRAME; i++, k++) {
            struct map_entry *e = &a->map[i];
            if (e->fd >= 0 && nfds == VRAM_MAX_FDS_PER_FRAME)
                break;
            len += (size_t)snprintf(text + len, cap - len,
                                    "%s{\"chunk\":%llu,\"region\":%u,\"slot\":%u",
                                    k ? "," : "", (unsigned long long)e->chunk,
                                    e->region, e->slot);
            if (e->fd >= 0) {
                len += (size_t)snprintf(text + len, cap - len, ",\"fd\":%d", nfds);
                fds[nfds++] = e->fd;
            }
            text[len++] = '}';
        }
        text[len++] = ']';
        text[len] = '\0';
        cJSON_AddRawToObject(m, "map", text);
        bool last = i >= a->nmap;
        if (!last) {
            cJSON_AddBoolToObject(m, "more", true);
        } else {
            if (a->unmap) {
                cJSON_AddItemToObject(m, "unmap", a->unmap);
                a->unmap = NULL;
            }
            if (err) {
                cJSON_AddStringToObject(m, "error", vram_errno_name(err));
                cJSON_AddStringToObject(m, "message", errmsg);
            }
            cJSON *f;
            cJSON *fl = fields ? fields->child : NULL;
            while ((f = fl)) {
                fl = f->next;
                cJSON_AddItemToObject(m, f->string,
                                      cJSON_Duplicate(f, true));
            }
        }
        r = send_msg(s, m, fds, nfds);
        cJSON_Delete(m);
    } while (r == 0 && i < a->nmap);
    free(text);
    return r;
}

static void send_budget_event(struct vd_server *srv, uint32_t stage)
{
    struct vl_stage *st = &srv->ledger.stage[stage];
    if (!st->used || !st->owner)
        return;
    for (struct vd_session *s = srv->sessions; s; s = s->next) {
        if (s->id != st->owner || s->closing)
            continue;
        struct vl_device *d = NULL;
        for (uint32_t i = 0; i < srv->ledger.ndev; i++)
            if (srv->ledger.dev[i].cfg.id == st->cfg.device)
                d = &srv->ledger.dev[i];
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "event");
        cJSON_AddStringToObject(m, "event", "budget_changed");
        vram_json_add_u64(m, "stage", stage);
        vram_json_add_u64(m, "residency_version", st->residency_version);
        vram_json_add_u64(m, "expert_slots_backed",
                          vl_expert_slots_backed(&srv->ledger, stage));
        vram_json_add_u64(m, "expert_loaned_bytes",
                          (uint64_t)(st->loan_chunks - st->recalling) *
                              (d ? d->cfg.chunk_bytes : 0));
        send_msg(s, m, NULL, 0);
        cJSON_Delete(m);
        return;
    }
}

/* ---- recalls ------------------------------------------------------------ */

static void recall_closed(uv_handle_t *h)
{
    struct vd_recall *rc = h->data;
    free(rc->chunks);
    free(rc);
}

static void recall_unlink(struct vd_recall *rc)
{
    struct vd_recall **pp = &rc->srv->recalls;
    while (*pp && *pp != rc)
        pp = &(*pp)->next;
    if (*pp)
        *pp = rc->next;
    uv_close((uv_handle_t *)&rc->timer, recall_closed);
}

static struct vd_session *session_by_id(struct vd_server *srv, uint32_t id)
{
    for (struct vd_session *s = srv->sessions; s; s = s->next)
        if (s->id == id && !s->closing)
            return s;
    return NULL;
}

/* The deadline passed: chunks still recalling are held by a client that did
 * not answer. Nothing is re-granted (the ledger keeps them recalling); the
 * client gets no new loans from now on. */
static void recall_deadline(uv_timer_t *t)
{
    struct vd_recall *rc = t->data;
    struct vd_server *srv = rc->srv;
    size_t still = 0;
    for (size_t i = 0; i < rc->n; i++) {
        uint32_t di = (uint32_t)(rc->chunks[i] >> 32), idx = (uint32_t)rc->chunks[i];
        if (di < srv->ledger.ndev && idx < srv->ledger.dev[di].nchunks) {
            struct vl_chunk *c = &srv->ledger.dev[di].chunks[idx];
            still += c->state == VL_RECALLING && c->holder == rc->client;
        }
    }
    if (still) {
        struct vd_session *s = session_by_id(srv, rc->client);
        srv->counters.recalls_missed++;
        vl_recall_missed(&srv->ledger, rc->client);
        vlog(VLOG_WARNING, "client %u (%s, pid %d) missed the %u ms recall "
             "deadline for %zu of %zu chunks of stage %u; it gets no new "
             "loans, and the chunks stay its own until it releases them or "
             "exits", rc->client, s ? s->name : "?", s ? (int)s->pid : -1,
             rc->deadline_ms, still, rc->n, rc->stage);
    }
    recall_unlink(rc);
}

static void start_recall(struct vd_server *srv, uint32_t client, uint32_t stage,
                         cJSON *chunks)
{
    struct vd_session *s = session_by_id(srv, client);
    uint32_t deadline = srv->ledger.stage[stage].cfg.recall_deadline_ms;
    if (!deadline)
        deadline = 2000;
    size_t n = (size_t)cJSON_GetArraySize(chunks);
    srv->counters.recalls += n;
    if (s) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "event");
        cJSON_AddStringToObject(m, "event", "recall");
        vram_json_add_u64(m, "stage", stage);
        cJSON_AddItemReferenceToObject(m, "chunks", chunks);
        vram_json_add_u64(m, "deadline_ms", deadline);
        send_msg(s, m, NULL, 0);
        cJSON_Delete(m);
        vlog(VLOG_INFO, "recalling %zu chunks of stage %u from client %u "
             "(%s), deadline %u ms", n, stage, client, s->name, deadline);
    }
    struct vd_recall *rc = calloc(1, sizeof(*rc));
    if (!rc)
        return;
    rc->chunks = malloc((n ? n : 1) * sizeof(uint64_t));
    if (!rc->chunks) {
        free(rc);
        return;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, chunks) rc->chunks[rc->n++] = (uint64_t)c->valuedouble;
    rc->srv = srv;
    rc->client = client;
    rc->stage = stage;
    rc->deadline_ms = deadline;
    uv_timer_init(srv->loop, &rc->timer);
    rc->timer.data = rc;
    uv_timer_start(&rc->timer, recall_deadline, deadline, 0);
    rc->next = srv->recalls;
    srv->recalls = rc;
}

/* ---- effects ------------------------------------------------------------ */

static void flush_budget(struct vd_server *srv)
{
    for (uint32_t i = 0; i < VL_MAX_STAGES; i++)
        if (srv->budget_pending[i]) {
            srv->budget_pending[i] = false;
            send_budget_event(srv, i);
        }
}

static int acc_push(struct reply_acc *a, struct map_entry e)
{
    if (a->nmap == a->capmap) {
        size_t cap = a->capmap ? a->capmap * 2 : 64;
        struct map_entry *v = realloc(a->map, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        a->map = v;
        a->capmap = cap;
    }
    a->map[a->nmap++] = e;
    return 0;
}

/* Carries out srv->fx. Entries for requester (may be NULL) go into acc; the
 * rest becomes events and backend work. */
static void apply_fx(struct vd_server *srv, struct vd_session *requester,
                     struct reply_acc *acc)
{
    struct vl_fxlist fx = srv->fx; /* take it: rollbacks reuse srv->fx */
    srv->fx = (struct vl_fxlist){0};
    uint64_t *failed = NULL;
    size_t nfailed = 0;
    bool granted = false;
    bool budget[VL_MAX_STAGES] = {0};
    /* Recalls grouped by (holder, stage): one event each. A stage has one
     * owner, so there are at most as many groups as stages. */
    struct recall_group {
        uint32_t client, stage;
        cJSON *chunks;
    } *rec = NULL;
    size_t nrec = 0;

    for (size_t i = 0; i < fx.n; i++) {
        struct vl_fx *e = &fx.v[i];
        bool mine = requester && e->client == requester->id;
        switch (e->kind) {
        case VL_FX_MAP:
        case VL_FX_MOVE: {
            if (!mine || !acc)
                break; /* only the requester is ever granted or moved */
            struct map_entry me = {.chunk = e->chunk, .region = e->region,
                                   .slot = e->slot, .fd = -1};
            if (e->kind == VL_FX_MAP) {
                int r = srv->backend->ops->chunk_fd(
                    srv->backend, (uint32_t)(e->chunk >> 32),
                    (uint32_t)e->chunk, &me.fd, &me.close_fd);
                if (r < 0) {
                    acc->map_error = r;
                    uint64_t *v = realloc(failed, (nfailed + 1) * sizeof(*v));
                    if (v) {
                        failed = v;
                        failed[nfailed++] = e->chunk;
                    }
                    break;
                }
                srv->counters.grants++;
                granted = true;
            } else {
                srv->counters.moves++;
            }
            if (acc_push(acc, me) < 0) {
                if (me.close_fd)
                    close(me.fd);
                acc->map_error = -ENOMEM;
            }
            break;
        }
        case VL_FX_UNMAP:
            if (mine && acc) {
                if (!acc->unmap)
                    acc->unmap = cJSON_CreateArray();
                cJSON_AddItemToArray(acc->unmap,
                                     cJSON_CreateNumber((double)e->chunk));
                break;
            }
            {
                size_t k = 0;
                while (k < nrec && (rec[k].client != e->client ||
                                    rec[k].stage != e->stage))
                    k++;
                if (k == nrec) {
                    struct recall_group *v = realloc(rec, (nrec + 1) * sizeof(*v));
                    if (!v) {
                        vlog(VLOG_ERR, "out of memory: a recall of chunk %llu "
                             "is not sent; its deadline will pass",
                             (unsigned long long)e->chunk);
                        break;
                    }
                    rec = v;
                    rec[nrec].client = e->client;
                    rec[nrec].stage = e->stage;
                    rec[nrec].chunks = cJSON_CreateArray();
                    nrec++;
                }
                if (k < nrec)
                    cJSON_AddItemToArray(rec[k].chunks,
                                         cJSON_CreateNumber((double)e->chunk));
            }
            break;
        case VL_FX_DROP:
            srv->backend->ops->chunk_drop(srv->backend,
                                          (uint32_t)(e->chunk >> 32),
                                          (uint32_t)e->chunk);
            srv->counters.releases++;
            break;
        case VL_FX_BUDGET:
            if (e->stage < VL_MAX_STAGES)
                budget[e->stage] = true;
            break;
        }
    }
    vl_fx_free(&fx);
    if (granted) { /* the pool refill keeps out of the client's imports */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        srv->last_grant_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }

    if (nfailed) {
        /* The backend could not make memory for these: give them back. */
        vl_fx_clear(&srv->fx);
        vl_chunks_release(&srv->ledger, requester->id, failed, nfailed,
                          &srv->fx);
        vlog(VLOG_ERR, "client %u: %zu chunks could not be created (%s); "
             "returned to the pool", requester->id, nfailed,
             strerror(-acc->map_error));
        free(failed);
        apply_fx(srv, NULL, NULL);
    }
    for (size_t k = 0; k < nrec; k++) {
        start_recall(srv, rec[k].client, rec[k].stage, rec[k].chunks);
        cJSON_Delete(rec[k].chunks);
    }
    free(rec);
    /* Budget events go out after the requester's reply (see finish), so a
     * client has mapped what the reply carries before it hears of it. */
    for (uint32_t i = 0; i < VL_MAX_STAGES; i++)
        if (budget[i])
            srv->budget_pending[i] = true;
    if (!requester)
        flush_budget(srv);
    if (srv->check_invariants && vl_check(&srv->ledger) < 0) {
        vlog(VLOG_ERR, "ledger invariant broken: %s", vl_why(&srv->ledger));
        abort();
    }
}

void vd_apply_background_fx(struct vd_server *srv)
{
    apply_fx(srv, NULL, NULL);
}

/* Runs the ledger's effects and answers the request. */
static int finish(struct vd_session *s, uint64_t id, cJSON *fields)
{
    struct reply_acc acc = {0};
    apply_fx(s->srv, s, &acc);
    int r;
    if (acc.map_error)
        r = send_reply(s, id, &acc, fields, acc.map_error,
                       "the backend could not create chunk memory; what was "
                       "mapped is listed, the rest returned to the pool");
    else
        r = send_reply(s, id, &acc, fields, 0, NULL);
    acc_free(&acc);
    cJSON_Delete(fields);
    flush_budget(s->srv);
    return r;
}

/* ---- request handlers --------------------------------------------------- */

static struct vl_device *device_of(struct vd_server *srv, uint32_t id)
{
    for (uint32_t i = 0; i < srv->ledger.ndev; i++)
        if (srv->ledger.dev[i].cfg.id == id)
            return &srv->ledger.dev[i];
    return NULL;
}

cJSON *vd_region_json(struct vd_server *srv, const struct vl_region *r);

cJSON *vd_region_json(struct vd_server *srv, const struct vl_region *r)
{
    struct vl_device *d = device_of(srv, r->device);
    cJSON *o = cJSON_CreateObject();
    vram_json_add_u64(o, "id", r->id);
    vram_json_add_u64(o, "stage", r->stage);
    cJSON_AddStringToObject(o, "kind", vl_kind_name(r->kind));
    vram_json_add_u64(o, "device", r->device);
    vram_json_add_u64(o, "base", r->base);
    vram_json_add_u64(o, "lane_stride", r->lane_stride);
    vram_json_add_u64(o, "va_bytes", r->va_bytes);
    vram_json_add_u64(o, "lanes", r->lanes);
    vram_json_add_u64(o, "lane_slots", r->lane_slots[0]);
    cJSON *ls = cJSON_AddArrayToObject(o, "lane_slot_counts");
    bool varied = false;
    for (uint32_t l = 1; l < r->lanes; l++)
        varied |= r->lane_slots[l] != r->lane_slots[0];
    if (varied)
        for (uint32_t l = 0; l < r->lanes; l++)
            cJSON_AddItemToArray(ls, cJSON_CreateNumber(r->lane_slots[l]));
    vram_json_add_u64(o, "stride_slots", r->stride_slots);
    vram_json_add_u64(o, "chunk_bytes", d ? d->cfg.chunk_bytes : 0);
    vram_json_add_u64(o, "chunks", r->used);
    return o;
}

static cJSON *stage_fields(struct vd_server *srv, uint32_t stage);

static int handle_hello(struct vd_session *s, uint64_t id, cJSON *msg)
{
    uint64_t v = 0;
    vram_json_u64(msg, "version", &v);
    if (v != VRAM_PROTOCOL_VERSION) {
        s->drain_close = true;
        return reply_err(s, id, -EPROTONOSUPPORT,
                         "protocol version mismatch: client %llu, server %d",
                         (unsigned long long)v, VRAM_PROTOCOL_VERSION);
    }
    const char *role = vram_json_str(msg, "role");
    if (role && strcmp(role, "ctl") && strcmp(role, "engine"))
        return reply_err(s, id, -EINVAL, "role must be engine or ctl");
    s->ctl = role && strcmp(role, "ctl") == 0;
    const char *name = vram_json_str(msg, "name");
    if (name)
        snprintf(s->name, sizeof(s->name), "%s", name);
    for (char *p = s->name; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = '?';
    s->hello = true;
    vlog(VLOG_INFO, "client %u (%s, pid %d, uid %u) said hello as %s", s->id,
         s->name, (int)s->pid, (unsigned)s->uid, s->ctl ? "ctl" : "engine");
    cJSON *f = cJSON_CreateObject();
    vram_json_add_u64(f, "version", VRAM_PROTOCOL_VERSION);
    cJSON *caps = cJSON_AddArrayToObject(f, "capabilities");
    cJSON_AddItemToArray(caps, cJSON_CreateString("fd-passing"));
    cJSON_AddItemToArray(caps, cJSON_CreateString("loans"));
    cJSON_AddItemToArray(caps, cJSON_CreateString("hold"));
    vram_json_add_u64(f, "client", s->id);
    cJSON_AddStringToObject(f, "backend", s->srv->backend->ops->name);
    return finish(s, id, f);
}

static int get_u32(struct vd_session *s, uint64_t id, cJSON *msg,
                   const char *key, uint32_t *out, bool required)
{
    uint64_t v;
    int r = vram_json_u64(msg, key, &v);
    if (r == -ENOENT && !required)
        return 1;
    if (r < 0 || v > UINT32_MAX) {
        reply_err(s, id, -EINVAL, "field '%s' must be an integer below 2^32",
                  key);
        return -EINVAL;
    }
    *out = (uint32_t)v;
    return 0;
}

static int handle_stage_register(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage = 0, dev = 0, first = 0, last = 0;
    bool keep = false;
    vram_json_bool(msg, "keep_window", &keep);
    int has_stage = get_u32(s, id, msg, "stage", &stage, false);
    if (has_stage < 0)
        return 0;
    vl_fx_clear(&srv->fx);
    int e;
    if (has_stage == 0) {
        e = vl_stage_register(&srv->ledger, s->id, stage, keep, &srv->fx);
    } else {
        if (get_u32(s, id, msg, "device", &dev, true) < 0 ||
            get_u32(s, id, msg, "first_layer", &first, true) < 0 ||
            get_u32(s, id, msg, "last_layer", &last, true) < 0)
            return 0;
        e = vl_stage_register_adhoc(&srv->ledger, s->id, dev, first, last,
                                    &stage);
    }
    if (e < 0)
        return reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    vlog(VLOG_INFO, "client %u (%s) registered stage %u", s->id, s->name,
         stage);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddItemToObject(f, "stage", stage_fields(srv, stage));
    return finish(s, id, f);
}

static int handle_stage_release(struct vd_session *s, uint64_t id, cJSON *msg)
{
    uint32_t stage;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0)
        return 0;
    vl_fx_clear(&s->srv->fx);
    int e = vl_stage_release(&s->srv->ledger, s->id, stage, &s->srv->fx);
    if (e < 0)
        return reply_err(s, id, e, "%s", vl_why(&s->srv->ledger));
    int r = finish(s, id, cJSON_CreateObject());
    vd_held_retry_all(s->srv);
    return r;
}

static int handle_region_create(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage, lanes = 1;
    uint64_t bytes = 0;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0 ||
        get_u32(s, id, msg, "lanes", &lanes, false) < 0)
        return 0;
    vram_json_u64(msg, "bytes", &bytes);
    int kind = vl_kind_parse(vram_json_str(msg, "kind"));
    if (kind < 0)
        return reply_err(s, id, -EINVAL,
                         "kind must be kv, expert, fixed or draft_kv");
    if (s->regions >= srv->cfg.max_regions_per_client)
        return reply_err(s, id, -E2BIG, "limit of %u regions per client "
                         "reached", srv->cfg.max_regions_per_client);
    uint32_t region;
    int e = vl_region_create(&srv->ledger, s->id, stage, kind, bytes, lanes,
                             &region);
    if (e < 0)
        return reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    s->regions++;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddItemToObject(f, "region",
                          vd_region_json(srv, vl_region_find(&srv->ledger, region)));
    vl_fx_clear(&srv->fx);
    return finish(s, id, f);
}

static uint32_t client_chunks(struct vd_server *srv, uint32_t client)
{
    struct vl_client *c = vl_client_find(&srv->ledger, client);
    return c ? c->chunks : 0;
}

static int handle_region_grow(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t region, n;
    if (get_u32(s, id, msg, "region", &region, true) < 0 ||
        get_u32(s, id, msg, "chunks", &n, true) < 0)
        return 0;
    struct vl_region *r = vl_region_find(&srv->ledger, region);
    uint64_t total = r ? (uint64_t)n * r->lanes : n;
    if (client_chunks(srv, s->id) + total > srv->cfg.max_chunks_per_client)
        return reply_err(s, id, -EDQUOT, "quota of %u chunks per client: "
                         "holding %u, asked %llu more",
                         srv->cfg.max_chunks_per_client,
                         client_chunks(srv, s->id), (unsigned long long)total);
    vl_fx_clear(&srv->fx);
    int e = vl_region_grow(&srv->ledger, s->id, region, n, &srv->fx);
    if (e < 0)
        return reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    return finish(s, id, cJSON_CreateObject());
}

static int parse_ids(struct vd_session *s, uint64_t id, cJSON *arr,
                     uint64_t **out, size_t *n_out)
{
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (n > 65536) {
        reply_err(s, id, -E2BIG, "at most 65536 chunks per release");
        return -E2BIG;
    }
    uint64_t *v = malloc((n ? n : 1) * sizeof(*v));
    if (!v) {
        reply_err(s, id, -ENOMEM, "out of memory");
        return -ENOMEM;
    }
    size_t i = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) {
        if (!cJSON_IsNumber(c) || c->valuedouble < 0 ||
            c->valuedouble >= 9007199254740992.0 ||
            c->valuedouble != (double)(uint64_t)c->valuedouble) {
            free(v);
            reply_err(s, id, -EINVAL, "chunks[%zu] is not a chunk id", i);
            return -EINVAL;
        }
        v[i++] = (uint64_t)c->valuedouble;
    }
    *out = v;
    *n_out = n;
    return 0;
}

static int handle_chunk_release(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint64_t *ids;
    size_t n;
    if (parse_ids(s, id, cJSON_GetObjectItemCaseSensitive(msg, "chunks"), &ids,
                  &n) < 0)
        return 0;
    vl_fx_clear(&srv->fx);
    int e = vl_chunks_release(&srv->ledger, s->id, ids, n, &srv->fx);
    free(ids);
    if (e < 0)
        return reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    cJSON *f = cJSON_CreateObject();
    vram_json_add_u64(f, "released", n);
    int r = finish(s, id, f);
    vd_held_retry_all(srv);
    return r;
}

static int handle_chunk_move(struct vd_session *s, uint64_t id, cJSON *msg)
{
    uint64_t chunk = 0;
    uint32_t region, slot;
    if (vram_json_u64(msg, "chunk", &chunk) < 0 ||
        get_u32(s, id, msg, "region", &region, true) < 0 ||
        get_u32(s, id, msg, "slot", &slot, true) < 0)
        return 0;
    vl_fx_clear(&s->srv->fx);
    int e = vl_chunk_move(&s->srv->ledger, s->id, chunk, region, slot,
                          &s->srv->fx);
    if (e < 0)
        return reply_err(s, id, e, "%s", vl_why(&s->srv->ledger));
    return finish(s, id, cJSON_CreateObject());
}

static int handle_region_release(struct vd_session *s, uint64_t id, cJSON *msg)
{
    uint32_t region;
    if (get_u32(s, id, msg, "region", &region, true) < 0)
        return 0;
    vl_fx_clear(&s->srv->fx);
    int e = vl_region_release(&s->srv->ledger, s->id, region, &s->srv->fx);
    if (e < 0)
        return reply_err(s, id, e, "%s", vl_why(&s->srv->ledger));
    if (s->regions)
        s->regions--;
    int r = finish(s, id, cJSON_CreateObject());
    vd_held_retry_all(s->srv);
    return r;
}

/* Reply fields of KV and loan requests: a summary, and the stage as in
 * status under "stage". */
static cJSON *kv_fields(struct vd_server *srv, uint32_t stage, uint32_t recalled)
{
    cJSON *st = stage_fields(srv, stage);
    cJSON *f = cJSON_CreateObject();
    static const char *keys[] = {"kv_needed_bytes", "kv_mapped_bytes",
                                 "expert_loaned_bytes", "expert_slots_backed",
                                 "residency_version"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        uint64_t v = 0;
        vram_json_u64(st, keys[i], &v);
        vram_json_add_u64(f, keys[i], v);
    }
    vram_json_add_u64(f, "recalled_chunks", recalled);
    cJSON_AddItemToObject(f, "stage", st);
    return f;
}

static void held_closed(uv_handle_t *h)
{
    free(h->data);
}

static void held_remove(struct vd_held *h)
{
    struct vd_held **pp = &h->srv->held;
    while (*pp && *pp != h)
        pp = &(*pp)->next;
    if (*pp)
        *pp = h->next;
    if (h->s && h->s->held)
        h->s->held--;
    uv_timer_stop(&h->timer);
    uv_close((uv_handle_t *)&h->timer, held_closed);
}

static void held_expired(uv_timer_t *t)
{
    struct vd_held *h = t->data;
    struct vd_server *srv = h->srv;
    struct vl_stage *st = &srv->ledger.stage[h->stage];
    /* One last try before giving up. */
    vl_fx_clear(&srv->fx);
    uint32_t recalled = 0;
    int e = vl_kv_reserve(&srv->ledger, h->s->id, h->stage, h->prompt,
                          h->output, &recalled, &srv->fx);
    if (e == 0) {
        finish(h->s, h->id, kv_fields(srv, h->stage, recalled));
    } else {
        apply_fx(srv, NULL, NULL);
        reply_err(h->s, h->id, -ETIMEDOUT,
                  "stage %u: hold of %u ms expired before recalls completed "
                  "(%s)", h->stage, st->cfg.hold_ms, vl_why(&srv->ledger));
    }
    held_remove(h);
}

void vd_held_retry_all(struct vd_server *srv)
{
    struct vd_held *h = srv->held;
    while (h) {
        /* A reply below may close a session (its peer stopped reading), which
         * unlinks that session's held requests; their memory lives until
         * their timers close, so the walk may go on, skipping them. */
        struct vd_held *next = h->next;
        if (!h->s) {
            h = next;
            continue;
        }
        vl_fx_clear(&srv->fx);
        uint32_t recalled = 0;
        int e = vl_kv_reserve(&srv->ledger, h->s->id, h->stage, h->prompt,
                              h->output, &recalled, &srv->fx);
        if (e == 0) {
            vlog(VLOG_INFO, "client %u: held KV reserve of stage %u granted",
                 h->s->id, h->stage);
            finish(h->s, h->id, kv_fields(srv, h->stage, recalled));
            held_remove(h);
        } else if (e == -EAGAIN) {
            apply_fx(srv, NULL, NULL); /* further recalls, if any */
        } else {
            reply_err(h->s, h->id, e, "%s", vl_why(&srv->ledger));
            held_remove(h);
        }
        h = next;
    }
}

static int handle_kv_reserve(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage;
    uint64_t prompt = 0, output = 0;
    bool hold = false;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0)
        return 0;
    vram_json_u64(msg, "prompt_tokens", &prompt);
    vram_json_u64(msg, "output_tokens", &output);
    vram_json_bool(msg, "hold", &hold);
    vl_fx_clear(&srv->fx);
    uint32_t recalled = 0;
    int e = vl_kv_reserve(&srv->ledger, s->id, stage, prompt, output,
                          &recalled, &srv->fx);
    if (e == 0)
        return finish(s, id, kv_fields(srv, stage, recalled));
    if (e != -EAGAIN)
        return reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    char why[256];
    snprintf(why, sizeof(why), "%s", vl_why(&srv->ledger));
    apply_fx(srv, NULL, NULL); /* the recalls go out either way */
    if (!hold)
        return reply_err(s, id, -EAGAIN, "%s; ask with hold to wait", why);
    if (s->held >= VRAM_MAX_REQUESTS_IN_FLIGHT)
        return reply_err(s, id, -EBUSY, "%d requests already held",
                         VRAM_MAX_REQUESTS_IN_FLIGHT);
    struct vd_held *h = calloc(1, sizeof(*h));
    if (!h)
        return reply_err(s, id, -ENOMEM, "out of memory");
    h->srv = srv;
    h->s = s;
    h->id = id;
    h->stage = stage;
    h->prompt = prompt;
    h->output = output;
    uv_timer_init(srv->loop, &h->timer);
    h->timer.data = h;
    uint32_t bound = srv->ledger.stage[stage].cfg.hold_ms;
    uv_timer_start(&h->timer, held_expired, bound ? bound : 1, 0);
    struct vd_held **pp = &srv->held; /* FIFO */
    while (*pp)
        pp = &(*pp)->next;
    *pp = h;
    s->held++;
    vlog(VLOG_INFO, "client %u: KV reserve of stage %u held up to %u ms: %s",
         s->id, stage, bound, why);
    return 0;
}

static int handle_kv_trim(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage;
    uint64_t tokens = 0;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0)
        return 0;
    vram_json_u64(msg, "tokens", &tokens);
    vl_fx_clear(&srv->fx);
    int e = vl_kv_trim(&srv->ledger, s->id, stage, tokens, &srv->fx);
    if (e < 0)
        return reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    return finish(s, id, kv_fields(srv, stage, 0));
}

static int handle_expert_request(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage;
    uint64_t bytes = 0;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0)
        return 0;
    vram_json_u64(msg, "bytes", &bytes);
    vl_fx_clear(&srv->fx);
    int e = vl_expert_request(&srv->ledger, s->id, stage, bytes, &srv->fx);
    if (e < 0)
        return reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    return finish(s, id, kv_fields(srv, stage, 0));
}

static int handle_expert_claim(struct vd_session *s, uint64_t id, cJSON *msg)
{
    struct vd_server *srv = s->srv;
    uint32_t stage, layer;
    if (get_u32(s, id, msg, "stage", &stage, true) < 0 ||
        get_u32(s, id, msg, "layer", &layer, true) < 0)
        return 0;
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(msg, "slots");
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (n > 65536)
        return reply_err(s, id, -E2BIG, "at most 65536 slots per claim");
    uint32_t *slots = malloc((n ? n : 1) * sizeof(uint32_t));
    if (!slots)
        return reply_err(s, id, -ENOMEM, "out of memory");
    size_t i = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) {
        if (!cJSON_IsNumber(c) || c->valuedouble < 0 ||
            c->valuedouble > UINT32_MAX ||
            c->valuedouble != (double)(uint32_t)c->valuedouble) {
            free(slots);
            return reply_err(s, id, -EINVAL, "slots[%zu] is not a slot index", i);
        }
        slots[i++] = (uint32_t)c->valuedouble;
    }
    int e = vl_expert_claim(&srv->ledger, s->id, stage, layer, slots, n);
    free(slots);
    if (e < 0)
        return reply_err(s, id, e, "%s", vl_why(&srv->ledger));
    cJSON *f = cJSON_CreateObject();
    vram_json_add_u64(f, "claimed", n);
    vl_fx_clear(&srv->fx);
    return finish(s, id, f);
}

static int handle_ping(struct vd_session *s, uint64_t id, cJSON *msg)
{
    (void)msg;
    cJSON *m = reply_new(id, true);
    int r = send_msg(s, m, NULL, 0);
    cJSON_Delete(m);
    return r;
}

static int handle_status(struct vd_session *s, uint64_t id, cJSON *msg)
{
    (void)msg;
    vl_fx_clear(&s->srv->fx);
    return finish(s, id, vd_status_build(s->srv));
}

static cJSON *stage_fields(struct vd_server *srv, uint32_t stage)
{
    return vd_stage_json(srv, stage);
}

static const struct {
    const char *type;
    int (*fn)(struct vd_session *, uint64_t, cJSON *);
} handlers[] = {
    {"hello", handle_hello},
    {"stage_register", handle_stage_register},
    {"stage_release", handle_stage_release},
    {"region_create", handle_region_create},
    {"region_grow", handle_region_grow},
    {"chunk_release", handle_chunk_release},
    {"region_release", handle_region_release},
    {"chunk_move", handle_chunk_move},
    {"kv_reserve", handle_kv_reserve},
    {"kv_trim", handle_kv_trim},
    {"expert_request", handle_expert_request},
    {"expert_claim", handle_expert_claim},
    {"status", handle_status},
    {"ping", handle_ping},
};

/* ---- framing ------------------------------------------------------------ */

static int on_frame(void *ud, struct vram_wire_frame *f)
{
    struct vd_session *s = ud;
    if (s->closing)
        return 1;
    if (f->version != VRAM_PROTOCOL_VERSION) {
        s->drain_close = true;
        reply_err(s, 0, -EPROTONOSUPPORT,
                  "protocol version mismatch: client %u, server %d",
                  f->version, VRAM_PROTOCOL_VERSION);
        return 1;
    }
    cJSON *msg = cJSON_ParseWithLength(f->payload, f->len);
    if (!msg || !cJSON_IsObject(msg)) {
        cJSON_Delete(msg);
        s->srv->counters.protocol_errors++;
        vd_session_close(s, "frame payload is not a JSON object");
        return -EPROTO;
    }
    uint64_t id = 0;
    int r = vram_json_u64(msg, "id", &id);
    char why[256];
    if (r < 0) {
        reply_err(s, 0, -EINVAL, "request has no integer field 'id'");
        goto out;
    }
    if (f->nfds > 0) {
        /* No request carries fds: close them first, then refuse. */
        for (int i = 0; i < f->nfds; i++) {
            close(f->fds[i]);
            f->fds[i] = -1;
        }
        reply_err(s, id, -EINVAL, "unsolicited file descriptors: %d closed "
                  "(no request carries fds)", f->nfds);
        goto out;
    }
    if ((r = vram_msg_validate_request(msg, why, sizeof(why))) < 0) {
        reply_err(s, id, r, "%s", why);
        goto out;
    }
    const char *type = vram_json_str(msg, "type");
    if (!s->hello && strcmp(type, "hello") != 0) {
        reply_err(s, id, -EPROTO, "say hello first");
        goto out;
    }
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
        if (strcmp(handlers[i].type, type) == 0) {
            handlers[i].fn(s, id, msg);
            break;
        }
out:
    cJSON_Delete(msg);
    return s->closing ? 1 : 0;
}

static void on_poll(uv_poll_t *p, int status, int events)
{
    struct vd_session *s = p->data;
    if (s->closing)
        return;
    if (status < 0) {
        vd_session_close(s, uv_strerror(status));
        return;
    }
    if (events & UV_WRITABLE) {
        if (flush(s) < 0)
            return;
    }
    if (events & UV_READABLE) {
        char why[256];
        int r = vram_wire_read(&s->wire, on_frame, s, why, sizeof(why));
        if (s->closing)
            return;
        if (r == -ENOTCONN) {
            vd_session_close(s, "disconnected");
            return;
        }
        if (r < 0) {
            s->srv->counters.protocol_errors++;
            vd_session_close(s, why);
            return;
        }
    }
}

void vd_session_want_write(struct vd_session *s)
{
    update_poll(s);
}

/* ---- lifecycle ---------------------------------------------------------- */

static void session_closed(uv_handle_t *h)
{
    struct vd_session *s = h->data;
    vram_wire_fini(&s->wire);
    free(s);
}

void vd_session_free(struct vd_session *s)
{
    if (!s)
        return;
    uv_close((uv_handle_t *)&s->poll, session_closed);
}

static void reaper_closed(uv_handle_t *h)
{
    struct vd_reaper *rp = h->data;
    close(rp->pidfd);
    free(rp);
}

static void reap(struct vd_server *srv, uint32_t client)
{
    vl_fx_clear(&srv->fx);
    if (vl_client_reap(&srv->ledger, client, &srv->fx) == 0) {
        size_t n = 0;
        for (size_t i = 0; i < srv->fx.n; i++)
            n += srv->fx.v[i].kind == VL_FX_DROP;
        if (n)
            vlog(VLOG_INFO, "client %u is gone: %zu quarantined chunks back "
                 "in the pool", client, n);
        apply_fx(srv, NULL, NULL);
        vd_held_retry_all(srv);
    }
}

static void reaper_ready(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    struct vd_reaper *rp = p->data;
    struct vd_reaper **pp = &rp->srv->reapers;
    while (*pp && *pp != rp)
        pp = &(*pp)->next;
    if (*pp)
        *pp = rp->next;
    reap(rp->srv, rp->client);
    uv_poll_stop(p);
    uv_close((uv_handle_t *)p, reaper_closed);
}

void vd_session_close(struct vd_session *s, const char *why)
{
    if (s->closing)
        return;
    struct vd_server *srv = s->srv;
    s->closing = true;
    srv->counters.disconnects++;
    vlog(strcmp(why, "disconnected") == 0 ? VLOG_INFO : VLOG_WARNING,
         "client %u (%s, pid %d): %s", s->id, s->name, (int)s->pid, why);
    /* Held requests of this client end with it. */
    for (struct vd_held *h = srv->held, *n; h; h = n) {
        n = h->next;
        if (h->s == s) {
            h->s = NULL;
            held_remove(h);
        }
    }
    uint32_t held = client_chunks(srv, s->id);
    vl_fx_clear(&srv->fx);
    vl_client_disconnect(&srv->ledger, s->id, &srv->fx);
    apply_fx(srv, NULL, NULL);
    /* Its chunks stay quarantined until its process is gone. */
    bool wait = false;
    if (held && s->pidfd >= 0 && !srv->stopping) {
        struct vd_reaper *rp = calloc(1, sizeof(*rp));
        if (rp) {
            rp->srv = srv;
            rp->client = s->id;
            rp->pid = s->pid;
            rp->pidfd = s->pidfd;
            s->pidfd = -1;
            uv_poll_init(srv->loop, &rp->poll, rp->pidfd);
            rp->poll.data = rp;
            uv_poll_start(&rp->poll, UV_READABLE, reaper_ready);
            rp->next = srv->reapers;
            srv->reapers = rp;
            wait = true;
            vlog(VLOG_INFO, "client %u: %u chunks quarantined until pid %d "
                 "exits", s->id, held, (int)s->pid);
        }
    }
    if (!wait) {
        if (held && s->pidfd < 0 && !srv->stopping)
            vlog(VLOG_WARNING, "client %u: pid %d could not be pinned (no "
                 "pidfd); its %u chunks return at once", s->id, (int)s->pid,
                 held);
        reap(srv, s->id);
    }
    if (s->pidfd >= 0)
        close(s->pidfd);
    s->pidfd = -1;
    uv_poll_stop(&s->poll);
    close(s->fd);
    struct vd_session **pp = &srv->sessions;
    while (*pp && *pp != s)
        pp = &(*pp)->next;
    if (*pp)
        *pp = s->next;
    srv->nsessions--;
    vd_session_free(s);
    vd_held_retry_all(srv);
}

void vd_session_accept(struct vd_server *srv, int fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        vlog(VLOG_WARNING, "refusing a connection: SO_PEERCRED failed: %s",
             strerror(errno));
        close(fd);
        return;
    }
    if (srv->nsessions >= srv->cfg.max_clients) {
        vlog(VLOG_WARNING, "refusing pid %d: limit of %u clients reached",
             (int)cred.pid, srv->cfg.max_clients);
        struct vram_wire w;
        vram_wire_init(&w, fd);
        cJSON *m = reply_new(0, false);
        cJSON_AddStringToObject(m, "error", "E2BIG");
        cJSON_AddStringToObject(m, "message", "too many clients connected");
        vram_msg_queue(&w, m, NULL, 0);
        vram_wire_flush(&w);
        vram_wire_fini(&w);
        cJSON_Delete(m);
        close(fd);
        return;
    }
    struct vd_session *s = calloc(1, sizeof(*s));
    if (!s) {
        close(fd);
        return;
    }
    s->srv = srv;
    s->fd = fd;
    s->id = ++srv->next_client_id;
    s->pid = cred.pid;
    s->uid = cred.uid;
    s->gid = cred.gid;
    /* Pin the peer's process now: a pid can be reused, a pidfd cannot. */
    s->pidfd = (int)syscall(SYS_pidfd_open, cred.pid, 0);
    if (s->pidfd >= 0)
        fcntl(s->pidfd, F_SETFD, FD_CLOEXEC);
    snprintf(s->name, sizeof(s->name), "pid-%d", (int)cred.pid);
    vram_wire_init(&s->wire, fd);
    /* Requests are small and carry no fds: one receive takes a whole
     * request (or several), and the level-triggered poll brings us back for
     * whatever is left. */
    s->wire.rx_greedy = true;
    if (vl_client_add(&srv->ledger, s->id) < 0) {
        if (s->pidfd >= 0)
            close(s->pidfd);
        free(s);
        close(fd);
        return;
    }
    uv_poll_init(srv->loop, &s->poll, fd);
    s->poll.data = s;
    s->poll_events = UV_READABLE;
    uv_poll_start(&s->poll, UV_READABLE, on_poll);
    s->next = srv->sessions;
    srv->sessions = s;
    srv->nsessions++;
    vlog(VLOG_DEBUG, "client %u connected (pid %d, uid %u, gid %u)", s->id,
         (int)cred.pid, (unsigned)cred.uid, (unsigned)cred.gid);
}
