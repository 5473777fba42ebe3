/* SPDX-License-Identifier: Apache-2.0 */
/* libvram's protocol layer (protocol.c): requests encoded from their typed
 * structs, replies decoded and checked against the catalogue, events
 * decoded, over the transport layer. What replies and events do to the
 * process is the state layer's: map entries wait in the client's pending
 * list for it, and events go up through the port it filled in. */
#ifndef VRAM_CLIENT_PROTOCOL_H
#define VRAM_CLIENT_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/arena.h"
#include "platform/handle.h"
#include "client/include/vram.h"
#include "gen/vram_msg.h"

/* How the protocol layer reaches the one above it (the daemon's
 * struct vd_port is the same idea): the state layer fills it in at
 * connect (events.c). */
struct vc_proto_port {
    /* An event arrived, decoded (evt: enum vw_evt_id). */
    void (*event)(vram_client *c, int evt, const void *fields);
    /* Before a request is sent or frames are read: what the layer above
     * has in flight (chunks mapped in the background) is settled, since a
     * reply or an event may touch it. */
    void (*settle)(vram_client *c);
};

/* A map entry of the reply being read, not applied yet. */
struct pending_map {
    uint64_t chunk;
    uint32_t region, slot;
    vp_handle h; /* VP_NONE: a chunk this client holds, moved */
};

/* Sends request type (enum vw_req_id) with its fields and waits for the
 * reply, decoded into rep (the type's reply struct, its arrays in a) and
 * checked against the catalogue; map entries are gathered into c->pend,
 * not applied. A refusal returns the daemon's error with its message in
 * last_error (map entries gathered all the same). */
int vc_rpc(vram_client *c, int type, const void *req, void *rep,
           struct vw_arena *a);
/* Sends a request whose reply is not waited for (its error is kept in
 * async_error). */
int vc_rpc_async(vram_client *c, int type, const void *req);
/* A request whose reply is read later (background mapping, background.c):
 * vc_rpc_send sends it and returns; vc_rpc_await, on any one thread while
 * nothing else uses the connection, reads its reply as vc_rpc does (map
 * entries into c->pend, *refused when the daemon refused it) but keeps the
 * events that come first instead of handing them up; vc_rpc_deliver then
 * hands those up through the port, in the order they came, on the thread
 * that may call the engine back (the reply is applied after them, as it
 * would be after a vc_rpc). One such request at a time. */
int vc_rpc_send(vram_client *c, int type, const void *req);
int vc_rpc_await(vram_client *c, void *rep, struct vw_arena *a, bool *refused);
int vc_rpc_deliver(vram_client *c);
/* Handles what arrived without waiting; *events counts events handled. */
int vc_rpc_poll(vram_client *c, int *events);
/* Frames (or part of one) wait in the receive buffer: a reply stopped the
 * read so that its map is applied before what followed it. */
bool vc_rpc_buffered(const vram_client *c);
/* Drops the gathered map entries, closing their handles. */
void vc_clear_pending(vram_client *c);
/* A chunk a recall took, to release (fire and forget) once the frames at
 * hand are read; and sending those releases now. */
void vc_release_queue(vram_client *c, uint64_t chunk);
void vc_send_releases(vram_client *c);

#endif
