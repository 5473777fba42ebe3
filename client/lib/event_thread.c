/* SPDX-License-Identifier: Apache-2.0 */
/* The event thread: for a process whose threads block in calls on other
 * clients, or never poll this one's fd, the library reads the connection
 * itself and answers recalls at once, so a deadline never passes because
 * the engine was busy elsewhere. Every call takes the client's lock
 * (call_frame.c); the thread takes it only to dispatch what arrived. */
#include <errno.h>
#include <stdio.h>

#include "client/lib/call_frame.h"
#include "client/lib/client_record.h"
#include "platform/conn.h"
#include "client/lib/error.h"
#include "client/lib/event_thread.h"

/* The connection to wait on, read under the lock: a reconnect on another
 * thread may replace it (connect.c), and on Windows it then has another
 * number. The lock alone, not vc_enter: that would wait for chunks being
 * mapped in the background, which the engine may not need yet. */
static vp_handle wait_begin(vram_client *c)
{
    vp_mutex_lock(c->lock);
    vp_handle h = c->h;
    c->thread_h = h;
    vp_mutex_unlock(c->lock);
    return h;
}

static void event_loop(void *p)
{
    vram_client *c = p;
    for (;;) {
        vp_handle h = wait_begin(c);
        int r = vp_conn_wait(h, VP_READABLE, -1);
        vc_enter(c);
        c->thread_h = VP_NONE;
        vp_close(&c->retired); /* out of its wait now */
        if (c->thread_stop) {
            vc_leave(c, 0);
            return;
        }
        if (!vp_same(h, c->h)) {
            /* Replaced while we waited (Windows): r was the old one's. */
            vc_leave(c, 0);
            continue;
        }
        /* The engine reads last_error after its own failed calls: what the
         * thread meets stays out of it (but for a lost connection). */
        char keep[sizeof(c->last_error)];
        snprintf(keep, sizeof(keep), "%s", c->last_error);
        int e = r < 0 ? r : vram_client_dispatch(c);
        bool lost = e < 0 && c->broken;
        if (!lost)
            snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
        vc_leave(c, 0);
        if (lost || (r < 0 && r != -EINTR))
            return; /* nothing more will come; calls report the loss */
    }
}

int vram_client_start_event_thread(vram_client *c)
{
    if (c->thread || c->lock)
        return vc_set_error(c, -EALREADY, "the event thread runs already");
    vp_mutex *m;
    int e = vp_mutex_new(&m);
    if (e < 0)
        return vc_set_error(c, e, "cannot make a lock");
    c->lock = m;
    vc_enter(c);
    e = vp_thread_start(&c->thread, event_loop, c);
    vc_leave(c, 0);
    if (e < 0) {
        c->lock = NULL;
        vp_mutex_free(m);
        return vc_set_error(c, e, "cannot start the event thread");
    }
    return 0;
}

void vc_thread_stop(vram_client *c)
{
    if (!c->thread)
        return;
    vc_enter(c);
    c->thread_stop = true;
    /* Wakes its wait, on whichever connection it waits. */
    vp_conn_shut_receive(vp_ok(c->thread_h) ? c->thread_h : c->h);
    vc_leave(c, 0);
    vp_thread_join(c->thread);
    c->thread = NULL;
}
