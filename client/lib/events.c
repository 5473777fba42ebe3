/* SPDX-License-Identifier: Apache-2.0 */
/* Events from the daemon: what the engine hears, and what the library does
 * about them. A recall is answered by the library itself: the engine is
 * told first (stop using those expert slots), then the chunks are unmapped
 * and released without waiting for the reply. */
#include <stdlib.h>

#include "internal.h"

static void queue_release(vram_client *c, uint64_t id)
{
    if (c->nrelease == c->caprelease) {
        size_t cap = c->caprelease ? c->caprelease * 2 : 64;
        uint64_t *v = realloc(c->release_q, cap * sizeof(*v));
        if (!v)
            return; /* the recall's deadline passes; the daemon says so */
        c->release_q = v;
        c->caprelease = cap;
    }
    c->release_q[c->nrelease++] = id;
}

void vc_event(vram_client *c, int evt, const void *fields)
{
    if (evt == VRAM_EVT_BUDGET_CHANGED) {
        /* Told when the call (or dispatch) that read it returns, after
         * whatever reply came with it was applied (lock.c). */
        const struct vram_evt_budget_changed *e = fields;
        struct vc_stage *st = vc_stage_get(c, e->stage);
        if (st && e->residency_version > st->res.version) {
            st->res.version = e->residency_version;
            c->tables_changed = true;
        }
    } else if (evt == VRAM_EVT_RECALL) {
        const struct vram_evt_recall *e = fields;
        /* A stage asleep, or whose sleep is in flight, has unmapped all:
         * the sleep answers the recall (R18), a release would name chunks
         * vramd no longer counts as ours. */
        const struct vc_stage *sl = vc_stage_get(c, e->stage);
        if (sl && (sl->sleep || sl->falling_asleep))
            return;
        vc_expert_leaving(c, VRAM_EVENT_RECALL, e->stage, e->chunks.v,
                          e->chunks.n, e->deadline_ms);
        for (size_t i = 0; i < e->chunks.n; i++)
            if (vc_table_get(&c->chunks, e->chunks.v[i])) {
                vc_drop_chunk(c, e->chunks.v[i]);
                queue_release(c, e->chunks.v[i]);
            }
    }
}

void vc_send_releases(vram_client *c)
{
    if (!c->nrelease || c->broken)
        return;
    struct vram_req_chunk_release m = {
        .chunks = {.v = c->release_q, .n = c->nrelease}};
    vc_rpc_async(c, VRAM_REQ_CHUNK_RELEASE, &m);
    c->nrelease = 0;
}
