/* SPDX-License-Identifier: Apache-2.0 */
/* The service manager's file descriptor store (systemd's sd_notify
 * protocol, spoken directly: a datagram to $NOTIFY_SOCKET). keeper.c
 * keeps the names; this says them to the manager. */
#ifndef VRAM_PLATFORM_POSIX_KEEPER_FDSTORE_H
#define VRAM_PLATFORM_POSIX_KEEPER_FDSTORE_H

#include <stddef.h>

/* Whether the store may be used: 1 with *max (from $FDSTORE), or 0 with
 * a note saying why not. */
int vpx_fdstore_usable(unsigned *max, char *note, size_t len);
/* A datagram socket to send from (-1 on failure, with why). */
int vpx_fdstore_socket(char *why, size_t whylen);
/* "FDSTORE=1\nFDNAME=name\nFDPOLL=0" with fd: 0 or a negative errno with
 * why. The manager keeps its own duplicate and answers nothing. */
int vpx_fdstore_put(int s, const char *name, int fd, char *why,
                    size_t whylen);
/* "FDSTOREREMOVE=1\nFDNAME=name". */
int vpx_fdstore_remove(int s, const char *name, char *why, size_t whylen);

#endif
