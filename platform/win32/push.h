/* SPDX-License-Identifier: Apache-2.0 */
/* Handles pushed into another process: where handles cannot travel beside
 * the bytes (Windows), the daemon duplicates each into its client's process
 * and sends the value the handle has there (vp_handles_inline, the
 * catalogue's handle type). proc is a handle to that process with
 * PROCESS_DUP_HANDLE (vp_identity_of_pipe's pin, or vp_proc_pin). The
 * daemon's connections send handles so (endpoint_win32.c's vp_link_give). */
#ifndef VRAM_PLATFORM_PUSH_H
#define VRAM_PLATFORM_PUSH_H

#include <stdint.h>

#include "platform/endpoint.h" /* what the copy may do: VP_PUSH_* */
#include "platform/handle.h"

/* Duplicates h into the process proc with the access asked for (nothing
 * more: no SECTION_QUERY, no WRITE_DAC), not inheritable. *value is what
 * the copy is called there. h stays open here. */
int vp_handle_push(vp_handle proc, vp_handle h, unsigned access,
                   uint64_t *value);
/* Closes the handle value in the process proc (a pushed handle its
 * receiver never took, or one the daemon takes back). It is duplicated
 * back with DUPLICATE_CLOSE_SOURCE and the copy closed here: the form
 * without a target process fails under wine (docs/windows.md). -EBADF when
 * value names no handle there. */
int vp_handle_close_remote(vp_handle proc, uint64_t value);

#endif
