/* SPDX-License-Identifier: Apache-2.0 */
/* Processes on Windows: a pin is a process handle (its exit signals it, and
 * its pid cannot be reused while the handle is open), start times are
 * creation times, and children are started with CreateProcessW.
 *
 * Not here yet: counting another process's mappings and handles of given
 * memory objects (vp_proc_count_mapped, vp_proc_count_held,
 * vp_procs_holding: Linux reads /proc; Windows would need the system's
 * handle table, NtQuerySystemInformation, which this port avoids by
 * holding process handles for liveness instead). They return -ENOSYS. */
#include "platform/proc.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "platform/win32/procinfo.h"
#include "platform/win32/winerr.h"
#include "platform/win32/wstr.h"

#define PIN_ACCESS                                                             \
    (SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_DUP_HANDLE |    \
     PROCESS_TERMINATE)
/* A killed process's exit code: what a POSIX shell reports for SIGKILL. */
#define KILLED_STATUS (128 + 9)

int vpw_process_start(HANDLE proc, uint64_t *out)
{
    FILETIME c, e, k, u;
    if (!GetProcessTimes(proc, &c, &e, &k, &u))
        return vpw_last_errno();
    *out = (uint64_t)c.dwHighDateTime << 32 | c.dwLowDateTime;
    return 0;
}

uint64_t vp_proc_start_time(int64_t pid)
{
    HANDLE p = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid);
    if (!p)
        return 0;
    uint64_t t = 0;
    if (vpw_process_start(p, &t) < 0)
        t = 0;
    CloseHandle(p);
    return t;
}

int64_t vp_self_pid(void)
{
    return (int64_t)GetCurrentProcessId();
}

int vp_proc_pin(int64_t pid, vp_handle *out)
{
    if (pid <= 0 || pid > (int64_t)MAXDWORD)
        return -ESRCH;
    HANDLE p = OpenProcess(PIN_ACCESS, FALSE, (DWORD)pid);
    if (!p) {
        DWORD err = GetLastError();
        /* No such process: OpenProcess says "invalid parameter". */
        return err == ERROR_INVALID_PARAMETER ? -ESRCH : vpw_errno(err);
    }
    out->v = (intptr_t)p;
    return 0;
}

bool vp_proc_exited(vp_handle pin)
{
    return WaitForSingleObject((HANDLE)pin.v, 0) == WAIT_OBJECT_0;
}

int vp_proc_kill(vp_handle pin)
{
    if (TerminateProcess((HANDLE)pin.v, KILLED_STATUS))
        return 0;
    /* Terminating a process that is ending already is refused. */
    return vp_proc_exited(pin) ? 0 : vpw_last_errno();
}

void vp_proc_kill_self(void)
{
    TerminateProcess(GetCurrentProcess(), KILLED_STATUS);
    for (;;)
        ExitProcess(KILLED_STATUS);
}

int vp_proc_count_mapped(int64_t pid, const uint64_t *ids, size_t n)
{
    return -ENOSYS;
}

int vp_proc_count_held(int64_t pid, const uint64_t *ids, size_t n)
{
    return -ENOSYS;
}

int vp_procs_holding(const uint64_t *ids, size_t n)
{
    return -ENOSYS;
}

/* The children vp_spawn started, with their handles: a pid alone cannot
 * be waited for once the process is gone. */
struct child {
    DWORD pid;
    HANDLE h;
    struct child *next;
};
static SRWLOCK children_lock = SRWLOCK_INIT;
static struct child *children;

/* Appends arg to the command line at *p (room checked by the caller's
 * sizing), quoted as CommandLineToArgvW and the C runtime read it back. */
static void quote_arg(const wchar_t *arg, wchar_t **p)
{
    wchar_t *o = *p;
    if (arg[0] && !wcspbrk(arg, L" \t\n\v\"")) {
        size_t n = wcslen(arg);
        memcpy(o, arg, n * sizeof(wchar_t));
        *p = o + n;
        return;
    }
    *o++ = L'"';
    for (const wchar_t *s = arg;; s++) {
        size_t bs = 0;
        while (*s == L'\\') {
            bs++;
            s++;
        }
        if (!*s) { /* backslashes before the closing quote: doubled */
            for (size_t i = 0; i < 2 * bs; i++)
                *o++ = L'\\';
            break;
        }
        if (*s == L'"') { /* doubled, and the quote escaped */
            for (size_t i = 0; i < 2 * bs + 1; i++)
                *o++ = L'\\';
        } else {
            for (size_t i = 0; i < bs; i++)
                *o++ = L'\\';
        }
        *o++ = *s;
    }
    *o++ = L'"';
    *p = o;
}

/* argv as one command line (free it). */
static int command_line(char *const argv[], wchar_t **out)
{
    size_t room = 1;
    int argc = 0;
    for (; argv[argc]; argc++)
        room += 2 * strlen(argv[argc]) * 2 + 4; /* worst case: all escaped */
    wchar_t *line = malloc(room * sizeof(wchar_t)), *p = line;
    if (!line)
        return -ENOMEM;
    for (int i = 0; i < argc; i++) {
        size_t n = strlen(argv[i]) + 1;
        wchar_t *w = malloc(n * sizeof(wchar_t));
        int e = w ? vpw_wide(argv[i], w, n) : -ENOMEM;
        if (e < 0) {
            free(w);
            free(line);
            return e;
        }
        if (i)
            *p++ = L' ';
        quote_arg(w, &p);
        free(w);
    }
    *p = 0;
    *out = line;
    return 0;
}

int vp_spawn(const char *path, char *const argv[], int64_t *pid_out)
{
    wchar_t wpath[MAX_PATH * 4];
    int e = vpw_wide(path, wpath, sizeof(wpath) / sizeof(wpath[0]));
    if (e < 0)
        return e;
    wchar_t *line;
    if ((e = command_line(argv, &line)) < 0)
        return e;
    struct child *c = malloc(sizeof(*c));
    if (!c) {
        free(line);
        return -ENOMEM;
    }
    STARTUPINFOW si = {.cb = sizeof(si)};
    PROCESS_INFORMATION pi;
    /* No handle is inherited (bInheritHandles FALSE): the child gets only
     * what is pushed into it. */
    BOOL ok = CreateProcessW(wpath, line, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi);
    e = ok ? 0 : vpw_last_errno();
    free(line);
    if (!ok) {
        free(c);
        return e;
    }
    CloseHandle(pi.hThread);
    c->pid = pi.dwProcessId;
    c->h = pi.hProcess;
    AcquireSRWLockExclusive(&children_lock);
    c->next = children;
    children = c;
    ReleaseSRWLockExclusive(&children_lock);
    *pid_out = pi.dwProcessId;
    return 0;
}

/* A pipe whose child's end (*child) is inheritable and whose parent's end
 * (*mine) is not, so that only the child gets it. */
static int child_pipe(bool child_reads, HANDLE *child, HANDLE *mine)
{
    SECURITY_ATTRIBUTES sa = {.nLength = sizeof(sa), .bInheritHandle = TRUE};
    HANDLE r, w;
    if (!CreatePipe(&r, &w, &sa, 0))
        return vpw_last_errno();
    HANDLE c = child_reads ? r : w, m = child_reads ? w : r;
    if (!SetHandleInformation(m, HANDLE_FLAG_INHERIT, 0)) {
        int e = vpw_last_errno();
        CloseHandle(r);
        CloseHandle(w);
        return e;
    }
    *child = c;
    *mine = m;
    return 0;
}

/* The parent's end of a pipe as a stdio stream; the handle is the
 * stream's from then on, and closed with it (also on failure). Text mode,
 * as the child's standard streams are: the child writes "\r\n" for "\n",
 * which must read back as "\n" ("ready\n"), and reads "\r\n" as "\n". */
static FILE *pipe_stream(HANDLE h, bool write)
{
    /* _O_TEXT said, not left to the default (binary for a handle here):
     * the child's streams translate, so these must too. */
    int fd = _open_osfhandle((intptr_t)h, (write ? _O_WRONLY : _O_RDONLY) | _O_TEXT);
    if (fd < 0) {
        CloseHandle(h);
        return NULL;
    }
    FILE *f = _fdopen(fd, write ? "w" : "r");
    if (!f)
        _close(fd);
    return f;
}

/* The child gets the two pipes as its standard input and output and this
 * process's standard error, and no other handle: the list of handles to
 * inherit (PROC_THREAD_ATTRIBUTE_HANDLE_LIST) keeps a handle another
 * thread made inheritable at the same moment out of it. */
int vp_spawn_piped(const char *path, char *const argv[], int64_t *pid_out,
                   FILE **to_child, FILE **from_child)
{
    wchar_t wpath[MAX_PATH * 4];
    int e = vpw_wide(path, wpath, sizeof(wpath) / sizeof(wpath[0]));
    if (e < 0)
        return e;
    wchar_t *line = NULL;
    struct child *c = NULL;
    HANDLE in_child = NULL, in_mine = NULL, out_child = NULL, out_mine = NULL;
    HANDLE err_child = NULL;
    LPPROC_THREAD_ATTRIBUTE_LIST attrs = NULL;
    FILE *to = NULL, *from = NULL;
    if ((e = command_line(argv, &line)) < 0)
        goto cleanup;
    if (!(c = malloc(sizeof(*c)))) {
        e = -ENOMEM;
        goto cleanup;
    }
    if ((e = child_pipe(true, &in_child, &in_mine)) < 0 ||
        (e = child_pipe(false, &out_child, &out_mine)) < 0)
        goto cleanup;
    /* Standard error: an inheritable copy of this process's, where it has
     * one (a GUI parent may not). */
    HANDLE err = GetStdHandle(STD_ERROR_HANDLE);
    if (err && err != INVALID_HANDLE_VALUE &&
        !DuplicateHandle(GetCurrentProcess(), err, GetCurrentProcess(), &err_child,
                         0, TRUE, DUPLICATE_SAME_ACCESS))
        err_child = NULL; /* the child then has none, as its parent nearly */
    HANDLE inherit[3] = {in_child, out_child, err_child};
    DWORD ninherit = err_child ? 3 : 2;
    SIZE_T size = 0;
    InitializeProcThreadAttributeList(NULL, 1, 0, &size);
    if (!(attrs = malloc(size))) {
        e = -ENOMEM;
        goto cleanup;
    }
    if (!InitializeProcThreadAttributeList(attrs, 1, 0, &size)) {
        e = vpw_last_errno();
        free(attrs);
        attrs = NULL;
        goto cleanup;
    }
    if (!UpdateProcThreadAttribute(attrs, 0, PROC_THREAD_ATTRIBUTE_HANDLE_LIST, inherit,
                                   ninherit * sizeof(HANDLE), NULL, NULL)) {
        e = vpw_last_errno();
        goto cleanup;
    }
    STARTUPINFOEXW si = {.StartupInfo = {.cb = sizeof(si)}};
    si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
    si.StartupInfo.hStdInput = in_child;
    si.StartupInfo.hStdOutput = out_child;
    si.StartupInfo.hStdError = err_child;
    si.lpAttributeList = attrs;
    /* What this process buffered goes out before the child writes, as a
     * fork would leave it. */
    fflush(NULL);
    PROCESS_INFORMATION pi;
    if (!CreateProcessW(wpath, line, NULL, NULL, TRUE, EXTENDED_STARTUPINFO_PRESENT,
                        NULL, NULL, &si.StartupInfo, &pi)) {
        e = vpw_last_errno();
        goto cleanup;
    }
    CloseHandle(pi.hThread);
    c->pid = pi.dwProcessId;
    c->h = pi.hProcess;
    /* The streams take the parent's ends (closing them on failure). */
    to = pipe_stream(in_mine, true);
    from = pipe_stream(out_mine, false);
    in_mine = out_mine = NULL;
    if (!to || !from) {
        /* Without its pipes the child is of no use: it is ended, never
         * left waiting for input nobody sends. */
        e = -EMFILE;
        TerminateProcess(c->h, KILLED_STATUS);
        WaitForSingleObject(c->h, INFINITE);
        CloseHandle(c->h);
        goto cleanup;
    }
    AcquireSRWLockExclusive(&children_lock);
    c->next = children;
    children = c;
    ReleaseSRWLockExclusive(&children_lock);
    c = NULL;
    *to_child = to;
    *from_child = from;
    *pid_out = pi.dwProcessId;
    to = from = NULL;
    e = 0;
cleanup:
    if (to)
        fclose(to);
    if (from)
        fclose(from);
    if (attrs) {
        DeleteProcThreadAttributeList(attrs);
        free(attrs);
    }
    /* The child's ends are the child's now (or nobody's); the parent's
     * ends are here only when no stream took them. */
    HANDLE left[] = {in_child, out_child, err_child, in_mine, out_mine};
    for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++)
        if (left[i])
            CloseHandle(left[i]);
    free(c);
    free(line);
    return e;
}

int vp_self_exe(char *buf, size_t len)
{
    wchar_t w[MAX_PATH * 4];
    DWORD n = GetModuleFileNameW(NULL, w, sizeof(w) / sizeof(w[0]));
    if (n == 0 || n >= sizeof(w) / sizeof(w[0]))
        return n ? -ENAMETOOLONG : vpw_last_errno();
    return vpw_utf8(w, buf, len);
}

int vp_wait_child(int64_t pid, int *status)
{
    AcquireSRWLockExclusive(&children_lock);
    struct child **pp = &children, *c;
    while ((c = *pp) && (int64_t)c->pid != pid)
        pp = &c->next;
    if (c)
        *pp = c->next;
    ReleaseSRWLockExclusive(&children_lock);
    if (!c)
        return -ECHILD;
    DWORD code = 0;
    int e = 0;
    if (WaitForSingleObject(c->h, INFINITE) != WAIT_OBJECT_0 ||
        !GetExitCodeProcess(c->h, &code))
        e = vpw_last_errno();
    CloseHandle(c->h);
    free(c);
    if (e == 0)
        *status = (int)code;
    return e;
}
