/* SPDX-License-Identifier: Apache-2.0 */
/* What vramd and its holder (holder_posix.c) say to each other: records on a
 * Unix seqpacket socket (one record a message, so a handle always comes
 * with the record it belongs to), each a fixed header and a name, with at
 * most one fd. Same host, same build family: native byte order.
 *
 *   vramd                          holder
 *   HELLO (version)             -> OK (its version, held, max) | ERR
 *                                  (-EBUSY, the other vramd's pid;
 *                                  -EPROTO, its version; -EPERM)
 *   PUT name + fd               -> OK | ERR (-EEXIST, -ENOSPC, -EINVAL)
 *   REMOVE name                 -> OK | ERR (-ENOENT)
 *   LIST                        -> ENTRY name + fd, ..., END (count)
 *
 * HELLO comes first and is the same in every version: a holder of another
 * version says which, and vramd says "holder X, vramd Y". */
#ifndef VRAM_PLATFORM_POSIX_KEEPER_WIRE_H
#define VRAM_PLATFORM_POSIX_KEEPER_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "platform/keeper.h"

#define VPX_KEEPER_MAGIC 0x504b5256u /* "VRKP" */
#define VPX_KEEPER_VERSION 1
/* The holder's socket, beside vramd's. */
#define VPX_KEEPER_SUFFIX ".keeper"

enum vpx_kop {
    VPX_K_HELLO = 1,
    VPX_K_PUT,
    VPX_K_REMOVE,
    VPX_K_LIST,
    VPX_K_ENTRY,
    VPX_K_END,
    VPX_K_OK,
    VPX_K_ERR,
};

struct vpx_krec {
    uint32_t magic;
    uint16_t op;
    uint16_t version;
    int32_t arg;   /* ERR: a negative errno; OK to HELLO: held; END: count */
    uint32_t arg2; /* OK to HELLO: max; ERR -EBUSY: a pid; ERR -EPROTO: version */
    char name[VP_KEEPER_NAME_MAX + 1]; /* on the wire without its '\0' */
};

/* Sends len bytes of buf as one message on s (to the address to, unless
 * NULL), with fd attached unless fd < 0 (the caller keeps fd), retried on
 * EINTR, never raising SIGPIPE. The bytes sent, -ETIMEDOUT when the send
 * timed out (EAGAIN), or a negative errno. */
ssize_t vpx_send_fd(int s, const void *to, socklen_t tolen, const void *buf,
                    size_t len, int fd);
/* Sends one record, with fd attached unless fd < 0 (the caller keeps fd).
 * 0 or a negative errno (-EPIPE: the peer is gone; never a signal). */
int vpx_krec_send(int s, uint16_t op, int32_t arg, uint32_t arg2,
                  const char *name, int fd);
/* Receives one record and the fd that came with it (-1 when none), waiting
 * up to timeout_ms (-1: for ever; 0: not at all). 0, -ECONNRESET at the
 * end of the stream, -ETIMEDOUT (-EAGAIN when timeout_ms is 0), or -EPROTO
 * with why: not a record of this protocol, more than one fd, or control
 * data cut short (MSG_CTRUNC: the fd table is full); every fd that did
 * arrive is closed then. Received fds are close-on-exec. */
int vpx_krec_recv(int s, struct vpx_krec *r, int *fd, int timeout_ms,
                  char *why, size_t whylen);

#endif
