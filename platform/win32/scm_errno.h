/* SPDX-License-Identifier: Apache-2.0 */
/* The errors the Service Control Manager's calls return, as negative errno
 * values: the entry's (entry_win32.c) and scm_install.c's, the service
 * program's calls.
 * winerr.h's mapping is for files and pipes; this one knows the SCM's own
 * (ERROR_SERVICE_EXISTS: -EEXIST, ERROR_FAILED_SERVICE_CONTROLLER_CONNECT:
 * -ESRCH, ...). Free of <windows.h>. */
#ifndef VRAM_WIN32_SCM_ERRNO_H
#define VRAM_WIN32_SCM_ERRNO_H

int vpw_scm_errno(unsigned long err);

#endif
