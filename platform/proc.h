/* SPDX-License-Identifier: Apache-2.0 */
/* Processes: pinning a peer's process so that its exit is seen and its pid
 * can never be mistaken for another's, start times, signals, and starting
 * helper processes. */
#ifndef VRAM_PLATFORM_PROC_H
#define VRAM_PLATFORM_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "platform/handle.h"

/* The start time of process pid (clock ticks since boot on Linux): with
 * the pid it names one process for good. 0 when unknown. */
uint64_t vp_proc_start_time(int64_t pid);
int64_t vp_self_pid(void);

/* A pinned process: a pidfd on Linux, a process handle on Windows. A pid
 * can be reused; a pin cannot. Readable (vp_watch) once the process exited. */
int vp_proc_pin(int64_t pid, vp_handle *out);
/* Whether the pinned process has exited. */
bool vp_proc_exited(vp_handle pin);
/* Kills the pinned process (SIGKILL), never a recycled pid. */
int vp_proc_kill(vp_handle pin);
/* Ends this process at once, as a crash would (fault injection in tests). */
void vp_proc_kill_self(void) __attribute__((noreturn));

/* How many mappings of process pid show one of the memory objects ids
 * (vp_mem_id), or a negative errno when that cannot be seen. */
int vp_proc_count_mapped(int64_t pid, const uint64_t *ids, size_t n);
/* The same, and when none is mapped, how many of process pid's open
 * handles are one of them. */
int vp_proc_count_held(int64_t pid, const uint64_t *ids, size_t n);
/* How many processes (this one aside) map or hold open one of ids. */
int vp_procs_holding(const uint64_t *ids, size_t n);

/* Starts path with argv (argv[0] included) as a child process. */
int vp_spawn(const char *path, char *const argv[], int64_t *pid_out);
/* The same, with the child's standard input and output as pipes to this
 * process: write its input to *to_child, read its output from *from_child. */
int vp_spawn_piped(const char *path, char *const argv[], int64_t *pid_out,
                   FILE **to_child, FILE **from_child);
/* The path of this program's executable. */
int vp_self_exe(char *buf, size_t len);
/* Waits for a child; *status is its exit status, or 128 + the signal that
 * ended it. */
int vp_wait_child(int64_t pid, int *status);

#endif
