/* SPDX-License-Identifier: Apache-2.0 */
/* Watching waitable objects from the libuv loop on Windows: a pinned
 * process's exit. libuv polls only sockets here, so a thread-pool wait
 * (RegisterWaitForSingleObject, one shot) posts to the loop with
 * uv_async_send, and the loop's thread calls the watcher: the callback
 * never runs on the pool's thread. Pipes are not watched here: the daemon's
 * connections are libuv streams (platform/win32/stream.h). */
#include "platform/watch.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>

static void CALLBACK signalled(void *ctx, BOOLEAN timed_out)
{
    (void)timed_out;
    uv_async_send(ctx);
}

/* Waits for the registered wait's callback to end, so no uv_async_send can
 * come after the handle is closed (INVALID_HANDLE_VALUE: block until
 * then; the callback only posts, so this is short). */
static void unregister(struct vp_watch *w)
{
    if (w->wait) {
        UnregisterWaitEx(w->wait, INVALID_HANDLE_VALUE);
        w->wait = NULL;
    }
}

static void on_async(uv_async_t *a)
{
    struct vp_watch *w = a->data;
    /* Stopped (or restarted) since the wait fired: a stale wake. */
    if (!(w->events & VP_READABLE) || !w->fn)
        return;
    if (WaitForSingleObject((HANDLE)w->h.v, 0) != WAIT_OBJECT_0)
        return;
    /* One shot: the wait is over. Level-triggered, as on POSIX: a watcher
     * that keeps VP_READABLE set is called again on the next turn. */
    unregister(w);
    w->fn(w, 0, VP_READABLE);
    if ((w->events & VP_READABLE) && !w->wait && !uv_is_closing((uv_handle_t *)a))
        uv_async_send(a);
}

int vp_watch_init(uv_loop_t *loop, struct vp_watch *w, vp_handle h)
{
    w->events = 0;
    w->fn = NULL;
    w->h = h;
    w->wait = NULL;
    int r = uv_async_init(loop, &w->async, on_async);
    w->async.data = w;
    return r;
}

int vp_watch_set(struct vp_watch *w, int events, vp_watch_fn fn)
{
    w->fn = fn;
    /* Writable has no meaning for a process handle. */
    events &= VP_READABLE;
    if (events == w->events)
        return 0;
    w->events = events;
    if (!events) {
        unregister(w);
        return 0;
    }
    HANDLE wait = NULL;
    if (!RegisterWaitForSingleObject(&wait, (HANDLE)w->h.v, signalled,
                                     &w->async, INFINITE,
                                     WT_EXECUTEONLYONCE | WT_EXECUTEINWAITTHREAD)) {
        w->events = 0;
        return -EINVAL;
    }
    w->wait = wait;
    return 0;
}

void vp_watch_close(struct vp_watch *w, uv_close_cb closed)
{
    w->events = 0;
    unregister(w);
    uv_close((uv_handle_t *)&w->async, closed);
}
