/* SPDX-License-Identifier: Apache-2.0 */
/* What platform/win32/mem_win32.c tells beyond mem.h (its tests, and a daemon
 * that reports how clients map). */
#ifndef VRAM_WIN32_MEM_H
#define VRAM_WIN32_MEM_H

#include <stdbool.h>

/* Whether this system has placeholders (VirtualAlloc2 with
 * MEM_RESERVE_PLACEHOLDER: Windows 10 1803 and later; not wine 8). Without
 * them mem_win32.c falls back to plain reservations, released and made again
 * around each view: a thread of the same process that allocates in that
 * moment can take the range, which is then reported (-EADDRINUSE), never
 * mapped over. */
bool vpw_vm_placeholders(void);

#endif
