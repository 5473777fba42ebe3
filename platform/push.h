/* SPDX-License-Identifier: Apache-2.0 */
/* Handles pushed into another process: where handles cannot travel beside
 * the bytes (Windows), the daemon duplicates each into its client's process
 * and sends the value the handle has there (vp_handles_inline, the
 * catalogue's handle type). proc is a handle to that process with
 * PROCESS_DUP_HANDLE (vp_identity_of_pipe's pin, or vp_proc_pin). */
#ifndef VRAM_PLATFORM_PUSH_H
#define VRAM_PLATFORM_PUSH_H

#include <stdint.h>

#include "handle.h"

/* What the copy may do, least first: a section mapped for reading, or for
 * reading and writing; or, for objects that are no sections (a CUDA
 * allocation's handle), what the original may. */
enum {
    VP_PUSH_MAP_READ = 1,
    VP_PUSH_MAP_WRITE = 2, /* with VP_PUSH_MAP_READ: a read-write view */
    VP_PUSH_SAME = 4,      /* the original's access (alone) */
};

/* Duplicates h into the process proc with the access asked for (nothing
 * more: no SECTION_QUERY, no WRITE_DAC), not inheritable. *value is what
 * the copy is called there. h stays open here. */
int vp_handle_push(vp_handle proc, vp_handle h, unsigned access,
                   uint64_t *value);
/* Closes the handle value in the process proc (a pushed handle its
 * receiver never took, or one the daemon takes back). It is duplicated
 * back with DUPLICATE_CLOSE_SOURCE and the copy closed here: the form
 * without a target process fails under wine (WINDOWS.md). -EBADF when
 * value names no handle there. */
int vp_handle_close_remote(vp_handle proc, uint64_t value);

#endif
