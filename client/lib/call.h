/* SPDX-License-Identifier: Apache-2.0 */
/* The API layer's requests (call.c): a request that survives a broken
 * connection. */
#ifndef VRAM_CLIENT_CALL_H
#define VRAM_CLIENT_CALL_H

#include "proto/arena.h"
#include "client/include/vram.h"

/* vc_rpc, and when the connection broke: connect again, resume, and send
 * the request once more. */
int vc_call(vram_client *c, int type, const void *req, void *rep,
            struct vw_arena *a);

#endif
