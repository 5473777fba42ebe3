/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint.h on POSIX: the listening Unix socket (listener.h: made here or
 * passed by the service manager) watched on the loop, and each connection
 * a socket watched on the loop (watch.h), its bytes and handles through
 * conn.h's vp_send and vp_recv (handles as SCM_RIGHTS beside the bytes),
 * its peer by SO_PEERCRED (peer.h). */
#include "platform/endpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/conn.h"
#include "platform/listener.h"
#include "platform/watch.h"

/* Out of fds, a listener stays readable: watching it would spin. Accepting
 * pauses instead, and tries again after a while; the connections wait in
 * the backlog meanwhile. */
#define ACCEPT_RETRY_MS 250

struct vp_endpoint {
    uv_loop_t *loop;
    vp_handle h;
    struct vp_watch watch;
    uv_timer_t retry;
    bool passed, watching, listening;
    int open_handles; /* libuv handles to close before the memory goes */
    vp_accept_fn fn;
    vp_accept_err_fn err_fn;
    void *data;
    char path[108];
};

struct vp_link {
    vp_handle h;
    struct vp_watch watch;
    const struct vp_link_cbs *cbs;
    void *ud;
    bool reading, want_write, closing;
    void (*closed)(void *ud);
};

static void on_accept(struct vp_watch *w, int status, int events);

static void on_retry(uv_timer_t *t)
{
    struct vp_endpoint *ep = t->data;
    if (ep->listening)
        vp_watch_set(&ep->watch, VP_READABLE, on_accept);
}

static struct vp_link *link_new(uv_loop_t *loop, vp_handle h, int *err)
{
    struct vp_link *l = calloc(1, sizeof(*l));
    if (!l) {
        *err = -ENOMEM;
        return NULL;
    }
    l->h = h;
    int e = vp_watch_init(loop, &l->watch, h);
    if (e < 0) {
        free(l);
        *err = -EIO;
        return NULL;
    }
    l->watch.data = l;
    return l;
}

static void on_accept(struct vp_watch *w, int status, int events)
{
    (void)events;
    struct vp_endpoint *ep = w->data;
    if (status < 0 || !ep->listening)
        return;
    /* One connection a turn: the watch is level-triggered, so the next
     * turn takes the next one (serving the others in between), and a lone
     * connection costs no accept that finds nothing. */
    vp_handle h;
    int e = vp_accept(ep->h, &h);
    if (e == -EMFILE || e == -ENFILE || e == -ENOBUFS || e == -ENOMEM) {
        vp_watch_set(&ep->watch, 0, on_accept);
        uv_timer_start(&ep->retry, on_retry, ACCEPT_RETRY_MS, 0);
        if (ep->err_fn)
            ep->err_fn(ep->data, e, ACCEPT_RETRY_MS);
        return;
    }
    if (e < 0)
        return;
    struct vp_link *l = link_new(ep->loop, h, &e);
    if (!l) {
        vp_close(&h);
        if (ep->err_fn)
            ep->err_fn(ep->data, e, 0);
        return;
    }
    ep->fn(ep->data, l);
}

int vp_endpoint_prepare(uv_loop_t *loop, const char *path,
                        struct vp_endpoint **out, unsigned *how, char *why,
                        size_t whylen)
{
    if (strlen(path) >= sizeof(((struct vp_endpoint *)0)->path)) {
        snprintf(why, whylen, "socket path %s is longer than %zu bytes", path,
                 sizeof(((struct vp_endpoint *)0)->path) - 1);
        return -ENAMETOOLONG;
    }
    struct vp_endpoint *ep = calloc(1, sizeof(*ep));
    if (!ep) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    ep->loop = loop;
    ep->h = VP_NONE;
    snprintf(ep->path, sizeof(ep->path), "%s", path);
    char passed[sizeof(ep->path)] = "";
    unsigned h = 0;
    int r = vp_listen_activated(&ep->h, passed, sizeof(passed), why, whylen);
    if (r > 0) {
        /* The service manager owns the path, its mode and its group. */
        ep->passed = true;
        h |= VP_ENDPOINT_PASSED;
        if (passed[0])
            snprintf(ep->path, sizeof(ep->path), "%s", passed);
    } else if (r == 0) {
        r = vp_listen_check_dir(ep->path, why, whylen);
        if (r > 0)
            h |= VP_ENDPOINT_DIR_MADE;
    }
    if (r < 0) {
        free(ep);
        return r;
    }
    *how = h;
    *out = ep;
    return 0;
}

int vp_endpoint_listen(struct vp_endpoint *ep, const struct vp_endpoint_access *acc,
                       vp_accept_fn fn, vp_accept_err_fn err_fn, void *data,
                       char *why, size_t whylen)
{
    if (!ep->passed) {
        struct vp_listen_cfg lc = {.path = ep->path, .group = acc->group,
                                   .mode = acc->mode};
        int e = vp_listen(&lc, &ep->h, why, whylen);
        if (e < 0)
            return e;
    }
    if (vp_watch_init(ep->loop, &ep->watch, ep->h) < 0) {
        snprintf(why, whylen, "cannot watch %s on the loop", ep->path);
        return -EIO;
    }
    ep->watching = true;
    ep->open_handles++;
    ep->watch.data = ep;
    uv_timer_init(ep->loop, &ep->retry);
    ep->open_handles++;
    ep->retry.data = ep;
    ep->fn = fn;
    ep->err_fn = err_fn;
    ep->data = data;
    ep->listening = true;
    vp_watch_set(&ep->watch, VP_READABLE, on_accept);
    return 0;
}

int vp_endpoint_set_access(struct vp_endpoint *ep,
                           const struct vp_endpoint_access *acc, char *why,
                           size_t whylen)
{
    (void)ep;
    (void)acc;
    (void)why;
    (void)whylen;
    return 0;
}

const char *vp_endpoint_access_text(const struct vp_endpoint *ep)
{
    (void)ep;
    return NULL;
}

const char *vp_endpoint_path(const struct vp_endpoint *ep)
{
    return ep->path;
}

void vp_endpoint_stop(struct vp_endpoint *ep)
{
    if (!ep || !ep->listening)
        return;
    ep->listening = false;
    vp_watch_set(&ep->watch, 0, on_accept);
    uv_timer_stop(&ep->retry);
}

static void endpoint_closed(struct vp_endpoint *ep)
{
    if (--ep->open_handles == 0)
        free(ep);
}

static void watch_closed(uv_handle_t *h)
{
    endpoint_closed(((struct vp_watch *)h->data)->data);
}

static void retry_closed(uv_handle_t *h)
{
    endpoint_closed(h->data);
}

void vp_endpoint_close(struct vp_endpoint **epp)
{
    struct vp_endpoint *ep = *epp;
    if (!ep)
        return;
    *epp = NULL;
    vp_endpoint_stop(ep);
    bool watched = ep->open_handles > 0;
    /* The watch goes before the fd, whose number another fd may take. */
    if (watched) {
        vp_watch_close(&ep->watch, watch_closed);
        uv_close((uv_handle_t *)&ep->retry, retry_closed);
    }
    /* An activated socket's path is the service manager's. */
    vp_listen_close(&ep->h, ep->path, !ep->passed);
    if (!watched)
        free(ep);
}

/* ---- links ---- */

static void on_ready(struct vp_watch *w, int status, int events);

static void link_watch(struct vp_link *l)
{
    vp_watch_set(&l->watch, (l->reading ? VP_READABLE : 0) |
                                (l->want_write ? VP_WRITABLE : 0),
                 on_ready);
}

void vp_link_start(struct vp_link *l, const struct vp_link_cbs *cbs, void *ud)
{
    l->cbs = cbs;
    l->ud = ud;
}

int vp_link_read(struct vp_link *l, bool on)
{
    if (l->closing)
        return -ECONNABORTED;
    l->reading = on;
    link_watch(l);
    return 0;
}

long vp_link_write(struct vp_link *l, const void *buf, size_t len,
                   const vp_handle *hs, int nh)
{
    long n = vp_send(l->h, buf, len, hs, nh);
    bool short_write = n == -EAGAIN || (n >= 0 && (size_t)n < len);
    if (short_write != l->want_write) {
        l->want_write = short_write;
        link_watch(l);
    }
    return n;
}

size_t vp_link_pending(const struct vp_link *l)
{
    (void)l;
    return 0; /* a send is written or refused at once */
}

int vp_link_peer(struct vp_link *l, struct vp_peer *out, char *why,
                 size_t whylen)
{
    int e = vp_peer_of(l->h, out);
    if (e < 0)
        snprintf(why, whylen, "its peer's credentials cannot be read: %s",
                 strerror(-e));
    return e;
}

int vp_link_pin(struct vp_link *l, const struct vp_peer *p, vp_handle *pin,
                uint64_t *start_time)
{
    return vp_peer_pin(l->h, p, pin, start_time);
}

int vp_link_give(struct vp_link *l, vp_handle *hs, int n, unsigned access,
                 vp_handle *vals)
{
    /* An fd carries no access of its own to lower; a sealed set's memfd
     * refuses a writable shared mapping already (F_SEAL_WRITE). */
    (void)l;
    (void)access;
    for (int i = 0; i < n; i++)
        vals[i] = hs[i];
    return 0;
}

void vp_link_take_back(struct vp_link *l, vp_handle *vals, int n)
{
    (void)l;
    (void)vals;
    (void)n;
}

/* What a failed connection's error means, in words for the log. */
static const char *conn_error(long err)
{
    switch (err) {
    case -ECONNRESET: return "the peer reset the connection";
    case -EPIPE: return "the peer went away while we were writing";
    case -ETIMEDOUT: return "the connection timed out";
    default: return strerror((int)-err);
    }
}

/* Bytes asked of one receive. */
#define RECV_BYTES 4096

static void on_ready(struct vp_watch *w, int status, int events)
{
    struct vp_link *l = w->data;
    if (l->closing)
        return;
    if (status < 0) {
        if (l->reading)
            l->cbs->read(l->ud, status, NULL, 0, "");
        else
            l->cbs->written(l->ud, status);
        return;
    }
    if ((events & VP_WRITABLE) && l->want_write) {
        l->want_write = false;
        link_watch(l);
        l->cbs->written(l->ud, 0); /* it may close us */
    }
    if (!(events & VP_READABLE) || !l->reading || l->closing)
        return;
    /* One receive a turn: the level-triggered watch brings us back for
     * whatever is left, so a flood from one peer does not hold the loop. */
    size_t room;
    uint8_t *buf = l->cbs->alloc(l->ud, RECV_BYTES, &room);
    if (!buf) {
        l->cbs->read(l->ud, -ENOMEM, NULL, 0, "out of memory for a receive");
        return;
    }
    vp_handle hs[VP_RECV_MAX_HANDLES];
    int nh = 0;
    char why[256] = "";
    long got = vp_recv(l->h, buf, room, hs, VP_RECV_MAX_HANDLES, &nh, 0, why,
                       sizeof(why));
    if (got == -EAGAIN)
        return;
    if (got < 0 && !why[0])
        snprintf(why, sizeof(why), "%s", conn_error(got));
    l->cbs->read(l->ud, got, hs, nh, why);
}

static void link_freed(uv_handle_t *h)
{
    struct vp_link *l = ((struct vp_watch *)h->data)->data;
    if (l->closed)
        l->closed(l->ud);
    free(l);
}

void vp_link_close(struct vp_link *l, void (*closed)(void *ud))
{
    l->closing = true;
    l->closed = closed;
    /* The watch goes before the fd (its memory lives until link_freed). */
    vp_watch_close(&l->watch, link_freed);
    vp_close(&l->h);
}
