/* SPDX-License-Identifier: Apache-2.0 */
/* What platform/win32/ reads of a process handle, shared by proc_win32.c and
 * identity.c. */
#ifndef VRAM_WIN32_PROCINFO_H
#define VRAM_WIN32_PROCINFO_H

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <stdint.h>

/* The process's creation time (100 ns units since 1601, GetProcessTimes):
 * 0 or a negative errno. */
int vpw_process_start(HANDLE proc, uint64_t *out);

#endif
