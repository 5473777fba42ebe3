/* SPDX-License-Identifier: Apache-2.0 */
/* Who is at the other end of a connection, by the kernel's word
 * (SO_PEERCRED and SO_PEERGROUPS on Linux; the pipe client's token on
 * Windows), never by what the peer says; and account names. */
#ifndef VRAM_PLATFORM_PEER_H
#define VRAM_PLATFORM_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/handle.h"

#define VP_MAX_GROUPS 64

struct vp_peer {
    int64_t pid;
    /* Of the process: with pid it names one process for good; 0 when
     * unknown. vp_peer_of reads it only where the kernel cannot name the
     * connecting process later (Linux before 6.5: no SO_PEERPIDFD), for
     * vp_peer_pin to check against; else 0, and vp_peer_pin reads it: most
     * connections (vramctl) never need it, and it costs a read of /proc. */
    uint64_t start_time;
    uint32_t uid, gid;
    uint32_t groups[VP_MAX_GROUPS];
    int ngroups;
};

/* The identity of the process that connected c. */
int vp_peer_of(vp_handle c, struct vp_peer *out);
/* Pins the process that connected c (p: what vp_peer_of said of it) and
 * reads its start time: never another process that took its pid since it
 * connected (without SO_PEERPIDFD: since vp_peer_of read it). 0 with *pin
 * (the caller closes it) and *start_time (0 where it cannot be read);
 * -ESRCH when that process is gone (its connection may live on in
 * another); another negative errno when it cannot be pinned (-EMFILE). */
int vp_peer_pin(vp_handle c, const struct vp_peer *p, vp_handle *pin,
                uint64_t *start_time);

/* This process's effective user. */
uint32_t vp_self_uid(void);
/* Account lookups: 0, or -ENOENT when there is no such user or group. On
 * Windows a name is an account name or a SID string ("S-1-5-32-545"), and
 * the number is the one vramd gives that SID (identity.h's vp_sid_id). */
int vp_user_id(const char *name, uint32_t *uid);
int vp_group_id(const char *name, uint32_t *gid);
/* Whether users and groups have numbers of the system's own (POSIX uids
 * and gids) that a configuration may give as numbers. False on Windows:
 * there the numbers are vramd's for SIDs, and mean nothing outside it. */
bool vp_ids_numeric(void);
/* The user of that number in words for a message: "uid 1000" (POSIX),
 * "user S-1-5-21-..." (Windows). */
void vp_user_describe(uint32_t uid, char *buf, size_t len);

#endif
