/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's exclusive lock: one vramd per socket directory. */
#ifndef VRAM_PLATFORM_LOCK_H
#define VRAM_PLATFORM_LOCK_H

#include <stddef.h>

#include "platform/handle.h"

/* Takes the lock of the directory that holds socket_path without waiting:
 * 0, -EADDRINUSE when another process holds it, or another negative errno
 * with why. The directory itself is locked, not a file in it: a file can
 * be deleted or made in advance by whoever may write there, the directory
 * only replaced by its owner (vp_listen_check_dir makes sure no one else
 * may write into it). dir_out (dirlen bytes) names what was locked. */
int vp_lock_take(const char *socket_path, vp_handle *out, char *dir_out,
                 size_t dirlen, char *why, size_t whylen);

#endif
