/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint.h on Windows: vramd's own named pipe (pipe_listener.h, with its
 * security descriptor), accepted on by a thread that hands connected
 * instances to the loop (stream.h); each connection identified by its
 * client's token (identity.h, numbered by peer_map.c) before it becomes a
 * libuv stream; handles sent by pushing them into the client's process
 * (push.h), their values there written inline in the frame.
 *
 * Why streams rather than a watch on the pipe: libuv polls only sockets
 * on Windows, and a stream moves the bytes itself (uv_read_start into the
 * caller's buffer, uv_write of owned copies). */
#include "platform/endpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/win32/identity.h"
#include "platform/win32/peer_map.h"
#include "platform/win32/pipe_listener.h"
#include "platform/win32/push.h"
#include "platform/win32/stream.h"

struct vp_endpoint {
    uv_loop_t *loop;
    struct vp_pipe_listener *pipe;
    struct vp_acceptor *acceptor;
    vp_accept_fn fn;
    vp_accept_err_fn err_fn;
    void *data;
    bool listening;
    char *text; /* "security descriptor <SDDL>" */
    char path[108];
};

struct vp_link {
    uv_pipe_t pipe;
    vp_handle pin; /* the client's process, from its identity: pushes go there */
    struct vp_peer peer;
    int peer_err; /* why the client could not be identified, or 0 */
    char peer_why[224];
    const struct vp_link_cbs *cbs;
    void *ud;
    size_t pending; /* bytes handed to uv_write, not written yet */
    bool reading, closing;
    void (*closed)(void *ud);
};

struct wreq {
    uv_write_t req;
    struct vp_link *l;
    size_t len;
    uint8_t bytes[];
};

/* libuv's error numbers on Windows are its own. */
static int uv_to_errno(int status)
{
    switch (status) {
    case UV_ECONNRESET: return -ECONNRESET;
    case UV_EPIPE: return -EPIPE;
    case UV_ENOMEM: return -ENOMEM;
    case UV_ECANCELED: return -ECANCELED;
    case UV_ETIMEDOUT: return -ETIMEDOUT;
    default: return -EIO;
    }
}

/* The pipe's access list: the users' and groups' SIDs, by their numbers. */
static int allow_list(const struct vp_endpoint_access *acc,
                      struct vp_access_list *out)
{
    out->n = 0;
    for (int i = 0; i < acc->nuids + acc->ngids; i++) {
        uint32_t id = i < acc->nuids ? acc->uids[i] : acc->gids[i - acc->nuids];
        if (out->n >= VP_ACCESS_MAX)
            return -ENOSPC;
        if (vp_id_sid(id, &out->sids[out->n]) < 0)
            return -ENOENT; /* every number a list has is a SID's */
        out->n++;
    }
    return 0;
}

static void refresh_text(struct vp_endpoint *ep)
{
    const char *sddl = vp_pipe_listen_sddl(ep->pipe);
    size_t len = strlen(sddl) + 32;
    char *t = malloc(len);
    if (!t)
        return; /* the old words stay */
    snprintf(t, len, "security descriptor %s", sddl);
    free(ep->text);
    ep->text = t;
}

/* Who the client is, read now, while the instance is still ours: the
 * answer (or why there is none) waits in the link for vp_link_peer. */
static void identify(struct vp_link *l, struct vp_pipe_conn *conn)
{
    struct vp_identity *id = malloc(sizeof(*id)); /* 9 KiB of groups */
    char why[192] = "";
    if (!id) {
        l->peer_err = -ENOMEM;
        snprintf(l->peer_why, sizeof(l->peer_why), "out of memory");
        return;
    }
    int e = vp_identity_of_pipe(conn->h, conn->connected_at, id, &l->pin, why,
                                sizeof(why));
    if (e < 0) {
        l->peer_err = e;
        snprintf(l->peer_why, sizeof(l->peer_why), "its client cannot be "
                 "identified: %s", why[0] ? why : strerror(-e));
    } else if ((e = vpw_peer_map(id, &l->peer, why, sizeof(why))) < 0) {
        l->peer_err = e;
        snprintf(l->peer_why, sizeof(l->peer_why), "pid %lld: %s",
                 (long long)id->pid, why);
    }
    free(id);
}

static void link_freed(uv_handle_t *h)
{
    struct vp_link *l = h->data;
    if (l->closed)
        l->closed(l->ud);
    vp_close(&l->pin);
    free(l);
}

static void on_conn(void *data, struct vp_pipe_conn conn)
{
    struct vp_endpoint *ep = data;
    if (!ep->listening) {
        vp_close(&conn.h);
        return;
    }
    struct vp_link *l = calloc(1, sizeof(*l));
    if (!l) {
        vp_close(&conn.h);
        if (ep->err_fn)
            ep->err_fn(ep->data, -ENOMEM, 0);
        return;
    }
    l->pin = VP_NONE;
    identify(l, &conn);
    int e = vp_stream_open(ep->loop, &l->pipe, &conn.h);
    l->pipe.data = l;
    if (e < 0) {
        l->closing = true;
        uv_close((uv_handle_t *)&l->pipe, link_freed);
        if (ep->err_fn)
            ep->err_fn(ep->data, e, 0);
        return;
    }
    ep->fn(ep->data, l);
}

/* The acceptor pauses by itself when out of handles or memory; anything
 * else it reports and goes on. */
static void on_accept_error(void *data, int err)
{
    struct vp_endpoint *ep = data;
    if (ep->err_fn)
        ep->err_fn(ep->data, err, 0);
}

int vp_endpoint_prepare(uv_loop_t *loop, const char *path,
                        struct vp_endpoint **out, unsigned *how, char *why,
                        size_t whylen)
{
    if (strlen(path) >= sizeof(((struct vp_endpoint *)0)->path)) {
        snprintf(why, whylen, "pipe name %s is longer than %u bytes", path,
                 (unsigned)sizeof(((struct vp_endpoint *)0)->path) - 1);
        return -ENAMETOOLONG;
    }
    struct vp_endpoint *ep = calloc(1, sizeof(*ep));
    if (!ep) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    ep->loop = loop;
    snprintf(ep->path, sizeof(ep->path), "%s", path);
    *how = 0; /* no service manager passes a pipe */
    *out = ep;
    return 0;
}

int vp_endpoint_listen(struct vp_endpoint *ep, const struct vp_endpoint_access *acc,
                       vp_accept_fn fn, vp_accept_err_fn err_fn, void *data,
                       char *why, size_t whylen)
{
    struct vp_access_list *allow = malloc(sizeof(*allow));
    int e = allow ? allow_list(acc, allow) : -ENOMEM;
    if (e < 0) {
        snprintf(why, whylen, "cannot write %s's access list: %s", ep->path,
                 strerror(-e));
        free(allow);
        return e;
    }
    struct vp_pipe_listen_cfg lc = {.name = ep->path, .allow = allow};
    e = vp_pipe_listen(&lc, &ep->pipe, why, whylen);
    free(allow);
    if (e < 0)
        return e;
    refresh_text(ep);
    ep->fn = fn;
    ep->err_fn = err_fn;
    ep->data = data;
    ep->listening = true;
    e = vp_acceptor_start(ep->loop, ep->pipe, on_conn, on_accept_error, ep,
                          &ep->acceptor);
    if (e < 0) {
        ep->listening = false;
        snprintf(why, whylen, "cannot start accepting on %s: %s", ep->path,
                 strerror(-e));
        vp_pipe_listen_close(&ep->pipe);
        return e;
    }
    return 0;
}

int vp_endpoint_set_access(struct vp_endpoint *ep,
                           const struct vp_endpoint_access *acc, char *why,
                           size_t whylen)
{
    if (!ep->pipe)
        return 0;
    struct vp_access_list *allow = malloc(sizeof(*allow));
    int e = allow ? allow_list(acc, allow) : -ENOMEM;
    if (e < 0) {
        snprintf(why, whylen, "cannot write its access list: %s", strerror(-e));
        free(allow);
        return e;
    }
    e = vp_pipe_listen_set_allow(ep->pipe, allow, why, whylen);
    free(allow);
    if (e > 0)
        refresh_text(ep);
    return e;
}

const char *vp_endpoint_access_text(const struct vp_endpoint *ep)
{
    return ep->text;
}

const char *vp_endpoint_path(const struct vp_endpoint *ep)
{
    return ep->path;
}

/* No more connections: the acceptor thread is stopped and joined. */
void vp_endpoint_stop(struct vp_endpoint *ep)
{
    if (!ep)
        return;
    ep->listening = false;
    vp_acceptor_stop(ep->acceptor);
    ep->acceptor = NULL;
}

void vp_endpoint_close(struct vp_endpoint **epp)
{
    struct vp_endpoint *ep = *epp;
    if (!ep)
        return;
    *epp = NULL;
    vp_endpoint_stop(ep);
    vp_pipe_listen_close(&ep->pipe);
    free(ep->text);
    free(ep);
}

/* ---- links ---- */

void vp_link_start(struct vp_link *l, const struct vp_link_cbs *cbs, void *ud)
{
    l->cbs = cbs;
    l->ud = ud;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct vp_link *l = h->data;
    size_t room = 0;
    uint8_t *p = l->cbs->alloc(l->ud, suggested, &room);
    *buf = uv_buf_init((char *)p, p ? (unsigned)room : 0);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    struct vp_link *l = st->data;
    if (l->closing || !l->reading || nread == 0)
        return;
    if (nread == UV_EOF)
        l->cbs->read(l->ud, 0, NULL, 0, "");
    else if (nread == UV_ENOBUFS)
        l->cbs->read(l->ud, -ENOMEM, NULL, 0, "out of memory for a receive");
    else if (nread < 0)
        l->cbs->read(l->ud, uv_to_errno((int)nread), NULL, 0, "");
    else
        l->cbs->read(l->ud, (long)nread, NULL, 0, "");
}

int vp_link_read(struct vp_link *l, bool on)
{
    if (l->closing)
        return -ECONNABORTED;
    if (on == l->reading)
        return 0;
    l->reading = on;
    if (!on)
        return uv_read_stop((uv_stream_t *)&l->pipe) ? -EIO : 0;
    int e = uv_read_start((uv_stream_t *)&l->pipe, on_alloc, on_read);
    if (e) {
        l->reading = false;
        return uv_to_errno(e);
    }
    return 0;
}

static void on_written(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct vp_link *l = w->l;
    l->pending -= w->len;
    free(w);
    if (l->closing)
        return; /* the stream's close cancels the rest */
    l->cbs->written(l->ud, status < 0 ? uv_to_errno(status) : 0);
}

long vp_link_write(struct vp_link *l, const void *buf, size_t len,
                   const vp_handle *hs, int nh)
{
    (void)hs;
    if (nh > 0)
        return -EINVAL; /* handles go inline here (vp_link_give) */
    /* A copy: the caller reuses its buffer. */
    struct wreq *w = malloc(sizeof(*w) + len);
    if (!w)
        return -ENOMEM;
    w->l = l;
    w->len = len;
    memcpy(w->bytes, buf, len);
    uv_buf_t b = uv_buf_init((char *)w->bytes, (unsigned)len);
    int e = uv_write(&w->req, (uv_stream_t *)&l->pipe, &b, 1, on_written);
    if (e < 0) {
        free(w);
        return e == UV_EPIPE ? -EPIPE : -EIO;
    }
    l->pending += len;
    return (long)len;
}

size_t vp_link_pending(const struct vp_link *l)
{
    return l->pending;
}

int vp_link_peer(struct vp_link *l, struct vp_peer *out, char *why,
                 size_t whylen)
{
    if (l->peer_err < 0) {
        snprintf(why, whylen, "%s", l->peer_why);
        return l->peer_err;
    }
    *out = l->peer;
    return 0;
}

int vp_link_pin(struct vp_link *l, const struct vp_peer *p, vp_handle *pin,
                uint64_t *start_time)
{
    /* The pin taken at accept, by the pipe (never by pid later): a copy. */
    if (!vp_ok(l->pin))
        return -ESRCH;
    int e = vp_dup(l->pin, pin);
    if (e < 0)
        return e;
    *start_time = p->start_time;
    return 0;
}

int vp_link_give(struct vp_link *l, vp_handle *hs, int n, unsigned access,
                 vp_handle *vals)
{
    /* Into the client's process: their values there go in the frame. Ours
     * are closed. On a failure the copies made so far are taken back: the
     * client never saw them. */
    int e = vp_ok(l->pin) ? 0 : -ESRCH, i;
    for (i = 0; e == 0 && i < n; i++) {
        uint64_t v;
        e = vp_handle_push(l->pin, hs[i], access, &v);
        if (e < 0)
            break;
        vals[i].v = (intptr_t)v;
    }
    if (e < 0)
        for (int k = 0; k < i; k++)
            vp_handle_close_remote(l->pin, (uint64_t)vals[k].v);
    for (int k = 0; k < n; k++)
        vp_close(&hs[k]);
    return e;
}

void vp_link_take_back(struct vp_link *l, vp_handle *vals, int n)
{
    for (int i = 0; i < n; i++)
        vp_handle_close_remote(l->pin, (uint64_t)vals[i].v);
}

void vp_link_close(struct vp_link *l, void (*closed)(void *ud))
{
    l->closing = true;
    l->closed = closed;
    /* Pending writes are cancelled (their callbacks run first, and see
     * the link closing), then link_freed. */
    uv_close((uv_handle_t *)&l->pipe, link_freed);
}
