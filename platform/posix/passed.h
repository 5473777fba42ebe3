/* SPDX-License-Identifier: Apache-2.0 */
/* The fds the service manager passed at start (systemd's LISTEN_PID,
 * LISTEN_FDS and LISTEN_FDNAMES, fds from 3 on). Two owners share them:
 * the activated listening socket is the listener's (listener.h), every
 * other fd the keeper's (keeper.h: the fd store's handles, by name). The
 * environment is read once, by whichever asks first, and unset then; each
 * fd is taken by one owner, once. Start-up only: not thread-safe. */
#ifndef VRAM_PLATFORM_POSIX_PASSED_H
#define VRAM_PLATFORM_POSIX_PASSED_H

#include <stdbool.h>
#include <stddef.h>

/* Most fds taken from LISTEN_FDS: the fd store's few thousand and the
 * sockets, with room to spare; a larger count is refused as garbage. */
#define VPX_PASSED_MAX 65536

/* Reads what was passed (the first call; later calls give the same
 * answer): the number of fds passed to this process, 0 when none were
 * (no LISTEN_PID, or one of another process: then the environment is left
 * as it is), or -EINVAL / -EBADF with why when what was passed cannot be
 * trusted (a count or a pid that is not a number, names that do not match
 * the count, an fd that is not open). Every passed fd is made close-on-exec
 * at once, taken or not. */
int vpx_passed_load(char *why, size_t whylen);
/* Whether LISTEN_FDNAMES came with them (systemd always sends it; other
 * activators may not). */
bool vpx_passed_named(void);
/* Entry i's fd, or -1 when i is out of range or already taken. */
int vpx_passed_fd(size_t i);
/* Entry i's name ("" when none was passed). */
const char *vpx_passed_name(size_t i);
/* Whether entry i is the listener's: a listening Unix stream socket, or
 * named like a socket unit's fd (the name ends in ".socket": systemd names
 * a socket's fds after its unit unless FileDescriptorName= says otherwise). */
bool vpx_passed_is_socket(size_t i);
/* Whether fd is a listening Unix stream socket (what vramd listens on). */
bool vpx_listening_unix_stream(int fd);
/* Takes entry i: its fd is the caller's from now on; -1 when there is none
 * to take. */
int vpx_passed_take(size_t i);

#endif
