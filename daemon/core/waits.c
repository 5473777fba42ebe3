#include "waits.h"

#include <stdlib.h>

#include "effects.h"
#include "log.h"
#include "reply.h"
#include "status.h"
#include "vram_msg.h"

struct vd_held {
    struct vd_held *next;
    struct vd_core *core;
    uint32_t client;
    uint64_t id;
    uint32_t stage;
    uint64_t prompt, output;
    uint32_t bound_ms;
    bool gone; /* unlinked; its memory lives until its timer is closed */
    uv_timer_t timer;
};

void vd_waits_reply_kv(struct vd_request *rq, uint32_t stage, uint32_t recalled)
{
    struct vram_rep_kv_reserve rep = {0};
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

/* One try of a held grow: answered (and removed) unless it must wait on. */
static bool try_held(struct vd_held *h, bool last)
{
    struct vd_core *core = h->core;
    struct vd_client *c = vd_clients_find(&core->clients, h->client);
    if (!c)
        return false;
    struct vd_request rq;
    vd_request_init(&rq, core, c, h->id, VRAM_REQ_KV_RESERVE);
    uint32_t recalled = 0;
    int e = vl_kv_reserve(core->ledger, h->client, h->stage, h->prompt,
                          h->output, &recalled, &rq.fx);
    bool done = true;
    if (e == 0) {
        vlog(VLOG_INFO, "client %u: held KV reserve of stage %u granted",
             h->client, h->stage);
        vd_waits_reply_kv(&rq, h->stage, recalled);
    } else if (e == VL_PENDING && !last) {
        vd_effects_apply(core, &rq.fx, NULL, NULL); /* further recalls */
        done = false;
    } else if (e == VL_PENDING) {
        char why[256];
        snprintf(why, sizeof(why), "%s", vl_why(core->ledger));
        vd_effects_apply(core, &rq.fx, NULL, NULL);
        vd_reply(&rq, vd_fail(&rq, -ETIMEDOUT, "stage %u: hold of %u ms "
                              "expired before recalls completed (%s)",
                              h->stage, h->bound_ms, why), NULL);
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

int vd_waits_hold(struct vd_request *rq, uint32_t stage, uint64_t prompt,
                  uint64_t output)
{
    struct vd_core *core = rq->core;
    if (rq->client->held >= VRAM_MAX_REQUESTS_IN_FLIGHT)
        return vd_fail(rq, -EBUSY, "%d requests already held",
                       VRAM_MAX_REQUESTS_IN_FLIGHT);
    struct vd_held *h = calloc(1, sizeof(*h));
    if (!h)
        return vd_fail(rq, -ENOMEM, "out of memory");
    h->core = core;
    h->client = rq->client->id;
    h->id = rq->id;
    h->stage = stage;
    h->prompt = prompt;
    h->output = output;
    h->bound_ms = vl_hold_ms(core->ledger, stage); /* R6 */
    uv_timer_init(core->loop, &h->timer);
    h->timer.data = h;
    uv_timer_start(&h->timer, held_expired, h->bound_ms, 0);
    struct vd_held **pp = &core->held; /* FIFO */
    while (*pp)
        pp = &(*pp)->next;
    *pp = h;
    rq->client->held++;
    vlog(VLOG_INFO, "client %u: KV reserve of stage %u held up to %u ms: %s",
         h->client, stage, h->bound_ms, rq->why);
    /* The recalls it needs go out now. */
    vd_effects_apply(core, &rq->fx, NULL, NULL);
    return VD_HELD;
}

void vd_waits_drop_client(struct vd_core *core, struct vd_client *c)
{
    for (struct vd_held *h = core->held, *n; h; h = n) {
        n = h->next;
        if (h->client == c->id)
            held_remove(h);
    }
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
