/* SPDX-License-Identifier: Apache-2.0 */
/* Per-connection state on Windows. POSIX keeps a socket's modes in the
 * kernel (O_NONBLOCK, SO_RCVTIMEO, SHUT_RD, SO_ERROR, the peer's address);
 * a pipe HANDLE has no room for them, and its non-blocking I/O needs
 * OVERLAPPED structures that outlive one call (the send in flight). So
 * each handle used as a connection gets an entry here, keyed by its value,
 * made on first use and freed by vp_close. Only platform/win32/ sees this.
 *
 * Entries are found under a lock, then used without one: like a POSIX fd,
 * a connection is not closed while another thread uses it, and has at most
 * one sending and one receiving thread at a time (a receive and a
 * vp_conn_wait may run together: they use different OVERLAPPEDs). */
#ifndef VRAM_WIN32_CONN_STATE_H
#define VRAM_WIN32_CONN_STATE_H

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Most bytes one send takes into its write (the rest waits for the next). */
#define VPW_SEND_MAX (64u << 10)

struct vpw_conn {
    HANDLE h;
    struct vpw_conn *next; /* in its bucket */
    bool nonblocking;
    DWORD recv_timeout_ms; /* 0: none */
    atomic_bool shut;      /* the receiving side was ended */
    HANDLE shut_ev;        /* set with shut: wakes a waiting receive */
    char *peer_path;       /* what vp_dial connected to; NULL: unknown */
    /* The write in flight: a send's bytes, copied to wbuf, that the pipe
     * had no room for yet (conn_win32.c says why it is never cancelled). */
    OVERLAPPED wov;
    uint8_t *wbuf;
    bool wpending;
    int werr; /* how the last write in flight failed; 0: it did not */
    OVERLAPPED rov; /* a receive */
    OVERLAPPED zov; /* a zero-byte read: waits for readability */
};

/* The entry of h, made when there is none: 0, -ENOTSOCK when h is not a
 * pipe opened for overlapped I/O (a synchronous one would make every
 * "non-blocking" call block), -EBADF, or -ENOMEM. */
int vpw_conn_get(HANDLE h, struct vpw_conn **out);
/* Ends the write in flight (its unsent bytes are lost) and frees the
 * entry of h, if any; before h is closed. */
void vpw_conn_forget(HANDLE h);

#endif
