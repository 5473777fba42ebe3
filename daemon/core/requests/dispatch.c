/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/requests/dispatch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/errnames.h"
#include "daemon/ledger/ledger.h"
#include "daemon/core/requests/lifecycle.h"
#include "daemon/log.h"
#include "proto/msg.h"
#include "platform/platform.h"
#include "daemon/core/requests/reply.h"
#include "daemon/core/requests/request.h"
#include "daemon/core/requests/send.h"
#include "gen/vd_dispatch.h"
#include "gen/vram_msg.h"
#include "daemon/core/requests/waits.h"
#include "daemon/core/requests/weight_opens.h"

/* ---- a request's JSON tree ----------------------------------------------- */

/* A frame's JSON tree is parsed into memory that lives as long as that one
 * request (through cJSON's allocation hooks, installed at the first frame):
 * no allocation per node (a release of 16,384 chunks has as many), and one
 * reset for the whole tree. Outside parse(), cJSON allocates as ever. The
 * first block is kept between requests; larger trees add blocks. */
#define TREE_BLOCK (64u << 10)

struct tree_block {
    struct tree_block *next;
    size_t used, cap;
    _Alignas(16) char data[];
};

static struct tree_block *tree_first, *tree_cur;
static bool parsing;

static void *tree_malloc(size_t n)
{
    if (!parsing)
        return malloc(n);
    n = (n + 15) & ~(size_t)15;
    if (!tree_cur || tree_cur->cap - tree_cur->used < n) {
        size_t cap = n > TREE_BLOCK ? n : TREE_BLOCK;
        struct tree_block *b = malloc(sizeof(*b) + cap);
        if (!b)
            return NULL;
        *b = (struct tree_block){.cap = cap};
        if (tree_cur)
            tree_cur->next = b;
        else
            tree_first = b;
        tree_cur = b;
    }
    void *p = tree_cur->data + tree_cur->used;
    tree_cur->used += n;
    return p;
}

static void tree_free(void *p)
{
    for (const struct tree_block *b = tree_first; p && b; b = b->next)
        if ((const char *)p >= b->data && (const char *)p < b->data + b->cap)
            return; /* the tree's: taken back by tree_done */
    free(p);
}

static cJSON *parse(const char *text, size_t len)
{
    static bool hooked;
    if (!hooked) {
        hooked = true;
        cJSON_InitHooks(&(cJSON_Hooks){.malloc_fn = tree_malloc,
                                       .free_fn = tree_free});
    }
    parsing = true;
    cJSON *t = cJSON_ParseWithLength(text, len);
    parsing = false;
    return t;
}

/* The request is over: its tree's memory goes back at once. */
static void tree_done(cJSON *t)
{
    cJSON_Delete(t);
    if (!tree_first)
        return;
    for (struct tree_block *b = tree_first->next, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    tree_first->next = NULL;
    tree_first->used = 0;
    tree_cur = tree_first;
}

/* ---- refusals ------------------------------------------------------------ */

/* Refusals are the peer's doing and as frequent as it likes: each one at
 * debug, and at info the first of every 10 s with a count of the others. */
static struct vlog_limit refusals = {.interval_ms = 10000};

static void log_refusal(const struct vd_client *c, uint64_t id, int err,
                        const char *why)
{
    if (vlog_level() >= VLOG_DEBUG)
        vlog(VLOG_DEBUG, "client %u (%s, pid %lld): request %llu refused: %s: %s",
             c->id, c->name, (long long)c->peer.pid, (unsigned long long)id,
             vw_errno_name(err), why);
    else
        vlog_limited(&refusals, VLOG_INFO, "client %u (%s, pid %lld): request "
                     "%llu refused: %s: %s", c->id, c->name,
                     (long long)c->peer.pid, (unsigned long long)id,
                     vw_errno_name(err), why);
}

/* A refusal outside any handler: the frame or its envelope is wrong. */
static void refuse(struct vd_core *core, struct vd_client *c, uint64_t id,
                   int type, int err, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static void refuse(struct vd_core *core, struct vd_client *c, uint64_t id,
                   int type, int err, const char *fmt, ...)
{
    struct vd_request rq;
    vd_request_init(&rq, core, c, id, type < 0 ? 0 : type);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rq.why, sizeof(rq.why), fmt, ap);
    va_end(ap);
    core->counters.errors++;
    log_refusal(c, id, err, rq.why);
    vd_send_reply(core, c, type, id, err, rq.why, false, NULL, NULL, NULL);
    vd_request_fini(&rq);
}

static void close_now(struct vd_core *core, struct vd_client *c, const char *why,
                      bool after_flush)
{
    if (c->conn && !c->closing) {
        c->closing = true;
        core->port.close(core->port.ctx, c->conn, why, after_flush);
    }
}

void vd_core_client_frame(struct vd_core *core, uint32_t client,
                          struct vw_codec_frame *f)
{
    struct vd_client *c = vd_clients_find(&core->clients, client);
    if (!c || c->closing)
        return;
    /* Before the hello, a frame of any version this vramd serves (a
     * hello's is 1); after it, of the version it agreed on. */
    if (c->hello ? f->version != c->version
                 : f->version < VW_PROTOCOL_OLDEST ||
                       f->version > VW_PROTOCOL_VERSION) {
        if (c->hello)
            refuse(core, c, 0, -1, -EPROTONOSUPPORT, "a frame of protocol "
                   "version %u on a connection that speaks version %u",
                   f->version, c->version);
        else
            refuse(core, c, 0, -1, -EPROTONOSUPPORT, "protocol version "
                   "mismatch: client %u, vramd %d to %d", f->version,
                   VW_PROTOCOL_OLDEST, VW_PROTOCOL_VERSION);
        close_now(core, c, "closed after a fatal error reply", true);
        return;
    }
    cJSON *msg = parse(f->payload, f->len);
    if (!msg || !cJSON_IsObject(msg)) {
        tree_done(msg);
        core->counters.protocol_errors++;
        close_now(core, c, "frame payload is not a JSON object", false);
        return;
    }
    struct vw_envelope env;
    char why[256];
    int r = vw_envelope_read(msg, &env, why, sizeof(why));
    if (r < 0 && !env.has_id) {
        refuse(core, c, 0, -1, -EINVAL, "request has no integer field 'id'");
        goto out;
    }
    if (f->nhandles > 0) {
        /* No request carries handles: close them first, then refuse. */
        int n = f->nhandles;
        for (int i = 0; i < n; i++)
            vp_close(&f->handles[i]);
        refuse(core, c, env.id, -1, -EINVAL, "unsolicited file descriptors: %d "
               "closed (no request carries fds)", n);
        goto out;
    }
    int type = env.kind == VW_MSG_REQUEST ? vw_req_lookup(env.type) : -1;
    /* Hello first, before anything of the request is looked at. */
    if (!c->hello && type != VW_REQ_HELLO) {
        refuse(core, c, env.id, -1, -EPROTO, "say hello first");
        goto out;
    }
    if (r < 0) {
        refuse(core, c, env.id, -1, -EINVAL, "%s", why);
        goto out;
    }
    if (type < 0) {
        refuse(core, c, env.id, -1, -ENOSYS, "unknown message type '%.64s'",
               env.type ? env.type : "");
        goto out;
    }
    if (type == VW_REQ_HELLO && c->hello) {
        refuse(core, c, env.id, type, -EPROTO, "hello was said already on this "
               "connection");
        goto out;
    }
    if (c->hello && !vw_since_in(vw_requests[type].since, c->version)) {
        refuse(core, c, env.id, -1, -ENOSYS, "'%s' came with protocol version "
               "%u; this connection speaks version %u", vw_requests[type].name,
               (unsigned)vw_requests[type].since, c->version);
        goto out;
    }
    bool may_get = type != VW_REQ_HELLO && type != VW_REQ_PING &&
                   type != VW_REQ_STATUS;
    /* R16: its user's gone clients are counted before it may get memory,
     * unless it comes back for one of them. */
    if (may_get && type != VW_REQ_RESUME &&
        (r = vl_client_admit(core->ledger, c->id)) < 0) {
        refuse(core, c, env.id, type, r, "%s", vl_why(core->ledger));
        goto out;
    }
    /* Before anything that may give it memory: its process pinned. */
    if (!c->pinned && may_get && (r = vd_lifecycle_pin(core, c)) < 0) {
        if (r == -E2BIG)
            refuse(core, c, env.id, type, r, "too many clients and gone "
                   "clients: the state file has no room to record your "
                   "process");
        goto out;
    }
    struct vd_request rq;
    vd_request_init(&rq, core, c, env.id, type);
    union vw_req_any req;
    union vw_rep_any rep;
    memset(&rep, 0, sizeof(rep));
    struct vw_dec d = {.arena = &rq.arena, .version = c->version};
    r = vw_decode(vw_requests[type].req, msg, &req, &d);
    if (r < 0) {
        refuse(core, c, env.id, type, r, "%s", d.why);
        vd_request_fini(&rq);
        goto out;
    }
    r = vd_handlers[type](&rq, &req, &rep);
    if (r >= 0 && type == core->crash_before_reply) {
        vlog(VLOG_WARNING, "fault injection: killed before replying to %s",
             vw_requests[type].name);
        vp_proc_kill_self();
    }
    if (r < 0) {
        core->counters.errors++;
        log_refusal(c, env.id, r, rq.why);
        vd_reply(&rq, r, NULL);
    } else if (r == 0) {
        vd_reply(&rq, 0, &rep);
    }
    bool retry = rq.freed_memory;
    vd_request_fini(&rq);
    if (retry)
        vd_waits_retry(core);
    if (core->wsets_changed)
        vd_weights_retry(core);
out:
    tree_done(msg);
}
