/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/requests/waits.h"

#include <stdlib.h>

#include "daemon/core/requests/apply_effects.h"
#include "daemon/log.h"
#include "daemon/core/requests/reply.h"
#include "daemon/core/requests/status.h"
#include "gen/vram_msg.h"

struct vd_held {
    struct vd_held *next;
    struct vd_core *core;
    uint32_t client;
    uint64_t id;
    int type;         /* VW_REQ_KV_RESERVE or VW_REQ_STAGE_REGISTER */
    uint32_t stage;
    uint64_t prompt, output;
    bool keep_window; /* stage_register */
    uint32_t bound_ms;
    bool gone; /* unlinked; its memory lives until its timer is closed */
    uv_timer_t timer;
};

void vd_waits_reply_kv(struct vd_request *rq, uint32_t stage, uint32_t recalled)
{
    struct vw_rep_kv_reserve rep = {0};
    struct vd_kv_summary sum;
    int e = vd_status_kv(rq->core, stage, recalled, &sum, &rq->arena);
    if (e < 0) {
        vd_reply(rq, vd_fail(rq, e, "out of memory"), NULL);
        return;
    }
    VD_KV_COPY(&rep, sum);
    vd_reply(rq, 0, &rep);
}

static void held_closed(uv_handle_t *h)
{
    free(h->data);
}

static void held_remove(struct vd_held *h)
{
    struct vd_held **pp = &h->core->held;
    while (*pp && *pp != h)
        pp = &(*pp)->next;
    if (*pp)
        *pp = h->next;
    h->gone = true;
    struct vd_client *c = vd_clients_find(&h->core->clients, h->client);
    if (c && c->held)
        c->held--;
    uv_timer_stop(&h->timer);
    uv_close((uv_handle_t *)&h->timer, held_closed);
}

/* The reply of a stage_register that succeeded. */
static void reply_register(struct vd_request *rq, uint32_t stage)
{
    struct vw_rep_stage_register rep = {0};
    int e = vd_status_stage(rq->core, stage, &rep.stage, &rq->arena);
    vd_reply(rq, e < 0 ? vd_fail(rq, e, "out of memory") : 0, e < 0 ? NULL : &rep);
}

/* What a held request is, in the log and its timeout's message. */
static const char *what(const struct vd_held *h)
{
    return h->type == VW_REQ_STAGE_REGISTER ? "registration" : "KV reserve";
}

/* One try of a held request: answered (and removed) unless it must wait
 * on. */
static bool try_held(struct vd_held *h, bool last)
{
    struct vd_core *core = h->core;
    struct vd_client *c = vd_clients_find(&core->clients, h->client);
    if (!c)
        return false;
    struct vd_request rq;
    vd_request_init(&rq, core, c, h->id, h->type);
    uint32_t recalled = 0;
    int e = h->type == VW_REQ_STAGE_REGISTER
                ? vl_stage_register(core->ledger, h->client, h->stage,
                                    h->keep_window, &rq.fx)
                : vl_kv_reserve(core->ledger, h->client, h->stage, h->prompt,
                                h->output, &recalled, &rq.fx);
    bool done = true;
    if (e == 0) {
        vlog(VLOG_INFO, "client %u: held %s of stage %u granted", h->client,
             what(h), h->stage);
        if (h->type == VW_REQ_STAGE_REGISTER)
            reply_register(&rq, h->stage);
        else
            vd_waits_reply_kv(&rq, h->stage, recalled);
    } else if (e == VL_PENDING && !last) {
        vd_effects_apply(core, &rq.fx, NULL, NULL); /* further recalls */
        done = false;
    } else if (e == VL_PENDING) {
        char why[256], by[384];
        snprintf(why, sizeof(why), "%s", vl_why(core->ledger));
        vd_effects_apply(core, &rq.fx, NULL, NULL);
        /* The operator's question is who: named in the reply and the log. */
        vd_status_blocker(core, h->stage, by, sizeof(by));
        vlog(VLOG_WARNING, "client %u: %s of stage %u timed out after %u ms: "
             "%s", h->client, what(h), h->stage, h->bound_ms,
             *by ? by : why);
        vd_reply(&rq, vd_fail(&rq, -ETIMEDOUT, "stage %u: %s held %u ms (the "
                              "stage's hold bound) and recalls did not "
                              "complete (%s)%s%s", h->stage, what(h),
                              h->bound_ms, why, *by ? ": " : "", by), NULL);
    } else {
        vd_reply(&rq, vd_fail_ledger(&rq, e), NULL);
    }
    vd_request_fini(&rq);
    return done;
}

static void held_expired(uv_timer_t *t)
{
    struct vd_held *h = t->data;
    try_held(h, true); /* one last try before giving up */
    held_remove(h);
}

void vd_waits_retry(struct vd_core *core)
{
    struct vd_held *h = core->held;
    while (h) {
        /* A reply below may end a connection, which removes that client's
         * held grows; removed ones stay readable until their timers close,
         * so the walk goes on from next. */
        struct vd_held *next = h->next;
        if (!h->gone && try_held(h, false))
            held_remove(h);
        h = next;
    }
}

static int hold(struct vd_request *rq, struct vd_held *proto)
{
    struct vd_core *core = rq->core;
    if (rq->client->held >= VW_MAX_REQUESTS_IN_FLIGHT)
        return vd_fail(rq, -EBUSY, "%d requests already held",
                       VW_MAX_REQUESTS_IN_FLIGHT);
    struct vd_held *h = calloc(1, sizeof(*h));
    if (!h)
        return vd_fail(rq, -ENOMEM, "out of memory");
    *h = *proto;
    h->core = core;
    h->client = rq->client->id;
    h->id = rq->id;
    h->type = rq->type;
    h->bound_ms = vl_hold_ms(core->ledger, h->stage); /* R6 */
    uv_timer_init(core->loop, &h->timer);
    h->timer.data = h;
    uv_timer_start(&h->timer, held_expired, h->bound_ms, 0);
    struct vd_held **pp = &core->held; /* FIFO */
    while (*pp)
        pp = &(*pp)->next;
    *pp = h;
    rq->client->held++;
    vlog(VLOG_INFO, "client %u: %s of stage %u held up to %u ms: %s",
         h->client, what(h), h->stage, h->bound_ms, rq->why);
    /* The recalls it needs go out now. */
    vd_effects_apply(core, &rq->fx, NULL, NULL);
    return VD_HELD;
}

int vd_waits_hold(struct vd_request *rq, uint32_t stage, uint64_t prompt,
                  uint64_t output)
{
    struct vd_held h = {.stage = stage, .prompt = prompt, .output = output};
    return hold(rq, &h);
}

int vd_waits_hold_register(struct vd_request *rq, uint32_t stage,
                           bool keep_window)
{
    struct vd_held h = {.stage = stage, .keep_window = keep_window};
    return hold(rq, &h);
}

void vd_waits_drop_client(struct vd_core *core, struct vd_client *c)
{
    for (struct vd_held *h = core->held, *n; h; h = n) {
        n = h->next;
        if (h->client == c->id)
            held_remove(h);
    }
}

void vd_waits_each(struct vd_core *core, void (*fn)(void *ud, uint32_t stage),
                   void *ud)
{
    for (struct vd_held *h = core->held; h; h = h->next)
        if (!h->gone)
            fn(ud, h->stage);
}

void vd_waits_fini(struct vd_core *core)
{
    /* The loop closed the timers already (startup.c). */
    for (struct vd_held *h = core->held, *n; h; h = n) {
        n = h->next;
        free(h);
    }
    core->held = NULL;
}
