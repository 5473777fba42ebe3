/* SPDX-License-Identifier: Apache-2.0 */
#include "platform/win32/wstr.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <limits.h>

int vpw_wide(const char *s, wchar_t *buf, size_t n)
{
    if (!s || n == 0 || n > INT_MAX)
        return -EINVAL;
    if (MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, buf, (int)n))
        return 0;
    return GetLastError() == ERROR_INSUFFICIENT_BUFFER ? -ENAMETOOLONG : -EINVAL;
}

int vpw_utf8(const wchar_t *s, char *buf, size_t n)
{
    if (!s || n == 0 || n > INT_MAX)
        return -EINVAL;
    if (WideCharToMultiByte(CP_UTF8, WC_ERR_INVALID_CHARS, s, -1, buf, (int)n,
                            NULL, NULL))
        return 0;
    return GetLastError() == ERROR_INSUFFICIENT_BUFFER ? -ENAMETOOLONG : -EINVAL;
}
