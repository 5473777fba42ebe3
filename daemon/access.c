#include "access.h"

#include <errno.h>
#include <grp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

int vd_peer_read(int fd, pid_t *pid, struct vd_peer *out)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    struct vd_peer p = {.uid = cred.uid, .gid = cred.gid};
    len = sizeof(p.groups);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, p.groups, &len) == 0)
        p.ngroups = (int)(len / sizeof(gid_t));
    /* Without SO_PEERGROUPS (old kernels) only the primary group counts. */
    *pid = cred.pid;
    *out = p;
    return 0;
}

static bool in_list(const struct vd_access_list *l, const struct vd_peer *p)
{
    for (uint32_t i = 0; i < l->nuids; i++)
        if (l->uids[i] == p->uid)
            return true;
    for (uint32_t i = 0; i < l->ngids; i++) {
        if (l->gids[i] == p->gid)
            return true;
        for (int k = 0; k < p->ngroups; k++)
            if (l->gids[i] == p->groups[k])
                return true;
    }
    return false;
}

bool vd_access_connect(const struct vd_config *cfg, const struct vd_peer *p)
{
    if (p->uid == 0)
        return true;
    if (cfg->allow_given)
        return in_list(&cfg->allow, p);
    struct vd_access_list def = {.uids = {geteuid()}, .nuids = 1};
    struct group *g = getgrnam("vramd");
    if (g) {
        def.gids[0] = g->gr_gid;
        def.ngids = 1;
    }
    return in_list(&def, p);
}

bool vd_access_admin(const struct vd_config *cfg, const struct vd_peer *p)
{
    return p->uid == 0 || in_list(&cfg->admin, p);
}
