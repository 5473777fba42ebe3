/* SPDX-License-Identifier: Apache-2.0 */
/* Who is at the other end of a connected local socket, by the kernel's
 * word: what the keeper's holder and vramd check of each other. Each OS
 * implements it (platform/linux/sockcred_linux.c: SO_PEERCRED). */
#ifndef VRAM_PLATFORM_POSIX_SOCKCRED_H
#define VRAM_PLATFORM_POSIX_SOCKCRED_H

#include <stdint.h>

/* The pid and effective uid of the process that connected s (or that
 * listened, for the side that connected): 0 with both written, or a
 * negative errno. */
int vpx_sockcred(int s, int64_t *pid, uint32_t *uid);

#endif
