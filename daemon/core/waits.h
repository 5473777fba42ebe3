/* KV grows that wait (R6): a kv_reserve with hold whose budget needs
 * chunks on their way back is answered when they come (vd_waits_retry,
 * after anything that may free memory), or with ETIMEDOUT at the stage's
 * hold bound, after one last try. */
#ifndef VRAMD_WAITS_H
#define VRAMD_WAITS_H

#include <stdint.h>

#include "request.h"

/* Holds rq (a kv_reserve of stage for prompt + output tokens): VD_HELD,
 * or a negative errno (with rq->why) when it cannot wait. */
int vd_waits_hold(struct vd_request *rq, uint32_t stage, uint64_t prompt,
                  uint64_t output);
/* Tries every held grow again, in the order they came. */
void vd_waits_retry(struct vd_core *core);
/* The client is gone: its held grows end without a reply. */
void vd_waits_drop_client(struct vd_core *core, struct vd_client *c);
void vd_waits_fini(struct vd_core *core);

/* The reply of a kv_reserve of stage that succeeded (here and in its
 * handler). */
void vd_waits_reply_kv(struct vd_request *rq, uint32_t stage, uint32_t recalled);

#endif
