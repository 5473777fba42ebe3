/* The daemon's exclusive lock: one vramd per socket. */
#ifndef VRAM_PLATFORM_LOCK_H
#define VRAM_PLATFORM_LOCK_H

#include <stddef.h>

#include "handle.h"

/* Takes the lock at path without waiting: 0, -EADDRINUSE when another
 * process holds it, or another negative errno with why. */
int vp_lock_take(const char *path, vp_handle *out, char *why, size_t whylen);

#endif
