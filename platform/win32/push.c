/* SPDX-License-Identifier: Apache-2.0 */
/* Pushing handles into another process with DuplicateHandle, and taking
 * them back. */
#include "platform/win32/push.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>

#include "platform/win32/winerr.h"

int vp_handle_push(vp_handle proc, vp_handle h, unsigned access, uint64_t *value)
{
    DWORD rights = 0, opts = 0;
    switch (access) {
    case VP_PUSH_SAME:
        opts = DUPLICATE_SAME_ACCESS;
        break;
    case VP_PUSH_MAP_READ:
        rights = SECTION_MAP_READ;
        break;
    case VP_PUSH_MAP_WRITE:
    case VP_PUSH_MAP_READ | VP_PUSH_MAP_WRITE:
        /* A read-write view takes both. */
        rights = SECTION_MAP_READ | SECTION_MAP_WRITE;
        break;
    default:
        return -EINVAL;
    }
    HANDLE out = NULL;
    if (!DuplicateHandle(GetCurrentProcess(), (HANDLE)h.v, (HANDLE)proc.v, &out,
                         rights, FALSE, opts))
        return vpw_last_errno();
    *value = (uint64_t)(uintptr_t)out;
    return 0;
}

int vp_handle_close_remote(vp_handle proc, uint64_t value)
{
    /* DuplicateHandle(proc, value, NULL, NULL, 0, FALSE,
     * DUPLICATE_CLOSE_SOURCE), the documented form, fails under wine 8
     * with error 6 (and, measured in one process, closes the handle all
     * the same); bringing the handle here and closing the copy works on
     * both. */
    HANDLE tmp = NULL;
    if (!DuplicateHandle((HANDLE)proc.v, (HANDLE)(uintptr_t)value,
                         GetCurrentProcess(), &tmp, 0, FALSE,
                         DUPLICATE_CLOSE_SOURCE | DUPLICATE_SAME_ACCESS))
        return vpw_last_errno();
    CloseHandle(tmp);
    return 0;
}
