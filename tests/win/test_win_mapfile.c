/* SPDX-License-Identifier: Apache-2.0 */
/* The state file's platform calls on Windows (platform/win32/mapfile_win32.c):
 * a file made and mapped for writing, read back mapped read-only, renamed
 * over (the state's NAME.state.new replaces NAME.state), and
 * what vp_mapfile_open refuses as not vramd's state: a directory, a
 * missing file, and a file another user owns. Wine keeps no file owners,
 * so the last is checked on real Windows only. */
#include "tests/win/wintest.h"

#include <aclapi.h>
#include <sddl.h>

#include "platform/mapfile.h"

static char dir[MAX_PATH];

static void path_in(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s\\%s", dir, name);
}

static void test_roundtrip(void)
{
    char a[MAX_PATH + 16], b[MAX_PATH + 16], why[256] = "";
    path_in("s.state", a, sizeof(a));
    path_in("s.state.new", b, sizeof(b));
    struct vp_mapfile w, n, r;
    CHECK(vp_mapfile_create(a, 65536, &w, why, sizeof(why)) == 0, "create: %s", why);
    memset(w.map, 0xa5, 65536);
    vp_mapfile_close(&w);
    CHECK(vp_mapfile_open(a, &r, why, sizeof(why)) == 0 && r.size == 65536 &&
              ((unsigned char *)r.map)[65535] == 0xa5,
          "read back: %s", why);
    /* The new file replaces the old one (once the old one's view is gone:
     * Windows and wine refuse to replace a mapped file, which is why
     * daemon/state/state.c lets it go first). */
    CHECK(vp_mapfile_create(b, 131072, &n, why, sizeof(why)) == 0, "create new: %s", why);
    memset(n.map, 0x3c, 131072);
    vp_mapfile_close(&n);
    vp_mapfile_close(&r);
    CHECK(vp_file_rename(b, a) == 0, "rename over the old file");
    CHECK(vp_mapfile_open(a, &r, why, sizeof(why)) == 0 && r.size == 131072 &&
              ((unsigned char *)r.map)[0] == 0x3c,
          "the new one is read: %s", why);
    vp_mapfile_close(&r);
    vp_mapfile_close(&r); /* closing twice is harmless */
    CHECK(vp_file_remove(a) == 0, "remove");
}

static void test_refusals(void)
{
    char p[MAX_PATH + 16], why[256] = "";
    struct vp_mapfile r = {.map = (void *)1};
    path_in("none.state", p, sizeof(p));
    CHECK(vp_mapfile_open(p, &r, why, sizeof(why)) == -ENOENT && !r.map,
          "a missing file: -ENOENT (%s)", why);
    path_in("adir", p, sizeof(p));
    MUST(CreateDirectoryA(p, NULL), "mkdir %s", p);
    why[0] = 0;
    CHECK(vp_mapfile_open(p, &r, why, sizeof(why)) == -EPERM && strstr(why, "not a regular file"),
          "a directory: -EPERM (%s)", why);
    RemoveDirectoryA(p);
}

/* A state file owned by someone else (a SID nobody has) is refused. Only
 * an administrator may give a file another owner (SeRestorePrivilege), and
 * wine keeps no owners at all: there it reads back as before. */
static void test_foreign_owner(void)
{
    char p[MAX_PATH + 16], why[256] = "";
    path_in("foreign.state", p, sizeof(p));
    struct vp_mapfile w, r;
    MUST(vp_mapfile_create(p, 65536, &w, why, sizeof(why)) == 0, "create: %s", why);
    vp_mapfile_close(&w);
    PSID other = NULL;
    MUST(ConvertStringSidToSidA("S-1-5-21-111-222-333-4001", &other), "SID");
    HANDLE tok;
    if (OpenProcessToken(GetCurrentProcess(), TOKEN_ADJUST_PRIVILEGES, &tok)) {
        TOKEN_PRIVILEGES tp = {.PrivilegeCount = 1};
        tp.Privileges[0].Attributes = SE_PRIVILEGE_ENABLED;
        if (LookupPrivilegeValueA(NULL, "SeRestorePrivilege", &tp.Privileges[0].Luid))
            AdjustTokenPrivileges(tok, FALSE, &tp, 0, NULL, NULL);
        CloseHandle(tok);
    }
    DWORD set = SetNamedSecurityInfoA(p, SE_FILE_OBJECT, OWNER_SECURITY_INFORMATION,
                                      other, NULL, NULL, NULL);
    PSID now = NULL;
    PSECURITY_DESCRIPTOR sd = NULL;
    bool changed = set == ERROR_SUCCESS &&
                   GetNamedSecurityInfoA(p, SE_FILE_OBJECT, OWNER_SECURITY_INFORMATION,
                                         &now, NULL, NULL, NULL, &sd) == ERROR_SUCCESS &&
                   now && EqualSid(now, other);
    if (sd)
        LocalFree(sd);
    if (WINDOWS_ONLY("a state file another user owns is refused",
                     "wine keeps no file owners (a set owner does not read back)")) {
        if (!changed) {
            printf("SKIP: a state file another user owns: the owner could not be set "
                   "(error %lu; an administrator is needed)\n", (unsigned long)set);
            skip_count++;
        } else {
            CHECK(vp_mapfile_open(p, &r, why, sizeof(why)) == -EPERM &&
                      strstr(why, "not a file of this user"),
                  "a file of another owner: -EPERM (%s)", why);
        }
    } else {
        /* What wine does give: the file stays ours, and is read. */
        CHECK(vp_mapfile_open(p, &r, why, sizeof(why)) == 0, "our own file: %s", why);
        vp_mapfile_close(&r);
    }
    LocalFree(other);
    DeleteFileA(p);
}

int main(void)
{
    DWORD n = GetTempPathA(sizeof(dir), dir);
    MUST(n > 0 && n < sizeof(dir) - 40, "GetTempPath");
    wt_unique(dir + n, sizeof(dir) - n, "vram-mapfile");
    MUST(CreateDirectoryA(dir, NULL), "mkdir %s", dir);
    test_roundtrip();
    test_refusals();
    test_foreign_owner();
    RemoveDirectoryA(dir);
    return win_report("test_win_mapfile");
}
