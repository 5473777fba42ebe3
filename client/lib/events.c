/* SPDX-License-Identifier: Apache-2.0 */
/* Events from the daemon: what the engine hears, and what the library does
 * about them. A recall is answered by the library itself: the engine is
 * told first (stop using those expert slots), then the chunks are unmapped
 * and released without waiting for the reply (the protocol layer sends
 * the releases once the frames at hand are read). This is the port the
 * protocol layer calls up through. */
#include <stdlib.h>

#include "client/lib/background.h"
#include "client/lib/chunk_table.h"
#include "client/lib/client_record.h"
#include "client/lib/events.h"
#include "client/lib/mapping.h"
#include "client/lib/protocol.h"
#include "client/lib/stage_table.h"

static void on_event(vram_client *c, int evt, const void *fields)
{
    if (evt == VW_EVT_BUDGET_CHANGED) {
        /* Told when the call (or dispatch) that read it returns, after
         * whatever reply came with it was applied (call_frame.c). */
        const struct vw_evt_budget_changed *e = fields;
        struct vc_stage *st = vc_stage_get(c, e->stage);
        if (st && e->residency_version > st->res.version) {
            st->res.version = e->residency_version;
            c->tables_changed = true;
        }
    } else if (evt == VW_EVT_RECALL) {
        const struct vw_evt_recall *e = fields;
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
                vc_release_queue(c, e->chunks.v[i]);
            }
    }
}

/* Its reply, or the events before it, may touch chunks still being mapped
 * in the background, or a background request's reply may still be on its
 * way: they are read and mapped first. */
static void settle(vram_client *c)
{
    if (c->bg.n || c->bg.reply)
        vc_bg_finish(c);
}

const struct vc_proto_port vc_state_port = {
    .event = on_event,
    .settle = settle,
};
