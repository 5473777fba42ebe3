/* Peer identity on Linux: SO_PEERCRED and SO_PEERGROUPS. */
#include "peer.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proc.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

int vp_peer_of(vp_handle c, struct vp_peer *out)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt((int)c.v, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    struct vp_peer p = {.pid = cred.pid, .uid = cred.uid, .gid = cred.gid};
    gid_t groups[VP_MAX_GROUPS];
    len = sizeof(groups);
    /* Without SO_PEERGROUPS (old kernels) only the primary group counts. */
    if (getsockopt((int)c.v, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0) {
        p.ngroups = (int)(len / sizeof(gid_t));
        for (int i = 0; i < p.ngroups; i++)
            p.groups[i] = groups[i];
    }
    p.start_time = vp_proc_start_time(p.pid);
    *out = p;
    return 0;
}

uint32_t vp_self_uid(void)
{
    return (uint32_t)geteuid();
}

int vp_user_id(const char *name, uint32_t *uid)
{
    struct passwd *pw = name ? getpwnam(name) : NULL;
    if (!pw)
        return -ENOENT;
    *uid = pw->pw_uid;
    return 0;
}

int vp_group_id(const char *name, uint32_t *gid)
{
    struct group *gr = name ? getgrnam(name) : NULL;
    if (!gr)
        return -ENOENT;
    *gid = gr->gr_gid;
    return 0;
}
