/* SPDX-License-Identifier: Apache-2.0 */
/* Weight sets (R17): weights_open, weights_handles, weights_seal,
 * weights_close, weights_list, weights_drop. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/log.h"
#include "platform/platform.h"
#include "daemon/core/requests/request.h"
#include "gen/vd_dispatch.h"
#include "daemon/core/requests/weight_opens.h"
#include "daemon/core/requests/weight_records.h"

int vd_handle_weights_open(struct vd_request *rq,
                           const struct vw_req_weights_open *m,
                           struct vw_rep_weights_open *rep)
{
    if (m->has_keep && m->keep && !rq->client->admin)
        return vd_fail(rq, -EPERM, "keeping a weight set is for "
                       "administrators (uid %u is not in access.admin)",
                       (unsigned)rq->client->peer.uid);
    return vd_weights_open(rq, m, rep, true);
}

int vd_handle_weights_handles(struct vd_request *rq,
                              const struct vw_req_weights_handles *m,
                              struct vw_rep_weights_handles *rep)
{
    struct vl_wset_view v;
    bool mine = false;
    if (vl_wset_view(rq->core->ledger, m->set, &v))
        for (uint32_t k = 0; k < v.users; k++)
            mine |= v.user[k] == rq->client->id;
    if (!mine)
        return vd_fail(rq, -ENOENT, "weight set %u is not open here", m->set);
    return vd_weights_fill(rq, m->set, m->first, NULL, &rep->handles);
}

int vd_handle_weights_seal(struct vd_request *rq,
                           const struct vw_req_weights_seal *m,
                           struct vw_rep_weights_seal *rep)
{
    struct vd_core *core = rq->core;
    struct vl_wset_view v;
    if (!vl_wset_view(core->ledger, m->set, &v) || v.writer != rq->client->id) {
        /* Not open here, sealed, or another's: the ledger says which, and
         * changes nothing. */
        int e = vl_weights_seal(core->ledger, rq->client->id, m->set, 0);
        return vd_fail_ledger(rq, e < 0 ? e : -EPERM);
    }
    /* The memory first: on the host backend nobody may map it writable any
     * more (its writer unmapped it; the seal fails while it has not). */
    uint32_t n = 0;
    const vp_handle *h = vd_wsets_handles(core, m->set, &n);
    int di = vl_device_index(core->ledger, v.device);
    for (uint32_t k = 0; h && k < n; k++) {
        char why[256] = "";
        int e = core->backend->ops->wset_seal(core->backend, (uint32_t)di, h[k],
                                              why, sizeof(why));
        if (e < 0)
            return vd_fail(rq, e, "weight set '%s': allocation %u: %s", v.name,
                           k, why);
    }
    /* The keeper first, then the ledger's record (the state file's): a
     * crash between leaves only names no set records, which the next
     * start removes. */
    char kwhy[256] = "";
    int k = vd_wsets_keep(core, m->set, kwhy, sizeof(kwhy));
    if (k < 0)
        vlog(VLOG_WARNING, "weight set %u '%s' is sealed, but its handles are "
             "not kept outside vramd (%s): it will not outlive vramd", m->set,
             v.name, kwhy);
    int e = vl_weights_seal(core->ledger, rq->client->id, m->set,
                            (uint64_t)vp_unix_ms());
    if (e < 0)
        return vd_fail_ledger(rq, e);
    vd_wsets_touch(core, m->set, true);
    vlog(VLOG_INFO, "weight set %u '%s' sealed by client %u (%llu MiB)",
         m->set, v.name, rq->client->id, (unsigned long long)(v.bytes >> 20));
    e = vd_weights_fill(rq, m->set, 0, &rep->set, NULL);
    vd_weights_retry(core); /* opens that waited for the seal */
    return e;
}

int vd_handle_weights_close(struct vd_request *rq,
                            const struct vw_req_weights_close *m,
                            struct vw_rep_weights_close *rep)
{
    (void)rep;
    int e = vl_weights_close(rq->core->ledger, rq->client->id, m->set, &rq->fx);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    vd_wsets_touch(rq->core, m->set, false);
    rq->freed_memory = true;
    return 0;
}

struct listing {
    struct vd_request *rq;
    struct vw_weights_entry_array *a;
    int err;
};

static void list_one(void *ud, const struct vl_wset_view *v)
{
    struct listing *l = ud;
    char *key = vw_arena_alloc(&l->rq->arena, 2 * VL_WSET_KEY + 1);
    if (!key) {
        l->err = -ENOMEM;
        return;
    }
    for (int i = 0; i < VL_WSET_KEY; i++)
        snprintf(key + 2 * i, 3, "%02x", v->key[i]);
    uint64_t created, sealed, last;
    vd_wsets_times(l->rq->core, v->id, &created, &sealed, &last);
    l->a->v[l->a->n++] = (struct vw_t_weights_entry){
        .id = v->id, .name = v->name, .device = v->device, .bytes = v->bytes,
        .alloc_bytes = v->alloc_bytes, .allocs = v->nalloc, .key = key,
        .state = !v->sealed ? "writing" : v->users ? "sealed" : "cached",
        .has_writer = v->writer != 0, .writer = v->writer, .users = v->users,
        .keep = v->keep, .owner = v->tenant, .created_ms = created,
        .has_sealed_ms = v->sealed, .sealed_ms = sealed, .last_use_ms = last};
}

static void count_one(void *ud, const struct vl_wset_view *v)
{
    (void)v;
    (*(size_t *)ud)++;
}

int vd_handle_weights_list(struct vd_request *rq,
                           const struct vw_req_weights_list *m,
                           struct vw_rep_weights_list *rep)
{
    (void)m;
    size_t n = 0;
    vl_each_wset(rq->core->ledger, count_one, &n);
    rep->sets.v = vw_arena_alloc(&rq->arena, (n ? n : 1) * sizeof(*rep->sets.v));
    if (!rep->sets.v)
        return vd_fail(rq, -ENOMEM, "out of memory");
    struct listing l = {.rq = rq, .a = &rep->sets};
    vl_each_wset(rq->core->ledger, list_one, &l);
    return l.err ? vd_fail(rq, l.err, "out of memory") : 0;
}

int vd_handle_weights_drop(struct vd_request *rq,
                           const struct vw_req_weights_drop *m,
                           struct vw_rep_weights_drop *rep)
{
    (void)rep;
    if (!rq->client->admin)
        return vd_fail(rq, -EPERM, "dropping a weight set is for "
                       "administrators (uid %u is not in access.admin)",
                       (unsigned)rq->client->peer.uid);
    uint32_t set = vl_wset_find(rq->core->ledger, m->name);
    if (!set)
        return vd_fail(rq, -ENOENT, "no weight set '%s'", m->name);
    int e = vl_weights_drop(rq->core->ledger, set, &rq->fx);
    if (e < 0)
        return vd_fail_ledger(rq, e);
    vlog(VLOG_NOTICE, "weight set %u '%s' dropped by client %u (admin)", set,
         m->name, rq->client->id);
    rq->freed_memory = true;
    return 0;
}
