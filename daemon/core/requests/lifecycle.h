/* SPDX-License-Identifier: Apache-2.0 */
/* A client's life, in one place: admission when its connection comes (who
 * it is, whether it may, the limits), the end of its connection (its
 * requests end, its memory quarantined, R11), its gone client watched until
 * its process exits or comes back (R13), and the reap that frees what it
 * left. */
#ifndef VRAMD_LIFECYCLE_H
#define VRAMD_LIFECYCLE_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/core/core.h"
#include "platform/peer.h"
#include "daemon/core/clients/reapers.h"

/* Why a connection is turned away. */
struct vd_refusal {
    int err;           /* negative errno, named on the wire */
    char message[256];
};

/* A connection came (io/): admits its peer as a client (the access lists,
 * the client limits). 0 and *id, or a negative errno with the refusal to
 * send before closing. */
int vd_core_client_open(struct vd_core *core, void *conn,
                        const struct vp_peer *peer, uint32_t *id,
                        struct vd_refusal *ref);
/* The client's connection is gone (io/ closed it, or the peer did). */
void vd_core_client_closed(struct vd_core *core, uint32_t id, const char *why);
/* Whether the client said hello (io closes connections that stay silent). */
bool vd_core_client_greeted(struct vd_core *core, uint32_t id);

/* Pins c's process, reads its start time, records it in the state file
 * and watches it for a hand-over, once, before its first request that may
 * give it memory. -ESRCH when the process that connected is gone while its
 * connection lives on: c is being closed. -E2BIG when the state file's
 * holder table is full: no memory for it now (not pinned: a later request
 * tries again). */
int vd_lifecycle_pin(struct vd_core *core, struct vd_client *c);

/* Evicts client: its process may not resume it, its connection is closed
 * (at the end of this loop turn). */
void vd_lifecycle_evict(struct vd_core *core, struct vd_client *c,
                        const char *why);

/* ---- gone clients whose process still runs (reapers.c) ---- */

/* Watches the process of gone client (pin taken); reaps at its exit. */
int vd_lifecycle_watch(struct vd_core *core, uint32_t client, int64_t pid,
                       vp_handle pin, uint64_t start_time, bool resumable,
                       const char *name);
/* Stops watching and reaps the client now (it has nothing left to wait
 * for: a resume took everything back, or its process exited). */
void vd_lifecycle_reap_now(struct vd_core *core, struct vd_reaper *rp);
/* An admin's word: a handed-off client's memory goes back now. */
void vd_lifecycle_reap_orphan(struct vd_core *core, uint32_t client);

#endif
