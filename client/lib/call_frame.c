/* SPDX-License-Identifier: Apache-2.0 */
/* Every public call is framed by vc_enter and vc_leave: with an event
 * thread they take the client's lock, and the outermost call, returning,
 * makes the library's figures what this process maps and tells the
 * residency changes not told yet. So BUDGET_CHANGED has one place in the
 * order: after the reply that caused it was applied, before the call
 * returns, whatever order the daemon's frames came in. */
#include "client/lib/background.h"
#include "client/lib/call_frame.h"
#include "client/lib/client_record.h"
#include "client/lib/protocol.h"
#include "client/lib/stage_table.h"

void vc_enter(const vram_client *cc)
{
    vram_client *c = (vram_client *)cc; /* the lock and the count only */
    if (c->lock)
        vp_mutex_lock(c->lock);
    c->depth++;
    /* Chunks still being mapped in the background, and a background
     * request's reply, are mapped and applied before any call looks at the
     * tables; counted in, so that what the finish tells the engine (the
     * events before the reply, an EXPERT_SHRINK) nests as a call's does. */
    if (c->bg.n || c->bg.reply)
        vc_bg_finish(c);
}

/* BUDGET_CHANGED for every stage whose residency moved since it was last
 * told; what a callback's own calls change is told by this loop, not by
 * theirs (they nest). */
static void tell_budgets(vram_client *c)
{
    for (;;) {
        struct vc_stage *due = NULL;
        for (size_t i = 0; i < c->nstages; i++) {
            struct vc_stage *st = &c->stages[i];
            if (c->tables_changed || st->res.version != st->told_version)
                vc_stage_refresh(c, st);
            if (!due && st->res.version != st->told_version)
                due = st;
        }
        c->tables_changed = false;
        if (!due)
            return;
        due->told_version = due->res.version;
        struct vram_event ev = {
            .type = VRAM_EVENT_BUDGET_CHANGED, .stage = due->id,
            .residency_version = due->res.version,
            .expert_slots_backed = due->res.expert_slots_backed,
            .expert_loaned_bytes = due->res.expert_loaned_bytes};
        vc_emit(c, &ev); /* its calls change the stages: look again */
    }
}

int vc_leave(const vram_client *cc, int ret)
{
    vram_client *c = (vram_client *)cc;
    /* What came after the call's reply (a recall of a chunk the reply
     * moved, say) is handled now that the reply is applied. */
    /* (Not while new chunks wait for the background thread: an event
     * could move them; nor while a background request's reply is to be
     * read by it. The next call polls, after they are mapped.) */
    if (c->depth == 1 && !c->broken && !c->bg.n && !c->bg.reply &&
        vc_rpc_buffered(c))
        vc_rpc_poll(c, NULL);
    if (c->depth == 1 && (c->tables_changed || c->nstages))
        tell_budgets(c); /* at depth 1: the callback's calls nest */
    /* Last: from here on the thread is the only one to touch the mapper. */
    if (c->depth == 1 && (c->bg.n || c->bg.reply))
        vc_bg_start(c);
    c->depth--;
    if (c->lock)
        vp_mutex_unlock(c->lock);
    return ret;
}
