/* SPDX-License-Identifier: Apache-2.0 */
/* Carrying out the ledger's effects, once per request: new and moved
 * chunks for the requester's reply (with the backend's handle for each new
 * one), chunks the requester must unmap, recalls of other clients' loans
 * (events with deadlines), chunks that left their holder back to the
 * backend, and budget changes announced after the reply. */
#ifndef VRAMD_APPLY_EFFECTS_H
#define VRAMD_APPLY_EFFECTS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/core/core.h"
#include "gen/vram_msg.h"

/* What the effects of a request mean for the client that asked. */
struct vd_effects_out {
    /* new chunks (has_fd, their handles not made yet: fd is VP_NONE until
     * reply.c makes it as its frame goes) and moved ones */
    struct vw_t_map_entry *map;
    size_t nmap, capmap;
    uint64_t *unmap;              /* chunks to unmap, then release */
    size_t nunmap, capunmap;
    int map_error; /* out of memory listing them: the reply says so */
};

/* Carries out fx (and empties it). Entries for requester go into out (both
 * NULL: effects of no request, such as a disconnect's); budget events wait
 * in core->budget_pending until vd_effects_flush_budget, or go at once
 * when there is no requester. */
void vd_effects_apply(struct vd_core *core, struct vl_fxlist *fx,
                      struct vd_client *requester, struct vd_effects_out *out);
/* Closes the handles of map entries not sent, and frees. NULL-tolerant. */
void vd_effects_out_free(struct vd_effects_out *out);
/* Chunks granted to c whose memory the backend could not make (err): back
 * to the pool, as c's release. */
void vd_effects_give_back(struct vd_core *core, struct vd_client *c,
                          const uint64_t *chunks, size_t n, int err);
void vd_effects_flush_budget(struct vd_core *core);

#endif
