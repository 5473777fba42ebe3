/* SPDX-License-Identifier: Apache-2.0 */
/* The fd store on Linux: systemd's sd_notify protocol, spoken directly
 * (a datagram to $NOTIFY_SOCKET): FDSTORE=1 and FDSTOREREMOVE=1 messages to
 * the manager, $FDSTORE saying how many it keeps.
 *
 * FDPOLL=0 goes with every fd (systemd 246 and later; 252 has it): by
 * default the manager drops a stored fd as soon as poll() reports POLLHUP
 * or POLLERR on it, which suits sockets, not memory. What a driver's
 * exported allocation reports to poll() is the driver's business; vramd
 * removes its handles itself and wants no other reason to lose them. */
#include "platform/posix/keeper_fdstore.h"
#include "platform/posix/keeper_wire.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "platform/keeper.h"

int vpx_fdstore_usable(unsigned *max, char *note, size_t len)
{
    const char *ns = getenv("NOTIFY_SOCKET"), *fs = getenv("FDSTORE");
    if (!ns || !ns[0]) {
        snprintf(note, len, "no service manager ($NOTIFY_SOCKET is not set)");
        return 0;
    }
    if ((ns[0] != '/' && ns[0] != '@') ||
        strlen(ns) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        snprintf(note, len, "$NOTIFY_SOCKET is not a socket's path");
        return 0;
    }
    char *end = NULL;
    long v = fs && fs[0] ? strtol(fs, &end, 10) : 0;
    if (!fs || !fs[0] || *end || v <= 0) {
        snprintf(note, len, "$NOTIFY_SOCKET is set but $FDSTORE is not a "
                 "count above 0, so the unit stores no fds (it needs "
                 "FileDescriptorStoreMax=, and Environment=FDSTORE= before "
                 "systemd 254); a holder in the unit's cgroup stops with "
                 "the unit");
        return 0;
    }
    *max = v > (1l << 20) ? 1u << 20 : (unsigned)v;
    snprintf(note, len, "$FDSTORE=%u", *max);
    return 1;
}

int vpx_fdstore_socket(char *why, size_t whylen)
{
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        snprintf(why, whylen, "socket: %s", strerror(errno));
        return -1;
    }
    /* A manager too busy to take a message blocks the sender; not for
     * ever. */
    struct timeval tv = {.tv_sec = VP_KEEPER_TIMEOUT_MS / 1000};
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return s;
}

static int send_state(int s, const char *state, int fd, char *why,
                      size_t whylen)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = path ? strlen(path) : 0;
    if (!len || len >= sizeof(sa.sun_path)) {
        snprintf(why, whylen, "$NOTIFY_SOCKET is gone from the environment");
        return -ENOTCONN;
    }
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace */
    ssize_t n = vpx_send_fd(s, &sa,
                            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len),
                            state, strlen(state), fd);
    if (n < 0) {
        int e = (int)n;
        snprintf(why, whylen, "the service manager (%s) did not take the "
                 "message: %s", path, strerror(-e));
        return e;
    }
    return 0;
}

int vpx_fdstore_put(int s, const char *name, int fd, char *why,
                    size_t whylen)
{
    char state[128];
    snprintf(state, sizeof(state), "FDSTORE=1\nFDNAME=%s\nFDPOLL=0", name);
    return send_state(s, state, fd, why, whylen);
}

int vpx_fdstore_remove(int s, const char *name, char *why, size_t whylen)
{
    char state[128];
    snprintf(state, sizeof(state), "FDSTOREREMOVE=1\nFDNAME=%s", name);
    return send_state(s, state, -1, why, whylen);
}
