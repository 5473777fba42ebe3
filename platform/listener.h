/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's listening endpoint: a Unix socket in a directory nobody else
 * can write into (POSIX), or a named pipe with an explicit security
 * descriptor (Windows), or the one the service manager passed. */
#ifndef VRAM_PLATFORM_LISTENER_H
#define VRAM_PLATFORM_LISTENER_H

#include <stdbool.h>
#include <stddef.h>

#include "platform/handle.h"

struct vp_listen_cfg {
    const char *path;
    const char *group; /* owning group of the socket file; NULL or "" keeps it */
    unsigned mode;     /* of the socket file, e.g. 0660 */
};

/* Checks that the directory of path is a real directory that only its
 * owner (or root) can write into, creating it (0755) when missing: 0, 1 when
 * it was created, or a negative errno with why. */
int vp_listen_check_dir(const char *path, char *why, size_t whylen);

/* Creates the listening endpoint (non-blocking). The caller holds the
 * daemon's lock, so a socket left at path by an earlier daemon is stale and
 * replaced; anything else at path is refused. */
int vp_listen(const struct vp_listen_cfg *cfg, vp_handle *out, char *why,
              size_t whylen);

/* Takes a listener passed by the service manager (systemd socket
 * activation: LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES). The same fds carry
 * the file descriptor store's handles, which are the keeper's (keeper.h):
 * with names, the listener's is the one listening Unix stream socket (or
 * the one named "<unit>.socket", which must be one), and more than one is
 * refused; without names (an activator that names nothing), exactly one fd
 * must be passed and be that socket. Returns 1 with its path written, 0
 * when none was passed to this process, or a negative errno with why. */
int vp_listen_activated(vp_handle *out, char *path, size_t pathlen, char *why,
                        size_t whylen);

/* Accepts one waiting connection without blocking: 0, -EAGAIN when none
 * waits, -EMFILE or -ENFILE when out of handles, or another negative errno. */
int vp_accept(vp_handle l, vp_handle *out);

/* Closes the listener; removes path too when remove_path (not for a
 * passed listener, whose path belongs to the service manager). */
void vp_listen_close(vp_handle *l, const char *path, bool remove_path);

#endif
