/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/requests/recalls.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "platform/proc.h"
#include "daemon/core/requests/send.h"
#include "gen/vram_msg.h"

struct vd_recall {
    struct vd_recall *next;
    struct vd_core *core;
    uint32_t client, stage, deadline_ms;
    uint64_t *chunks;
    size_t n;
    uv_timer_t timer;
};

static void recall_closed(uv_handle_t *h)
{
    struct vd_recall *rc = h->data;
    free(rc->chunks);
    free(rc);
}

static void recall_unlink(struct vd_recall *rc)
{
    struct vd_recall **pp = &rc->core->recalls;
    while (*pp && *pp != rc)
        pp = &(*pp)->next;
    if (*pp)
        *pp = rc->next;
    uv_close((uv_handle_t *)&rc->timer, recall_closed);
}

/* The deadline passed: chunks still recalling are held by a client that
 * did not answer. They stay recalling (the ledger grants them to nobody
 * else); the ledger's policy decides the rest. */
static void recall_deadline(uv_timer_t *t)
{
    struct vd_recall *rc = t->data;
    struct vd_core *core = rc->core;
    size_t still = 0;
    for (size_t i = 0; i < rc->n; i++) {
        struct vl_chunk_view cv;
        if (vl_chunk_view(core->ledger, rc->chunks[i], &cv))
            still += cv.state == VL_RECALLING && cv.holder == rc->client;
    }
    if (still) {
        struct vd_client *c = vd_clients_find(&core->clients, rc->client);
        core->counters.recalls_missed++;
        bool kill_it = vl_recall_missed(core->ledger, rc->client, rc->stage) ==
                       VL_MISSED_KILL; /* R15 */
        vlog(VLOG_WARNING, "client %u (%s, pid %lld) missed the %u ms recall "
             "deadline for %zu of %zu chunks of stage %u; %s", rc->client,
             c ? c->name : "?", c ? (long long)c->peer.pid : -1LL,
             rc->deadline_ms, still, rc->n, rc->stage,
             kill_it ? "the stage's policy says kill: SIGKILL sent"
                     : "it gets no new loans, and the chunks stay its own "
                       "until it releases them or exits");
        /* Through the pin taken at connect: never a recycled pid. */
        if (kill_it && c && vp_ok(c->pin))
            vp_proc_kill(c->pin);
    }
    recall_unlink(rc);
}

void vd_recall_start(struct vd_core *core, uint32_t client, uint32_t stage,
                     const uint64_t *chunks, size_t n)
{
    uint32_t deadline = vl_recall_deadline_ms(core->ledger, stage); /* R15 */
    core->counters.recalls += n;
    struct vd_client *c = vd_clients_find(&core->clients, client);
    if (c) {
        struct vw_evt_recall ev = {
            .stage = stage,
            .chunks = {.v = (uint64_t *)chunks, .n = n},
            .deadline_ms = deadline,
        };
        vd_send_event(core, c, VW_EVT_RECALL, &ev);
        vlog(VLOG_INFO, "recalling %zu chunks of stage %u from client %u "
             "(%s), deadline %u ms", n, stage, client, c->name, deadline);
    }
    struct vd_recall *rc = calloc(1, sizeof(*rc));
    if (!rc)
        return;
    rc->chunks = malloc((n ? n : 1) * sizeof(uint64_t));
    if (!rc->chunks) {
        free(rc);
        return;
    }
    memcpy(rc->chunks, chunks, n * sizeof(uint64_t));
    rc->n = n;
    rc->core = core;
    rc->client = client;
    rc->stage = stage;
    rc->deadline_ms = deadline;
    uv_timer_init(core->loop, &rc->timer);
    rc->timer.data = rc;
    uv_timer_start(&rc->timer, recall_deadline, deadline, 0);
    rc->next = core->recalls;
    core->recalls = rc;
}

void vd_recalls_fini(struct vd_core *core)
{
    /* The loop closes the timers (uv_walk in startup.c); their memory goes
     * here. */
    for (struct vd_recall *r = core->recalls, *n; r; r = n) {
        n = r->next;
        free(r->chunks);
        free(r);
    }
    core->recalls = NULL;
}
