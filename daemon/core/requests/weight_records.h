/* SPDX-License-Identifier: Apache-2.0 */
/* The weight sets' records (R17): for each set the ledger knows, the
 * handles of its allocations and its times. Below the effects (which
 * forget a set the ledger dropped); weight_opens.h is what requests use. */
#ifndef VRAMD_WEIGHT_RECORDS_H
#define VRAMD_WEIGHT_RECORDS_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/core/core.h"
#include "platform/handle.h"

struct vd_wset_rec {
    uint32_t set;
    uint32_t dev; /* device index */
    vp_handle *h;
    uint32_t n;
    uint64_t created_ms, sealed_ms, last_use_ms;
    bool kept; /* its handles are the keeper's too */
};

/* The record of set, or NULL. */
struct vd_wset_rec *vd_wsets_rec(struct vd_core *core, uint32_t set);
/* A new, empty record for set; NULL when out of memory. */
struct vd_wset_rec *vd_wsets_add(struct vd_core *core, uint32_t set);
/* A set a restarted vramd took back: its n handles, adopted. */
int vd_wsets_adopt(struct vd_core *core, uint32_t set, vp_handle *h,
                   uint32_t n, uint64_t created, uint64_t sealed);
/* Set is gone from the ledger (VL_FX_WSET_DROP): its handles are closed,
 * and its memory goes once no process maps it. Unknown sets: nothing. */
void vd_wsets_forget(struct vd_core *core, uint32_t set);
/* The allocations' handles of set (n of them), or NULL. */
const vp_handle *vd_wsets_handles(struct vd_core *core, uint32_t set,
                                  uint32_t *n);
/* Times of set for listings: Unix ms made, sealed (0) and last used. */
void vd_wsets_times(struct vd_core *core, uint32_t set, uint64_t *created,
                    uint64_t *sealed, uint64_t *last_use);
/* Set was used now (sealed now, when sealed). */
void vd_wsets_touch(struct vd_core *core, uint32_t set, bool sealed);
/* R17: a sealed set's handles go to the keeper (platform/keeper.h), so
 * that a restarted vramd finds the set again; forgetting a set takes them
 * back out. The keeper's names: "w<set>.<index>". 0, or -errno with why
 * (the set is sealed all the same, but would not outlive vramd). */
int vd_wsets_keep(struct vd_core *core, uint32_t set, char *why, size_t whylen);
/* The keeper's name of allocation index of set. */
void vd_wsets_name(uint32_t set, uint32_t index, char *out, size_t len);
void vd_wsets_fini(struct vd_core *core);

#endif
