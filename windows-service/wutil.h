/* SPDX-License-Identifier: Apache-2.0 */
/* windows-service/'s own small helpers: UTF-8 and UTF-16, and the Win32
 * errors the SCM calls return as errno values. (platform/win32/ has its
 * own; this library does not reach into its private headers.) */
#ifndef VRAM_WINSVC_WUTIL_H
#define VRAM_WINSVC_WUTIL_H

#include <stddef.h>
#include <wchar.h>

/* 0, -EINVAL (NULL, not UTF-8), -ENAMETOOLONG. */
int svc_wide(const char *s, wchar_t *buf, size_t n);
int svc_utf8(const wchar_t *s, char *buf, size_t n);
/* A Win32 error as a negative errno. */
int svc_errno(unsigned long err);

#endif
