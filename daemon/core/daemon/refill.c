/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/daemon/refill.h"

#include "platform/clock.h"
#include "daemon/ledger/ledger.h"

static void on_idle(uv_idle_t *h)
{
    struct vd_core *core = h->data;
    /* Not within 250 ms of a grant (a GiB takes a client about 45 ms to
     * import on an H200): the timer starts us again. */
    if (vp_now_ns() - core->last_grant_ns < 250000000ull) {
        uv_idle_stop(h);
        return;
    }
    /* A few chunks a turn keeps the loop responsive while the pool fills
     * (each costs the driver 40-60 us on cuda). The target is what the
     * ledger could grant now: every free chunk, so that a grant finds its
     * memory made, and returned chunks are replaced. */
    uint32_t steps = 8;
    int done = 0;
    for (uint32_t i = 0; i < vl_device_count(core->ledger) && steps; i++) {
        struct vl_device_view v;
        vl_device_view(core->ledger, i, &v);
        int n = core->backend->ops->prefill(core->backend, i, v.free, steps);
        if (n > 0) {
            done += n;
            steps -= (uint32_t)n < steps ? (uint32_t)n : steps;
        }
    }
    if (done == 0)
        uv_idle_stop(h);
}

static void on_timer(uv_timer_t *t)
{
    struct vd_core *core = t->data;
    if (!uv_is_active((uv_handle_t *)&core->refill_idle))
        uv_idle_start(&core->refill_idle, on_idle);
}

void vd_refill_start(struct vd_core *core)
{
    uv_idle_init(core->loop, &core->refill_idle);
    core->refill_idle.data = core;
    uv_idle_start(&core->refill_idle, on_idle);
    /* Refill the pool after grants drained it. */
    uv_timer_init(core->loop, &core->refill_timer);
    core->refill_timer.data = core;
    uv_timer_start(&core->refill_timer, on_timer, 50, 50);
    uv_unref((uv_handle_t *)&core->refill_timer);
    core->refill_started = true;
}
