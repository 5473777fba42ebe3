/* SPDX-License-Identifier: Apache-2.0 */
/* The weight sets' records (R17): for each set the ledger knows, the
 * handles of its allocations (with the clients' own, the only references
 * to its memory: closing them is what frees it) and its times. Below the
 * effects, which forget a set the ledger dropped. */
#include "daemon/core/requests/weight_records.h"

#include <errno.h>
#include <stdlib.h>

#include "platform/keeper.h"
#include "daemon/log.h"
#include "platform/platform.h"

#include <stdio.h>


struct vd_wset_rec *vd_wsets_rec(struct vd_core *core, uint32_t set)
{
    for (size_t i = 0; i < core->nwsets; i++)
        if (core->wsets[i].set == set)
            return &core->wsets[i];
    return NULL;
}

struct vd_wset_rec *vd_wsets_add(struct vd_core *core, uint32_t set)
{
    if (core->nwsets == core->wsets_cap) {
        size_t cap = core->wsets_cap ? core->wsets_cap * 2 : 8;
        struct vd_wset_rec *v = realloc(core->wsets, cap * sizeof(*v));
        if (!v)
            return NULL;
        core->wsets = v;
        core->wsets_cap = cap;
    }
    struct vd_wset_rec *r = &core->wsets[core->nwsets++];
    *r = (struct vd_wset_rec){.set = set};
    return r;
}

static void rec_free(struct vd_wset_rec *r)
{
    for (uint32_t k = 0; k < r->n; k++)
        vp_close(&r->h[k]);
    free(r->h);
    r->h = NULL;
    r->n = 0;
}

int vd_wsets_adopt(struct vd_core *core, uint32_t set, vp_handle *h,
                     uint32_t n, uint64_t created, uint64_t sealed)
{
    struct vl_wset_view v;
    if (!vl_wset_view(core->ledger, set, &v))
        return -ENOENT;
    struct vd_wset_rec *r = vd_wsets_add(core, set);
    if (!r)
        return -ENOMEM;
    r->dev = (uint32_t)vl_device_index(core->ledger, v.device);
    r->h = h;
    r->n = n;
    r->created_ms = created;
    r->sealed_ms = sealed;
    r->kept = true; /* it came back from the keeper */
    r->last_use_ms = (uint64_t)vp_unix_ms();
    return 0;
}

void vd_wsets_name(uint32_t set, uint32_t index, char *out, size_t len)
{
    snprintf(out, len, "w%u.%u", set, index);
}

int vd_wsets_keep(struct vd_core *core, uint32_t set, char *why, size_t whylen)
{
    struct vd_wset_rec *r = vd_wsets_rec(core, set);
    if (!r)
        return -ENOENT;
    if (!core->keeper) {
        snprintf(why, whylen, "no keeper");
        return -ENOTSUP;
    }
    for (uint32_t k = 0; k < r->n; k++) {
        char name[32];
        vd_wsets_name(set, k, name, sizeof(name));
        int e = vp_keeper_put(core->keeper, name, r->h[k], why, whylen);
        if (e < 0 && e != -EEXIST) {
            while (k--) { /* all or none */
                char n2[32], w2[128];
                vd_wsets_name(set, k, n2, sizeof(n2));
                vp_keeper_remove(core->keeper, n2, w2, sizeof(w2));
            }
            return e;
        }
    }
    r->kept = true;
    return 0;
}

void vd_wsets_forget(struct vd_core *core, uint32_t set)
{
    for (size_t i = 0; i < core->nwsets; i++)
        if (core->wsets[i].set == set) {
            /* The keeper's copies first: until they go the memory lives. */
            for (uint32_t k = 0; core->wsets[i].kept && core->keeper &&
                                 k < core->wsets[i].n; k++) {
                char name[32], why[256];
                vd_wsets_name(set, k, name, sizeof(name));
                int e = vp_keeper_remove(core->keeper, name, why, sizeof(why));
                if (e < 0 && e != -ENOENT)
                    vlog(VLOG_ERR, "weight set %u: the keeper still holds %s: "
                         "%s", set, name, why);
            }
            rec_free(&core->wsets[i]);
            core->wsets[i] = core->wsets[--core->nwsets];
            return;
        }
}

const vp_handle *vd_wsets_handles(struct vd_core *core, uint32_t set,
                                    uint32_t *n)
{
    struct vd_wset_rec *r = vd_wsets_rec(core, set);
    if (!r)
        return NULL;
    *n = r->n;
    return r->h;
}

void vd_wsets_times(struct vd_core *core, uint32_t set, uint64_t *created,
                      uint64_t *sealed, uint64_t *last_use)
{
    struct vd_wset_rec *r = vd_wsets_rec(core, set);
    *created = r ? r->created_ms : 0;
    *sealed = r ? r->sealed_ms : 0;
    *last_use = r ? r->last_use_ms : 0;
}

void vd_wsets_touch(struct vd_core *core, uint32_t set, bool sealed)
{
    struct vd_wset_rec *r = vd_wsets_rec(core, set);
    if (!r)
        return;
    r->last_use_ms = (uint64_t)vp_unix_ms();
    if (sealed)
        r->sealed_ms = r->last_use_ms;
}

void vd_wsets_fini(struct vd_core *core)
{
    for (size_t i = 0; i < core->nwsets; i++)
        rec_free(&core->wsets[i]);
    free(core->wsets);
    core->wsets = NULL;
    core->nwsets = core->wsets_cap = 0;
}
