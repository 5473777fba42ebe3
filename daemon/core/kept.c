#include "kept.h"

#include <errno.h>

#include "log.h"
#include "platform.h"

static struct vlog_limit kept_limit = {.interval_ms = 10000};

int vd_kept_refuse(struct vd_request *rq, const uint64_t *chunks, size_t n)
{
    struct vd_core *core = rq->core;
    struct vd_backend *b = core->backend;
    if (!b->ops->chunk_mem_id || !n)
        return 0;
    uint64_t *ids = vram_arena_alloc(&rq->arena, n * sizeof(uint64_t));
    if (!ids)
        return 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        struct vl_chunk_view cv;
        /* Only what it holds; the ledger refuses the rest with its reason. */
        if (!vl_chunk_view(core->ledger, chunks[i], &cv) ||
            cv.holder != rq->client->id)
            return 0;
        uint64_t id = b->ops->chunk_mem_id(b, (uint32_t)(chunks[i] >> 32),
                                           (uint32_t)chunks[i]);
        if (id)
            ids[k++] = id;
    }
    int held = k ? vp_proc_count_held(rq->client->peer.pid, ids, k) : 0;
    if (held <= 0)
        return 0;
    core->counters.kept_after_release += (uint64_t)held;
    vlog_limited(&kept_limit, VLOG_WARNING, "client %u (%s, pid %lld) released "
                 "chunks it still maps or holds open (%d); refused: that "
                 "memory stays its own", rq->client->id, rq->client->name,
                 (long long)rq->client->peer.pid, held);
    return vd_fail(rq, -EBUSY, "%d of the %zu chunks are still mapped or open "
                   "in your process (pid %lld): unmap and close them before "
                   "releasing", held, n, (long long)rq->client->peer.pid);
}

struct gather {
    struct vd_request *rq;
    uint64_t *ids;
    size_t n, cap;
    int err;
};

static void gather_region(void *ud, const struct vl_region_view *r)
{
    struct gather *g = ud;
    size_t slots = (size_t)r->lanes * r->stride_slots;
    for (size_t k = 0; k < slots && !g->err; k++) {
        if (r->slot_chunk[k] == VL_CHUNK_NONE)
            continue;
        if (vram_arena_grow(&g->rq->arena, (void **)&g->ids, g->n, &g->cap,
                            sizeof(uint64_t), 64) < 0)
            g->err = -ENOMEM;
        else
            g->ids[g->n++] = r->slot_chunk[k];
    }
}

int vd_kept_refuse_region(struct vd_request *rq, uint32_t region)
{
    if (!rq->core->backend->ops->chunk_mem_id)
        return 0;
    struct vl_region_view r;
    if (!vl_region_view(rq->core->ledger, region, &r) || r.client != rq->client->id)
        return 0;
    struct gather g = {.rq = rq};
    gather_region(&g, &r);
    return g.err ? 0 : vd_kept_refuse(rq, g.ids, g.n);
}

int vd_kept_refuse_stage(struct vd_request *rq, uint32_t stage)
{
    if (!rq->core->backend->ops->chunk_mem_id)
        return 0;
    struct vl_stage_view s;
    if (!vl_stage_view(rq->core->ledger, stage, &s) || s.owner != rq->client->id)
        return 0;
    struct gather g = {.rq = rq};
    vl_each_region(rq->core->ledger, stage, gather_region, &g);
    return g.err ? 0 : vd_kept_refuse(rq, g.ids, g.n);
}
