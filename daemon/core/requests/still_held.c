/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/requests/still_held.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "platform/platform.h"

/* Memory ids looked for at once: the look reads the process once whatever
 * their number, and compares each line with each id. Before a release (a
 * small process: a few hundred lines), up to KEPT_SYNC_SAMPLE; later, in an
 * audit (a large one), KEPT_SAMPLE. */
#define KEPT_SYNC_SAMPLE 1024
#define KEPT_SAMPLE 64
/* Looked for before the release when the client keeps at most this many
 * chunks after it, and its process's last look took at most KEPT_SYNC_NS:
 * a process whose maps take longer to read than a frame of the loop can
 * spare. Not 1 ms: a small process under a loaded machine (or ASan) took
 * that long, and its release was let through instead of refused. */
#define KEPT_SYNC_HELD 128
#define KEPT_SYNC_NS 20000000ull
/* Processes whose last look is remembered, and audits waiting. */
#define KEPT_PIDS 64
#define KEPT_AUDITS 64
/* An audit that took d waits KEPT_SHARE * d (at least KEPT_MIN_MS) before
 * the next: audits take at most 1/KEPT_SHARE of a core. */
#define KEPT_SHARE 20
#define KEPT_MIN_MS 100

struct pid_cost {
    int64_t pid;
    uint64_t start, ns;
};

struct audit {
    uint32_t client;
    int64_t pid;
    uint64_t start;
    uint32_t n;
    uint64_t seen;
    uint64_t ids[KEPT_SAMPLE];
};

struct vd_kept {
    struct vd_core *core;
    uv_timer_t timer;
    bool armed;
    /* The audit being looked for, on libuv's thread pool: a large process
     * takes a quarter of a second to read, which the loop must not wait
     * for. */
    uv_work_t work;
    bool working;
    struct audit doing;
    int doing_held;
    uint64_t doing_ns;
    struct pid_cost cost[KEPT_PIDS];
    uint32_t ncost, next_cost;
    struct audit audit[KEPT_AUDITS];
    uint32_t naudit;
    uint64_t rng;
};

static struct vlog_limit kept_limit = {.interval_ms = 10000};

static struct vd_kept *kept_of(struct vd_core *core)
{
    if (!core->kept) {
        struct vd_kept *k = calloc(1, sizeof(*k));
        if (!k)
            return NULL;
        k->core = core;
        k->rng = 0x9e3779b97f4a7c15ull;
        uv_timer_init(core->loop, &k->timer);
        k->timer.data = k;
        uv_unref((uv_handle_t *)&k->timer);
        core->kept = k;
    }
    return core->kept;
}

void vd_kept_fini(struct vd_core *core)
{
    free(core->kept);
    core->kept = NULL;
}

static uint64_t next_rand(struct vd_kept *k)
{
    k->rng ^= k->rng << 13;
    k->rng ^= k->rng >> 7;
    k->rng ^= k->rng << 17;
    return k->rng;
}

static struct pid_cost *cost_of(struct vd_kept *k, const struct vd_client *c)
{
    for (uint32_t i = 0; i < k->ncost; i++)
        if (k->cost[i].pid == c->peer.pid && k->cost[i].start == c->peer.start_time)
            return &k->cost[i];
    return NULL;
}

static void cost_note(struct vd_kept *k, int64_t pid, uint64_t start,
                      uint64_t ns)
{
    struct pid_cost *p = NULL;
    for (uint32_t i = 0; i < k->ncost && !p; i++)
        if (k->cost[i].pid == pid && k->cost[i].start == start)
            p = &k->cost[i];
    if (!p) {
        if (k->ncost < KEPT_PIDS)
            p = &k->cost[k->ncost++];
        else
            p = &k->cost[k->next_cost++ % KEPT_PIDS];
    }
    *p = (struct pid_cost){.pid = pid, .start = start, .ns = ns};
}

/* Looks for ids in process pid: how many are still there. */
static int look(struct vd_kept *k, int64_t pid, uint64_t start,
                const uint64_t *ids, size_t n)
{
    uint64_t t0 = vp_now_ns();
    int held = vp_proc_count_held(pid, ids, n);
    cost_note(k, pid, start, vp_now_ns() - t0);
    return held;
}

/* ---- audits from the loop ------------------------------------------------ */

static void on_timer(uv_timer_t *t);

/* The next audit, after the last one's share of the loop. */
static void arm(struct vd_kept *k, uint64_t last_ns)
{
    if (k->armed || k->working || !k->naudit)
        return;
    uint64_t ms = last_ns * KEPT_SHARE / 1000000;
    k->armed = true;
    uv_timer_start(&k->timer, on_timer, ms > KEPT_MIN_MS ? ms : KEPT_MIN_MS, 0);
}

static void audit_work(uv_work_t *w)
{
    struct vd_kept *k = w->data;
    uint64_t t0 = vp_now_ns();
    k->doing_held = vp_proc_count_held(k->doing.pid, k->doing.ids, k->doing.n);
    k->doing_ns = vp_now_ns() - t0;
}

static void audit_done(uv_work_t *w, int status)
{
    struct vd_kept *k = w->data;
    struct vd_core *core = k->core;
    struct audit *a = &k->doing;
    k->working = false;
    if (status < 0)
        return;
    cost_note(k, a->pid, a->start, k->doing_ns);
    struct vd_client *c = vd_clients_find(&core->clients, a->client);
    if (k->doing_held > 0 && c) {
        core->counters.kept_after_release += (uint64_t)k->doing_held;
        vlog_limited(&kept_limit, VLOG_WARNING, "client %u (%s, pid %lld) "
                     "released chunks it still maps or holds open (%d of %u "
                     "looked for, after the release): that memory is its "
                     "own, counted free", c->id, c->name, (long long)a->pid,
                     k->doing_held, a->n);
    }
    if (!core->stopping)
        arm(k, k->doing_ns);
}

static void on_timer(uv_timer_t *t)
{
    struct vd_kept *k = t->data;
    struct vd_core *core = k->core;
    k->armed = false;
    while (k->naudit && !k->working) {
        struct audit a = k->audit[0];
        memmove(k->audit, k->audit + 1, (k->naudit - 1) * sizeof(*k->audit));
        k->naudit--;
        struct vd_client *c = vd_clients_find(&core->clients, a.client);
        /* A client gone is the reaper's: its memory waits for its
         * process. */
        if (!c || c->peer.pid != a.pid || c->peer.start_time != a.start)
            continue;
        k->doing = a;
        k->work.data = k;
        if (uv_queue_work(core->loop, &k->work, audit_work, audit_done) == 0)
            k->working = true;
    }
}

/* A sample of ids, to be looked for later in c's process. */
static void audit_later(struct vd_kept *k, const struct vd_client *c,
                        const uint64_t *ids, size_t n)
{
    struct audit *a = NULL;
    for (uint32_t i = 0; i < k->naudit && !a; i++)
        if (k->audit[i].client == c->id)
            a = &k->audit[i];
    if (!a) {
        if (k->naudit == KEPT_AUDITS) /* the oldest goes unlooked */
            memmove(k->audit, k->audit + 1, --k->naudit * sizeof(*k->audit));
        a = &k->audit[k->naudit++];
        *a = (struct audit){.client = c->id, .pid = c->peer.pid,
                            .start = c->peer.start_time};
    }
    for (size_t i = 0; i < n; i++) { /* reservoir sampling */
        uint64_t s = a->seen++;
        if (a->n < KEPT_SAMPLE)
            a->ids[a->n++] = ids[i];
        else if ((s = next_rand(k) % (s + 1)) < KEPT_SAMPLE)
            a->ids[s] = ids[i];
    }
    arm(k, 0);
}

/* ---- before a release ---------------------------------------------------- */

int vd_kept_refuse(struct vd_request *rq, const uint64_t *chunks, size_t n)
{
    struct vd_core *core = rq->core;
    struct vd_backend *b = core->backend;
    struct vd_client *c = rq->client;
    if (!b->ops->chunk_mem_id || !n)
        return 0;
    struct vl_client_view cv;
    if (!vl_client_view(core->ledger, c->id, &cv))
        return 0;
    struct vd_kept *k = kept_of(core);
    if (!k)
        return 0;
    uint32_t after = cv.chunks > n ? cv.chunks - (uint32_t)n : 0;
    const struct pid_cost *pc = cost_of(k, c);
    bool now = after <= KEPT_SYNC_HELD && !(pc && pc->ns > KEPT_SYNC_NS);
    /* The memory ids to look for: all of them, or every k-th from a
     * varying start past the sample's size, so that a look costs the
     * process's lines, not lines times chunks. A look before the release
     * reads a small process and takes a larger sample. */
    size_t max = now ? KEPT_SYNC_SAMPLE : KEPT_SAMPLE;
    uint64_t *ids = vw_arena_alloc(&rq->arena, max * sizeof(uint64_t));
    if (!ids)
        return 0;
    size_t step = n > max ? n / max : 1;
    size_t from = n > max ? next_rand(k) % step : 0;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        struct vl_chunk_view v;
        /* Only what it holds; the ledger refuses the rest with its reason. */
        if (!vl_chunk_view(core->ledger, chunks[i], &v) || v.holder != c->id)
            return 0;
        if (i < from || (i - from) % step || m == max)
            continue;
        uint64_t id = b->ops->chunk_mem_id(b, (uint32_t)(chunks[i] >> 32),
                                           (uint32_t)chunks[i]);
        if (id)
            ids[m++] = id;
    }
    if (!m)
        return 0;
    if (!now) {
        audit_later(k, c, ids, m);
        return 0;
    }
    int held = look(k, c->peer.pid, c->peer.start_time, ids, m);
    if (held <= 0)
        return 0;
    core->counters.kept_after_release += (uint64_t)held;
    vlog_limited(&kept_limit, VLOG_WARNING, "client %u (%s, pid %lld) released "
                 "chunks it still maps or holds open (%d); refused: that "
                 "memory stays its own", c->id, c->name,
                 (long long)c->peer.pid, held);
    return vd_fail(rq, -EBUSY, "%d of the %zu chunks are still mapped or open "
                   "in your process (pid %lld): unmap and close them before "
                   "releasing", held, n, (long long)c->peer.pid);
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
        if (vw_arena_grow(&g->rq->arena, (void **)&g->ids, g->n, &g->cap,
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
