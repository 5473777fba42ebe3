/* SPDX-License-Identifier: Apache-2.0 */
/* Weight sets (R17): what the daemon keeps of each set the ledger knows
 * (the handles of its allocations: with the clients' own, the only
 * references to its memory, so closing them is what frees it), and the
 * opens that wait for another client to seal a set. */
#include "daemon/core/requests/weight_opens.h"


#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/clients/access.h"
#include "proto/errnames.h"
#include "proto/hexkey.h"
#include "daemon/log.h"
#include "platform/platform.h"
#include "daemon/core/requests/reply.h"
#include "daemon/core/requests/send.h"
#include "daemon/core/requests/weight_records.h"

struct vd_wwait {
    struct vd_wwait *next;
    struct vd_core *core;
    uint32_t client;
    uint64_t id;
    char name[VL_WSET_NAME_MAX + 1];
    char key[2 * VL_WSET_KEY + 1];
    uint32_t device;
    uint64_t bytes;
    bool keep;
    uint32_t wait_ms;
    bool gone;
    uv_timer_t timer;
};

int vd_weights_make(struct vd_request *rq, uint32_t set)
{
    struct vd_core *core = rq->core;
    struct vl_wset_view v;
    struct vl_fxlist fx = {0};
    int e = -ENOENT;
    if (!vl_wset_view(core->ledger, set, &v))
        goto fail;
    int di = vl_device_index(core->ledger, v.device);
    vp_handle *h = calloc(v.nalloc, sizeof(*h));
    struct vd_wset_rec *r = h ? vd_wsets_add(core, set) : NULL;
    if (!r) {
        free(h);
        e = vd_fail(rq, -ENOMEM, "out of memory");
        goto undo;
    }
    char why[256] = "";
    uint64_t t0 = vp_now_ns();
    e = core->backend->ops->wset_alloc
            ? core->backend->ops->wset_alloc(core->backend, (uint32_t)di,
                                             v.alloc_bytes, v.nalloc, h, why,
                                             sizeof(why))
            : (snprintf(why, sizeof(why), "the %s backend has no weight sets",
                        core->backend->ops->name), -ENOTSUP);
    if (e < 0) {
        core->nwsets--; /* r was the last */
        free(h);
        e = vd_fail(rq, e, "weight set '%s': %s", v.name, why);
        goto undo;
    }
    r->dev = (uint32_t)di;
    r->h = h;
    r->n = v.nalloc;
    r->created_ms = r->last_use_ms = (uint64_t)vp_unix_ms();
    vlog(VLOG_INFO, "weight set %u '%s': %u allocations of %llu MiB made on "
         "device %u in %.1f ms for client %u", set, v.name, v.nalloc,
         (unsigned long long)(v.alloc_bytes >> 20), v.device,
         (double)(vp_now_ns() - t0) / 1e6, rq->client->id);
    return 0;
undo:
    /* The ledger's set goes again: nobody saw it. */
    vl_weights_close(core->ledger, rq->client->id, set, &fx);
    vl_fx_free(&fx);
    return e;
fail:
    return vd_fail(rq, e, "weight set %u is gone", set);
}

int vd_weights_fill(struct vd_request *rq, uint32_t set, uint32_t first,
                    struct vw_t_weights_info *info,
                    struct vw_weights_handle_array *handles)
{
    struct vd_core *core = rq->core;
    struct vl_wset_view v;
    struct vd_wset_rec *r = vd_wsets_rec(core, set);
    if (!vl_wset_view(core->ledger, set, &v) || !r)
        return vd_fail(rq, -ENOENT, "weight set %u is gone", set);
    if (info)
        *info = (struct vw_t_weights_info){
            .id = v.id, .name = v.name, .device = v.device, .base = v.base,
            .va_bytes = v.va_bytes, .bytes = v.bytes, .alloc_bytes = v.alloc_bytes,
            .allocs = v.nalloc, .writer = v.writer == rq->client->id,
            .sealed = v.sealed};
    if (!handles)
        return 0;
    if (first > r->n)
        return vd_fail(rq, -EINVAL, "weight set %u has %u allocations", set,
                       r->n);
    /* A reader's handles, or a sealed set's: for mapping read-only. */
    if (v.writer != rq->client->id || v.sealed)
        rq->send_flags |= VD_SEND_READ_ONLY;
    uint32_t n = r->n - first < VW_MAX_FDS_PER_FRAME
                     ? r->n - first
                     : VW_MAX_FDS_PER_FRAME;
    if ((int)n > vd_send_room(core, rq->client))
        return vd_fail(rq, -EAGAIN, "the connection holds too many handles "
                       "in flight; ask again once they are read");
    handles->v = vw_arena_alloc(&rq->arena, (n ? n : 1) * sizeof(*handles->v));
    if (!handles->v)
        return vd_fail(rq, -ENOMEM, "out of memory");
    handles->n = 0;
    for (uint32_t k = 0; k < n; k++) {
        struct vw_t_weights_handle *o = &handles->v[handles->n];
        o->index = first + k;
        o->has_fd = true;
        if (vp_dup(r->h[first + k], &o->fd) < 0) {
            for (size_t j = 0; j < handles->n; j++)
                vp_close(&handles->v[j].fd);
            handles->n = 0;
            return vd_fail(rq, -EMFILE, "out of file descriptors for the "
                           "set's handles; ask again");
        }
        handles->n++;
    }
    return 0;
}

/* R17: a set's allocations: the configured size (1 GiB), or the set's
 * size when it is smaller, each rounded up to the device's granularity. */
static uint64_t alloc_size(struct vd_core *core, int di, uint64_t bytes)
{
    uint64_t g = di >= 0 && (uint32_t)di < core->backend->ndev
                     ? core->backend->info[di].granularity
                     : 0;
    if (!g)
        g = 2u << 20;
    uint64_t a = core->cfg.weights_alloc ? core->cfg.weights_alloc : 1ull << 30;
    if (bytes < a)
        a = bytes;
    return (a + g - 1) / g * g;
}

int vd_weights_open(struct vd_request *rq, const struct vw_req_weights_open *m,
                    struct vw_rep_weights_open *rep, bool may_wait)
{
    struct vd_core *core = rq->core;
    struct vd_client *c = rq->client;
    uint8_t key[VL_WSET_KEY];
    if (vw_hex_decode(m->key, key, VL_WSET_KEY) < 0)
        return vd_fail(rq, -EINVAL, "key: 64 hex digits (32 bytes)");
    uint32_t existing = vl_wset_find(core->ledger, m->name);
    struct vl_wset_view v;
    if (existing && vl_wset_view(core->ledger, existing, &v) &&
        !vd_access_weights(&core->cfg, &c->peer, v.tenant))
        return vd_fail(rq, -EACCES, "weight set '%s' belongs to uid %u; uid %u "
                       "may not open it (access.weights)", m->name, v.tenant,
                       (unsigned)c->peer.uid);
    int di = vl_device_index(core->ledger, m->device);
    struct vl_wset_req req = {.name = m->name, .key = key, .device = m->device,
                              .bytes = m->bytes,
                              .alloc_bytes = alloc_size(core, di, m->bytes),
                              .keep = m->has_keep && m->keep};
    uint32_t set = 0;
    bool writer = false;
    int e = vl_weights_open(core->ledger, c->id, &req, &set, &writer, &rq->fx);
    if (e == -EAGAIN && may_wait && m->has_wait_ms && m->wait_ms)
        return vd_weights_hold(rq, m);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    if (writer && !vd_wsets_rec(core, set)) {
        e = vd_weights_make(rq, set);
        if (e < 0)
            return e;
        core->counters.weights_misses++;
    } else if (!writer) {
        core->counters.weights_hits++;
    }
    vd_wsets_touch(core, set, false);
    return vd_weights_fill(rq, set, 0, &rep->set, &rep->handles);
}

/* ---- opens waiting for a seal ------------------------------------------- */

static void wait_closed(uv_handle_t *h)
{
    free(h->data);
}

static void wait_remove(struct vd_wwait *w)
{
    struct vd_wwait **pp = &w->core->wwaits;
    while (*pp && *pp != w)
        pp = &(*pp)->next;
    if (*pp)
        *pp = w->next;
    w->gone = true;
    struct vd_client *c = vd_clients_find(&w->core->clients, w->client);
    if (c && c->held)
        c->held--;
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, wait_closed);
}

/* One try: answered unless the set is still being written (and time
 * remains). */
static bool wait_try(struct vd_wwait *w, bool last)
{
    struct vd_core *core = w->core;
    struct vd_client *c = vd_clients_find(&core->clients, w->client);
    if (!c)
        return true;
    struct vw_req_weights_open m = {
        .name = w->name, .device = w->device, .bytes = w->bytes, .key = w->key,
        .has_keep = w->keep, .keep = w->keep};
    struct vd_request rq;
    vd_request_init(&rq, core, c, w->id, VW_REQ_WEIGHTS_OPEN);
    struct vw_rep_weights_open rep;
    memset(&rep, 0, sizeof(rep));
    int e = vd_weights_open(&rq, &m, &rep, false);
    bool done = true;
    if (e == 0) {
        vd_reply(&rq, 0, &rep);
    } else if (e == -EAGAIN && !last) {
        done = false;
    } else if (e == -EAGAIN) {
        uint32_t set = vl_wset_find(core->ledger, w->name);
        struct vl_wset_view v;
        uint32_t by = set && vl_wset_view(core->ledger, set, &v) ? v.writer : 0;
        vd_reply(&rq, vd_fail(&rq, -ETIMEDOUT, "weight set '%s' was still "
                              "being written by client %u after %u ms",
                              w->name, by, w->wait_ms), NULL);
    } else {
        vd_reply(&rq, e, NULL);
    }
    vd_request_fini(&rq);
    return done;
}

static void wait_expired(uv_timer_t *t)
{
    struct vd_wwait *w = t->data;
    wait_try(w, true);
    wait_remove(w);
}

int vd_weights_hold(struct vd_request *rq, const struct vw_req_weights_open *m)
{
    struct vd_core *core = rq->core;
    if (rq->client->held >= VW_MAX_REQUESTS_IN_FLIGHT)
        return vd_fail(rq, -EBUSY, "%d requests already held",
                       VW_MAX_REQUESTS_IN_FLIGHT);
    struct vd_wwait *w = calloc(1, sizeof(*w));
    if (!w)
        return vd_fail(rq, -ENOMEM, "out of memory");
    *w = (struct vd_wwait){.core = core, .client = rq->client->id, .id = rq->id,
                           .device = m->device, .bytes = m->bytes,
                           .keep = m->has_keep && m->keep,
                           .wait_ms = m->wait_ms};
    snprintf(w->name, sizeof(w->name), "%s", m->name);
    snprintf(w->key, sizeof(w->key), "%s", m->key);
    uv_timer_init(core->loop, &w->timer);
    w->timer.data = w;
    uv_timer_start(&w->timer, wait_expired, m->wait_ms, 0);
    struct vd_wwait **pp = &core->wwaits;
    while (*pp)
        pp = &(*pp)->next;
    *pp = w;
    rq->client->held++;
    vlog(VLOG_INFO, "client %u: open of weight set '%s' waits up to %u ms: %s",
         w->client, w->name, w->wait_ms, rq->why);
    return VD_HELD;
}

void vd_weights_retry(struct vd_core *core)
{
    core->wsets_changed = false;
    for (struct vd_wwait *w = core->wwaits, *next; w; w = next) {
        next = w->next;
        if (!w->gone && wait_try(w, false))
            wait_remove(w);
    }
}

void vd_weights_drop_client(struct vd_core *core, uint32_t client)
{
    for (struct vd_wwait *w = core->wwaits, *next; w; w = next) {
        next = w->next;
        if (w->client == client)
            wait_remove(w);
    }
}

void vd_weights_fini(struct vd_core *core)
{
    /* The loop closed the timers already (startup.c). */
    for (struct vd_wwait *w = core->wwaits, *next; w; w = next) {
        next = w->next;
        free(w);
    }
    core->wwaits = NULL;
    vd_wsets_fini(core);
}
