/* SPDX-License-Identifier: Apache-2.0 */
/* Regions of ad-hoc stages and their chunks: region_create, region_grow,
 * region_release, chunk_release, chunk_move. */
#include "daemon/core/requests/still_held.h"
#include "daemon/core/requests/request.h"
#include "daemon/core/requests/status.h"
#include "gen/vd_dispatch.h"

int vd_handle_region_create(struct vd_request *rq,
                            const struct vw_req_region_create *m,
                            struct vw_rep_region_create *rep)
{
    int kind = vl_kind_parse(m->kind);
    if (kind < 0)
        return vd_fail(rq, -EINVAL, "kind must be kv, expert, fixed or draft_kv");
    uint32_t region;
    int e = vl_region_create(rq->core->ledger, rq->client->id, m->stage, kind,
                             m->bytes, m->has_lanes ? m->lanes : 1, &region);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    e = vd_status_region(rq->core, region, &rep->region, &rq->arena);
    return e < 0 ? vd_fail(rq, e, "out of memory") : 0;
}

int vd_handle_region_grow(struct vd_request *rq,
                          const struct vw_req_region_grow *m,
                          struct vw_rep_region_grow *rep)
{
    (void)rep;
    int e = vl_region_grow(rq->core->ledger, rq->client->id, m->region,
                           m->chunks, &rq->fx);
    return e < 0 ? vd_fail_ledger(rq, e) : 0;
}

int vd_handle_region_release(struct vd_request *rq,
                             const struct vw_req_region_release *m,
                             struct vw_rep_region_release *rep)
{
    (void)rep;
    int e = vd_kept_refuse_region(rq, m->region);
    if (e < 0)
        return e;
    e = vl_region_release(rq->core->ledger, rq->client->id, m->region, &rq->fx);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    rq->freed_memory = true;
    return 0;
}

int vd_handle_chunk_release(struct vd_request *rq,
                            const struct vw_req_chunk_release *m,
                            struct vw_rep_chunk_release *rep)
{
    int e = vd_kept_refuse(rq, m->chunks.v, m->chunks.n);
    if (e < 0)
        return e;
    e = vl_chunks_release(rq->core->ledger, rq->client->id, m->chunks.v,
                          m->chunks.n, &rq->fx);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    rep->released = (uint32_t)m->chunks.n;
    rq->freed_memory = true;
    return 0;
}

int vd_handle_chunk_move(struct vd_request *rq,
                         const struct vw_req_chunk_move *m,
                         struct vw_rep_chunk_move *rep)
{
    (void)rep;
    int e = vl_chunk_move(rq->core->ledger, rq->client->id, m->chunk, m->region,
                          m->slot, &rq->fx);
    return e < 0 ? vd_fail_ledger(rq, e) : 0;
}
