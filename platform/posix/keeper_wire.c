/* SPDX-License-Identifier: Apache-2.0 */
/* Records between vramd and its holder, on a seqpacket socket. */
#include "platform/posix/keeper_wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define HEAD_BYTES offsetof(struct vpx_krec, name)

ssize_t vpx_send_fd(int s, const void *to, socklen_t tolen, const void *buf,
                    size_t len, int fd)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {.msg_name = (void *)to, .msg_namelen = to ? tolen : 0,
                         .msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&ctl, 0, sizeof(ctl));
        msg.msg_control = ctl.buf;
        msg.msg_controllen = sizeof(ctl.buf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    ssize_t n;
    do {
        n = sendmsg(s, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN ? -ETIMEDOUT : -errno;
    return n;
}

int vpx_krec_send(int s, uint16_t op, int32_t arg, uint32_t arg2,
                  const char *name, int fd)
{
    struct vpx_krec r = {.magic = VPX_KEEPER_MAGIC, .op = op,
                         .version = VPX_KEEPER_VERSION, .arg = arg,
                         .arg2 = arg2};
    size_t len = name ? strlen(name) : 0;
    if (len > VP_KEEPER_NAME_MAX)
        return -EINVAL;
    if (len)
        memcpy(r.name, name, len);
    ssize_t n = vpx_send_fd(s, NULL, 0, &r, HEAD_BYTES + len, fd);
    if (n < 0)
        return (int)n;
    return (size_t)n == HEAD_BYTES + len ? 0 : -EPROTO;
}

/* Closes every fd in the control data. */
static int close_fds(struct msghdr *msg)
{
    int n = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            close(fd);
            n++;
        }
    }
    return n;
}

int vpx_krec_recv(int s, struct vpx_krec *r, int *fd, int timeout_ms,
                  char *why, size_t whylen)
{
    *fd = -1;
    if (timeout_ms != 0) {
        struct pollfd p = {.fd = s, .events = POLLIN};
        int k;
        do {
            k = poll(&p, 1, timeout_ms);
        } while (k < 0 && errno == EINTR);
        if (k < 0)
            return -errno;
        if (k == 0)
            return -ETIMEDOUT;
    }
    /* Room for more fds than allowed, to see (and close) any extra. */
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * 8)];
    } ctl;
    struct vpx_krec in;
    struct iovec iov = {.iov_base = &in, .iov_len = sizeof(in)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = ctl.buf,
                         .msg_controllen = sizeof(ctl.buf)};
    ssize_t n;
    do {
        n = recvmsg(s, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN ? (timeout_ms ? -ETIMEDOUT : -EAGAIN) : -errno;
    if (n == 0)
        return -ECONNRESET;
    if (msg.msg_flags & MSG_CTRUNC) {
        close_fds(&msg);
        snprintf(why, whylen, "a handle was lost on its way (control data "
                 "cut short: is the fd table full?)");
        return -EPROTO;
    }
    size_t len = (size_t)n;
    if ((msg.msg_flags & MSG_TRUNC) || len < HEAD_BYTES ||
        len - HEAD_BYTES > VP_KEEPER_NAME_MAX ||
        in.magic != VPX_KEEPER_MAGIC) {
        close_fds(&msg);
        snprintf(why, whylen, "a record that is not the keeper's (%zu bytes)",
                 len);
        return -EPROTO;
    }
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    if (cm) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
            cm->cmsg_len != CMSG_LEN(sizeof(int)) || CMSG_NXTHDR(&msg, cm)) {
            int k = close_fds(&msg);
            snprintf(why, whylen, "a record came with %d handles; one at "
                     "most", k);
            return -EPROTO;
        }
        memcpy(fd, CMSG_DATA(cm), sizeof(int));
    }
    in.name[len - HEAD_BYTES] = '\0';
    *r = in;
    return 0;
}
