/* SPDX-License-Identifier: Apache-2.0 */
/* UTF-8 (the platform interface's strings) to and from UTF-16 (Win32's
 * W functions), into the caller's buffers. */
#ifndef VRAM_WIN32_WSTR_H
#define VRAM_WIN32_WSTR_H

#include <stddef.h>
#include <wchar.h>

/* 0, -EINVAL for NULL or text that is not UTF-8, -ENAMETOOLONG when it
 * does not fit in n characters with its terminator. */
int vpw_wide(const char *s, wchar_t *buf, size_t n);
/* 0, -EINVAL, or -ENAMETOOLONG when it does not fit in n bytes. */
int vpw_utf8(const wchar_t *s, char *buf, size_t n);

#endif
