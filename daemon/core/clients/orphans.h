/* SPDX-License-Identifier: Apache-2.0 */
/* A connection belongs to the process that made it. One that lives on
 * after that process exited was handed to another (inherited across fork,
 * or passed as an fd): vramd cannot know who maps its memory then. While a
 * client is connected its process is watched; when it exits and the
 * connection is still open a moment later, the client is handed off: its
 * connection is closed and its memory stays quarantined, as an orphan,
 * until no process is seen holding it (host chunks, looked for among every
 * process's mappings and handles) or an admin evicts it (GPU chunks cannot
 * be seen). */
#ifndef VRAMD_ORPHANS_H
#define VRAMD_ORPHANS_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/core/core.h"

/* Called when a watched client's process exited and its connection did
 * not end with it; and when an orphan's memory is no longer held. */
typedef void (*vd_handoff_fn)(struct vd_core *core, uint32_t client);

/* Watches the process of a connected client (a copy of pin is taken). */
int vd_handoff_watch(struct vd_core *core, uint32_t client, vp_handle pin,
                     vd_handoff_fn handed_off);
/* Its connection ended: no more watching. */
void vd_handoff_unwatch(struct vd_core *core, uint32_t client);
/* A gone client of a handed-off connection: kept until free runs. */
int vd_handoff_orphan(struct vd_core *core, uint32_t client, vd_handoff_fn free);
bool vd_handoff_is_orphan(const struct vd_core *core, uint32_t client);
/* Forgets an orphan (an admin reaped it). */
void vd_handoff_forget(struct vd_core *core, uint32_t client);
/* After the loop's last turn. */
void vd_handoff_fini(struct vd_core *core);

#endif
