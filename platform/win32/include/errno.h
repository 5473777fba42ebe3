/* SPDX-License-Identifier: Apache-2.0 */
/* The C library's <errno.h> for the Windows build, with the POSIX names
 * vramd uses that mingw-w64's lacks (EDQUOT: the ledger's quotas; ESTALE: a
 * resumed stage that no longer matches). cmake/windows.cmake puts this
 * folder ahead of the system headers, so every file that includes <errno.h>
 * (the ledger, which may include nothing outside its folder, too) gets them
 * without a forced include; the Linux build never sees this file.
 *
 * The values are Windows Sockets' own codes for the two conditions
 * (WSAEDQUOT, WSAESTALE, which mingw-w64's winsock headers leave
 * unmapped): far above the C runtime's errno values (1-140), so they
 * collide with none of them, and the wire carries names, never numbers
 * (proto/errnames.h). */
#ifndef VRAM_WIN32_ERRNO_H
#define VRAM_WIN32_ERRNO_H

#include_next <errno.h>

#ifndef EDQUOT
#define EDQUOT 10069 /* WSAEDQUOT */
#endif
#ifndef ESTALE
#define ESTALE 10070 /* WSAESTALE */
#endif
/* ESHUTDOWN: a fetch asked of vramctl's fetcher (client/tools/fetcher.c)
 * that is being freed; it never leaves the process. */
#ifndef ESHUTDOWN
#define ESHUTDOWN 10058 /* WSAESHUTDOWN */
#endif

#endif
