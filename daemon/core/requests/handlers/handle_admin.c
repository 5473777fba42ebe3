/* SPDX-License-Identifier: Apache-2.0 */
/* Requests of operators and health checks: status, ping, and for admins
 * (access.admin) device_set_capacity and client_evict. */
#include <stdio.h>

#include "daemon/core/clients/orphans.h"
#include "daemon/core/requests/lifecycle.h"
#include "daemon/log.h"
#include "daemon/core/requests/request.h"
#include "daemon/core/requests/status.h"
#include "gen/vd_dispatch.h"
#include "daemon/core/requests/waits.h"

struct blocked {
    struct vd_core *core;
    struct vw_rep_status *rep;
};

/* A stage with a held request shows whom it waits for (stages come in
 * the order of their ids). */
static void mark_blocked(void *ud, uint32_t stage)
{
    struct blocked *b = ud;
    size_t lo = 0, hi = b->rep->stages.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->rep->stages.v[mid].id < stage)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == b->rep->stages.n || b->rep->stages.v[lo].id != stage)
        return;
    struct vl_blocker bl;
    if (!vl_stage_blocker(b->core->ledger, stage, &bl))
        return;
    b->rep->stages.v[lo].blocked_by = bl.client;
    b->rep->stages.v[lo].has_blocked_by = true;
}

int vd_handle_status(struct vd_request *rq, const struct vw_req_status *m,
                     struct vw_rep_status *rep)
{
    (void)m;
    int e = vd_status_build(rq->core, rep, &rq->arena);
    if (e < 0)
        return vd_fail(rq, e, "out of memory for the status");
    vd_waits_each(rq->core, mark_blocked, &(struct blocked){rq->core, rep});
    return 0;
}

int vd_handle_ping(struct vd_request *rq, const struct vw_req_ping *m,
                   struct vw_rep_ping *rep)
{
    (void)rq;
    (void)m;
    (void)rep;
    return 0;
}

int vd_handle_device_set_capacity(struct vd_request *rq,
                                  const struct vw_req_device_set_capacity *m,
                                  struct vw_rep_device_set_capacity *rep)
{
    (void)rep;
    struct vd_client *c = rq->client;
    if (!c->admin)
        return vd_fail(rq, -EPERM, "changing a capacity is for administrators "
                       "(uid %u is not in access.admin)", (unsigned)c->peer.uid);
    int e = vl_device_set_capacity(rq->core->ledger, m->device, m->bytes, false);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    vlog(VLOG_NOTICE, "client %u (%s, uid %u) set device %u's capacity to %llu "
         "MiB", c->id, c->name, (unsigned)c->peer.uid, m->device,
         (unsigned long long)(m->bytes >> 20));
    rq->freed_memory = true; /* more room may serve a held reserve */
    return 0;
}

int vd_handle_client_evict(struct vd_request *rq,
                           const struct vw_req_client_evict *m,
                           struct vw_rep_client_evict *rep)
{
    (void)rep;
    struct vd_client *c = rq->client;
    if (!c->admin)
        return vd_fail(rq, -EPERM, "evicting a client is for administrators "
                       "(uid %u is not in access.admin)", (unsigned)c->peer.uid);
    struct vd_client *t = vd_clients_find(&rq->core->clients, m->client);
    if (!t && vd_handoff_is_orphan(rq->core, m->client)) {
        /* No process to wait for: the admin says its memory may go. */
        vlog(VLOG_NOTICE, "client %u (%s, uid %u) evicted handed-off client %u: "
             "its quarantined memory returns to the pool", c->id, c->name,
             (unsigned)c->peer.uid, m->client);
        vd_lifecycle_reap_orphan(rq->core, m->client);
        rq->freed_memory = true;
        return 0;
    }
    if (!t || t->closing)
        return vd_fail(rq, -ENOENT, "no connected client %u", m->client);
    if (t == c)
        return vd_fail(rq, -EINVAL, "a client cannot evict itself");
    char why[128];
    snprintf(why, sizeof(why), "evicted by client %u (%s, uid %u)", c->id,
             c->name, (unsigned)c->peer.uid);
    vd_lifecycle_evict(rq->core, t, why);
    return 0;
}
