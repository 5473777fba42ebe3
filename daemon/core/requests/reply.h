/* SPDX-License-Identifier: Apache-2.0 */
/* The one place a request is answered: its effects applied once, its reply
 * sent once (map entries over as many frames as their handles need), then
 * the budget events it caused. */
#ifndef VRAMD_REPLY_H
#define VRAMD_REPLY_H

#include "daemon/core/requests/request.h"

/* Answers rq: err 0 with rep (the request type's reply struct; its map and
 * unmap come from the effects), or err < 0 with rq->why (rep NULL; chunks
 * the effects mapped anyway are still listed). */
void vd_reply(struct vd_request *rq, int err, void *rep);

#endif
