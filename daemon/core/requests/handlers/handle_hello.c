/* SPDX-License-Identifier: Apache-2.0 */
/* hello: the first request of every connection. */
#include <stdio.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/core/requests/request.h"
#include "daemon/state/state.h"
#include "gen/vd_dispatch.h"

int vd_handle_hello(struct vd_request *rq, const struct vw_req_hello *m,
                    struct vw_rep_hello *rep)
{
    struct vd_client *c = rq->client;
    /* The client speaks [min_version, version] (a client of version 1 says
     * only version); the connection speaks the newest both do. */
    uint32_t hi = m->version, lo = m->has_min_version ? m->min_version : m->version;
    uint32_t v = hi < VW_PROTOCOL_VERSION ? hi : VW_PROTOCOL_VERSION;
    if (lo > hi || v < lo || v < VW_PROTOCOL_OLDEST) {
        rq->close_after = true;
        return vd_fail(rq, -EPROTONOSUPPORT, "protocol versions: client %u to %u, "
                       "vramd %d to %d: none in common", lo, hi,
                       VW_PROTOCOL_OLDEST, VW_PROTOCOL_VERSION);
    }

    if (m->role && strcmp(m->role, "ctl") && strcmp(m->role, "engine"))
        return vd_fail(rq, -EINVAL, "role must be engine or ctl");
    c->ctl = m->role && strcmp(m->role, "ctl") == 0;
    if (m->name)
        snprintf(c->name, sizeof(c->name), "%s", m->name);
    /* The name is shown by vramctl and logged: no control characters. */
    for (char *p = c->name; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    c->hello = true;
    c->version = (uint16_t)v;
    /* The reply goes in a frame of that version already: a client that
     * offered it reads it. */
    if (rq->core->port.speak)
        rq->core->port.speak(rq->core->port.ctx, c->conn, c->version);
    /* Kept with its process's record: vramctl names it while it is gone,
     * across a restart of vramd too. That record is made later, with this
     * name, when it is pinned (vd_lifecycle_pin): hello comes first. */
    if (c->recorded)
        vd_state_holder_name(rq->core->state, c->id, c->name);
    vlog(c->ctl ? VLOG_DEBUG : VLOG_INFO,
         "client %u (%s, pid %lld, uid %u) said hello as %s, protocol "
         "version %u", c->id, c->name, (long long)c->peer.pid,
         (unsigned)c->peer.uid, c->ctl ? "ctl" : "engine", (unsigned)v);
    static const char *caps[] = {"fd-passing", "loans", "hold"};
    rep->version = c->version;
    rep->capabilities.v = (const char **)caps;
    rep->capabilities.n = sizeof(caps) / sizeof(caps[0]);
    rep->client = c->id;
    rep->backend = rq->core->backend->ops->name;
    return 0;
}
