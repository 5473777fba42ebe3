/* SPDX-License-Identifier: Apache-2.0 */
/* Local stream connections between vramd and its clients: a Unix stream
 * socket on POSIX, a named pipe on Windows. Bytes and handles move
 * together: a send attaches its handles to its first byte; a receive
 * returns the bytes and every handle that arrived with them, in order.
 * Which frame a handle belongs to is the codec's business (proto/codec.h),
 * never this layer's.
 *
 * Every rule about received handles that the kernel makes visible lives
 * here: handles arrive close-on-exec; a receive whose control data was cut
 * (POSIX MSG_CTRUNC: too many handles, a full fd table, an LSM veto) closes
 * what did arrive and fails; more handles than the caller has room for are
 * closed and fail the receive. */
#ifndef VRAM_PLATFORM_CONN_H
#define VRAM_PLATFORM_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/handle.h"

/* Where vramd listens unless configured otherwise: its socket on POSIX,
 * its named pipe on Windows (platform/win32/pipe_listener.h). */
#ifdef _WIN32
#define VP_DEFAULT_ENDPOINT "\\\\.\\pipe\\vramd"
#else
#define VP_DEFAULT_ENDPOINT "/run/vramd/vramd.sock"
#endif

/* Most handles one receive may return. */
#define VP_RECV_MAX_HANDLES 64

/* Connects to the daemon at path (blocking). -ENOENT, -ECONNREFUSED,
 * -EACCES, -ENAMETOOLONG as the system says. */
int vp_dial(const char *path, vp_handle *out);

/* The system service that vramd runs as, by default (Windows). */
#define VP_DEFAULT_SERVICE "vramd"

/* vp_dial, and where vramd runs as the system service named service
 * (non-NULL, non-empty), a check that the process serving path is that
 * service's: a pipe of vramd's name that someone else made first, while the
 * service was stopped, is never talked to. On Windows: no such service
 * installed, plain vp_dial (vramd run by hand); installed and running,
 * another server is refused with -EPERM; installed but not running, any
 * server is refused with -ECONNREFUSED. POSIX: plain vp_dial (the socket's
 * directory is what keeps impostors out). why says what failed (may be
 * NULL). Writes *out only on success. */
int vp_dial_daemon(const char *path, const char *service, vp_handle *out,
                   char *why, size_t whylen);

/* Sends up to len bytes without blocking, with n handles attached to the
 * first byte (the caller keeps its handles). Returns the bytes sent (the
 * handles went with them when > 0), -EAGAIN when nothing could be sent, or
 * another negative errno (-EPIPE: the peer is gone; never a signal). */
long vp_send(vp_handle c, const void *buf, size_t len, const vp_handle *hs,
             int n);

enum { VP_RECV_WAIT = 1 }; /* wait for data (up to the receive timeout) */

/* Receives up to len bytes. Handles that came with them are stored in hs
 * (at most max) and counted in *nh. Returns the bytes received, 0 at an
 * orderly end of the stream, -EAGAIN when nothing is there (or the wait
 * timed out), or another negative errno with a reason in why: -EPROTO for
 * cut control data, -E2BIG for more handles than max (all closed). */
long vp_recv(vp_handle c, void *buf, size_t len, vp_handle *hs, int max,
             int *nh, int flags, char *why, size_t whylen);

/* Whether receives and sends block when there is nothing to do (sends
 * never do in vp_send; this is the connection's own mode). */
int vp_conn_set_blocking(vp_handle c, bool blocking);
bool vp_conn_blocking(vp_handle c);
/* Bounds each waiting receive (VP_RECV_WAIT) to ms. */
int vp_conn_set_recv_timeout(vp_handle c, int ms);
/* The path the peer listens on (a client's record of where to connect
 * again); -ENOENT when unknown. */
int vp_conn_peer_path(vp_handle c, char *buf, size_t len);

enum { VP_READABLE = 1, VP_WRITABLE = 2 };
/* The error pending on c (-ECONNRESET, -EPIPE, ...), cleared; 0 if none. */
int vp_conn_error(vp_handle c);
/* Ends c's receiving side: a vp_conn_wait for readability on another
 * thread returns at once, and every receive after reads the end of the
 * stream. Sends still work. */
int vp_conn_shut_receive(vp_handle c);
/* Waits up to timeout_ms (-1: for ever) until c is ready for events.
 * Returns the ready events (0 on timeout) or a negative errno. */
int vp_conn_wait(vp_handle c, int events, int timeout_ms);

#endif
