/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's exclusive lock on Windows: a file opened with no sharing.
 * A second vramd for the same run directory gets ERROR_SHARING_VIOLATION.
 * The lock goes with the process, however it ends (the system closes its
 * handles). The directory is vramd's (vpw_svc_prepare_dir, or the
 * operator's for --run-dir), so nobody else can make the file first.
 * One vramd per pipe name is the pipe's own rule (pipe_listener.h): this
 * lock guards the state file beside it. */
#include "platform/lock.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "platform/win32/winerr.h"
#include "platform/win32/wstr.h"

int vp_lock_take(const char *socket_path, vp_handle *out, char *dir_out,
                 size_t dirlen, char *why, size_t whylen)
{
    char path[MAX_PATH + 8];
    if (snprintf(path, sizeof(path), "%s.lock", socket_path) >= (int)sizeof(path)) {
        snprintf(why, whylen, "%s.lock: the path is too long", socket_path);
        return -ENAMETOOLONG;
    }
    wchar_t w[MAX_PATH + 8];
    int e = vpw_wide(path, w, sizeof(w) / sizeof(w[0]));
    if (e < 0) {
        snprintf(why, whylen, "%s: not a usable path", path);
        return e;
    }
    /* No FILE_SHARE_*: nobody else opens it while vramd holds it. */
    HANDLE h = CreateFileW(w, GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_ALWAYS,
                           FILE_ATTRIBUTE_NORMAL, NULL);
    if (h == INVALID_HANDLE_VALUE) {
        DWORD err = GetLastError();
        snprintf(dir_out, dirlen, "%s", path);
        if (err == ERROR_SHARING_VIOLATION || err == ERROR_LOCK_VIOLATION)
            return -EADDRINUSE;
        snprintf(why, whylen, "cannot take the lock %s (error %lu)", path,
                 (unsigned long)err);
        return vpw_errno(err);
    }
    snprintf(dir_out, dirlen, "%s", path);
    out->v = (intptr_t)h;
    return 0;
}
