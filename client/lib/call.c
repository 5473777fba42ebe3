/* SPDX-License-Identifier: Apache-2.0 */
/* A request that survives a broken connection: when vramd went away (a
 * restart, a crash), the library connects again, takes back what it holds
 * (connect.c) and sends the request once more; nothing of the failed
 * attempt was applied (its map entries are dropped with their handles). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client/lib/background.h"
#include "client/lib/call.h"
#include "client/lib/call_frame.h"
#include "client/lib/client_record.h"
#include "client/lib/connect.h"
#include "client/lib/error.h"
#include "client/lib/mapping.h"
#include "client/lib/protocol.h"

/* Requests whose effect the library made before sending (it unmapped and
 * forgot the memory): after a reconnect the resume already left them out,
 * so they are done, not sent again. */
static bool done_by_resume(int type)
{
    return type == VW_REQ_CHUNK_RELEASE || type == VW_REQ_REGION_RELEASE ||
           type == VW_REQ_STAGE_RELEASE;
}

int vc_call(vram_client *c, int type, const void *req, void *rep,
            struct vw_arena *a)
{
    /* A background request that failed after its call returned: the
     * engine's next request says so instead of being sent (background.c). */
    int e = c->depth == 1 ? vc_bg_failure(c) : 0;
    if (e < 0)
        return e;
    for (int attempt = 0;; attempt++) {
        e = vc_rpc(c, type, req, rep, a);
        if (e < 0 && c->broken && attempt == 0 && vc_can_reconnect(c)) {
            vc_clear_pending(c);
            int r = vc_reconnect(c);
            if (r < 0)
                return r;
            if (done_by_resume(type))
                return 0;
            continue;
        }
        break;
    }
    if (e < 0 && !c->await_err) {
        vc_clear_pending(c);
        return e;
    }
    if (e < 0 && c->npend) {
        /* Even a refused reply may carry chunks that were mapped. */
        char keep[512];
        snprintf(keep, sizeof(keep), "%s", c->last_error);
        vc_apply_pending(c);
        snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
    }
    return e;
}

static int dispatch(vram_client *c)
{
    int events = 0;
    int e = c->broken ? -ENOTCONN : vc_rpc_poll(c, &events);
    if (e < 0 && c->broken && vc_can_reconnect(c)) {
        e = vc_reconnect(c);
        events++; /* RECONNECTED */
    } else if (c->broken && e == 0) {
        e = vc_set_error(c, -ENOTCONN, "the connection to vramd is closed");
    }
    return e < 0 ? e : events;
}

int vram_client_dispatch(vram_client *c)
{
    vc_enter(c);
    return vc_leave(c, dispatch(c));
}
