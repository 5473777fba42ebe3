/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's core: everything between the connections (io/) and the
 * pieces that keep state (the ledger, the backend, the state file). This
 * header holds only its shared state; startup.c makes and ends it.
 *
 * The core never sees a socket. io/ hands it connections (lifecycle.h) and
 * frames (dispatch.h); the core answers through the port that io/
 * registered, and asks it to close a connection, which io/ does at the end
 * of the loop turn, never inside a send. Inside the core, dependencies run
 * one way too:
 *
 *   dispatch -> handlers/ -> lifecycle, status, request
 *            -> waits -> reply -> effects -> recalls -> clients
 *
 * A request's context (request.h) gathers the ledger's effects; reply.c
 * applies them once and sends the reply once. */
#ifndef VRAMD_CORE_H
#define VRAMD_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/backends/backend.h"
#include "daemon/core/clients/clients.h"
#include "daemon/config.h"
#include "platform/handle.h"
#include "daemon/ledger/ledger.h"
#include "daemon/log.h"
#include "daemon/state/state.h"

/* The frame's handles are for mapping read-only (a sealed weight set's, to
 * a reader): where the OS lets a handle carry its access (Windows
 * sections), the client gets one that cannot map them writable. */
#define VD_SEND_READ_ONLY 1u

/* How the core reaches connections: io/ fills this in. conn is io's own
 * pointer for a connection (struct vd_client.conn). */
struct vd_port {
    void *ctx;
    /* Queues one frame; takes the handles. 0, or a negative errno when the
     * connection cannot take it (it is being closed then). flags:
     * VD_SEND_READ_ONLY. */
    int (*send)(void *ctx, void *conn, const char *payload, size_t len,
                vp_handle *hs, int n, unsigned flags);
    /* Closes the connection at the end of this loop turn (after what is
     * queued went out, when after_flush); io/ then tells the core with
     * vd_core_client_closed. */
    void (*close)(void *ctx, void *conn, const char *why, bool after_flush);
    /* Handles the connection takes now before the core should wait for it
     * to drain (io/ then calls vd_core_client_writable): what a grant of
     * thousands of chunks holds in the daemon at once. */
    int (*room)(void *ctx, void *conn);
    /* Pins the process that opened the connection (peer: what io/ said of
     * it at accept) and reads its start time: vp_peer_pin's results. Asked
     * only when a client first may get memory, so that a connection that
     * only looks costs no pidfd and no start-time read. */
    int (*pin)(void *ctx, void *conn, const struct vp_peer *peer,
               vp_handle *pin, uint64_t *start_time);
    /* The protocol version the connection's frames carry from now on (its
     * hello's). */
    void (*speak)(void *ctx, void *conn, uint16_t version);
};

struct vd_counters {
    uint64_t grants, moves, recalls, recalls_missed, releases, errors,
        disconnects, protocol_errors, kept_after_release;
    uint64_t weights_hits, weights_misses, weights_evictions; /* R17 */
};

struct vd_reaper;
struct vd_handoff;
struct vd_orphan_list;
struct vd_held;
struct vd_recall;
struct vd_kept;
struct vd_wset_rec;
struct vp_keeper;
struct vd_wwait;

struct vd_core {
    uv_loop_t *loop;
    struct vd_config cfg;
    char config_path[4096]; /* "" without a file */
    struct vl_ledger *ledger;
    struct vd_backend *backend;
    struct vd_state *state;
    struct vd_state_params state_params;
    struct vd_port port;
    struct vd_clients clients;
    struct vd_reaper *reapers;   /* gone clients whose process lives */
    struct vd_handoff *handoffs; /* connected clients' processes, watched */
    struct vd_orphan_list *orphans; /* gone clients of handed-off
                                       connections */
    struct vd_held *held;        /* KV grows waiting for recalls (FIFO) */
    struct vd_recall *recalls;   /* recall deadlines */
    struct vd_kept *kept;        /* looks for released memory (still_held.c) */
    struct vd_wset_rec *wsets;   /* weight sets' handles (weight_records.c) */
    size_t nwsets, wsets_cap;
    struct vd_wwait *wwaits;     /* opens waiting for a seal (weight_opens.c) */
    bool wsets_changed;          /* a set went: waiting opens may go on */
    struct vp_keeper *keeper;    /* sealed sets' handles across restarts */
    struct vd_counters counters;
    bool budget_pending[VL_MAX_STAGES]; /* events due after the reply */
    uint32_t budget_ids[64];            /* which, in order (when they fit) */
    uint32_t budget_npending;           /* how many are set */
    struct vlog_limit admission_limit; /* refusals at admission, logged */
    bool discard_state; /* --discard-state: the old state file unread */
    bool check_invariants; /* vl_check after each change of the ledger */
    bool check_replies;    /* every frame sent is decoded again (send.c) */
    bool stopping;
    vp_handle lock;
    char lock_path[4200], state_path[4200];
    uint64_t started_ns;
    uint64_t last_grant_ns; /* the pool refill waits for grant bursts */
    uv_idle_t refill_idle;
    uv_timer_t refill_timer;
    bool refill_started;
    /* Fault injection for tests (VRAMD_TEST_CRASH_BEFORE_REPLY=<type>):
     * vramd kills itself after the ledger committed the first such request
     * and before any of its effects or its reply went out, which is the
     * window a real crash can hit. Unset in production. */
    int crash_before_reply; /* enum vw_req_id, or -1 */
    /* ... and VRAMD_TEST_CRASH_MID_REPLY=<type>: after the second frame of
     * the first such reply that takes more, the window where an engine
     * holds part of a reply. */
    int crash_mid_reply;
};

#endif
