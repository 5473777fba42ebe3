/* SPDX-License-Identifier: Apache-2.0 */
/* The state file on Windows: a file under vramd's run directory, mapped
 * with CreateFileMappingW. Opened with FILE_SHARE_DELETE so that the new
 * file can be renamed over the old one while it is mapped (as a POSIX
 * rename is); the mapping object is closed once the view is made (the view
 * keeps it). What POSIX checks with fstat (a regular file of this user) is
 * checked here as "not a directory and not a reparse point (link,
 * junction)", and an owner that is vramd's: its user, the owner its token
 * gives new files (Administrators, for an elevated one), SYSTEM or
 * Administrators. */
#include "platform/mapfile.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <aclapi.h>
#include <winternl.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "platform/win32/winerr.h"
#include "platform/win32/wstr.h"

static int wide_path(const char *path, wchar_t *w, size_t n, char *why,
                     size_t whylen)
{
    int e = vpw_wide(path, w, n);
    if (e < 0)
        snprintf(why, whylen, "%s: not a usable path", path);
    return e;
}

static int map(HANDLE f, size_t size, bool writable, void **out)
{
    HANDLE m = CreateFileMappingW(f, NULL, writable ? PAGE_READWRITE : PAGE_READONLY,
                                  (DWORD)((uint64_t)size >> 32), (DWORD)size, NULL);
    if (!m)
        return vpw_last_errno();
    void *v = MapViewOfFile(m, writable ? FILE_MAP_WRITE : FILE_MAP_READ, 0, 0, size);
    int e = v ? 0 : vpw_last_errno();
    CloseHandle(m);
    if (e == 0)
        *out = v;
    return e;
}

int vp_mapfile_create(const char *path, size_t size, struct vp_mapfile *out,
                      char *why, size_t whylen)
{
    *out = VP_MAPFILE_NONE;
    wchar_t w[MAX_PATH + 8];
    int e = wide_path(path, w, sizeof(w) / sizeof(w[0]), why, whylen);
    if (e < 0)
        return e;
    DeleteFileW(w);
    HANDLE f = CreateFileW(w, GENERIC_READ | GENERIC_WRITE,
                           FILE_SHARE_READ | FILE_SHARE_DELETE, NULL, CREATE_NEW,
                           FILE_ATTRIBUTE_NORMAL, NULL);
    if (f == INVALID_HANDLE_VALUE) {
        e = vpw_last_errno();
        snprintf(why, whylen, "%s: cannot create it (error %lu)", path,
                 (unsigned long)GetLastError());
        return e;
    }
    void *v = NULL;
    if ((e = map(f, size, true, &v)) < 0) {
        snprintf(why, whylen, "%s: cannot map %zu bytes: %s", path, size,
                 strerror(-e));
        CloseHandle(f);
        DeleteFileW(w);
        return e;
    }
    *out = (struct vp_mapfile){.map = v, .size = size, .h = (intptr_t)f};
    return 0;
}

/* Whether sid is what this process's files are owned by (the token's user
 * or its default owner), or SYSTEM or Administrators, who could replace
 * vramd itself anyway. Anyone else's file is not vramd's state. */
static bool owner_is_ours(PSID sid)
{
    BYTE wk[SECURITY_MAX_SID_SIZE];
    DWORD n = sizeof(wk);
    if (CreateWellKnownSid(WinLocalSystemSid, NULL, wk, &n) && EqualSid(sid, wk))
        return true;
    n = sizeof(wk);
    if (CreateWellKnownSid(WinBuiltinAdministratorsSid, NULL, wk, &n) && EqualSid(sid, wk))
        return true;
    HANDLE t;
    if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &t))
        return false;
    bool ours = false;
    TOKEN_INFORMATION_CLASS cls[2] = {TokenUser, TokenOwner};
    for (int i = 0; i < 2 && !ours; i++) {
        union {
            TOKEN_USER user;
            TOKEN_OWNER owner;
            BYTE b[sizeof(TOKEN_USER) + SECURITY_MAX_SID_SIZE];
        } ti;
        DWORD len = 0;
        if (GetTokenInformation(t, cls[i], &ti, sizeof(ti), &len))
            ours = EqualSid(sid, i == 0 ? ti.user.User.Sid : ti.owner.Owner);
    }
    CloseHandle(t);
    return ours;
}

int vp_mapfile_open(const char *path, struct vp_mapfile *out, char *why,
                    size_t whylen)
{
    *out = VP_MAPFILE_NONE;
    wchar_t w[MAX_PATH + 8];
    int e = wide_path(path, w, sizeof(w) / sizeof(w[0]), why, whylen);
    if (e < 0)
        return e;
    /* FILE_FLAG_OPEN_REPARSE_POINT: a link is opened as itself, and
     * refused below, never followed. FILE_FLAG_BACKUP_SEMANTICS: a
     * directory opens too, and is refused as not a regular file (without
     * it, the open fails with an access error that says nothing). */
    HANDLE f = CreateFileW(w, GENERIC_READ | READ_CONTROL,
                           FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                           NULL, OPEN_EXISTING,
                           FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_BACKUP_SEMANTICS, NULL);
    if (f == INVALID_HANDLE_VALUE) {
        DWORD err = GetLastError();
        snprintf(why, whylen, "%s: cannot open it (error %lu)", path,
                 (unsigned long)err);
        return err == ERROR_PATH_NOT_FOUND ? -ENOENT : vpw_errno(err);
    }
    BY_HANDLE_FILE_INFORMATION info;
    if (!GetFileInformationByHandle(f, &info)) {
        e = vpw_last_errno();
        snprintf(why, whylen, "%s: cannot read its attributes", path);
        CloseHandle(f);
        return e;
    }
    if (info.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT) {
        CloseHandle(f);
        snprintf(why, whylen, "%s is a link", path);
        return -ELOOP;
    }
    if (info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) {
        CloseHandle(f);
        snprintf(why, whylen, "%s is not a regular file", path);
        return -EPERM;
    }
    PSID owner = NULL;
    PSECURITY_DESCRIPTOR sd = NULL;
    DWORD se = GetSecurityInfo(f, SE_FILE_OBJECT, OWNER_SECURITY_INFORMATION, &owner,
                               NULL, NULL, NULL, &sd);
    bool ours = se == ERROR_SUCCESS && owner && owner_is_ours(owner);
    if (sd)
        LocalFree(sd);
    if (!ours) {
        CloseHandle(f);
        if (se != ERROR_SUCCESS)
            snprintf(why, whylen, "%s: cannot read its owner (error %lu)", path,
                     (unsigned long)se);
        else
            snprintf(why, whylen, "%s is not a file of this user (its owner is "
                     "not vramd's user, SYSTEM or Administrators)", path);
        return -EPERM;
    }
    uint64_t size = (uint64_t)info.nFileSizeHigh << 32 | info.nFileSizeLow;
    if (size == 0) {
        CloseHandle(f);
        return 0;
    }
    void *v = NULL;
    e = map(f, (size_t)size, false, &v);
    CloseHandle(f);
    if (e < 0) {
        snprintf(why, whylen, "%s: cannot map it: %s", path, strerror(-e));
        return e;
    }
    *out = (struct vp_mapfile){.map = v, .size = (size_t)size, .h = -1};
    return 0;
}

void vp_mapfile_close(struct vp_mapfile *m)
{
    if (!m)
        return;
    if (m->map)
        UnmapViewOfFile(m->map);
    if (m->h != -1)
        CloseHandle((HANDLE)m->h);
    *m = VP_MAPFILE_NONE;
}

int vp_file_rename(const char *from, const char *to)
{
    wchar_t a[MAX_PATH + 8], b[MAX_PATH + 8];
    int e;
    if ((e = vpw_wide(from, a, MAX_PATH + 8)) < 0 ||
        (e = vpw_wide(to, b, MAX_PATH + 8)) < 0)
        return e;
    if (!MoveFileExW(a, b, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH))
        return vpw_last_errno();
    return 0;
}

int vp_file_remove(const char *path)
{
    wchar_t w[MAX_PATH + 8];
    int e = vpw_wide(path, w, MAX_PATH + 8);
    if (e < 0)
        return e;
    if (!DeleteFileW(w))
        return vpw_last_errno();
    return 0;
}

/* Windows has no boot id; the boot's time (the kernel's record of it,
 * fixed for the boot, unlike now less the uptime) is one. "" when unknown. */
void vp_boot_id(char out[40])
{
    SYSTEM_TIMEOFDAY_INFORMATION t;
    ULONG got = 0;
    out[0] = '\0';
    if (NtQuerySystemInformation(SystemTimeOfDayInformation, &t, sizeof(t), &got) < 0)
        return;
    snprintf(out, 40, "win-boot-%llu", (unsigned long long)t.BootTime.QuadPart);
}
