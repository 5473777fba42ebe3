/* SPDX-License-Identifier: Apache-2.0 */
/* One request's context, from its frame to its reply: who asked, what the
 * ledger's operations produced as effects, and why it failed. Handlers
 * fill it; reply.c carries it out. */
#ifndef VRAMD_REQUEST_H
#define VRAMD_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/arena.h"
#include "daemon/core/core.h"
#include "daemon/ledger/ledger.h"

/* A handler's result besides 0 (reply now) and a negative errno (refuse):
 * the request waits (its reply comes later, from waits.c). */
#define VD_HELD 1

struct vd_request {
    struct vd_core *core;
    struct vd_client *client;
    uint64_t id;
    int type;               /* enum vw_req_id */
    struct vl_fxlist fx;    /* the ledger's effects, applied by reply.c */
    struct vw_arena arena; /* the reply's arrays and strings */
    bool freed_memory;      /* held grows may go ahead now */
    bool close_after;       /* close the connection once the reply went */
    unsigned send_flags;    /* the reply's (VD_SEND_READ_ONLY) */
    char why[512];          /* a refusal's message */
};

void vd_request_init(struct vd_request *rq, struct vd_core *core,
                     struct vd_client *client, uint64_t id, int type);
void vd_request_fini(struct vd_request *rq);
/* Refuses the request: the message, and err (negative) returned. */
int vd_fail(struct vd_request *rq, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Refuses with the ledger's reason. */
int vd_fail_ledger(struct vd_request *rq, int err);

#endif
