/* SPDX-License-Identifier: Apache-2.0 */
/* stage_register, stage_release, stage_sleep and stage_wake. */
#include "daemon/log.h"
#include "daemon/core/requests/still_held.h"
#include "daemon/core/requests/request.h"
#include "daemon/core/requests/status.h"
#include "gen/vd_dispatch.h"
#include "daemon/core/requests/waits.h"

int vd_handle_stage_register(struct vd_request *rq,
                             const struct vw_req_stage_register *m,
                             struct vw_rep_stage_register *rep)
{
    struct vd_core *core = rq->core;
    uint32_t stage = m->stage;
    int e;
    if (m->has_stage) {
        e = vl_stage_register(core->ledger, rq->client->id, stage,
                              m->has_keep_window && m->keep_window, &rq->fx);
        if (e == VL_PENDING) {
            /* R5: its initial window is lent as pool loans: recalled, and
             * the registration waits for them up to the hold bound. */
            vd_fail_ledger(rq, 0);
            return vd_waits_hold_register(rq, stage,
                                          m->has_keep_window && m->keep_window);
        }
    } else {
        if (!m->has_device || !m->has_first_layer || !m->has_last_layer)
            return vd_fail(rq, -EINVAL, "stage_register: a configured stage "
                           "needs stage; an ad-hoc one device, first_layer "
                           "and last_layer");
        e = vl_stage_register_adhoc(core->ledger, rq->client->id, m->device,
                                    m->first_layer, m->last_layer, &stage);
    }
    if (e < 0)
        return vd_fail_ledger(rq, e);
    vlog(VLOG_INFO, "client %u (%s) registered stage %u", rq->client->id,
         rq->client->name, stage);
    e = vd_status_stage(core, stage, &rep->stage, &rq->arena);
    return e < 0 ? vd_fail(rq, e, "out of memory") : 0;
}

int vd_handle_stage_release(struct vd_request *rq,
                            const struct vw_req_stage_release *m,
                            struct vw_rep_stage_release *rep)
{
    (void)rep;
    int e = vd_kept_refuse_stage(rq, m->stage);
    if (e < 0)
        return e;
    e = vl_stage_release(rq->core->ledger, rq->client->id, m->stage, &rq->fx);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    rq->freed_memory = true;
    return 0;
}

/* R18: the owner copied and unmapped; everything the stage holds goes
 * back to the pool. */
int vd_handle_stage_sleep(struct vd_request *rq,
                          const struct vw_req_stage_sleep *m,
                          struct vw_rep_stage_sleep *rep)
{
    int e = vd_kept_refuse_stage(rq, m->stage);
    if (e < 0)
        return e;
    uint64_t tokens = 0;
    uint32_t freed = 0;
    e = vl_stage_sleep(rq->core->ledger, rq->client->id, m->stage,
                       m->host_bytes, m->took_us, &tokens, &freed, &rq->fx);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    vlog(VLOG_INFO, "client %u (%s): stage %u sleeps (%u chunks back to the "
         "pool, %llu bytes kept in its host memory)", rq->client->id,
         rq->client->name, m->stage, freed, (unsigned long long)m->host_bytes);
    rq->freed_memory = true;
    rep->wake_tokens = tokens;
    rep->freed_chunks = freed;
    return 0;
}

int vd_handle_stage_wake(struct vd_request *rq,
                         const struct vw_req_stage_wake *m,
                         struct vw_rep_stage_wake *rep)
{
    struct vd_core *core = rq->core;
    int e;
    if (m->has_took_us) { /* the report of a finished wake */
        e = vl_stage_woke(core->ledger, rq->client->id, m->stage, m->took_us);
        return e < 0 ? vd_fail_ledger(rq, e) : 0;
    }
    uint64_t tokens = 0;
    e = vl_stage_wake(core->ledger, rq->client->id, m->stage, &tokens);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    vlog(VLOG_INFO, "client %u (%s): stage %u wakes", rq->client->id,
         rq->client->name, m->stage);
    rep->wake_tokens = tokens;
    return 0;
}
