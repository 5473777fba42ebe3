/* Carrying out the ledger's effects: the requester's reply with its map
 * entries (new chunks' fds batched 32 a frame, moves without fds, chunks to
 * unmap), recall events with deadlines, budget_changed events, scrubbing
 * through the backend, and requests held until recalls complete. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "message.h"
#include "platform.h"
#include "session.h"

#define MAP_ENTRIES_PER_FRAME 1024

struct map_entry {
    uint64_t chunk;
    uint32_t region, slot;
    vp_handle h; /* a new chunk's, owned until it is queued */
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
        vp_close(&a->map[i].h);
    free(a->map);
    cJSON_Delete(a->unmap);
    memset(a, 0, sizeof(*a));
}

/* ---- replies and events --------------------------------------------------- */

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
        cJSON *m = vd_reply_new(id, err == 0);
        vp_handle fds[VRAM_MAX_FDS_PER_FRAME];
        int nfds = 0;
        size_t k = 0, len = 0;
        text[len++] = '[';
        for (; i < a->nmap && k < MAP_ENTRIES_PER_FRAME; i++, k++) {
            struct map_entry *e = &a->map[i];
            if (vp_ok(e->h) && nfds == VRAM_MAX_FDS_PER_FRAME)
                break;
            len += (size_t)snprintf(text + len, cap - len,
                                    "%s{\"chunk\":%llu,\"region\":%u,\"slot\":%u",
                                    k ? "," : "", (unsigned long long)e->chunk,
                                    e->region, e->slot);
            if (vp_ok(e->h)) {
                len += (size_t)snprintf(text + len, cap - len, ",\"fd\":%d", nfds);
                fds[nfds++] = e->h;
                e->h = VP_NONE; /* the queue takes it */
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
        r = vd_send(s, m, fds, nfds);
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
        vd_send(s, m, NULL, 0);
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
        struct vd_session *s = vd_session_by_id(srv, rc->client);
        srv->counters.recalls_missed++;
        vl_recall_missed(&srv->ledger, rc->client);
        bool kill_it = srv->ledger.stage[rc->stage].cfg.kill_on_missed_recall;
        vlog(VLOG_WARNING, "client %u (%s, pid %lld) missed the %u ms recall "
             "deadline for %zu of %zu chunks of stage %u; %s", rc->client,
             s ? s->name : "?", s ? (long long)s->pid : -1LL, rc->deadline_ms, still,
             rc->n, rc->stage,
             kill_it ? "the stage's policy says kill: SIGKILL sent"
                     : "it gets no new loans, and the chunks stay its own "
                       "until it releases them or exits");
        /* Through the pin taken at connect: never a recycled pid. */
        if (kill_it && s && vp_ok(s->pin))
            vp_proc_kill(s->pin);
    }
    recall_unlink(rc);
}

static void start_recall(struct vd_server *srv, uint32_t client, uint32_t stage,
                         cJSON *chunks)
{
    struct vd_session *s = vd_session_by_id(srv, client);
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
        vd_send(s, m, NULL, 0);
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

/* A client that releases chunks must have unmapped them; one that keeps a
 * mapping (and so the memory) is found among its process's mappings by the
 * chunks' memory ids, and reported. Only host chunks can be seen this way. */
static void check_kept(struct vd_server *srv, struct vd_session *s,
                       const uint64_t *ids, size_t n)
{
    int kept = vp_proc_count_mapped(s->pid, ids, n);
    if (kept > 0) {
        srv->counters.kept_after_release += (uint64_t)kept;
        vlog(VLOG_WARNING, "client %u (%s, pid %lld) released chunks it still "
             "maps (%d mapping(s)): that memory stays in use by it",
             s->id, s->name, (long long)s->pid, kept);
    }
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
    uint64_t inos[64];
    size_t nino = 0;
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
                                   .slot = e->slot, .h = VP_NONE};
            if (e->kind == VL_FX_MAP) {
                int r = srv->backend->ops->chunk_handle(
                    srv->backend, (uint32_t)(e->chunk >> 32),
                    (uint32_t)e->chunk, &me.h);
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
                vp_close(&me.h);
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
            /* Released by the requester: remember what its memory looked
             * like, to look for it in the requester's mappings below. */
            if (mine && srv->backend->ops->chunk_mem_id && nino < 64) {
                uint64_t ino = srv->backend->ops->chunk_mem_id(
                    srv->backend, (uint32_t)(e->chunk >> 32), (uint32_t)e->chunk);
                if (ino)
                    inos[nino++] = ino;
            }
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
    if (nino)
        check_kept(srv, requester, inos, nino);
    if (granted) /* the pool refill keeps out of the client's imports */
        srv->last_grant_ns = vp_now_ns();

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
int vd_finish(struct vd_session *s, uint64_t id, cJSON *fields)
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

/* Reply fields of KV and loan requests: a summary, and the stage as in
 * status under "stage". */
cJSON *vd_kv_fields(struct vd_server *srv, uint32_t stage, uint32_t recalled)
{
    cJSON *st = vd_stage_json(srv, stage);
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

/* ---- held requests ------------------------------------------------------ */

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
        vd_finish(h->s, h->id, vd_kv_fields(srv, h->stage, recalled));
    } else {
        apply_fx(srv, NULL, NULL);
        vd_reply_err(h->s, h->id, -ETIMEDOUT,
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
            vd_finish(h->s, h->id, vd_kv_fields(srv, h->stage, recalled));
            held_remove(h);
        } else if (e == -EAGAIN) {
            apply_fx(srv, NULL, NULL); /* further recalls, if any */
        } else {
            vd_reply_err(h->s, h->id, e, "%s", vl_why(&srv->ledger));
            held_remove(h);
        }
        h = next;
    }
}

/* A KV reserve that must wait for other clients' recalls: answered when
 * they come back (vd_held_retry_all), or with ETIMEDOUT at the stage's hold
 * bound. */
int vd_held_add(struct vd_session *s, uint64_t id, uint32_t stage,
                uint64_t prompt, uint64_t output, const char *why)
{
    struct vd_server *srv = s->srv;
    if (s->held >= VRAM_MAX_REQUESTS_IN_FLIGHT)
        return vd_reply_err(s, id, -EBUSY, "%d requests already held",
                            VRAM_MAX_REQUESTS_IN_FLIGHT);
    struct vd_held *h = calloc(1, sizeof(*h));
    if (!h)
        return vd_reply_err(s, id, -ENOMEM, "out of memory");
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

void vd_held_drop_session(struct vd_server *srv, struct vd_session *s)
{
    for (struct vd_held *h = srv->held, *n; h; h = n) {
        n = h->next;
        if (h->s == s) {
            h->s = NULL;
            held_remove(h);
        }
    }
}
