/* SPDX-License-Identifier: Apache-2.0 */
/* The state file: what a restarted vramd must know so that it never grants
 * memory a live process still maps (R13 in ledger/README.md). For each client:
 * its pid and the process's start time; for each chunk: its holder and what
 * it counts as; the address ranges of regions and the ad-hoc stage ids
 * taken. The file is a shared mapping next to the socket (in /run: memory,
 * gone at reboot, when every holder is gone too), updated in place by the
 * ledger's observer: a store per change, nothing on the request path waits
 * for a disk. A crash loses no store already made. */
#ifndef VRAMD_STATE_H
#define VRAMD_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/state/format.h"
#include "platform/handle.h"

struct vl_ledger;
struct vd_state;

/* What the state file is laid out for. */
struct vd_state_params {
    struct vl_ledger *ledger;
    uint32_t max_clients, max_regions_per_client; /* sizes its tables */
    const char *uuid[64]; /* per device index: the backend's, or NULL */
    bool discard; /* the operator said to start without the old file */
};

/* The holders a restarted daemon found alive, for the caller to watch. */
struct vd_orphan {
    uint32_t client;
    int64_t pid;
    vp_handle pin;
    uint64_t starttime;
    uint32_t uid;
    bool resumable;
    char name[48]; /* as it said hello ("" from an older file) */
};

/* Reads what a previous vramd left at path (if anything), rebuilds the
 * gone clients of live processes into prm->ledger, and starts a new file
 * there with the observer installed. *orphans (caller frees) lists them.
 * Fails with -EBADMSG, saying why in the log, when the file is not ours,
 * fails its check, is inconsistent, or records live holders under a
 * different device layout: granting anything then could hand out memory
 * they map. With prm->discard the old file is set aside unread. */
int vd_state_open(const struct vd_state_params *prm, const char *path,
                  struct vd_orphan **orphans, size_t *norphans,
                  struct vd_state **out);
void vd_state_close(struct vd_state *st);

/* A connected client's process, recorded before it can hold anything, with
 * its name (NULL: none; cut to 47 bytes) for vramctl while it is gone.
 * -ENOSPC when the holder table is full. */
int vd_state_holder_add(struct vd_state *st, uint32_t client, int64_t pid,
                        uint64_t starttime, uint32_t uid, const char *name);
/* The name it said hello with (cut to 47 bytes). */
void vd_state_holder_name(struct vd_state *st, uint32_t client, const char *name);
/* The client is reaped: nothing of it is left. */
void vd_state_holder_drop(struct vd_state *st, uint32_t client);
/* An evicted client's process may not take its memory back. */
void vd_state_holder_evicted(struct vd_state *st, uint32_t client);
/* R17: a sealed weight set the previous vramd recorded, with the gone
 * clients (of those restored) that map it. */
#define VD_STATE_FOUND_USERS 256
struct vd_state_found_wset {
    struct vd_state_wset rec;
    uint32_t users[VD_STATE_FOUND_USERS];
    uint32_t nusers;
};
/* What vd_state_open found of the sets (valid until vd_state_found_free
 * or the close). */
void vd_state_found_wsets(const struct vd_state *st,
                          const struct vd_state_found_wset **v, size_t *n);
void vd_state_found_free(struct vd_state *st);
void vd_state_next_client(struct vd_state *st, uint32_t next);
uint32_t vd_state_first_client(const struct vd_state *st);

#endif
