/* SPDX-License-Identifier: Apache-2.0 */
/* Watching a handle from the daemon's libuv loop: a connection becoming
 * readable or writable, a pinned process exiting (readable), a listener
 * with connections waiting. libuv polls sockets and fds on POSIX; on
 * Windows this is where pipes and process handles are waited for. */
#ifndef VRAM_PLATFORM_WATCH_H
#define VRAM_PLATFORM_WATCH_H

#include <uv.h>

#include "platform/conn.h"
#include "platform/handle.h"

struct vp_watch;
/* status < 0: the handle failed (a negative errno, such as -ECONNRESET);
 * events: VP_READABLE and
 * VP_WRITABLE (platform/conn.h). */
typedef void (*vp_watch_fn)(struct vp_watch *w, int status, int events);

#ifdef _WIN32
/* Windows: only waitable objects (a pinned process), readable once
 * signalled. A wait registered with the thread pool
 * (RegisterWaitForSingleObject) wakes the loop through async; the
 * connections themselves are libuv streams (platform/win32/stream.h). The close
 * callback gets async, whose data is the watch, as it gets poll on POSIX. */
struct vp_watch {
    uv_async_t async;
    vp_handle h;
    vp_watch_fn fn;
    void *data;
    int events;
    void *wait; /* the registered wait, NULL when none */
};
#else
struct vp_watch {
    uv_poll_t poll;
    vp_handle h;
    vp_watch_fn fn;
    void *data;
    int events;
};
#endif

int vp_watch_init(uv_loop_t *loop, struct vp_watch *w, vp_handle h);
/* Watches for events (0 stops). Restarting with the same events is free. */
int vp_watch_set(struct vp_watch *w, int events, vp_watch_fn fn);
/* Stops watching and closes the libuv handle; closed runs once it is done
 * (the memory of w must live until then). */
void vp_watch_close(struct vp_watch *w, uv_close_cb closed);

#endif
