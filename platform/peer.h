/* Who is at the other end of a connection, by the kernel's word
 * (SO_PEERCRED and SO_PEERGROUPS on Linux; the pipe client's token on
 * Windows), never by what the peer says; and account names. */
#ifndef VRAM_PLATFORM_PEER_H
#define VRAM_PLATFORM_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "handle.h"

#define VP_MAX_GROUPS 64

struct vp_peer {
    int64_t pid;
    uint64_t start_time; /* of the process: with pid it names one process
                            for good; 0 when unknown */
    uint32_t uid, gid;
    uint32_t groups[VP_MAX_GROUPS];
    int ngroups;
};

/* The identity of the process that connected c. */
int vp_peer_of(vp_handle c, struct vp_peer *out);

/* This process's effective user. */
uint32_t vp_self_uid(void);
/* Account lookups: 0, or -ENOENT when there is no such user or group. */
int vp_user_id(const char *name, uint32_t *uid);
int vp_group_id(const char *name, uint32_t *gid);

#endif
