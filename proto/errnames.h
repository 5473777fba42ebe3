/* SPDX-License-Identifier: Apache-2.0 */
/* Error codes on the wire: errno names ("ENOSPC"), portable across
 * operating systems, negative errno values at each end. Where a C library
 * lacks a name the protocol uses (mingw-w64 has no EDQUOT or ESTALE), the
 * platform supplies it in <errno.h> itself (platform/win32/include/), so
 * that the ledger, which includes nothing of the platform, has it too. */
#ifndef VW_PROTO_ERRNAMES_H
#define VW_PROTO_ERRNAMES_H

#include <errno.h>

#if !defined(EDQUOT) || !defined(ESTALE)
#error "<errno.h> lacks EDQUOT or ESTALE: on Windows, platform/win32/include must come before the system headers (cmake/windows.cmake)"
#endif

/* The name of err (negative or not); "EIO" for one the protocol lacks. */
const char *vw_errno_name(int err);
/* The negative errno of a name; -EPROTO for an unknown one. */
int vw_errno_from_name(const char *name);

#endif
