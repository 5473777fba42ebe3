/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/requests/lifecycle.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/clients/access.h"
#include "daemon/core/requests/resume_declaration.h"
#include "daemon/core/requests/apply_effects.h"
#include "daemon/core/clients/orphans.h"
#include "daemon/log.h"
#include "platform/platform.h"
#include "daemon/core/clients/reapers.h"
#include "daemon/core/requests/send.h"
#include "daemon/core/requests/waits.h"
#include "daemon/core/requests/weight_opens.h"

/* ---- reaping ------------------------------------------------------------ */

/* The client's process can no longer touch its memory: quarantine ends.
 * recorded: it has a record in the state file (every client pinned, and
 * every gone one). */
static void reap(struct vd_core *core, uint32_t client, bool recorded)
{
    struct vl_fxlist fx = {0};
    if (vl_client_reap(core->ledger, client, &fx) == 0) {
        size_t n = 0;
        for (size_t i = 0; i < fx.n; i++)
            n += fx.v[i].kind == VL_FX_DROP;
        if (n)
            vlog(VLOG_INFO, "client %u is gone: %zu quarantined chunks back "
                 "in the pool", client, n);
        if (recorded)
            vd_state_holder_drop(core->state, client);
        vd_effects_apply(core, &fx, NULL, NULL);
        vd_waits_retry(core);
        vd_weights_retry(core);
    }
    vl_fx_free(&fx);
}

/* ---- handed-off connections --------------------------------------------- */

/* Its process exited and its connection lives on in another: closed, and
 * its memory kept as an orphan's (orphans.h). */
static void handed_off(struct vd_core *core, uint32_t client)
{
    struct vd_client *c = vd_clients_find(&core->clients, client);
    if (!c || !c->conn || c->closing)
        return;
    c->handed_off = true;
    vlog(VLOG_WARNING, "client %u (%s, pid %lld): its process exited but its "
         "connection lives on in another process; a connection cannot be "
         "handed over: closing it", c->id, c->name, (long long)c->peer.pid);
    c->closing = true;
    core->port.close(core->port.ctx, c->conn, "handed over to another process",
                     false);
}

static void orphan_free(struct vd_core *core, uint32_t client)
{
    reap(core, client, true);
}

void vd_lifecycle_reap_orphan(struct vd_core *core, uint32_t client)
{
    vd_handoff_forget(core, client);
    reap(core, client, true);
}

void vd_lifecycle_reap_now(struct vd_core *core, struct vd_reaper *rp)
{
    uint32_t client = vd_reaper_client(rp);
    vd_reapers_remove(core, rp);
    reap(core, client, true);
}

int vd_lifecycle_watch(struct vd_core *core, uint32_t client, int64_t pid,
                       vp_handle pin, uint64_t start_time, bool resumable,
                       const char *name)
{
    return vd_reapers_add(core, client, pid, pin, start_time, resumable, name,
                          vd_lifecycle_reap_now);
}

/* ---- admission ---------------------------------------------------------- */

struct uid_count {
    uint32_t uid, n;
};

static void count_uid(void *ud, struct vd_client *c)
{
    struct uid_count *u = ud;
    u->n += c->peer.uid == u->uid;
}

static uint32_t connections_of(struct vd_core *core, uint32_t uid)
{
    struct uid_count u = {uid, 0};
    vd_clients_each(&core->clients, count_uid, &u);
    return u.n;
}

int vd_core_client_open(struct vd_core *core, void *conn,
                        const struct vp_peer *peer, uint32_t *id,
                        struct vd_refusal *ref)
{
    if (!vd_access_connect(&core->cfg, peer)) {
        char who[128], gid[24] = ""; /* "user " and a SID string */
        vp_user_describe(peer->uid, who, sizeof(who));
        if (vp_ids_numeric())
            snprintf(gid, sizeof(gid), " (gid %u)", (unsigned)peer->gid);
        snprintf(ref->message, sizeof(ref->message), "%s%s may not use vramd: "
                 "not in its access list (access.allow)", who, gid);
        vlog(VLOG_WARNING, "refusing pid %lld: %s", (long long)peer->pid,
             ref->message);
        core->counters.errors++;
        ref->err = -EACCES;
        return ref->err;
    }
    bool admin = vd_access_admin(&core->cfg, peer);
    /* Above limits.clients, a few slots are kept for admins, so that an
     * operator can always look and evict; and no one user may hold more
     * than its share of connections. */
    size_t n = core->clients.n;
    if (n >= (size_t)core->cfg.max_clients + (admin ? core->cfg.admin_connections : 0)) {
        vlog_limited(&core->admission_limit, VLOG_WARNING, "refusing pid %lld "
                     "(uid %u): limit of %u clients reached%s",
                     (long long)peer->pid, (unsigned)peer->uid,
                     core->cfg.max_clients,
                     admin ? ", and the admins' slots are taken" : "");
        snprintf(ref->message, sizeof(ref->message), "too many clients connected "
                 "(limits.clients %u%s)", core->cfg.max_clients,
                 admin ? " and limits.admin_connections" : "");
        ref->err = -E2BIG;
        return ref->err;
    }
    uint32_t mine = admin ? 0 : connections_of(core, peer->uid);
    if (!admin && mine >= core->cfg.connections_per_user) {
        vlog_limited(&core->admission_limit, VLOG_WARNING, "refusing pid %lld: "
                     "uid %u has %u connections (limits.connections_per_user)",
                     (long long)peer->pid, (unsigned)peer->uid, mine);
        snprintf(ref->message, sizeof(ref->message), "uid %u has %u connections "
                 "open, its limit (limits.connections_per_user)",
                 (unsigned)peer->uid, mine);
        ref->err = -E2BIG;
        return ref->err;
    }
    struct vd_client *c = vd_clients_add(&core->clients);
    if (!c) {
        snprintf(ref->message, sizeof(ref->message), "out of memory");
        ref->err = -ENOMEM;
        return ref->err;
    }
    c->conn = conn;
    c->peer = *peer;
    c->admin = admin;
    /* Its process is pinned, its start time read and its record made in
     * the state file before its first request that may give it memory
     * (vd_lifecycle_pin), not here: a client that only looks (vramctl)
     * costs no pidfd, no watch, no start-time read and no record. */
    snprintf(c->name, sizeof(c->name), "pid-%lld", (long long)peer->pid);
    vd_state_next_client(core->state, core->clients.next_id + 1);
    int e = vl_client_add_tenant(core->ledger, c->id, peer->uid, admin); /* R16 */
    if (e < 0) {
        vlog_limited(&core->admission_limit, VLOG_WARNING, "refusing pid "
                     "%lld: %s", (long long)peer->pid, vl_why(core->ledger));
        snprintf(ref->message, sizeof(ref->message), "%s", vl_why(core->ledger));
        ref->err = e;
        vd_clients_remove(&core->clients, c);
        return ref->err;
    }
    vlog(VLOG_DEBUG, "client %u connected (pid %lld, uid %u, gid %u%s)", c->id,
         (long long)peer->pid, (unsigned)peer->uid, (unsigned)peer->gid,
         c->admin ? ", admin" : "");
    *id = c->id;
    return 0;
}

int vd_lifecycle_pin(struct vd_core *core, struct vd_client *c)
{
    if (c->pinned)
        return 0;
    /* A pid can be reused, a pin cannot: the pin is the process that
     * connected, by the connection (never by pid alone), and its start
     * time is read with it, checked against it (vp_peer_pin says why the
     * read is sound). From here on every user of the start time has it:
     * the state file's record below, the reaper at disconnect, resume, the
     * looks for kept memory. Gone by now: the connection lives on in
     * another process. */
    vp_handle pin = VP_NONE;
    uint64_t start = 0;
    int e = core->port.pin(core->port.ctx, c->conn, &c->peer, &pin, &start);
    if (e == -ESRCH) {
        c->pinned = true; /* tried: its connection is being closed */
        handed_off(core, c->id);
        return -ESRCH;
    }
    /* No pin (out of fds): it may still get memory, which then returns at
     * once when it goes (vd_core_client_closed). Its start time read
     * without a pin to check it against is what a read at connect was:
     * another process's only if its pid was reused, and then a restarted
     * vramd waits for that process, as it would with none. */
    if (e < 0)
        start = c->peer.start_time ? c->peer.start_time
                                   : vp_proc_start_time(c->peer.pid);
    /* Recorded before it can hold anything: a restarted vramd must know.
     * With the table full (gone clients wait in it too) it gets nothing
     * now, and may ask again once some are reaped. */
    if (vd_state_holder_add(core->state, c->id, c->peer.pid, start,
                            c->peer.uid, c->name) < 0) {
        vp_close(&pin);
        vlog_limited(&core->admission_limit, VLOG_WARNING, "client %u (%s, "
                     "pid %lld) gets no memory: the state file's holder table "
                     "is full", c->id, c->name, (long long)c->peer.pid);
        return -E2BIG;
    }
    c->recorded = true;
    c->pinned = true;
    c->pin = pin;
    c->peer.start_time = start;
    if (vp_ok(c->pin))
        vd_handoff_watch(core, c->id, c->pin, handed_off);
    return 0;
}

void vd_lifecycle_evict(struct vd_core *core, struct vd_client *c,
                        const char *why)
{
    c->evicted = true; /* its process may not take its memory back */
    vd_state_holder_evicted(core->state, c->id);
    if (c->conn && !c->closing) {
        c->closing = true;
        core->port.close(core->port.ctx, c->conn, why, false);
    }
}

/* ---- the end of a connection -------------------------------------------- */

void vd_core_client_closed(struct vd_core *core, uint32_t id, const char *why)
{
    struct vd_client *c = vd_clients_find(&core->clients, id);
    if (!c)
        return;
    core->counters.disconnects++;
    /* A control client's end is routine (vramctl runs often). */
    vlog(strcmp(why, "disconnected") ? VLOG_WARNING : c->ctl ? VLOG_DEBUG
                                                             : VLOG_INFO,
         "client %u (%s, pid %lld): %s", c->id, c->name, (long long)c->peer.pid,
         why);
    c->conn = NULL;
    if (c->pinned)
        vd_handoff_unwatch(core, id);
    vd_waits_drop_client(core, c); /* its held requests end with it */
    vd_weights_drop_client(core, id);
    struct vl_client_view cv;
    /* R17: a weight set it maps is memory its process holds too. */
    uint32_t held = vl_client_view(core->ledger, id, &cv) ? cv.chunks + cv.wsets
                                                          : 0;
    struct vl_fxlist fx = {0};
    vl_client_disconnect(core->ledger, id, &fx);
    vd_effects_apply(core, &fx, NULL, NULL);
    vl_fx_free(&fx);
    /* What it holds stays its own until its process is gone or comes back
     * (R13); when vramd stops, the state file keeps it for the next. A
     * client holding no memory goes at once (its ranges and stage ids with
     * it: a process that reconnects usually finds them free). */
    bool wait = core->stopping;
    if (!wait && held && c->handed_off &&
        vd_handoff_orphan(core, id, orphan_free) == 0) {
        wait = true;
        vlog(VLOG_WARNING, "client %u: %u chunks quarantined until no process "
             "holds them (or an admin evicts it)", id, held);
    }
    if (!wait && held && vp_ok(c->pin) &&
        vd_lifecycle_watch(core, id, c->peer.pid, c->pin, c->peer.start_time,
                           !c->evicted, c->name) == 0) {
        c->pin = VP_NONE;
        wait = true;
        vlog(VLOG_INFO, "client %u: %u chunks quarantined until pid %lld "
             "exits or comes back", id, held, (long long)c->peer.pid);
    }
    if (!wait) {
        if (held && !vp_ok(c->pin))
            vlog(VLOG_WARNING, "client %u: pid %lld could not be pinned (no "
                 "pidfd); its %u chunks return at once", id,
                 (long long)c->peer.pid, held);
        reap(core, id, c->recorded);
    }
    vd_resume_acc_free(c->resume);
    vd_send_drop(c); /* what never went: its chunks stay quarantined */
    vp_close(&c->pin);
    vd_clients_remove(&core->clients, c);
    vd_waits_retry(core);
    vd_weights_retry(core);
}

bool vd_core_client_greeted(struct vd_core *core, uint32_t id)
{
    struct vd_client *c = vd_clients_find(&core->clients, id);
    return c && c->hello;
}
