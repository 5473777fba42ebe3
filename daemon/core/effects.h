/* Carrying out the ledger's effects, once per request: new and moved
 * chunks for the requester's reply (with the backend's handle for each new
 * one), chunks the requester must unmap, recalls of other clients' loans
 * (events with deadlines), chunks that left their holder back to the
 * backend, and budget changes announced after the reply. */
#ifndef VRAMD_EFFECTS_H
#define VRAMD_EFFECTS_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "vram_msg.h"

/* What the effects of a request mean for the client that asked. */
struct vd_effects_out {
    struct vram_t_map_entry *map; /* new chunks (has_fd) and moved ones */
    size_t nmap, capmap;
    uint64_t *unmap;              /* chunks to unmap, then release */
    size_t nunmap, capunmap;
    int map_error; /* the backend could not make memory for some chunks:
                      those went back to the pool */
};

/* Carries out fx (and empties it). Entries for requester go into out (both
 * NULL: effects of no request, such as a disconnect's); budget events wait
 * in core->budget_pending until vd_effects_flush_budget, or go at once
 * when there is no requester. */
void vd_effects_apply(struct vd_core *core, struct vl_fxlist *fx,
                      struct vd_client *requester, struct vd_effects_out *out);
/* Closes the handles of map entries not sent, and frees. NULL-tolerant. */
void vd_effects_out_free(struct vd_effects_out *out);
void vd_effects_flush_budget(struct vd_core *core);

#endif
