/* SPDX-License-Identifier: Apache-2.0 */
/* The backend's pool of ready chunks, refilled off the grant path: from the
 * idle loop, a few chunks a turn, never while a client is importing what it
 * was just granted (the driver calls of both sides contend). */
#ifndef VRAMD_REFILL_H
#define VRAMD_REFILL_H

#include "daemon/core/core.h"

void vd_refill_start(struct vd_core *core);

#endif
