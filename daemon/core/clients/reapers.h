/* SPDX-License-Identifier: Apache-2.0 */
/* Gone clients whose process still runs (R13): each watched through its
 * pin until the process exits, when the function its watcher gave is
 * called. Who holds what stays in the ledger; this is only the watch. */
#ifndef VRAMD_REAPERS_H
#define VRAMD_REAPERS_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/core/core.h"

typedef void (*vd_reaper_fn)(struct vd_core *core, struct vd_reaper *rp);

/* Watches the process of gone client (the pin is taken); on_exit runs when
 * it exits. */
int vd_reapers_add(struct vd_core *core, uint32_t client, int64_t pid,
                   vp_handle pin, uint64_t start_time, bool resumable,
                   const char *name, vd_reaper_fn on_exit);
struct vd_reaper *vd_reapers_find(struct vd_core *core, uint32_t client);
/* fn for each (fn may not remove). */
void vd_reapers_each(struct vd_core *core,
                     void (*fn)(void *ud, struct vd_reaper *rp), void *ud);
/* Stops watching (the memory goes once the loop closed the watch). */
void vd_reapers_remove(struct vd_core *core, struct vd_reaper *rp);
uint32_t vd_reaper_client(const struct vd_reaper *rp);
int64_t vd_reaper_pid(const struct vd_reaper *rp);
uint64_t vd_reaper_start_time(const struct vd_reaper *rp);
bool vd_reaper_resumable(const struct vd_reaper *rp);
/* The name the client said hello with, for vramctl ("" when unknown). */
const char *vd_reaper_name(const struct vd_reaper *rp);
/* After the loop's last turn. */
void vd_reapers_fini(struct vd_core *core);

#endif
