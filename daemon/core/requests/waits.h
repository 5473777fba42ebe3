/* SPDX-License-Identifier: Apache-2.0 */
/* Requests that wait (R6): a kv_reserve with hold whose budget needs
 * chunks on their way back, and a stage_register whose initial window is
 * lent as pool loans (R5), are answered when the chunks come
 * (vd_waits_retry, after anything that may free memory), or with ETIMEDOUT
 * at the stage's hold bound, after one last try. */
#ifndef VRAMD_WAITS_H
#define VRAMD_WAITS_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/core/requests/request.h"

/* Holds rq (a kv_reserve of stage for prompt + output tokens): VD_HELD,
 * or a negative errno (with rq->why) when it cannot wait. */
int vd_waits_hold(struct vd_request *rq, uint32_t stage, uint64_t prompt,
                  uint64_t output);
/* Holds rq (a stage_register of a configured stage): VD_HELD, or a
 * negative errno. */
int vd_waits_hold_register(struct vd_request *rq, uint32_t stage,
                           bool keep_window);
/* Tries every held grow again, in the order they came. */
void vd_waits_retry(struct vd_core *core);
/* The client is gone: its held grows end without a reply. */
void vd_waits_drop_client(struct vd_core *core, struct vd_client *c);
/* fn(ud, stage) for each held request, in the order they came. */
void vd_waits_each(struct vd_core *core, void (*fn)(void *ud, uint32_t stage),
                   void *ud);
void vd_waits_fini(struct vd_core *core);

/* The reply of a kv_reserve of stage that succeeded (here and in its
 * handler). */
void vd_waits_reply_kv(struct vd_request *rq, uint32_t stage, uint32_t recalled);

#endif
