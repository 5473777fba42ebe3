/* Who may connect to vramd, and who may administer it: peers are judged by
 * the kernel's word (SO_PEERCRED, SO_PEERGROUPS), never by what they say. */
#ifndef VRAMD_ACCESS_H
#define VRAMD_ACCESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "config.h"

#define VD_MAX_PEER_GROUPS 64

struct vd_peer {
    uid_t uid;
    gid_t gid;
    gid_t groups[VD_MAX_PEER_GROUPS];
    int ngroups;
};

/* Reads the peer's credentials and groups from a connected socket. */
int vd_peer_read(int fd, pid_t *pid, struct vd_peer *out);
/* Root always; then the configured allow-list, or by default the daemon's
 * own user and the members of group vramd. */
bool vd_access_connect(const struct vd_config *cfg, const struct vd_peer *p);
/* Root always; then the configured admin list. */
bool vd_access_admin(const struct vd_config *cfg, const struct vd_peer *p);

#endif
