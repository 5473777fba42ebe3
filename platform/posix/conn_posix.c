/* SPDX-License-Identifier: Apache-2.0 */
/* Connections on POSIX: Unix stream sockets, with handles as SCM_RIGHTS. */
#include "platform/conn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

int vp_dial(const char *path, vp_handle *out)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    out->v = fd;
    return 0;
}

long vp_send(vp_handle c, const void *buf, size_t len, const vp_handle *hs,
             int n)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * VP_RECV_MAX_HANDLES)];
    } ctl;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n < 0 || n > VP_RECV_MAX_HANDLES)
        return -E2BIG;
    if (n > 0) {
        memset(&ctl, 0, sizeof(ctl));
        msg.msg_control = ctl.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
        int *p = (int *)(void *)CMSG_DATA(cm);
        for (int i = 0; i < n; i++)
            p[i] = (int)hs[i].v;
    }
    ssize_t r;
    do {
        r = sendmsg((int)c.v, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    if (r < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    return (long)r;
}

long vp_recv(vp_handle c, void *buf, size_t len, vp_handle *hs, int max,
             int *nh, int flags, char *why, size_t whylen)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * VP_RECV_MAX_HANDLES)];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = ctl.buf,
    };
    *nh = 0;
    if (max < 0 || max > VP_RECV_MAX_HANDLES)
        max = VP_RECV_MAX_HANDLES;
    /* Room for max fds only: more is cut control data (MSG_CTRUNC). */
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)(max ? max : 1));
    ssize_t r;
    do {
        r = recvmsg((int)c.v, &msg,
                    ((flags & VP_RECV_WAIT) ? 0 : MSG_DONTWAIT) | MSG_CMSG_CLOEXEC);
    } while (r < 0 && errno == EINTR);
    if (r < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;

    int got = 0, closed = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *p = (int *)(void *)CMSG_DATA(cm);
        for (size_t i = 0; i < k; i++) {
            if (got < max) {
                hs[got++].v = p[i];
            } else {
                close(p[i]);
                closed++;
            }
        }
    }
    if ((msg.msg_flags & MSG_CTRUNC) || closed) {
        for (int i = 0; i < got; i++)
            vp_close(&hs[i]);
        if (msg.msg_flags & MSG_CTRUNC) {
            snprintf(why, whylen,
                     "control data truncated (MSG_CTRUNC): too many fds, a "
                     "full fd table or a denied fd; %d fds received and "
                     "closed", got + closed);
            return -EPROTO;
        }
        snprintf(why, whylen, "%d fds in one receive, at most %d are taken",
                 got + closed, max);
        return -E2BIG;
    }
    *nh = got;
    return (long)r;
}

int vp_conn_set_blocking(vp_handle c, bool blocking)
{
    int fl = fcntl((int)c.v, F_GETFL);
    if (fl < 0)
        return -errno;
    fl = blocking ? fl & ~O_NONBLOCK : fl | O_NONBLOCK;
    return fcntl((int)c.v, F_SETFL, fl) < 0 ? -errno : 0;
}

bool vp_conn_blocking(vp_handle c)
{
    int fl = fcntl((int)c.v, F_GETFL);
    return fl >= 0 && !(fl & O_NONBLOCK);
}

int vp_conn_set_recv_timeout(vp_handle c, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return setsockopt((int)c.v, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0
               ? -errno
               : 0;
}

int vp_conn_peer_path(vp_handle c, char *buf, size_t len)
{
    struct sockaddr_un sa;
    socklen_t salen = sizeof(sa);
    if (getpeername((int)c.v, (struct sockaddr *)&sa, &salen) < 0)
        return -errno;
    if (sa.sun_family != AF_UNIX || salen <= offsetof(struct sockaddr_un, sun_path) ||
        !sa.sun_path[0])
        return -ENOENT;
    snprintf(buf, len, "%.*s", (int)sizeof(sa.sun_path), sa.sun_path);
    return 0;
}

int vp_conn_error(vp_handle c)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt((int)c.v, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        return -errno;
    return -err;
}

int vp_conn_shut_receive(vp_handle c)
{
    return shutdown((int)c.v, SHUT_RD) < 0 ? -errno : 0;
}

int vp_conn_wait(vp_handle c, int events, int timeout_ms)
{
    struct pollfd p = {.fd = (int)c.v,
                       .events = (short)(((events & VP_READABLE) ? POLLIN : 0) |
                                         ((events & VP_WRITABLE) ? POLLOUT : 0))};
    int r;
    do {
        r = poll(&p, 1, timeout_ms);
    } while (r < 0 && errno == EINTR);
    if (r < 0)
        return -errno;
    int ready = 0;
    if (p.revents & (POLLIN | POLLHUP | POLLERR))
        ready |= VP_READABLE;
    if (p.revents & (POLLOUT | POLLERR))
        ready |= VP_WRITABLE;
    return ready & events;
}

int vp_dial_daemon(const char *path, const char *service, vp_handle *out,
                   char *why, size_t whylen)
{
    (void)service;
    if (why && whylen)
        why[0] = '\0';
    return vp_dial(path, out);
}
