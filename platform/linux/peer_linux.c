/* SPDX-License-Identifier: Apache-2.0 */
/* peer.h's connections on Linux: who connected by SO_PEERCRED and
 * SO_PEERGROUPS, and the process pinned by SO_PEERPIDFD (Linux 6.5), or by
 * pid and start time before it. The accounts half of peer.h is POSIX's
 * (platform/posix/peer_posix.c). */
#include "platform/peer.h"

#include <errno.h>
#include <sys/socket.h>

#include "platform/proc.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* Whether this kernel gives a connection's peer as a pidfd (SO_PEERPIDFD,
 * Linux 6.5): 1 yes, -1 no, 0 not known yet. Found on the first connection
 * and the same for every later one. */
static int peer_pidfd;

/* The pidfd of the process that connected c: the kernel's own reference to
 * it, taken at connect(), so never a process that reused its pid (and
 * close-on-exec: the kernel makes every pidfd so). */
static int peer_pidfd_of(vp_handle c, vp_handle *out)
{
    int fd = -1;
    socklen_t len = sizeof(fd);
    if (getsockopt((int)c.v, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) < 0) {
        int e = -errno;
        /* Unknown option: a kernel before 6.5. */
        if (e == -ENOPROTOOPT || e == -EINVAL)
            __atomic_store_n(&peer_pidfd, -1, __ATOMIC_RELAXED);
        return e;
    }
    __atomic_store_n(&peer_pidfd, 1, __ATOMIC_RELAXED);
    out->v = fd;
    return 0;
}

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
    /* Without SO_PEERPIDFD a later pin goes by pid, and only the start
     * time read now tells whether that pid still names this process then
     * (vp_peer_pin). With it the read waits for the pin: a client that
     * never asks for memory costs no /proc read. The first connection
     * finds out which. */
    int known = __atomic_load_n(&peer_pidfd, __ATOMIC_RELAXED);
    if (known == 0) {
        vp_handle probe = VP_NONE;
        if (peer_pidfd_of(c, &probe) == 0)
            vp_close(&probe);
        known = __atomic_load_n(&peer_pidfd, __ATOMIC_RELAXED);
    }
    if (known <= 0)
        p.start_time = vp_proc_start_time(p.pid);
    *out = p;
    return 0;
}

int vp_peer_pin(vp_handle c, const struct vp_peer *p, vp_handle *pin_out,
                uint64_t *start_out)
{
    /* A peer whose pid this namespace cannot see could never be watched or
     * found again by pid (state file, reapers): refused, as a pin by pid
     * would be. */
    if (p->pid <= 0)
        return -ESRCH;
    vp_handle pin = VP_NONE;
    int e = peer_pidfd_of(c, &pin);
    if (e == -ENOPROTOOPT || e == -EINVAL)
        e = vp_proc_pin(p->pid, &pin); /* checked by start time below */
    if (e < 0)
        return e;
    uint64_t start = vp_proc_start_time(p->pid);
    /* The pin names the right process, but /proc/PID is read by pid: the
     * start time read is the pinned process's only if PID named it during
     * the read. It did if that process is still running after the read: a
     * pid is given to another process only once its own has exited and
     * been reaped (an open pidfd does not hold the number). So: read
     * first, then check that it has not exited. Without SO_PEERPIDFD the
     * pin went by pid: the start time read at connect must match too. */
    if (vp_proc_exited(pin) || (p->start_time && start != p->start_time)) {
        vp_close(&pin);
        return -ESRCH;
    }
    *pin_out = pin;
    *start_out = start;
    return 0;
}
