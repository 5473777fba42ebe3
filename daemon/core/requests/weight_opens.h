/* SPDX-License-Identifier: Apache-2.0 */
/* Weight sets (R17) as requests meet them: making a set's allocations,
 * what an open's reply carries, and the opens that wait for another
 * client's seal. The handles themselves are kept in weight_records.h. */
#ifndef VRAMD_WEIGHT_OPENS_H
#define VRAMD_WEIGHT_OPENS_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/core/core.h"
#include "daemon/core/requests/request.h"
#include "gen/vram_msg.h"

/* Makes the allocations of set (just opened in the ledger, its writer the
 * request's client) and keeps their handles; -errno with rq's why, the
 * ledger's set dropped again, when the backend cannot. */
int vd_weights_make(struct vd_request *rq, uint32_t set);
/* Fills info (when not NULL) and up to 32 handles (duplicates, which the
 * reply takes; none when handles is NULL) from allocation first on:
 * -EAGAIN when the connection cannot take that many handles now. */
int vd_weights_fill(struct vd_request *rq, uint32_t set, uint32_t first,
                    struct vw_t_weights_info *info,
                    struct vw_weights_handle_array *handles);

/* An open of a set another client writes waits (VD_HELD) up to wait_ms. */
int vd_weights_hold(struct vd_request *rq, const struct vw_req_weights_open *m);
/* A set was sealed or dropped: the opens waiting on its name go again. */
void vd_weights_retry(struct vd_core *core);
/* The client is gone: its waiting opens end without a reply. */
void vd_weights_drop_client(struct vd_core *core, uint32_t client);
/* The open itself (handlers/handle_weights.c), from a request or a retry: 0 with
 * the reply filled, VD_HELD, or -errno with rq's why. */
int vd_weights_open(struct vd_request *rq, const struct vw_req_weights_open *m,
                    struct vw_rep_weights_open *rep, bool may_wait);
void vd_weights_fini(struct vd_core *core);

#endif
