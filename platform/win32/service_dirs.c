/* SPDX-License-Identifier: Apache-2.0 */
/* %ProgramData%\vramd, its configuration path and the log file. */
#include "platform/win32/service_dirs.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <aclapi.h>
#include <sddl.h>
#include <shlobj.h>
#include <knownfolders.h>

#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/win32/scm_errno.h"
#include "platform/win32/wstr.h"

#define DIR_NAME "vramd"
#define CONFIG_NAME "vramd.json"
#define LOG_NAME "vramd.log"
#define DEFAULT_LOG_MAX (16ul << 20)
#define WPATH_MAX (MAX_PATH * 4)

/* SYSTEM and Administrators: full control; Users: read and list. For the
 * folder and, inherited (OICI), what is made in it. P: nothing inherited
 * from %ProgramData%, which lets every user create and write. */
#define DIR_SDDL L"D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)"

int vpw_svc_data_dir(char *buf, size_t len)
{
    char base[WPATH_MAX];
    PWSTR w = NULL;
    int e;
    if (SUCCEEDED(SHGetKnownFolderPath(&FOLDERID_ProgramData, 0, NULL, &w))) {
        e = vpw_utf8(w, base, sizeof(base));
        CoTaskMemFree(w);
    } else {
        wchar_t env[WPATH_MAX];
        DWORD n = GetEnvironmentVariableW(L"ProgramData", env, WPATH_MAX);
        if (n == 0 || n >= WPATH_MAX)
            return -ENOENT;
        e = vpw_utf8(env, base, sizeof(base));
    }
    if (e < 0)
        return e;
    int n = snprintf(buf, len, "%s\\%s", base, DIR_NAME);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int vpw_svc_config_path(const char *dir, char *buf, size_t len)
{
    char d[WPATH_MAX];
    if (!dir) {
        int e = vpw_svc_data_dir(d, sizeof(d));
        if (e < 0)
            return e;
        dir = d;
    }
    int n = snprintf(buf, len, "%s\\%s", dir, CONFIG_NAME);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Whether owner is SYSTEM, Administrators or this process's user. */
static bool trusted_owner(PSID owner)
{
    BYTE sy[SECURITY_MAX_SID_SIZE], ba[SECURITY_MAX_SID_SIZE];
    DWORD n = sizeof(sy);
    if (CreateWellKnownSid(WinLocalSystemSid, NULL, sy, &n) && EqualSid(owner, sy))
        return true;
    n = sizeof(ba);
    if (CreateWellKnownSid(WinBuiltinAdministratorsSid, NULL, ba, &n) &&
        EqualSid(owner, ba))
        return true;
    HANDLE t;
    if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &t))
        return false;
    BYTE buf[sizeof(TOKEN_USER) + SECURITY_MAX_SID_SIZE];
    bool mine = GetTokenInformation(t, TokenUser, buf, sizeof(buf), &n) &&
                EqualSid(owner, ((TOKEN_USER *)buf)->User.Sid);
    CloseHandle(t);
    return mine;
}

int vpw_svc_prepare_dir(const char *dir, char *why, size_t whylen)
{
    wchar_t w[WPATH_MAX];
    if (vpw_wide(dir, w, WPATH_MAX) < 0) {
        snprintf(why, whylen, "data directory %s: not a valid path", dir ? dir : "(null)");
        return -EINVAL;
    }
    PSECURITY_DESCRIPTOR sd = NULL;
    if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(DIR_SDDL, SDDL_REVISION_1,
                                                              &sd, NULL)) {
        snprintf(why, whylen, "data directory's security descriptor: error %lu",
                 GetLastError());
        return -EIO;
    }
    SECURITY_ATTRIBUTES sa = {sizeof(sa), sd, FALSE};
    BOOL made = CreateDirectoryW(w, &sa);
    DWORD err = GetLastError();
    LocalFree(sd);
    if (made)
        return 1;
    if (err != ERROR_ALREADY_EXISTS) {
        snprintf(why, whylen, "cannot create data directory %s: error %lu", dir, err);
        return vpw_scm_errno(err);
    }
    DWORD attrs = GetFileAttributesW(w);
    if (attrs == INVALID_FILE_ATTRIBUTES || !(attrs & FILE_ATTRIBUTE_DIRECTORY)) {
        snprintf(why, whylen, "data directory %s is not a directory", dir);
        return -ENOTDIR;
    }
    if (attrs & FILE_ATTRIBUTE_REPARSE_POINT) {
        snprintf(why, whylen, "data directory %s is a junction or link; refusing",
                 dir);
        return -ELOOP;
    }
    PSID owner = NULL;
    PSECURITY_DESCRIPTOR got = NULL;
    err = GetNamedSecurityInfoW(w, SE_FILE_OBJECT, OWNER_SECURITY_INFORMATION, &owner,
                                NULL, NULL, NULL, &got);
    if (err != ERROR_SUCCESS) {
        snprintf(why, whylen, "cannot read the owner of %s: error %lu", dir, err);
        return vpw_scm_errno(err);
    }
    bool ok = owner && trusted_owner(owner);
    wchar_t *ws = NULL;
    char s[256] = "?";
    if (!ok && owner && ConvertSidToStringSidW(owner, &ws)) {
        vpw_utf8(ws, s, sizeof(s));
        LocalFree(ws);
    }
    LocalFree(got);
    if (!ok) {
        snprintf(why, whylen, "data directory %s belongs to %s, not to SYSTEM, "
                 "Administrators or vramd's user; refusing (another user may "
                 "have made it: remove it)", dir, s);
        return -EPERM;
    }
    return 0;
}

int vpw_svc_log_open(const char *dir, unsigned long max_bytes,
                          char *path_out, size_t pathlen, char *why,
                          size_t whylen)
{
    char path[WPATH_MAX], old[WPATH_MAX];
    int n = snprintf(path, sizeof(path), "%s\\%s", dir, LOG_NAME);
    if (n < 0 || (size_t)n >= sizeof(path) ||
        snprintf(old, sizeof(old), "%s.1", path) >= (int)sizeof(old)) {
        snprintf(why, whylen, "log path in %s: too long", dir);
        return -ENAMETOOLONG;
    }
    wchar_t w[WPATH_MAX], wold[WPATH_MAX];
    if (vpw_wide(path, w, WPATH_MAX) < 0 || vpw_wide(old, wold, WPATH_MAX) < 0) {
        snprintf(why, whylen, "log path %s: not valid", path);
        return -EINVAL;
    }
    /* Rotation, once a start: the run before the last stays readable. */
    WIN32_FILE_ATTRIBUTE_DATA fa;
    if (GetFileAttributesExW(w, GetFileExInfoStandard, &fa) &&
        ((uint64_t)fa.nFileSizeHigh << 32 | fa.nFileSizeLow) >
            (max_bytes ? max_bytes : DEFAULT_LOG_MAX))
        MoveFileExW(w, wold, MOVEFILE_REPLACE_EXISTING);
    /* Appending only; others may read (and rename, or truncate) it while
     * it is open, so it can be tailed. Not inherited (no attributes). */
    HANDLE h = CreateFileW(w, FILE_APPEND_DATA | SYNCHRONIZE,
                           FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                           NULL, OPEN_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
    if (h == INVALID_HANDLE_VALUE) {
        DWORD err = GetLastError();
        snprintf(why, whylen, "cannot open log %s: error %lu", path, err);
        return vpw_scm_errno(err);
    }
    int fd = _open_osfhandle((intptr_t)h, _O_APPEND | _O_TEXT | _O_WRONLY);
    if (fd < 0) {
        CloseHandle(h);
        snprintf(why, whylen, "cannot open log %s: out of descriptors", path);
        return -EMFILE;
    }
    fflush(stderr);
    /* A service has no console: its stderr stream then names no
     * descriptor (-2), and freopen refuses such a stream under wine. So
     * descriptor 2 becomes the file, and the stream is pointed at it;
     * msvcrt's FILE is a public struct (mingw-w64's stdio.h). */
    int target = _fileno(stderr) >= 0 ? _fileno(stderr) : 2;
    int r = fd == target ? 0 : _dup2(fd, target);
    if (fd != target)
        _close(fd);
    if (r != 0) {
        snprintf(why, whylen, "cannot redirect stderr to %s", path);
        return -EIO;
    }
    if (_fileno(stderr) < 0) {
#ifdef _UCRT
        snprintf(why, whylen, "stderr names no descriptor (UCRT): not redirected");
        return -ENOSYS;
#else
        stderr->_file = target;
        stderr->_flag = _IOWRT;
#endif
    }
    setvbuf(stderr, NULL, _IONBF, 0);
    HANDLE eh = (HANDLE)_get_osfhandle(target);
    /* _dup2 makes an inheritable handle, as descriptors are inherited. */
    SetHandleInformation(eh, HANDLE_FLAG_INHERIT, 0);
    SetStdHandle(STD_ERROR_HANDLE, eh);
    snprintf(path_out, pathlen, "%s", path);
    return 0;
}
