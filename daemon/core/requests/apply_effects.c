/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/requests/apply_effects.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/core/requests/weight_records.h"
#include "platform/platform.h"
#include "daemon/core/requests/recalls.h"
#include "daemon/core/requests/send.h"
#include "gen/vram_msg.h"

void vd_effects_out_free(struct vd_effects_out *out)
{
    if (!out)
        return;
    for (size_t i = 0; i < out->nmap; i++)
        if (out->map[i].has_fd)
            vp_close(&out->map[i].fd);
    free(out->map);
    free(out->unmap);
    memset(out, 0, sizeof(*out));
}

static int push_map(struct vd_effects_out *o, const struct vw_t_map_entry *e)
{
    if (o->nmap == o->capmap) {
        size_t cap = o->capmap ? o->capmap * 2 : 64;
        struct vw_t_map_entry *v = realloc(o->map, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        o->map = v;
        o->capmap = cap;
    }
    o->map[o->nmap++] = *e;
    return 0;
}

static int push_u64(uint64_t **v, size_t *n, size_t *cap, uint64_t x)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        uint64_t *p = realloc(*v, c * sizeof(*p));
        if (!p)
            return -ENOMEM;
        *v = p;
        *cap = c;
    }
    (*v)[(*n)++] = x;
    return 0;
}

static void send_budget_event(struct vd_core *core, uint32_t stage)
{
    struct vl_stage_view sv;
    if (!vl_stage_view(core->ledger, stage, &sv) || !sv.owner)
        return;
    struct vd_client *c = vd_clients_find(&core->clients, sv.owner);
    if (!c)
        return;
    struct vw_evt_budget_changed ev = {
        .stage = stage,
        .residency_version = sv.residency_version,
        .expert_slots_backed = sv.expert_slots_backed,
        .expert_loaned_bytes = (uint64_t)(sv.loan_chunks - sv.recalling) *
                               sv.chunk_bytes,
    };
    vd_send_event(core, c, VW_EVT_BUDGET_CHANGED, &ev);
}

void vd_effects_flush_budget(struct vd_core *core)
{
    /* Most replies change no budget: skip the walk over every stage. */
    /* Usually a few stages, listed as they came; past the list's room,
     * one walk over the table. */
    uint32_t n = core->budget_npending;
    if (n <= 64) {
        core->budget_npending = 0;
        for (uint32_t k = 0; k < n; k++) {
            core->budget_pending[core->budget_ids[k]] = false;
            send_budget_event(core, core->budget_ids[k]);
        }
        return;
    }
    for (uint32_t i = 0; core->budget_npending && i < VL_MAX_STAGES; i++)
        if (core->budget_pending[i]) {
            core->budget_pending[i] = false;
            core->budget_npending--;
            send_budget_event(core, i);
        }
}

/* Recalls grouped by (holder, stage): one event each. */
struct recall_group {
    uint32_t client, stage;
    uint64_t *chunks;
    size_t n, cap;
};

static struct recall_group *group_of(struct recall_group **g, size_t *ng,
                                     uint32_t client, uint32_t stage)
{
    for (size_t k = 0; k < *ng; k++)
        if ((*g)[k].client == client && (*g)[k].stage == stage)
            return &(*g)[k];
    struct recall_group *v = realloc(*g, (*ng + 1) * sizeof(*v));
    if (!v)
        return NULL;
    *g = v;
    v[*ng] = (struct recall_group){.client = client, .stage = stage};
    return &v[(*ng)++];
}

void vd_effects_apply(struct vd_core *core, struct vl_fxlist *list,
                      struct vd_client *requester, struct vd_effects_out *out)
{
    /* Taken: what this applies may make effects of its own. */
    struct vl_fxlist fx = *list;
    *list = (struct vl_fxlist){0};
    bool changed = fx.n > 0;
    struct recall_group *rec = NULL;
    size_t nrec = 0;
    int map_error = 0;

    for (size_t i = 0; i < fx.n; i++) {
        struct vl_fx *e = &fx.v[i];
        bool mine = requester && out && e->client == requester->id;
        uint32_t dev = (uint32_t)(e->chunk >> 32), idx = (uint32_t)e->chunk;
        switch (e->kind) {
        case VL_FX_MAP:
        case VL_FX_MOVE: {
            if (!mine)
                break; /* only the requester is ever granted or moved */
            /* A new chunk's handle is made when its frame goes (reply.c):
             * the daemon holds the handles of what the connection takes,
             * not of the whole grant. */
            struct vw_t_map_entry me = {.chunk = e->chunk, .region = e->region,
                                          .slot = e->slot,
                                          .fd = VP_NONE,
                                          .has_fd = e->kind == VL_FX_MAP};
            if (e->kind == VL_FX_MOVE)
                core->counters.moves++;
            if (push_map(out, &me) < 0)
                map_error = -ENOMEM;
            break;
        }
        case VL_FX_UNMAP:
            if (mine) {
                if (push_u64(&out->unmap, &out->nunmap, &out->capunmap, e->chunk) < 0)
                    map_error = -ENOMEM;
                break;
            }
            {
                struct recall_group *g = group_of(&rec, &nrec, e->client, e->stage);
                if (!g || push_u64(&g->chunks, &g->n, &g->cap, e->chunk) < 0)
                    vlog(VLOG_ERR, "out of memory: a recall of chunk %llu is not "
                         "sent; its deadline will pass",
                         (unsigned long long)e->chunk);
            }
            break;
        case VL_FX_DROP:
            core->backend->ops->chunk_drop(core->backend, dev, idx);
            core->counters.releases++;
            break;
        case VL_FX_WSET_DROP: /* R17: the memory goes with the handles */
            vd_wsets_forget(core, e->set);
            if (e->evicted) {
                core->counters.weights_evictions++;
                vlog(VLOG_INFO, "weight set %u evicted to make room", e->set);
            }
            core->wsets_changed = true;
            break;
        case VL_FX_BUDGET:
            if (e->stage < VL_MAX_STAGES) {
                if (!core->budget_pending[e->stage]) {
                    if (core->budget_npending < 64)
                        core->budget_ids[core->budget_npending] = e->stage;
                    core->budget_npending++;
                    core->budget_pending[e->stage] = true;
                }
            }
            break;
        }
    }
    vl_fx_free(&fx);
    if (out && map_error)
        out->map_error = map_error;
    for (size_t k = 0; k < nrec; k++) {
        vd_recall_start(core, rec[k].client, rec[k].stage, rec[k].chunks,
                        rec[k].n);
        free(rec[k].chunks);
    }
    free(rec);
    /* Budget events go out after the requester's reply (reply.c), so a
     * client has mapped what the reply carries before it hears of it. */
    if (!requester)
        vd_effects_flush_budget(core);
    /* The check walks every chunk; a request that changed no chunk (ping,
     * status, a refused call) skips it: the next change checks the whole
     * ledger again, so nothing broken goes unseen. */
    if (core->check_invariants && changed && vl_check(core->ledger) < 0) {
        vlog(VLOG_ERR, "ledger invariant broken: %s", vl_why(core->ledger));
        abort();
    }
}

void vd_effects_give_back(struct vd_core *core, struct vd_client *c,
                          const uint64_t *chunks, size_t n, int err)
{
    struct vl_fxlist back = {0};
    vl_chunks_release(core->ledger, c->id, chunks, n, &back);
    vlog(VLOG_ERR, "client %u: %zu chunks could not be created (%s); "
         "returned to the pool", c->id, n, strerror(-err));
    vd_effects_apply(core, &back, NULL, NULL);
}
