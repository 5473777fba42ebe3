/* SPDX-License-Identifier: Apache-2.0 */
/* vramd serving, and refusing, processes of other users: what only a real
 * Windows machine, and an administrator on it, can run. Under wine every
 * process belongs to one user, an administrator, and no pipe DACL is ever
 * checked (docs/windows.md), so there each check prints
 * "SKIP (real Windows only): ..." with the reason and the test exits 0.
 * On real Windows without an elevated administrator (creating users takes
 * one) each check prints "SKIP (needs an elevated administrator): ..." and
 * the test exits 77, which ctest reports as skipped (SKIP_RETURN_CODE in
 * cmake/windows_crossuser.cmake). Nothing is ever passed that did not run.
 *
 * On real Windows, elevated:
 *  1. Two temporary local users, vramtA<pid> and vramtB<pid> (NetUserAdd,
 *     level 1, random 24-character passwords), deleted at exit whatever
 *     happened (atexit, and a console control handler for ^C): their
 *     processes ended, their profiles (if Windows made any) removed, the
 *     accounts deleted (NetUserDel), the passwords wiped.
 *  2. vramd.exe installed as a service of the test's own name, pipe, run
 *     directory and configuration (host backend, as test_win_vramd's),
 *     with access.allow.users = [userA]. A service, so LocalSystem: vramd
 *     pins each client's process with PROCESS_DUP_HANDLE and pushes chunks
 *     into it, which an administrator's own token may not do to another
 *     user's process (identity.c says "serving other users' processes
 *     takes LocalSystem"); the service is what users will run. It is set
 *     to demand start after the install, so one left behind by a killed
 *     test never starts at boot.
 *  3. win_vramd_client.exe run as userA (CreateProcessWithLogonW, logon
 *     flags 0: a real logon of that user, not LOGON_NETCREDENTIALS_ONLY,
 *     which would keep this user's token locally) is served in full:
 *     hello, a fixed region grown by host chunks that vramd pushed into
 *     userA's process, written and read, shrunk, released. vramd's log
 *     shows the hello with a uid of the client's own (not 0: not an
 *     administrator). Also a probe (this program, run as userA with
 *     --dial) opens the pipe with read + FILE_WRITE_DATA and is refused
 *     GENERIC_WRITE (no FILE_CREATE_PIPE_INSTANCE for clients).
 *  4. As userB (not listed), the probe's open is refused with
 *     ERROR_ACCESS_DENIED (the pipe's DACL), and win_vramd_client.exe's
 *     connect fails with -EACCES at the dial (its REQUIRE, exit 1); vramd's
 *     log never saw that process. vramd keeps serving: still RUNNING as the
 *     same process, and a third run as userA is served. A fourth run as
 *     userA with VRAM_SERVICE naming the service: libvram asks the service
 *     manager for the service's pid as a standard user, and is served.
 *  5. A %ProgramData% directory made first by userB (cmd /c mkdir, run as
 *     userB) is owned by userB and refused by vpw_svc_prepare_dir
 *     (-EPERM, naming userB's SID); one this process made is accepted.
 *
 * Where the files are: the other users must be able to run the client
 * (and libvram.dll beside it) and the probe, but the build directory may
 * be anywhere, often in the administrator's profile, which other users
 * cannot read. So the programs are copied into a directory of the test's
 * own (xdir below), %ProgramData%\vramt-<pid>-<n>, made with a protected
 * DACL: SYSTEM and Administrators full control, userA and userB read and
 * execute, and nobody else anything (nothing inherited from %ProgramData%,
 * where every user may create and write). The copies get that DACL
 * explicitly too.
 * vramd.exe is copied there as well: a service's program must not be
 * writable by users. The run directory (configuration, log, state, lock)
 * is a subdirectory made by vpw_svc_prepare_dir; clients need nothing
 * of it, they talk to the pipe only. The build tree's ACLs are left alone,
 * and the whole directory is removed at exit.
 *
 * Run it by hand, from an elevated prompt, in the build directory copied
 * to a Windows machine: test_win_crossuser.exe. It needs the Secondary
 * Logon service (seclogon) for CreateProcessWithLogonW, and a local
 * machine whose Users may log on locally (not a domain controller). */
#include "tests/win/wintest.h"

#include <aclapi.h>
#include <bcrypt.h>
#include <knownfolders.h>
#include <lm.h>
#include <sddl.h>
#include <shlobj.h>
#include <userenv.h>

#include "platform/win32/identity.h" /* VP_SID_ID_BASE */
#include "windows-service/install.h"
#include "platform/win32/service_dirs.h"
#include "tests/win/winproc.h"

#define WPATH (MAX_PATH * 2)
#define PW_LEN 24
/* How long one program of a user may run. */
#define RUN_MS 60000

/* A check that prints its outcome: on real Windows every check says PASS
 * or FAIL (wintest.h's CHECK counts it and says why on failure). */
#define STEP(cond, ...)                                                        \
    do {                                                                       \
        bool step_ok_ = (cond);                                                \
        CHECK(step_ok_, __VA_ARGS__);                                          \
        printf("%s: ", step_ok_ ? "PASS" : "FAIL");                            \
        printf(__VA_ARGS__);                                                   \
        printf("\n");                                                          \
        fflush(stdout);                                                        \
    } while (0)

/* What is checked, for the skip lines: under wine, or without an
 * administrator, each says which check did not run and why. */
static const char *const CHECKS[][2] = {
    {"two temporary local users (NetUserAdd), deleted at exit (NetUserDel)",
     "wine has a single user: no second account can be logged on as"},
    {"vramd as LocalSystem serving a listed user's process: hello, a region grown by "
     "chunks pushed into that process (OpenProcess with PROCESS_DUP_HANDLE across users), "
     "written and read",
     "wine runs every process as the same user, an administrator: there is no other "
     "user's process to push into"},
    {"the listed user gets read and FILE_WRITE_DATA on vramd's pipe, and GENERIC_WRITE "
     "refused (no FILE_CREATE_PIPE_INSTANCE)",
     "wine never checks a pipe's DACL when a client opens it"},
    {"a user not on access.allow refused at the pipe's DACL: the open gives "
     "ERROR_ACCESS_DENIED",
     "wine never checks a pipe's DACL when a client opens it"},
    {"libvram of a user not on access.allow: vram_client_connect fails with -EACCES at "
     "the dial, and vramd never sees the process",
     "wine never checks a pipe's DACL when a client opens it"},
    {"vramd keeps serving after a refusal: the same process, the listed user served again",
     "the refusal it follows cannot happen under wine"},
    {"libvram of a standard user asking the service manager for the service's pid "
     "(VRAM_SERVICE) is served",
     "wine has no standard user: every process is an administrator"},
    {"a %ProgramData% directory made first by another user is refused by "
     "vpw_svc_prepare_dir (-EPERM)",
     "wine has one user, and every file's owner is that user (wine makes owners and "
     "DACLs up from the Unix file)"},
};
#define NCHECKS (sizeof(CHECKS) / sizeof(CHECKS[0]))

struct user {
    wchar_t name[32];
    char name8[32];
    wchar_t pw[PW_LEN + 1];
    char sid[192]; /* S-1-5-21-... */
    bool created;
};
static struct user ua, ub;

static char svc_name[64], pipe_name[128], src_dir[WPATH], xdir[WPATH], run_dir[WPATH],
    by_b[WPATH], by_me[WPATH], log_path[WPATH], cfg_path[WPATH];
static bool svc_installed;
/* The user's program running now, ended by the cleanup if it outlives us. */
static HANDLE running;
static volatile LONG cleaned;

static void wide(const char *s, wchar_t *w, int n)
{
    if (!MultiByteToWideChar(CP_UTF8, 0, s, -1, w, n))
        w[0] = 0;
}

static void narrow(const wchar_t *w, char *s, int n)
{
    if (!WideCharToMultiByte(CP_UTF8, 0, w, -1, s, n, NULL, NULL))
        s[0] = 0;
}

/* The probe, run as another user: opens pipe as a client with read and
 * FILE_WRITE_DATA ("rw", what libvram asks) or GENERIC_READ | GENERIC_WRITE
 * ("gw"), at identification level as libvram does. Exits with the error
 * (0: opened), so the test reads the answer from the exit code alone. */
static int probe(const char *pipe, const char *how)
{
    DWORD access = strcmp(how, "gw") == 0 ? GENERIC_READ | GENERIC_WRITE
                                          : GENERIC_READ | FILE_WRITE_DATA;
    wchar_t w[256];
    wide(pipe, w, 256);
    for (int t = 0; t < 50; t++) {
        HANDLE h = CreateFileW(w, access, 0, NULL, OPEN_EXISTING,
                               SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION, NULL);
        if (h != INVALID_HANDLE_VALUE) {
            CloseHandle(h);
            printf("probe: %s opened with 0x%lx\n", pipe, access);
            return 0;
        }
        DWORD err = GetLastError();
        /* Every instance taken: wait for one, as libvram's dial does. */
        if (err == ERROR_PIPE_BUSY) {
            WaitNamedPipeW(w, 100);
            continue;
        }
        printf("probe: %s with 0x%lx: error %lu\n", pipe, access, err);
        return err ? (int)err : 1;
    }
    printf("probe: %s stayed busy\n", pipe);
    return ERROR_PIPE_BUSY;
}

static bool is_admin(void)
{
    BYTE ba[SECURITY_MAX_SID_SIZE];
    DWORD n = sizeof(ba);
    BOOL member = FALSE;
    /* CheckTokenMembership counts only enabled groups: an administrator's
     * filtered (not elevated) token has Administrators deny-only. */
    if (!CreateWellKnownSid(WinBuiltinAdministratorsSid, NULL, ba, &n) ||
        !CheckTokenMembership(NULL, ba, &member))
        return false;
    return member;
}

/* A password that any complexity policy takes: each of the four classes,
 * then random ones, from the system's generator. */
static bool make_password(wchar_t pw[PW_LEN + 1])
{
    static const char *const classes[] = {"ABCDEFGHJKLMNPQRSTUVWXYZ",
                                          "abcdefghijkmnopqrstuvwxyz", "23456789",
                                          "!#%+-=_.:?@"};
    static const char all[] = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
                              "23456789!#%+-=_.:?@";
    unsigned char r[PW_LEN];
    if (!BCRYPT_SUCCESS(BCryptGenRandom(NULL, r, sizeof(r),
                                        BCRYPT_USE_SYSTEM_PREFERRED_RNG)))
        return false;
    for (int i = 0; i < PW_LEN; i++) {
        const char *set = i < 4 ? classes[i] : all;
        pw[i] = (wchar_t)set[r[i] % strlen(set)];
    }
    pw[PW_LEN] = 0;
    SecureZeroMemory(r, sizeof(r));
    return true;
}

/* Creates user u and reads its SID: 0, NetUserAdd's NET_API_STATUS, or
 * the Win32 error of the lookup. Only an account made here is ever deleted
 * (u->created): a name that exists is someone's. */
static DWORD add_user(struct user *u, char letter)
{
    /* At most 20 characters (a Windows account name): 32 random bits. */
    _snwprintf(u->name, 32, L"vramt%c%08lx", letter, (unsigned long)wt_random64());
    narrow(u->name, u->name8, sizeof(u->name8));
    if (!make_password(u->pw))
        return ERROR_INTERNAL_ERROR;
    USER_INFO_1 ui = {
        .usri1_name = u->name,
        .usri1_password = u->pw,
        .usri1_priv = USER_PRIV_USER,
        .usri1_comment = L"vramd test_win_crossuser (deleted when the test ends)",
        .usri1_flags = UF_SCRIPT | UF_DONT_EXPIRE_PASSWD | UF_PASSWD_CANT_CHANGE,
    };
    DWORD parm = 0;
    NET_API_STATUS st = NetUserAdd(NULL, 1, (LPBYTE)&ui, &parm);
    if (st != NERR_Success)
        return st;
    u->created = true;
    BYTE sid[SECURITY_MAX_SID_SIZE];
    wchar_t dom[256];
    DWORD sn = sizeof(sid), dn = 256;
    SID_NAME_USE use;
    LPWSTR ws = NULL;
    if (!LookupAccountNameW(NULL, u->name, sid, &sn, dom, &dn, &use) ||
        !ConvertSidToStringSidW(sid, &ws))
        return GetLastError();
    narrow(ws, u->sid, sizeof(u->sid));
    LocalFree(ws);
    return 0;
}

static void delete_user(struct user *u, bool report)
{
    if (!u->created)
        return;
    /* A logon may have made a profile (C:\Users\NAME): NetUserDel leaves
     * it. None is expected without LOGON_WITH_PROFILE; gone either way. */
    if (u->sid[0]) {
        wchar_t ws[192];
        wide(u->sid, ws, 192);
        DeleteProfileW(ws, NULL, NULL);
    }
    NET_API_STATUS st = NetUserDel(NULL, u->name);
    u->created = st != NERR_Success && st != NERR_UserNotFound;
    SecureZeroMemory(u->pw, sizeof(u->pw));
    if (report)
        STEP(st == NERR_Success, "user %s deleted (NetUserDel: %lu)", u->name8,
             (unsigned long)st);
}

/* Sets path's DACL to sddl, protected (nothing inherited). */
static DWORD set_dacl(const char *path, const wchar_t *sddl)
{
    PSECURITY_DESCRIPTOR sd = NULL;
    if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1, &sd,
                                                              NULL))
        return GetLastError();
    BOOL present = FALSE, defaulted = FALSE;
    PACL dacl = NULL;
    DWORD err = ERROR_INVALID_SECURITY_DESCR;
    if (GetSecurityDescriptorDacl(sd, &present, &dacl, &defaulted) && present) {
        wchar_t w[WPATH];
        wide(path, w, WPATH);
        err = SetNamedSecurityInfoW(w, SE_FILE_OBJECT,
                                    DACL_SECURITY_INFORMATION |
                                        PROTECTED_DACL_SECURITY_INFORMATION,
                                    NULL, NULL, dacl, NULL);
    }
    LocalFree(sd);
    return err;
}

/* The test directory's DACL: SYSTEM and Administrators full control, the two
 * users read and execute (0x1200a9), for the folder and what is in it. */
static void xdir_sddl(wchar_t *buf, size_t n, const wchar_t *inherit)
{
    wchar_t a[192], b[192];
    wide(ua.sid, a, 192);
    wide(ub.sid, b, 192);
    _snwprintf(buf, n,
               L"D:P(A;%ls;FA;;;SY)(A;%ls;FA;;;BA)(A;%ls;0x1200a9;;;%ls)"
               L"(A;%ls;0x1200a9;;;%ls)",
               inherit, inherit, inherit, a, inherit, b);
}

static bool make_xdir(void)
{
    PWSTR pd = NULL;
    if (FAILED(SHGetKnownFolderPath(&FOLDERID_ProgramData, 0, NULL, &pd)))
        return false;
    char base[WPATH];
    narrow(pd, base, sizeof(base));
    CoTaskMemFree(pd);
    unsigned long long n = (unsigned long long)wt_random64();
    snprintf(xdir, sizeof(xdir), "%s\\vramt-%016llx", base, n);
    snprintf(by_b, sizeof(by_b), "%s\\vramt-%016llx-byB", base, n);
    wchar_t sddl[1024], w[WPATH];
    xdir_sddl(sddl, 1024, L"OICI");
    PSECURITY_DESCRIPTOR sd = NULL;
    if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1, &sd,
                                                              NULL))
        return false;
    SECURITY_ATTRIBUTES sa = {sizeof(sa), sd, FALSE};
    wide(xdir, w, WPATH);
    /* A fresh directory only: one that exists could be anyone's. */
    BOOL ok = CreateDirectoryW(w, &sa);
    LocalFree(sd);
    if (!ok)
        xdir[0] = 0;
    return ok;
}

/* Copies name from the build directory into xdir as as, with xdir's DACL
 * set explicitly (what ACL a copy gets is not something to assume). */
static bool copy_in(const char *name, const char *as)
{
    char from[WPATH], to[WPATH];
    wchar_t wf[WPATH], wt[WPATH], sddl[1024];
    snprintf(from, sizeof(from), "%s%s", src_dir, name);
    snprintf(to, sizeof(to), "%s\\%s", xdir, as);
    wide(from, wf, WPATH);
    wide(to, wt, WPATH);
    if (!CopyFileW(wf, wt, TRUE)) {
        fprintf(stderr, "copying %s to %s: error %lu\n", from, to, GetLastError());
        return false;
    }
    xdir_sddl(sddl, 1024, L"");
    DWORD err = set_dacl(to, sddl);
    if (err)
        fprintf(stderr, "the DACL of %s: error %lu\n", to, err);
    return err == 0;
}

/* ---- programs ----------------------------------------------------------- */

/* p's exit code (winproc.h's wt_wait_exit), a program still running at the
 * deadline ended first: a user's program must not outlive its check. */
static DWORD wait_code(HANDLE p, DWORD ms)
{
    DWORD code = wt_wait_exit(p, ms);
    if (code == WT_TIMED_OUT) {
        TerminateProcess(p, WT_TIMED_OUT);
        WaitForSingleObject(p, 5000);
    }
    return code;
}

/* Runs line as this user (an administrator's program: vramd's install):
 * its exit code, or WT_NOT_STARTED when it could not start. */
static DWORD run_here(const char *line)
{
    wchar_t w[4096];
    wide(line, w, 4096);
    HANDLE p = wt_start(NULL, w, NULL, NULL);
    DWORD code = wait_code(p, RUN_MS);
    if (p)
        CloseHandle(p);
    return code;
}

/* The user a process runs as, as a SID string: 1, 0 when its token
 * cannot be read (another user's token need not grant this process
 * TOKEN_QUERY), -1 on another failure. */
static int process_user(HANDLE p, char *sid, size_t n)
{
    HANDLE t;
    if (!OpenProcessToken(p, TOKEN_QUERY, &t))
        return GetLastError() == ERROR_ACCESS_DENIED ? 0 : -1;
    BYTE buf[sizeof(TOKEN_USER) + SECURITY_MAX_SID_SIZE];
    DWORD len;
    LPWSTR ws = NULL;
    bool ok = GetTokenInformation(t, TokenUser, buf, sizeof(buf), &len) &&
              ConvertSidToStringSidW(((TOKEN_USER *)buf)->User.Sid, &ws);
    CloseHandle(t);
    if (ok) {
        narrow(ws, sid, (int)n);
        LocalFree(ws);
    }
    return ok ? 1 : -1;
}

struct run {
    DWORD code; /* exit code; WT_NOT_STARTED, or WT_TIMED_OUT (killed) */
    DWORD pid;
    /* Its token's user was the one asked for, or could not be read (then
     * the logon's user, which is what CreateProcessWithLogonW runs as). */
    bool as_user;
    char out[8192]; /* its stdout and stderr */
};

/* Runs exe (a path in xdir, or cmd.exe) with args as user u, logged
 * on with its password (CreateProcessWithLogonW, logon flags 0), in the
 * xdir, its output caught in a file there. env: an environment block, or
 * NULL for the one Windows makes for u. Created suspended so that the
 * process's user is checked before it runs. */
static void run_as(const struct user *u, const char *exe, const char *args, void *env,
                   struct run *r)
{
    memset(r, 0, sizeof(*r));
    r->code = WT_NOT_STARTED;
    static int n;
    char out_path[WPATH], line[4096];
    wchar_t wout[WPATH], wexe[WPATH], wline[4096], wdir[WPATH];
    snprintf(out_path, sizeof(out_path), "%s\\out-%d.txt", xdir, n++);
    snprintf(line, sizeof(line), "\"%s\" %s", exe, args);
    wide(out_path, wout, WPATH);
    wide(exe, wexe, WPATH);
    wide(line, wline, 4096);
    wide(xdir, wdir, WPATH);
    /* The secondary logon service hands the standard handles on: they must
     * be inheritable. This process opened the file, so the user needs no
     * right on it. */
    SECURITY_ATTRIBUTES sa = {sizeof(sa), NULL, TRUE};
    HANDLE out = CreateFileW(wout, GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE, &sa,
                             CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
    HANDLE in = CreateFileW(L"NUL", GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE, &sa,
                            OPEN_EXISTING, 0, NULL);
    if (out == INVALID_HANDLE_VALUE || in == INVALID_HANDLE_VALUE) {
        fprintf(stderr, "the output file %s: %lu\n", out_path, GetLastError());
        goto done;
    }
    /* Hidden: its console is a new one (CREATE_NEW_CONSOLE is the default
     * here), and a test should not flash windows. */
    STARTUPINFOW si = {.cb = sizeof(si),
                       .dwFlags = STARTF_USESTDHANDLES | STARTF_USESHOWWINDOW,
                       .wShowWindow = SW_HIDE,
                       .hStdInput = in,
                       .hStdOutput = out,
                       .hStdError = out};
    PROCESS_INFORMATION pi;
    DWORD flags = CREATE_SUSPENDED | (env ? CREATE_UNICODE_ENVIRONMENT : 0);
    if (!CreateProcessWithLogonW(u->name, L".", u->pw, 0, wexe, wline, flags, env, wdir,
                                 &si, &pi)) {
        DWORD err = GetLastError();
        fprintf(stderr, "CreateProcessWithLogonW as %s: %s: error %lu%s\n", u->name8, line,
                err,
                err == ERROR_SERVICE_DISABLED || err == ERROR_SERVICE_NOT_ACTIVE
                    ? " (the Secondary Logon service, seclogon, is off)"
                    : "");
        goto done;
    }
    running = pi.hProcess;
    r->pid = pi.dwProcessId;
    char sid[192] = "";
    int known = process_user(pi.hProcess, sid, sizeof(sid));
    r->as_user = known == 0 || (known == 1 && strcmp(sid, u->sid) == 0);
    if (known == 0)
        fprintf(stderr, "note: the token of pid %lu (%s) cannot be read here: its user "
                "is the logon's, %s\n", pi.dwProcessId, u->name8, u->sid);
    if (!r->as_user) {
        fprintf(stderr, "%s runs as %s, not as %s (%s)\n", line, sid, u->name8, u->sid);
        TerminateProcess(pi.hProcess, 996);
    } else {
        ResumeThread(pi.hThread);
    }
    r->code = wait_code(pi.hProcess, RUN_MS);
    running = NULL;
    CloseHandle(pi.hThread);
    CloseHandle(pi.hProcess);
done:
    if (out != INVALID_HANDLE_VALUE)
        CloseHandle(out);
    if (in != INVALID_HANDLE_VALUE)
        CloseHandle(in);
    FILE *f = _wfopen(wout, L"rb");
    if (f) {
        size_t got = fread(r->out, 1, sizeof(r->out) - 1, f);
        r->out[got] = 0;
        fclose(f);
    }
}

static void show(const char *what, const struct run *r)
{
    fprintf(stderr, "---- %s (pid %lu, exit %lu) ----\n%s---- end ----\n", what, r->pid,
            r->code, r->out);
}

/* win_vramd_client.exe as u, filling the chunks with fill. */
static void client_as(const struct user *u, unsigned fill, void *env, struct run *r)
{
    char exe[WPATH], args[256];
    snprintf(exe, sizeof(exe), "%s\\win_vramd_client.exe", xdir);
    snprintf(args, sizeof(args), "%s 0x%x", pipe_name, fill);
    run_as(u, exe, args, env, r);
}

/* The probe (this program, copied into xdir) as u. */
static DWORD probe_as(const struct user *u, const char *how)
{
    char exe[WPATH], args[256];
    snprintf(exe, sizeof(exe), "%s\\vramt_probe.exe", xdir);
    snprintf(args, sizeof(args), "--dial %s %s", pipe_name, how);
    struct run r;
    run_as(u, exe, args, NULL, &r);
    if (!r.as_user)
        return WT_NOT_STARTED;
    return r.code;
}

/* ---- vramd's log ---------------------------------------------------------- */

/* The whole log (free it), its length in *len; "" before vramd wrote it. */
static char *read_log(size_t *len)
{
    return wt_slurp_a(log_path, len);
}

static size_t log_size(void)
{
    size_t n = 0;
    free(read_log(&n));
    return n;
}

/* Whether the log, from byte from on, has what. */
static bool log_has(size_t from, const char *what)
{
    size_t n = 0;
    char *buf = read_log(&n);
    bool yes = buf && from <= n && strstr(buf + from, what);
    free(buf);
    return yes;
}

static bool log_wait(size_t from, const char *what, int ms)
{
    for (int t = 0; t <= ms; t += 100) {
        if (log_has(from, what))
            return true;
        Sleep(100);
    }
    return false;
}

/* Whether the log, from byte from on, names process pid ("pid N" with N
 * whole: not the start of a longer number). */
static bool log_names_pid(size_t from, DWORD pid)
{
    size_t n = 0;
    char *buf = read_log(&n);
    bool yes = false;
    char want[32];
    int wl = snprintf(want, sizeof(want), "pid %lu", pid);
    for (char *p = buf && from <= n ? strstr(buf + from, want) : NULL; p && !yes;
         p = strstr(p + 1, want))
        yes = p[wl] < '0' || p[wl] > '9';
    free(buf);
    return yes;
}

/* The uid vramd gave the client of pid in its hello line ("client N
 * (wine-engine, pid P, uid U) said hello as engine"), or -1. */
static long hello_uid(size_t from, DWORD pid)
{
    size_t n = 0;
    char *buf = read_log(&n);
    char want[64];
    snprintf(want, sizeof(want), "(wine-engine, pid %lu, uid ", pid);
    char *p = buf && from <= n ? strstr(buf + from, want) : NULL;
    long uid = -1;
    if (p) {
        char *end;
        unsigned long u = strtoul(p + strlen(want), &end, 10);
        if (strncmp(end, ") said hello as engine", 22) == 0)
            uid = (long)u;
    }
    free(buf);
    return uid;
}

static void print_log(void)
{
    char *buf = read_log(NULL);
    wt_print_log(log_path, buf);
    free(buf);
}

/* ---- cleanup ---------------------------------------------------------------- */

/* Leaves nothing behind: the user's program, the service, the users, the
 * directories. Runs once, from main (report: with checks), at exit (a
 * REQUIRE's exit(1)) or on ^C. */
static void cleanup(bool report)
{
    if (InterlockedExchange(&cleaned, 1))
        return;
    if (running) {
        TerminateProcess(running, 1);
        WaitForSingleObject(running, 5000);
    }
    if (svc_installed) {
        char why[256] = "";
        int e = vram_service_uninstall(svc_name, 30000, why, sizeof(why));
        svc_installed = e < 0 && e != -ENOENT;
        if (report)
            STEP(e == 0, "vramd's service %s stopped and removed (%d %s)", svc_name, e, why);
    }
    if (check_failures && log_path[0])
        print_log();
    delete_user(&ua, report);
    delete_user(&ub, report);
    if (by_b[0]) {
        wchar_t w[WPATH];
        wide(by_b, w, WPATH);
        RemoveDirectoryW(w);
    }
    if (by_me[0])
        remove_dir(by_me);
    if (run_dir[0])
        remove_dir(run_dir);
    if (xdir[0])
        remove_dir(xdir);
}

static void cleanup_at_exit(void)
{
    cleanup(false);
}

static BOOL WINAPI on_ctrl(DWORD ev)
{
    (void)ev;
    cleanup(false);
    return FALSE; /* and the default: the process ends */
}

/* ---- the checks ---------------------------------------------------------- */

static void write_config(void)
{
    FILE *f = fopen(cfg_path, "wb");
    REQUIRE(f != NULL, "cannot write %s", cfg_path);
    /* As test_win_vramd's: one small host device in 2 MiB chunks, a small
     * pool. Only userA is allowed (SYSTEM and Administrators always are). */
    fprintf(f, "{\"devices\": [{\"id\": 0, \"backend\": \"host\", \"capacity\": \"64MiB\","
               " \"chunk\": \"2MiB\"}], \"pool\": {\"prefill_chunks\": 2},"
               " \"access\": {\"allow\": {\"users\": [\"%s\"]}}}\n",
            ua.name8);
    fclose(f);
}

/* vramd.exe (xdir's copy) installed as a service of this test's and
 * started; RUNNING with its pid, or REQUIRE fails. */
static int64_t start_vramd(void)
{
    char line[4096];
    snprintf(line, sizeof(line),
             "\"%s\\vramd.exe\" --install-service --service-name %s -s %s -r \"%s\" "
             "-c \"%s\" -l debug",
             xdir, svc_name, pipe_name, run_dir, cfg_path);
    DWORD code = run_here(line);
    REQUIRE(code == 0, "vramd --install-service exited %lu", code);
    svc_installed = true;
    /* Demand start: a service left behind by a killed test must not come
     * back at every boot (vramd installs itself as automatic). */
    wchar_t wname[64];
    wide(svc_name, wname, 64);
    SC_HANDLE m = OpenSCManagerW(NULL, NULL, SC_MANAGER_CONNECT);
    SC_HANDLE s = m ? OpenServiceW(m, wname, SERVICE_CHANGE_CONFIG) : NULL;
    CHECK(s && ChangeServiceConfigW(s, SERVICE_NO_CHANGE, SERVICE_DEMAND_START,
                                    SERVICE_NO_CHANGE, NULL, NULL, NULL, NULL, NULL, NULL,
                                    NULL),
          "setting %s to demand start: %lu", svc_name, GetLastError());
    if (s)
        CloseServiceHandle(s);
    if (m)
        CloseServiceHandle(m);
    REQUIRE(vram_service_start(svc_name) == 0, "starting %s", svc_name);
    struct vpw_scm_status st = {0};
    for (int t = 0; t < 30000; t += 100) {
        if (vram_service_query(svc_name, &st) == 0 &&
            (st.state == SERVICE_RUNNING || st.state == SERVICE_STOPPED))
            break;
        Sleep(100);
    }
    if (st.state != SERVICE_RUNNING)
        print_log();
    REQUIRE(st.state == SERVICE_RUNNING, "vramd's service is %s (exit %u/%u), not RUNNING",
            vram_service_state_name(st.state), st.win32_exit, st.service_exit);
    REQUIRE(log_wait(0, "ready on ", 10000), "vramd's log %s never says it is ready",
            log_path);
    return st.pid;
}

/* An environment block of the system's variables (no user's) and
 * VRAM_SERVICE=svc_name: libvram then checks the pipe's server against
 * the service manager's pid for the service. Freed with free(). */
static wchar_t *env_with_service(void)
{
    void *sys = NULL;
    if (!CreateEnvironmentBlock(&sys, NULL, FALSE))
        return NULL;
    size_t n = 0;
    for (const wchar_t *p = sys; *p; p += wcslen(p) + 1)
        n += wcslen(p) + 1;
    wchar_t extra[128], wname[64];
    wide(svc_name, wname, 64);
    _snwprintf(extra, 128, L"VRAM_SERVICE=%ls", wname);
    size_t en = wcslen(extra) + 1;
    wchar_t *env = malloc((n + en + 1) * sizeof(wchar_t));
    if (env) {
        memcpy(env, sys, n * sizeof(wchar_t));
        memcpy(env + n, extra, en * sizeof(wchar_t));
        env[n + en] = 0;
    }
    DestroyEnvironmentBlock(sys);
    return env;
}

static void test_serving(void)
{
    int64_t pid = start_vramd();
    char want[256];
    snprintf(want, sizeof(want), "(A;;0x12008b;;;%s)", ua.sid);
    STEP(log_has(0, want) && !log_has(0, ub.sid),
         "vramd's pipe descriptor gives %s read and write-data (%s) and names %s nowhere",
         ua.name8, want, ub.name8);

    /* userA, listed: the pipe opens as libvram opens it, not for
     * GENERIC_WRITE (FILE_APPEND_DATA is FILE_CREATE_PIPE_INSTANCE). */
    DWORD rw = probe_as(&ua, "rw"), gw = probe_as(&ua, "gw");
    STEP(rw == 0 && gw == ERROR_ACCESS_DENIED,
         "%s opens the pipe with read + FILE_WRITE_DATA (error %lu) and is refused "
         "GENERIC_WRITE (error %lu, want 5)",
         ua.name8, rw, gw);

    /* userA's client: served in full, chunks pushed into its process. */
    size_t at = log_size();
    struct run r;
    client_as(&ua, 0x11, NULL, &r);
    /* Its uid is a number vramd gave its SID (from VP_SID_ID_BASE), not
     * 0: vramd judged it as userA, not as an administrator. */
    long uid = hello_uid(at, r.pid), uid_a = uid;
    STEP(r.as_user && r.code == 0 && uid >= (long)VP_SID_ID_BASE,
         "win_vramd_client.exe as %s (pid %lu, exit %lu) served: hello (uid %ld, a SID's "
         "number, not root), a region grown by chunks pushed into its process, written and "
         "read, released",
         ua.name8, r.pid, r.code, uid);
    if (r.code != 0)
        show("win_vramd_client as userA", &r);

    /* userB, not listed: refused at the pipe's DACL, before vramd sees
     * anything of it. */
    DWORD b = probe_as(&ub, "rw");
    STEP(b == ERROR_ACCESS_DENIED,
         "%s's open of the pipe with read + FILE_WRITE_DATA refused by its DACL "
         "(error %lu, want 5)",
         ub.name8, b);
    at = log_size();
    client_as(&ub, 0x22, NULL, &r);
    char dial[256];
    snprintf(dial, sizeof(dial), "connect to vramd at %s: %d (cannot connect to vramd at ",
             pipe_name, -EACCES);
    /* The client has no mode for a refusal at the dial (its "refused" mode
     * wants the pid check's "refusing" text): in its normal mode the
     * connect's REQUIRE fails, exit 1, and says what connect returned. */
    bool names_b = log_names_pid(at, r.pid) || log_has(at, ub.sid);
    STEP(r.as_user && r.code == 1 && strstr(r.out, dial) && !names_b,
         "win_vramd_client.exe as %s (pid %lu) refused at the dial: exit %lu (want 1), "
         "\"%s\" in its output%s",
         ub.name8, r.pid, r.code, dial,
         names_b ? ", but vramd's log names it" : ", vramd never saw it");
    if (r.code != 1 || !strstr(r.out, dial))
        show("win_vramd_client as userB", &r);

    /* vramd goes on serving: the same process, userA served again. */
    struct vpw_scm_status st = {0};
    CHECK(vram_service_query(svc_name, &st) == 0, "query %s", svc_name);
    at = log_size();
    client_as(&ua, 0x33, NULL, &r);
    uid = hello_uid(at, r.pid);
    STEP(st.state == SERVICE_RUNNING && st.pid == pid && r.as_user && r.code == 0 &&
             uid == uid_a && uid_a >= 0,
         "after the refusal vramd still runs as pid %lld (%s, pid %lld) and serves %s again "
         "(exit %lu, uid %ld)",
         (long long)pid, vram_service_state_name(st.state), (long long)st.pid, ua.name8,
         r.code, uid);
    if (r.code != 0)
        show("win_vramd_client as userA, again", &r);

    /* libvram as a standard user, told which service serves the pipe:
     * it asks the service manager for the service's pid (conn_win32.c's
     * service_status), which takes SERVICE_QUERY_STATUS on vramd's
     * service. */
    wchar_t *env = env_with_service();
    CHECK(env != NULL, "CreateEnvironmentBlock: %lu", GetLastError());
    if (env) {
        at = log_size();
        client_as(&ua, 0x44, env, &r);
        uid = hello_uid(at, r.pid);
        STEP(r.as_user && r.code == 0 && uid == uid_a && uid_a >= 0,
             "win_vramd_client.exe as %s with VRAM_SERVICE=%s (the service manager asked "
             "as a standard user) served (exit %lu, uid %ld)",
             ua.name8, svc_name, r.code, uid);
        if (r.code != 0)
            show("win_vramd_client as userA with VRAM_SERVICE", &r);
        free(env);
    }
}

/* The owner of path, as a SID string. */
static bool owner_of(const char *path, char *sid, size_t n)
{
    wchar_t w[WPATH];
    wide(path, w, WPATH);
    PSID owner = NULL;
    PSECURITY_DESCRIPTOR sd = NULL;
    if (GetNamedSecurityInfoW(w, SE_FILE_OBJECT, OWNER_SECURITY_INFORMATION, &owner, NULL,
                              NULL, NULL, &sd) != ERROR_SUCCESS)
        return false;
    LPWSTR ws = NULL;
    bool ok = owner && ConvertSidToStringSidW(owner, &ws);
    if (ok) {
        narrow(ws, sid, (int)n);
        LocalFree(ws);
    }
    LocalFree(sd);
    return ok;
}

static void test_data_dir(void)
{
    /* userB makes it first: any user may create folders in %ProgramData%. */
    char cmd[WPATH], args[WPATH + 32], sys[MAX_PATH];
    UINT sn = GetSystemDirectoryA(sys, sizeof(sys));
    REQUIRE(sn > 0 && sn < sizeof(sys), "GetSystemDirectoryA");
    snprintf(cmd, sizeof(cmd), "%s\\cmd.exe", sys);
    snprintf(args, sizeof(args), "/c mkdir \"%s\"", by_b);
    wchar_t wb[WPATH];
    wide(by_b, wb, WPATH);
    if (GetFileAttributesW(wb) != INVALID_FILE_ATTRIBUTES) {
        /* Someone's: not ours to judge, nor to remove at the end. */
        CHECK(false, "%s exists already", by_b);
        by_b[0] = 0;
        return;
    }
    struct run r;
    run_as(&ub, cmd, args, NULL, &r);
    char owner[192] = "";
    bool made = r.as_user && r.code == 0 && owner_of(by_b, owner, sizeof(owner));
    if (!made)
        show("cmd /c mkdir as userB", &r);
    char why[512] = "";
    int e = made ? vpw_svc_prepare_dir(by_b, why, sizeof(why)) : 0;
    STEP(made && strcmp(owner, ub.sid) == 0 && e == -EPERM && strstr(why, ub.sid),
         "%s, made first by %s (cmd exit %lu; owner %s, want %s), refused by "
         "vpw_svc_prepare_dir: %d (want %d): %s",
         by_b, ub.name8, r.code, owner, ub.sid, e, -EPERM, why);

    /* And the same call takes a directory this process made, then finds
     * it its own: the refusal is about the owner, not about the call. */
    snprintf(by_me, sizeof(by_me), "%s\\made-here", xdir);
    int e1 = vpw_svc_prepare_dir(by_me, why, sizeof(why));
    int e2 = e1 == 1 ? vpw_svc_prepare_dir(by_me, why, sizeof(why)) : e1;
    STEP(e1 == 1 && e2 == 0,
         "a directory this process made is made (%d, want 1) and then accepted (%d, "
         "want 0) by vpw_svc_prepare_dir",
         e1, e2);
}

int main(int argc, char **argv)
{
    /* The probe, run as another user from xdir's copy. */
    if (argc == 4 && strcmp(argv[1], "--dial") == 0)
        return probe(argv[2], argv[3]);

    if (under_wine()) {
        for (size_t i = 0; i < NCHECKS; i++)
            (void)WINDOWS_ONLY(CHECKS[i][0], CHECKS[i][1]);
        return win_report("test_win_crossuser");
    }
    if (!is_admin()) {
        for (size_t i = 0; i < NCHECKS; i++)
            printf("SKIP (needs an elevated administrator): %s: creating users takes "
                   "one, and this process's Administrators group is not enabled\n",
                   CHECKS[i][0]);
        printf("test_win_crossuser: skipped (run it from an elevated prompt)\n");
        return 77; /* ctest's SKIP_RETURN_CODE */
    }

    setvbuf(stdout, NULL, _IONBF, 0);
    atexit(cleanup_at_exit);
    SetConsoleCtrlHandler(on_ctrl, TRUE);
    unique_service(svc_name, sizeof(svc_name), "xuser");
    unique_pipe(pipe_name, sizeof(pipe_name), "xuser");
    beside_me("", src_dir, sizeof(src_dir));
    /* This program's own name, for its copy (the probe). */
    char self[WPATH];
    DWORD sl = GetModuleFileNameA(NULL, self, sizeof(self));
    REQUIRE(sl > 0 && sl < sizeof(self), "GetModuleFileNameA: %lu", GetLastError());
    const char *me = strrchr(self, '\\') ? strrchr(self, '\\') + 1 : self;

    DWORD ea = add_user(&ua, 'A');
    DWORD eb = ea ? 0 : add_user(&ub, 'B');
    STEP(ea == 0 && eb == 0, "two temporary local users: %s (%s) and %s (%s) (NetUserAdd: "
         "%lu, %lu)", ua.name8, ua.sid, ub.name8, ub.sid, ea, eb);
    if (ea || eb)
        return win_report("test_win_crossuser"); /* atexit deletes what was made */

    REQUIRE(make_xdir(), "the test directory in %%ProgramData%%: error %lu", GetLastError());
    REQUIRE(copy_in("vramd.exe", "vramd.exe") &&
                copy_in("win_vramd_client.exe", "win_vramd_client.exe") &&
                copy_in("libvram.dll", "libvram.dll") &&
                copy_in(me, "vramt_probe.exe"),
            "copying the programs into %s", xdir);
    snprintf(run_dir, sizeof(run_dir), "%s\\run", xdir);
    char why[512];
    REQUIRE(vpw_svc_prepare_dir(run_dir, why, sizeof(why)) == 1, "run dir: %s", why);
    snprintf(cfg_path, sizeof(cfg_path), "%s\\vramd.json", run_dir);
    snprintf(log_path, sizeof(log_path), "%s\\vramd.log", run_dir);
    write_config();

    test_serving();
    test_data_dir();
    cleanup(true);
    return win_report("test_win_crossuser");
}
