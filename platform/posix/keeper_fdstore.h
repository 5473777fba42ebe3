/* SPDX-License-Identifier: Apache-2.0 */
/* The service manager's file descriptor store. keeper_posix.c keeps the names;
 * these say them to the manager. Each OS implements them where its service
 * manager has a store: platform/linux/keeper_fdstore_linux.c speaks
 * systemd's protocol. An OS without one answers 0 from vpx_fdstore_usable
 * (with its note) and keeper_posix.c uses the holder. */
#ifndef VRAM_PLATFORM_POSIX_KEEPER_FDSTORE_H
#define VRAM_PLATFORM_POSIX_KEEPER_FDSTORE_H

#include <stddef.h>

/* Whether the store may be used: 1 with *max (how many fds the manager
 * keeps for this service) and a note saying where that comes from, or 0
 * with a note saying why not. */
int vpx_fdstore_usable(unsigned *max, char *note, size_t len);
/* A datagram socket to send from (-1 on failure, with why). */
int vpx_fdstore_socket(char *why, size_t whylen);
/* Stores fd under name: 0 or a negative errno with why. The manager keeps
 * its own duplicate and answers nothing. */
int vpx_fdstore_put(int s, const char *name, int fd, char *why,
                    size_t whylen);
/* Drops what is stored under name. */
int vpx_fdstore_remove(int s, const char *name, char *why, size_t whylen);

#endif
