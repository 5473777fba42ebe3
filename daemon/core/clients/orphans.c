/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/clients/orphans.h"

#include <errno.h>
#include <stdlib.h>

#include "daemon/log.h"
#include "platform/platform.h"
#include "platform/watch.h"

/* A process's fds close before it is seen to exit, so its connection's end
 * is normally read in the same loop turn; one still open after this was
 * handed over. */
#define GRACE_MS 500
/* How often orphans' memory is looked for (every process is scanned). */
#define SCAN_MS 2000

struct vd_handoff {
    struct vd_handoff *next;
    struct vd_core *core;
    uint32_t client;
    vp_handle pin;          /* a copy of the client's, watched */
    struct vp_watch watch;
    uv_timer_t grace;
    bool graced, unlinked;
    int closing;            /* handles still to close before it is freed */
    vd_handoff_fn handed_off;
};

struct vd_orphan_list {
    uint32_t *v;
    size_t n, cap;
    vd_handoff_fn free_fn;
    uv_timer_t scan;
    bool timer;
};

static struct vd_orphan_list *orphans_of(struct vd_core *core)
{
    if (!core->orphans)
        core->orphans = calloc(1, sizeof(struct vd_orphan_list));
    return core->orphans;
}

static void closed_one(struct vd_handoff *w)
{
    if (--w->closing == 0) {
        vp_close(&w->pin);
        free(w);
    }
}

static void watch_closed(uv_handle_t *h)
{
    closed_one(((struct vp_watch *)h->data)->data);
}

static void grace_closed(uv_handle_t *h)
{
    closed_one(h->data);
}

static void unlink_handoff(struct vd_core *core, struct vd_handoff *w)
{
    for (struct vd_handoff **pp = &core->handoffs; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    w->unlinked = true;
    w->closing = 1 + w->graced;
    vp_watch_close(&w->watch, watch_closed);
    if (w->graced)
        uv_close((uv_handle_t *)&w->grace, grace_closed);
}

static void grace_over(uv_timer_t *t)
{
    struct vd_handoff *w = t->data;
    struct vd_core *core = w->core;
    uint32_t client = w->client;
    vd_handoff_fn fn = w->handed_off;
    unlink_handoff(core, w);
    fn(core, client); /* still connected: handed over */
}

static void process_exited(struct vp_watch *pw, int status, int events)
{
    (void)status;
    (void)events;
    struct vd_handoff *w = pw->data;
    vp_watch_set(&w->watch, 0, process_exited);
    if (w->graced)
        return;
    w->graced = true;
    uv_timer_init(w->core->loop, &w->grace);
    w->grace.data = w;
    uv_timer_start(&w->grace, grace_over, GRACE_MS, 0);
}

int vd_handoff_watch(struct vd_core *core, uint32_t client, vp_handle pin,
                     vd_handoff_fn handed_off)
{
    if (!vp_ok(pin))
        return -EINVAL;
    struct vd_handoff *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->core = core;
    w->client = client;
    w->handed_off = handed_off;
    /* Not calloc's 0: a failed dup (out of fds) leaves it, and the close
     * below would take fd 0, whatever it is by then (a client's socket,
     * whose watch then outlives it). */
    w->pin = VP_NONE;
    if (vp_dup(pin, &w->pin) < 0 ||
        vp_watch_init(core->loop, &w->watch, w->pin) < 0) {
        vp_close(&w->pin);
        free(w);
        return -EIO;
    }
    w->watch.data = w;
    vp_watch_set(&w->watch, VP_READABLE, process_exited);
    w->next = core->handoffs;
    core->handoffs = w;
    return 0;
}

void vd_handoff_unwatch(struct vd_core *core, uint32_t client)
{
    for (struct vd_handoff *w = core->handoffs; w; w = w->next)
        if (w->client == client) {
            unlink_handoff(core, w);
            return;
        }
}

/* ---- orphans ------------------------------------------------------------ */

static void scan(uv_timer_t *t)
{
    struct vd_core *core = t->data;
    struct vd_orphan_list *o = core->orphans;
    struct vd_backend *b = core->backend;
    if (!b->ops->chunk_mem_id)
        return; /* GPU chunks: only an admin can let them go */
    for (size_t i = 0; i < o->n;) {
        uint32_t client = o->v[i];
        uint64_t chunks[4096], ids[4096];
        size_t n = vl_client_chunk_ids(core->ledger, client, chunks, 4096), k = 0;
        for (size_t j = 0; j < n; j++) {
            uint64_t id = b->ops->chunk_mem_id(b, (uint32_t)(chunks[j] >> 32),
                                               (uint32_t)chunks[j]);
            if (id)
                ids[k++] = id;
        }
        int holders = k ? vp_procs_holding(ids, k) : 0;
        if (holders == 0 && n < 4096) {
            o->v[i] = o->v[--o->n];
            vlog(VLOG_NOTICE, "client %u: no process holds the memory of its "
                 "handed-off connection any more", client);
            o->free_fn(core, client);
            continue;
        }
        i++;
    }
    if (!o->n)
        uv_timer_stop(&o->scan);
}

int vd_handoff_orphan(struct vd_core *core, uint32_t client, vd_handoff_fn free_fn)
{
    struct vd_orphan_list *o = orphans_of(core);
    if (!o)
        return -ENOMEM;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 8;
        uint32_t *v = realloc(o->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = client;
    o->free_fn = free_fn;
    if (!o->timer) {
        uv_timer_init(core->loop, &o->scan);
        o->scan.data = core;
        o->timer = true;
    }
    if (!uv_is_active((uv_handle_t *)&o->scan))
        uv_timer_start(&o->scan, scan, SCAN_MS, SCAN_MS);
    return 0;
}

bool vd_handoff_is_orphan(const struct vd_core *core, uint32_t client)
{
    const struct vd_orphan_list *o = core->orphans;
    for (size_t i = 0; o && i < o->n; i++)
        if (o->v[i] == client)
            return true;
    return false;
}

void vd_handoff_forget(struct vd_core *core, uint32_t client)
{
    struct vd_orphan_list *o = core->orphans;
    for (size_t i = 0; o && i < o->n; i++)
        if (o->v[i] == client) {
            o->v[i] = o->v[--o->n];
            return;
        }
}

void vd_handoff_fini(struct vd_core *core)
{
    /* The loop closed every handle (uv_walk in main.c); the watches'
     * memory went with their close callbacks. */
    struct vd_orphan_list *o = core->orphans;
    if (o) {
        free(o->v);
        free(o);
        core->orphans = NULL;
    }
}
