/* SPDX-License-Identifier: Apache-2.0 */
/* Watching fds from the libuv loop on POSIX: uv_poll. */
#include "platform/watch.h"

#include "platform/conn.h"

static void on_poll(uv_poll_t *p, int status, int events)
{
    struct vp_watch *w = p->data;
    /* libuv reports any socket error (POLLERR) as EBADF: say what it was. */
    if (status == UV_EBADF) {
        int e = vp_conn_error(w->h);
        status = e < 0 ? e : UV_ECONNRESET;
    }
    int ev = ((events & UV_READABLE) ? VP_READABLE : 0) |
             ((events & UV_WRITABLE) ? VP_WRITABLE : 0);
    w->fn(w, status, ev);
}

int vp_watch_init(uv_loop_t *loop, struct vp_watch *w, vp_handle h)
{
    w->events = 0;
    w->fn = NULL;
    w->h = h;
    int r = uv_poll_init(loop, &w->poll, (int)h.v);
    w->poll.data = w;
    return r;
}

int vp_watch_set(struct vp_watch *w, int events, vp_watch_fn fn)
{
    w->fn = fn;
    if (events == w->events)
        return 0;
    w->events = events;
    if (!events)
        return uv_poll_stop(&w->poll);
    return uv_poll_start(&w->poll,
                         ((events & VP_READABLE) ? UV_READABLE : 0) |
                             ((events & VP_WRITABLE) ? UV_WRITABLE : 0),
                         on_poll);
}

void vp_watch_close(struct vp_watch *w, uv_close_cb closed)
{
    /* uv_close stops the poll itself: a uv_poll_stop first would take the
     * fd out of epoll twice (a syscall on every disconnect). */
    w->events = 0;
    uv_close((uv_handle_t *)&w->poll, closed);
}
