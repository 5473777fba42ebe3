/* SPDX-License-Identifier: Apache-2.0 */
/* The client's record (struct vram_client, opaque in vram.h): one per
 * connection to vramd, its fields grouped by the layer that owns them.
 * Each layer's functions are declared in its own headers (transport.h,
 * protocol.h, the state layer's and the API's); a layer reads what lies
 * below it here, and reaches above only through the port it was given. */
#ifndef VRAM_CLIENT_RECORD_H
#define VRAM_CLIENT_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/arena.h"
#include "client/lib/client_state.h"
#include "platform/handle.h"
#include "client/lib/protocol.h"
#include "platform/thread.h"
#include "client/include/vram.h"
#include "proto/wire.h"

struct vc_mapper;
struct vc_wset;

struct vram_client {
    /* ---- what every layer uses (error.c) */
    char last_error[512];
    int timeout_ms;

    /* ---- transport: the connection (transport.c) */
    vp_handle h;
    struct vw_wire wire;
    bool broken;
    bool blocking;       /* the socket blocks: replies are awaited in recv */

    /* ---- protocol: requests, replies, events (protocol.c) */
    const struct vc_proto_port *port; /* the state layer's (events.c) */
    uint64_t next_id;
    uint16_t version;    /* the protocol version hello agreed on; 0 before */
    /* the request being waited for */
    uint64_t await_id;
    int await_type;
    void *await_rep;               /* its reply, decoded here */
    struct vw_arena *await_arena;
    bool await_done;
    uint32_t await_parts;          /* its frames so far that said more */
    int await_err;                 /* the daemon refused it */
    struct pending_map *pend;      /* its map entries, not applied yet */
    size_t npend, cappend;
    /* a request sent by vc_rpc_send, its reply not read yet */
    uint64_t later_id;
    int later_type;
    /* events read while vc_rpc_await read that reply: their JSON, kept
     * for vc_rpc_deliver (no event carries handles) */
    bool hold_events;
    struct vc_held_event {
        char *text;
        size_t len;
    } *held;
    size_t nheld, capheld;
    /* chunks a recall took, to release without waiting */
    uint64_t *release_q;
    size_t nrelease, caprelease;
    /* fire-and-forget requests (releases answering recalls) */
    uint64_t async_ids[64];
    size_t nasync;
    int async_error;

    /* ---- state: what this process holds and maps (client_state.h) */
    const struct vc_mapper *mapper;
    void *mapper_state;
    bool peer_access;
    /* The daemon's word on peer access (learnt at the first registration
     * of a client that asks for it): bit k of dev_peers[j]: device j may
     * access device k's chunks. None is used that vramd does not list. */
    uint64_t dev_peers[64];
    bool peers_known;
    struct vc_chunk_table chunks;
    struct vc_region **regions;
    size_t nregions;
    struct vc_stage *stages;
    size_t nstages;
    bool tables_changed;  /* a chunk was mapped or unmapped since the
                             figures were last made current */
    /* new chunks being mapped in the background (background.c) */
    struct vc_bg bg;
    vram_event_fn cb;     /* the engine's callback */
    void *cb_user;

    /* ---- the API: the client itself */
    uint32_t id;
    char backend[16];
    /* how to connect again (connect.c) */
    char path[108];
    char name[64];
    bool ctl;
    int reconnect_ms;  /* -1: never */
    bool reconnecting;
    uint32_t resume_from;    /* the id whose memory we hold, until a resume
                                is answered */
    uint32_t resume_sent_as; /* our id when a resume broke half-way */
    struct vc_wset *wsets;   /* open weight sets (weight_sets.c) */
    size_t nwsets;
    /* calls in progress on this thread (call_frame.c): state is brought up
     * to date and BUDGET_CHANGED told when the outermost one returns */
    int depth;
    /* the event thread (event_thread.c) */
    vp_mutex *lock;
    vp_thread *thread;
    bool thread_stop;
    vp_handle thread_h;  /* the connection the thread waits on, or VP_NONE */
    vp_handle retired;   /* a replaced connection the thread may still wait
                            on (Windows: connect.c), closed by the thread */
};

#endif
