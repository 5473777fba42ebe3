/* One client connection: who the peer is (SO_PEERCRED, a pidfd), its
 * frames in and out, and its end (quarantine until its process is gone).
 * What a request does is in requests.c; carrying out the ledger's effects
 * (replies with chunks, recalls, held requests, budget events) in
 * effects.c. No memory decision is made here. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "message.h"
#include "platform.h"
#include "session.h"
#include "state.h"

/* ---- sending ------------------------------------------------------------ */

static void on_ready(struct vp_watch *w, int status, int events);

static void update_poll(struct vd_session *s)
{
    if (s->closing)
        return;
    vp_watch_set(&s->watch,
                 VP_READABLE | (vram_wire_pending(&s->wire) ? VP_WRITABLE : 0),
                 on_ready);
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

int vd_send(struct vd_session *s, cJSON *msg, vp_handle *hs, int n)
{
    struct vd_server *srv = s->srv;
    if (srv->crash_before_reply && srv->request_type &&
        strcmp(srv->crash_before_reply, srv->request_type) == 0) {
        vlog(VLOG_WARNING, "fault injection: killed before replying to %s",
             srv->request_type);
        vp_proc_kill_self();
    }
    if (s->closing) {
        for (int i = 0; i < n; i++)
            vp_close(&hs[i]);
        return -ECONNABORTED;
    }
    int r = vram_msg_queue(&s->wire, msg, hs, n);
    if (r < 0) {
        char why[128];
        snprintf(why, sizeof(why), "cannot queue a message: %s (the peer does "
                 "not read its socket)", strerror(-r));
        vd_session_close(s, why);
        return r;
    }
    return flush(s);
}

cJSON *vd_reply_new(uint64_t id, bool ok)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "reply");
    vram_json_add_u64(m, "id", id);
    cJSON_AddBoolToObject(m, "ok", ok);
    return m;
}

int vd_reply_err(struct vd_session *s, uint64_t id, int err,
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
    cJSON *m = vd_reply_new(id, false);
    cJSON_AddStringToObject(m, "error", vram_errno_name(err));
    cJSON_AddStringToObject(m, "message", msg);
    int r = vd_send(s, m, NULL, 0);
    cJSON_Delete(m);
    return r;
}

struct vd_session *vd_session_by_id(struct vd_server *srv, uint32_t id)
{
    for (struct vd_session *s = srv->sessions; s; s = s->next)
        if (s->id == id && !s->closing)
            return s;
    return NULL;
}

/* ---- framing ------------------------------------------------------------ */

static int on_frame(void *ud, struct vram_codec_frame *f)
{
    struct vd_session *s = ud;
    if (s->closing)
        return 1;
    if (f->version != VRAM_PROTOCOL_VERSION) {
        s->drain_close = true;
        vd_reply_err(s, 0, -EPROTONOSUPPORT,
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
        vd_reply_err(s, 0, -EINVAL, "request has no integer field 'id'");
        goto out;
    }
    if (f->nhandles > 0) {
        /* No request carries fds: close them first, then refuse. */
        for (int i = 0; i < f->nhandles; i++)
            vp_close(&f->handles[i]);
        vd_reply_err(s, id, -EINVAL, "unsolicited file descriptors: %d closed "
                  "(no request carries fds)", f->nhandles);
        goto out;
    }
    if ((r = vram_msg_validate_request(msg, why, sizeof(why))) < 0) {
        vd_reply_err(s, id, r, "%s", why);
        goto out;
    }
    const char *type = vram_json_str(msg, "type");
    if (!s->hello && strcmp(type, "hello") != 0) {
        vd_reply_err(s, id, -EPROTO, "say hello first");
        goto out;
    }
    vd_request_handle(s, id, type, msg);
out:
    cJSON_Delete(msg);
    return s->closing ? 1 : 0;
}

static void on_ready(struct vp_watch *w, int status, int events)
{
    struct vd_session *s = w->data;
    if (s->closing)
        return;
    if (status < 0) {
        vd_session_close(s, uv_strerror(status));
        return;
    }
    if (events & VP_WRITABLE) {
        if (flush(s) < 0)
            return;
    }
    if (events & VP_READABLE) {
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

/* ---- lifecycle ---------------------------------------------------------- */

static void session_closed(uv_handle_t *h)
{
    struct vd_session *s = ((struct vp_watch *)h->data)->data;
    vram_wire_fini(&s->wire);
    free(s);
}

void vd_session_free(struct vd_session *s)
{
    if (!s)
        return;
    vp_watch_close(&s->watch, session_closed);
}

static void reaper_closed(uv_handle_t *h)
{
    struct vd_reaper *rp = ((struct vp_watch *)h->data)->data;
    vp_close(&rp->pin);
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
        vd_state_holder_drop(srv->state, client);
        vd_apply_background_fx(srv);
        vd_held_retry_all(srv);
    }
}

void vd_reaper_end(struct vd_reaper *rp)
{
    struct vd_reaper **pp = &rp->srv->reapers;
    while (*pp && *pp != rp)
        pp = &(*pp)->next;
    if (*pp)
        *pp = rp->next;
    reap(rp->srv, rp->client);
    vp_watch_close(&rp->watch, reaper_closed);
}

static void reaper_ready(struct vp_watch *w, int status, int events)
{
    (void)status;
    (void)events;
    vd_reaper_end(w->data);
}

int vd_reaper_watch(struct vd_server *srv, uint32_t client, int64_t pid,
                    vp_handle pin, uint64_t starttime, bool resumable)
{
    struct vd_reaper *rp = calloc(1, sizeof(*rp));
    if (!rp)
        return -ENOMEM;
    rp->srv = srv;
    rp->client = client;
    rp->pid = pid;
    rp->pin = pin;
    rp->starttime = starttime;
    rp->resumable = resumable;
    if (vp_watch_init(srv->loop, &rp->watch, pin) < 0) {
        free(rp);
        return -EIO;
    }
    rp->watch.data = rp;
    vp_watch_set(&rp->watch, VP_READABLE, reaper_ready);
    rp->next = srv->reapers;
    srv->reapers = rp;
    return 0;
}

struct vd_reaper *vd_reaper_find(struct vd_server *srv, uint32_t client)
{
    for (struct vd_reaper *rp = srv->reapers; rp; rp = rp->next)
        if (rp->client == client)
            return rp;
    return NULL;
}

void vd_session_close(struct vd_session *s, const char *why)
{
    if (s->closing)
        return;
    struct vd_server *srv = s->srv;
    s->closing = true;
    srv->counters.disconnects++;
    vlog(strcmp(why, "disconnected") == 0 ? VLOG_INFO : VLOG_WARNING,
         "client %u (%s, pid %lld): %s", s->id, s->name, (long long)s->pid, why);
    vd_held_drop_session(srv, s); /* its held requests end with it */
    uint32_t held = vd_client_chunks(srv, s->id);
    vl_fx_clear(&srv->fx);
    vl_client_disconnect(&srv->ledger, s->id, &srv->fx);
    vd_apply_background_fx(srv);
    /* What it holds stays its own until its process is gone or comes back
     * (rule 13); when vramd stops, the state file keeps it for the next. A
     * client holding no memory goes at once (its ranges and stage ids with
     * it: a process that reconnects usually finds them free). */
    bool wait = srv->stopping;
    if (!wait && held && vp_ok(s->pin) &&
        vd_reaper_watch(srv, s->id, s->pid, s->pin, s->starttime,
                        !s->evicted) == 0) {
        s->pin = VP_NONE;
        wait = true;
        if (held)
            vlog(VLOG_INFO, "client %u: %u chunks quarantined until pid %lld "
                 "exits or comes back", s->id, held, (long long)s->pid);
    }
    if (!wait) {
        if (held && !vp_ok(s->pin))
            vlog(VLOG_WARNING, "client %u: pid %lld could not be pinned (no "
                 "pidfd); its %u chunks return at once", s->id,
                 (long long)s->pid, held);
        reap(srv, s->id);
    }
    cJSON_Delete(s->resume_acc);
    s->resume_acc = NULL;
    vp_close(&s->pin);
    vp_watch_set(&s->watch, 0, NULL);
    vp_close(&s->h);
    struct vd_session **pp = &srv->sessions;
    while (*pp && *pp != s)
        pp = &(*pp)->next;
    if (*pp)
        *pp = s->next;
    srv->nsessions--;
    vd_session_free(s);
    vd_held_retry_all(srv);
}

/* Turns a connection away with one error frame (the peer's library reports
 * it as the connect's error), then closes it. */
static void refuse(vp_handle h, const char *code, const char *msg)
{
    struct vram_wire w;
    vram_wire_init(&w, h);
    cJSON *m = vd_reply_new(0, false);
    cJSON_AddStringToObject(m, "error", code);
    cJSON_AddStringToObject(m, "message", msg);
    vram_msg_queue(&w, m, NULL, 0);
    vram_wire_flush(&w);
    vram_wire_fini(&w);
    cJSON_Delete(m);
    vp_close(&h);
}

void vd_session_accept(struct vd_server *srv, vp_handle fd)
{
    struct vp_peer peer;
    int e = vp_peer_of(fd, &peer);
    if (e < 0) {
        vlog(VLOG_WARNING, "refusing a connection: SO_PEERCRED failed: %s",
             strerror(-e));
        vp_close(&fd);
        return;
    }
    int64_t pid = peer.pid;
    char msg[256];
    if (!vd_access_connect(&srv->cfg, &peer)) {
        snprintf(msg, sizeof(msg), "uid %u (gid %u) may not use vramd: not in "
                 "its access list (access.allow)", (unsigned)peer.uid,
                 (unsigned)peer.gid);
        vlog(VLOG_WARNING, "refusing pid %lld: %s", (long long)pid, msg);
        srv->counters.errors++;
        refuse(fd, "EACCES", msg);
        return;
    }
    if (srv->nsessions >= srv->cfg.max_clients) {
        vlog(VLOG_WARNING, "refusing pid %lld: limit of %u clients reached",
             (long long)pid, srv->cfg.max_clients);
        refuse(fd, "E2BIG", "too many clients connected");
        return;
    }
    struct vd_session *s = calloc(1, sizeof(*s));
    if (!s) {
        vp_close(&fd);
        return;
    }
    s->srv = srv;
    s->h = fd;
    s->id = ++srv->next_client_id;
    vd_state_next_client(srv->state, srv->next_client_id + 1);
    s->pid = pid;
    s->starttime = peer.start_time;
    s->peer = peer;
    s->admin = vd_access_admin(&srv->cfg, &peer);
    /* Pin the peer's process now: a pid can be reused, a pin cannot. */
    s->pin = VP_NONE;
    vp_proc_pin(pid, &s->pin);
    snprintf(s->name, sizeof(s->name), "pid-%lld", (long long)pid);
    vram_wire_init(&s->wire, fd);
    /* Requests are small and carry no fds: one receive takes a whole
     * request (or several), and the level-triggered poll brings us back for
     * whatever is left. */
    s->wire.max_recvs = 1;
    /* Recorded before it can hold anything: a restarted vramd must know. */
    if (vd_state_holder_add(srv->state, s->id, pid, s->starttime) < 0) {
        vlog(VLOG_WARNING, "refusing pid %lld: the state file's holder table "
             "is full", (long long)pid);
        vp_close(&s->pin);
        vram_wire_fini(&s->wire);
        free(s);
        refuse(fd, "E2BIG", "too many clients and gone clients");
        return;
    }
    if (vl_client_add(&srv->ledger, s->id) < 0 ||
        vp_watch_init(srv->loop, &s->watch, fd) < 0) {
        vd_state_holder_drop(srv->state, s->id);
        vp_close(&s->pin);
        vram_wire_fini(&s->wire);
        free(s);
        vp_close(&fd);
        return;
    }
    s->watch.data = s;
    vp_watch_set(&s->watch, VP_READABLE, on_ready);
    s->next = srv->sessions;
    srv->sessions = s;
    srv->nsessions++;
    vlog(VLOG_DEBUG, "client %u connected (pid %lld, uid %u, gid %u%s)", s->id,
         (long long)pid, (unsigned)peer.uid, (unsigned)peer.gid,
         s->admin ? ", admin" : "");
}
