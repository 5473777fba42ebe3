/* Memory a client gives back must be gone from its process. A chunk it
 * still maps or holds open (seen for host chunks: their memory ids among
 * the process's mappings and handles; a GPU driver shows no other
 * process's imports) stays its own: the request that would return it to
 * the pool is refused with EBUSY and changes nothing, or the memory would
 * be the client's and the next holder's at once. */
#ifndef VRAMD_KEPT_H
#define VRAMD_KEPT_H

#include <stddef.h>
#include <stdint.h>

#include "request.h"

/* Refuses rq (returns its error) when one of chunks, which the requester
 * holds, is still in its process; 0 when none is or none can be seen. */
int vd_kept_refuse(struct vd_request *rq, const uint64_t *chunks, size_t n);
/* The same for the chunks of a region, or of every region of a stage. */
int vd_kept_refuse_region(struct vd_request *rq, uint32_t region);
int vd_kept_refuse_stage(struct vd_request *rq, uint32_t stage);

#endif
