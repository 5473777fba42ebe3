/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's listening endpoint on Windows: a named pipe that vramd
 * creates itself (\\.\pipe\vramd by default), never libuv's pipe server
 * (libuv 1.44 creates its instances with a NULL security descriptor and
 * takes remote clients).
 *
 * The pipe has an explicit security descriptor: SYSTEM,
 * Administrators and the daemon's own user have full access (the daemon
 * needs FILE_CREATE_PIPE_INSTANCE on its own pipe to make the next
 * instance), the allowed users and groups read and FILE_WRITE_DATA only:
 * not GENERIC_WRITE, whose FILE_APPEND_DATA is FILE_CREATE_PIPE_INSTANCE on
 * a pipe and would let a client serve instances of vramd's pipe itself.
 * A pipe has one descriptor for all its instances, the one its first
 * instance was created with (Windows' and wine's named-pipe file systems
 * ignore a later instance's): vp_pipe_listen_set_allow changes it on the
 * pipe itself, for every instance at once.
 *
 * The first instance is created with FILE_FLAG_FIRST_PIPE_INSTANCE, so a
 * name someone else holds is refused instead of shared; every instance
 * with PIPE_REJECT_REMOTE_CLIENTS. The next instance is made before a
 * connected one is handed on, so the name is never free between two.
 *
 * A connected instance is an ordinary connection (platform/conn.h), or a
 * libuv stream (platform/win32/stream.h), and names its client through
 * platform/win32/identity.h. */
#ifndef VRAM_PLATFORM_PIPE_LISTENER_H
#define VRAM_PLATFORM_PIPE_LISTENER_H

#include <stddef.h>
#include <stdint.h>

#include "platform/handle.h"
#include "platform/win32/identity.h"

struct vp_pipe_listen_cfg {
    const char *name; /* "\\\\.\\pipe\\vramd"; NULL: that */
    /* Who may connect besides SYSTEM, Administrators and the daemon's
     * user; NULL or empty: nobody else. */
    const struct vp_access_list *allow;
    uint32_t buffer_bytes; /* each direction's; 0: 64 KiB */
    uint32_t max_instances; /* 0: unlimited */
};

struct vp_pipe_listener;

/* A connected instance and when it connected (vp_identity_of_pipe's
 * connected_at). */
struct vp_pipe_conn {
    vp_handle h;
    uint64_t connected_at;
};

/* The security descriptor the listener gives its pipe, as SDDL, for allow
 * (NULL: none) and the daemon's user self (NULL: the current process's):
 * 0, -ENOSPC, -EINVAL (a SID that is not one, or a list's count out of
 * range). */
int vp_pipe_sddl(const struct vp_access_list *allow, const struct vp_sid *self,
                 char *buf, size_t len);

/* Creates the first instance: 0, -EADDRINUSE when a pipe of that name
 * exists (someone else's, or a daemon already running), -EINVAL for a name
 * outside \\.\pipe\, or another negative errno; why says what. */
int vp_pipe_listen(const struct vp_pipe_listen_cfg *cfg,
                   struct vp_pipe_listener **out, char *why, size_t whylen);
/* Waits up to timeout_ms (-1: for ever, 0: not at all) for a client:
 * 0 and *out (the caller owns out->h), -EAGAIN when none came in time,
 * -EINTR when vp_pipe_listen_wake was called, or another negative errno. A
 * client that connected and left again before it was taken is skipped. */
int vp_pipe_accept(struct vp_pipe_listener *l, int timeout_ms,
                   struct vp_pipe_conn *out);
/* Makes a vp_pipe_accept waiting on another thread return -EINTR (and the
 * next one, if none waits). */
void vp_pipe_listen_wake(struct vp_pipe_listener *l);
/* Gives the pipe the descriptor for allow (NULL: nobody besides SYSTEM,
 * Administrators and the daemon's user), as vp_pipe_listen would have:
 * set on the pipe through the instance waiting for a client, so the
 * waiting instance, the connected ones and every later one have it at
 * once (the DACL is checked when a client opens the pipe: connected
 * clients stay). 1 when it changed, 0 when the pipe had it already, or a
 * negative errno with why saying what, and then nothing changed (the old
 * descriptor stays). Safe while another thread is in vp_pipe_accept; not
 * with another set_allow, vp_pipe_listen_sddl or close at the same time.
 * If no instance exists at the moment (making one failed), the next one
 * made gets it. */
int vp_pipe_listen_set_allow(struct vp_pipe_listener *l,
                             const struct vp_access_list *allow, char *why,
                             size_t whylen);
/* The pipe's name, as given. */
const char *vp_pipe_listen_name(const struct vp_pipe_listener *l);
/* The SDDL the pipe has now (vp_pipe_listen's, or the last
 * vp_pipe_listen_set_allow's); valid until the next of those. */
const char *vp_pipe_listen_sddl(const struct vp_pipe_listener *l);
/* Closes the instance waiting for a client (connected ones are their
 * owners'); NULL-tolerant, sets *l to NULL. No accept may be running. */
void vp_pipe_listen_close(struct vp_pipe_listener **l);

#endif
