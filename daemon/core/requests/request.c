/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/requests/request.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void vd_request_init(struct vd_request *rq, struct vd_core *core,
                     struct vd_client *client, uint64_t id, int type)
{
    memset(rq, 0, sizeof(*rq));
    rq->core = core;
    rq->client = client;
    rq->id = id;
    rq->type = type;
}

void vd_request_fini(struct vd_request *rq)
{
    if (!rq)
        return;
    vl_fx_free(&rq->fx);
    vw_arena_free(&rq->arena);
}

int vd_fail(struct vd_request *rq, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rq->why, sizeof(rq->why), fmt, ap);
    va_end(ap);
    return err;
}

int vd_fail_ledger(struct vd_request *rq, int err)
{
    return vd_fail(rq, err, "%s", vl_why(rq->core->ledger));
}
