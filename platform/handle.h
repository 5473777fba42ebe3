/* SPDX-License-Identifier: Apache-2.0 */
/* Operating-system handles, as an opaque type: a file descriptor on POSIX,
 * a HANDLE on Windows. Everything above platform/ holds handles only
 * through this type, so no other code knows which one it is.
 *
 * Every handle the platform layer creates or receives is close-on-exec (not
 * inherited on Windows). */
#ifndef VRAM_PLATFORM_HANDLE_H
#define VRAM_PLATFORM_HANDLE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct vp_handle {
    intptr_t v; /* fd or HANDLE; -1 when none */
} vp_handle;

#define VP_NONE ((vp_handle){-1})

static inline bool vp_ok(vp_handle h)
{
    return h.v != -1;
}

static inline bool vp_same(vp_handle a, vp_handle b)
{
    return a.v == b.v;
}

/* Closes h (a no-op for VP_NONE) and sets it to VP_NONE. */
void vp_close(vp_handle *h);
/* Whether h names an open handle of this process. */
bool vp_valid(vp_handle h);
/* A second handle to the same object. */
int vp_dup(vp_handle h, vp_handle *out);
/* Makes dst refer to what src refers to, keeping dst's number (a socket
 * replaced under an engine's event loop keeps its fd); closes src. */
int vp_replace(vp_handle dst, vp_handle *src);
/* Keeps h out of child processes (FD_CLOEXEC): for handles an engine
 * passed in. */
int vp_set_noinherit(vp_handle h);
/* Lifts the soft limit on open handles to the hard one (once a process):
 * a GPU's worth of 2 MiB chunks is tens of thousands of fds. */
void vp_raise_handle_limit(void);
/* Grows this process's handle table to n entries now, before returning,
 * once a process: so that the handles of a first grant are not received
 * into a table that grows as they come. Linux doubles a full fd table, and
 * in a process with more than one thread (any CUDA engine) each growth
 * waits for an RCU grace period: receiving a first 2048 fds took 52-58 ms
 * that way, 0.35 ms into a table grown beforehand. The
 * growth itself costs one grace period (10-14 ms there, microseconds in a
 * process of one thread). It is not left to a thread of its own: a grant
 * whose fds arrived while that thread waited waited too, and when its
 * own first growth came first, for two grace periods (vram-bench-fdtable).
 * A no-op where the table does not grow so (Windows). */
void vp_reserve_handle_table(uint64_t n);
/* How many handles this process may hold open at once (the soft limit on
 * POSIX, after vp_raise_handle_limit; Windows has no such limit below its
 * 16 million). What vramd may hold ahead of grants is sized by it. */
uint64_t vp_handle_limit(void);
/* Whether handles travel inside frames as values the receiver can use
 * (Windows: pushed into the peer's process) rather than beside them
 * (POSIX: SCM_RIGHTS). */
bool vp_handles_inline(void);

#endif
