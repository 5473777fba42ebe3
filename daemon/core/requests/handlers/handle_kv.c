/* SPDX-License-Identifier: Apache-2.0 */
/* KV budgets and loans of configured stages: kv_reserve (held when it
 * needs recalls and asked to hold, R6), kv_trim, expert_request,
 * expert_claim. */
#include <stdio.h>

#include "daemon/core/requests/request.h"
#include "daemon/core/requests/status.h"
#include "gen/vd_dispatch.h"
#include "daemon/core/requests/waits.h"

/* The stage's KV and loan figures after the change, as every reply here
 * carries them (VD_KV_COPY fills the reply). */
static int summary(struct vd_request *rq, uint32_t stage, uint32_t recalled,
                   struct vd_kv_summary *sum)
{
    int e = vd_status_kv(rq->core, stage, recalled, sum, &rq->arena);
    return e < 0 ? vd_fail(rq, e, "out of memory") : 0;
}

int vd_handle_kv_reserve(struct vd_request *rq,
                         const struct vw_req_kv_reserve *m,
                         struct vw_rep_kv_reserve *rep)
{
    uint32_t recalled = 0;
    int e = vl_kv_reserve(rq->core->ledger, rq->client->id, m->stage,
                          m->prompt_tokens, m->output_tokens, &recalled, &rq->fx);
    if (e == VL_PENDING) {
        /* The recalls it issued go out either way, with the reply or now. */
        vd_fail_ledger(rq, 0);
        if (m->has_hold && m->hold)
            return vd_waits_hold(rq, m->stage, m->prompt_tokens,
                                 m->output_tokens);
        char why[512];
        snprintf(why, sizeof(why), "%s", rq->why);
        return vd_fail(rq, -EAGAIN, "%s; ask with hold to wait", why);
    }
    if (e < 0)
        return vd_fail_ledger(rq, e);
    struct vd_kv_summary sum;
    if ((e = summary(rq, m->stage, recalled, &sum)) < 0)
        return e;
    VD_KV_COPY(rep, sum);
    return 0;
}

int vd_handle_kv_trim(struct vd_request *rq, const struct vw_req_kv_trim *m,
                      struct vw_rep_kv_trim *rep)
{
    int e = vl_kv_trim(rq->core->ledger, rq->client->id, m->stage,
                       m->has_tokens ? m->tokens : 0, &rq->fx);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    struct vd_kv_summary sum;
    if ((e = summary(rq, m->stage, 0, &sum)) < 0)
        return e;
    VD_KV_COPY(rep, sum);
    return 0;
}

int vd_handle_expert_request(struct vd_request *rq,
                             const struct vw_req_expert_request *m,
                             struct vw_rep_expert_request *rep)
{
    int e = vl_expert_request(rq->core->ledger, rq->client->id, m->stage,
                              m->has_bytes ? m->bytes : 0, &rq->fx);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    struct vd_kv_summary sum;
    if ((e = summary(rq, m->stage, 0, &sum)) < 0)
        return e;
    VD_KV_COPY(rep, sum);
    return 0;
}

int vd_handle_expert_claim(struct vd_request *rq,
                           const struct vw_req_expert_claim *m,
                           struct vw_rep_expert_claim *rep)
{
    int e = vl_expert_claim(rq->core->ledger, rq->client->id, m->stage, m->layer,
                            m->slots.v, m->slots.n);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    rep->claimed = (uint32_t)m->slots.n;
    return 0;
}
