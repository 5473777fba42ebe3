/* SPDX-License-Identifier: Apache-2.0 */
/* The clients the core knows: one record per connection that was
 * admitted, from its admission (lifecycle.c) to the end of its connection.
 * A record is what the core knows of a peer beyond the ledger: who it is
 * by the kernel's word, what it said in hello, and io's handle for its
 * connection. */
#ifndef VRAMD_CLIENTS_H
#define VRAMD_CLIENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/handle.h"
#include "platform/peer.h"

struct vd_resume_acc;
struct vd_outbox;

struct vd_client {
    uint32_t id;
    void *conn;          /* io's connection */
    struct vp_peer peer; /* pid, start time (once pinned), uid, groups */
    vp_handle pin;       /* the peer's process, pinned */
    bool admin, ctl, hello;
    uint16_t version;    /* the protocol version its hello agreed on */
    bool evicted;        /* its process may not resume it */
    bool handed_off;     /* its process exited, its connection lives on */
    bool closing;        /* its connection is being closed */
    bool pinned;         /* pin taken (or tried), its process watched */
    bool recorded;       /* its process has a record in the state file */
    char name[64];
    uint32_t resumed_from;        /* the gone client it took back, 0 */
    struct vd_resume_acc *resume; /* a declaration arriving in parts */
    uint32_t held;                /* its requests waiting (hold) */
    /* Frames waiting for room on its connection, behind a reply whose
     * handles are made as the connection takes them (send.c); NULL when
     * nothing waits. */
    struct vd_outbox *outbox;
    bool close_when_sent; /* close once the outbox has gone out */
};

struct vd_clients {
    struct vd_client **v; /* by id, open addressing */
    size_t cap, n, used;  /* used counts removed entries too */
    uint32_t next_id;
};

/* A new record with the next id (0 and the ids of a state file's clients
 * are never reused); NULL when out of memory. */
struct vd_client *vd_clients_add(struct vd_clients *cs);
/* The record of a connected client, or NULL. */
struct vd_client *vd_clients_find(const struct vd_clients *cs, uint32_t id);
/* Removes and frees a record (its pin is the caller's business). */
void vd_clients_remove(struct vd_clients *cs, struct vd_client *c);
/* fn for each record, in no order; fn may not add or remove. */
void vd_clients_each(const struct vd_clients *cs,
                     void (*fn)(void *ud, struct vd_client *c), void *ud);
void vd_clients_fini(struct vd_clients *cs);

#endif
