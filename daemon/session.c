/* One client connection: who the peer is (SO_PEERCRED, a pidfd), its
 * frames in and out, and its end (quarantine until its process is gone).
 * What a request does is in requests.c; carrying out the ledger's effects
 * (replies with chunks, recalls, held requests, budget events) in
 * effects.c. No memory decision is made here. */
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "message.h"
#include "session.h"
#include "state.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

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

int vd_send(struct vd_session *s, cJSON *msg, const int *fds, int nfds)
{
    struct vd_server *srv = s->srv;
    if (srv->crash_before_reply && srv->request_type &&
        strcmp(srv->crash_before_reply, srv->request_type) == 0) {
        vlog(VLOG_WARNING, "fault injection: killed before replying to %s",
             srv->request_type);
        raise(SIGKILL);
    }
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

static int on_frame(void *ud, struct vram_wire_frame *f)
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
    if (f->nfds > 0) {
        /* No request carries fds: close them first, then refuse. */
        for (int i = 0; i < f->nfds; i++) {
            close(f->fds[i]);
            f->fds[i] = -1;
        }
        vd_reply_err(s, id, -EINVAL, "unsolicited file descriptors: %d closed "
                  "(no request carries fds)", f->nfds);
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
    uv_poll_stop(&rp->poll);
    uv_close((uv_handle_t *)&rp->poll, reaper_closed);
}

static void reaper_ready(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    vd_reaper_end(p->data);
}

int vd_reaper_watch(struct vd_server *srv, uint32_t client, pid_t pid,
                    int pidfd, uint64_t starttime, bool resumable)
{
    struct vd_reaper *rp = calloc(1, sizeof(*rp));
    if (!rp)
        return -ENOMEM;
    rp->srv = srv;
    rp->client = client;
    rp->pid = pid;
    rp->pidfd = pidfd;
    rp->starttime = starttime;
    rp->resumable = resumable;
    uv_poll_init(srv->loop, &rp->poll, rp->pidfd);
    rp->poll.data = rp;
    uv_poll_start(&rp->poll, UV_READABLE, reaper_ready);
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
         "client %u (%s, pid %d): %s", s->id, s->name, (int)s->pid, why);
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
    if (!wait && held && s->pidfd >= 0 &&
        vd_reaper_watch(srv, s->id, s->pid, s->pidfd, s->starttime,
                        !s->evicted) == 0) {
        s->pidfd = -1;
        wait = true;
        if (held)
            vlog(VLOG_INFO, "client %u: %u chunks quarantined until pid %d "
                 "exits or comes back", s->id, held, (int)s->pid);
    }
    if (!wait) {
        if (held && s->pidfd < 0)
            vlog(VLOG_WARNING, "client %u: pid %d could not be pinned (no "
                 "pidfd); its %u chunks return at once", s->id, (int)s->pid,
                 held);
        reap(srv, s->id);
    }
    cJSON_Delete(s->resume_acc);
    s->resume_acc = NULL;
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

/* Turns a connection away with one error frame (the peer's library reports
 * it as the connect's error), then closes it. */
static void refuse(int fd, const char *code, const char *msg)
{
    struct vram_wire w;
    vram_wire_init(&w, fd);
    cJSON *m = vd_reply_new(0, false);
    cJSON_AddStringToObject(m, "error", code);
    cJSON_AddStringToObject(m, "message", msg);
    vram_msg_queue(&w, m, NULL, 0);
    vram_wire_flush(&w);
    vram_wire_fini(&w);
    cJSON_Delete(m);
    close(fd);
}

void vd_session_accept(struct vd_server *srv, int fd)
{
    pid_t pid;
    struct vd_peer peer;
    int e = vd_peer_read(fd, &pid, &peer);
    if (e < 0) {
        vlog(VLOG_WARNING, "refusing a connection: SO_PEERCRED failed: %s",
             strerror(-e));
        close(fd);
        return;
    }
    char msg[256];
    if (!vd_access_connect(&srv->cfg, &peer)) {
        snprintf(msg, sizeof(msg), "uid %u (gid %u) may not use vramd: not in "
                 "its access list (access.allow)", (unsigned)peer.uid,
                 (unsigned)peer.gid);
        vlog(VLOG_WARNING, "refusing pid %d: %s", (int)pid, msg);
        srv->counters.errors++;
        refuse(fd, "EACCES", msg);
        return;
    }
    if (srv->nsessions >= srv->cfg.max_clients) {
        vlog(VLOG_WARNING, "refusing pid %d: limit of %u clients reached",
             (int)pid, srv->cfg.max_clients);
        refuse(fd, "E2BIG", "too many clients connected");
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
    vd_state_next_client(srv->state, srv->next_client_id + 1);
    s->pid = pid;
    s->starttime = vd_process_starttime(pid);
    s->peer = peer;
    s->admin = vd_access_admin(&srv->cfg, &peer);
    /* Pin the peer's process now: a pid can be reused, a pidfd cannot. */
    s->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (s->pidfd >= 0)
        fcntl(s->pidfd, F_SETFD, FD_CLOEXEC);
    snprintf(s->name, sizeof(s->name), "pid-%d", (int)pid);
    vram_wire_init(&s->wire, fd);
    /* Requests are small and carry no fds: one receive takes a whole
     * request (or several), and the level-triggered poll brings us back for
     * whatever is left. */
    s->wire.rx_greedy = true;
    /* Recorded before it can hold anything: a restarted vramd must know. */
    if (vd_state_holder_add(srv->state, s->id, pid, s->starttime) < 0) {
        vlog(VLOG_WARNING, "refusing pid %d: the state file's holder table "
             "is full", (int)pid);
        if (s->pidfd >= 0)
            close(s->pidfd);
        free(s);
        refuse(fd, "E2BIG", "too many clients and gone clients");
        return;
    }
    if (vl_client_add(&srv->ledger, s->id) < 0) {
        vd_state_holder_drop(srv->state, s->id);
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
    vlog(VLOG_DEBUG, "client %u connected (pid %d, uid %u, gid %u%s)", s->id,
         (int)pid, (unsigned)peer.uid, (unsigned)peer.gid,
         s->admin ? ", admin" : "");
}
