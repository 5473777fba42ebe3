/* SPDX-License-Identifier: Apache-2.0 */
/* Memory a client gives back must be gone from its process. A chunk it
 * still maps or holds open (seen for host chunks: their memory ids among
 * the process's mappings and handles; a GPU driver shows no other
 * process's imports) stays its own: the request that would return it to
 * the pool is refused with EBUSY and changes nothing, or the memory would
 * be counted free while the client still has it.
 *
 * Looking costs what the process maps and holds open (reading them takes
 * about 13 us a chunk here), not what the request gives back, so it is done
 * before the release only where that is cheap: a client holding few chunks
 * in a process whose last look was cheap. Elsewhere (a client of 18,000
 * chunks releasing 16) a sample of the released memory is looked for
 * later, on libuv's thread pool (the loop does not wait), one look at a
 * time and at most a twentieth of the time; a chunk found then is counted
 * and logged, and the release stands (a host chunk's next grant is fresh
 * memory: what the client kept is its own). */
#ifndef VRAMD_STILL_HELD_H
#define VRAMD_STILL_HELD_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/core/requests/request.h"

/* Refuses rq (returns its error) when one of chunks, which the requester
 * holds, is still in its process; 0 when none is or none can be seen (or
 * the look is left to the audit). */
int vd_kept_refuse(struct vd_request *rq, const uint64_t *chunks, size_t n);
/* The same for the chunks of a region, or of every region of a stage. */
int vd_kept_refuse_region(struct vd_request *rq, uint32_t region);
int vd_kept_refuse_stage(struct vd_request *rq, uint32_t stage);
/* Frees the audits' state (after the loop closed its handles). */
void vd_kept_fini(struct vd_core *core);

#endif
