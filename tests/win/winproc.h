/* SPDX-License-Identifier: Apache-2.0 */
/* What the Windows integration tests do with the programs they run and the
 * files those write: start a program with its output in files (vramd.exe's
 * log, a tool's stdout and stderr), wait for its exit code or for the pipe
 * it serves, read a whole file back as text, and poll one for a line.
 * Every test that runs vramd.exe did these with its own copy; they are
 * here so that a fix (a timeout, a handle left inheritable) reaches all of
 * them. Include after <windows.h>; brings run_dir.h (wt_run_dir) with it.
 *
 * The helpers that poll or read do not CHECK: they are called a varying
 * number of times, and a test's count of checks must not vary with that;
 * what failed is in their return value, for the test's own CHECK. The
 * REQUIREs are wt_open_out's (one) and wt_require_serving's (two), the
 * same every call. */
#ifndef VRAM_TEST_WINPROC_H
#define VRAM_TEST_WINPROC_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "tests/win/run_dir.h"

/* wt_wait_exit's answers that are no exit code (a test prints them). */
#define WT_TIMED_OUT 999   /* still running at the deadline */
#define WT_NO_CODE 998     /* ended, but GetExitCodeProcess said nothing */
#define WT_NOT_STARTED 997 /* no process (wt_start failed) */

/* An inheritable handle on path for a child's stdout or stderr: appended
 * to (a log several processes write in turn, e.g. vramd's) or made anew.
 * Shared for reading and writing, so that the test reads it while the
 * child still writes. */
static inline HANDLE wt_open_out(const wchar_t *path, bool append)
{
    SECURITY_ATTRIBUTES sa = {.nLength = sizeof(sa), .bInheritHandle = TRUE};
    HANDLE h = CreateFileW(path, append ? FILE_APPEND_DATA : GENERIC_WRITE,
                           FILE_SHARE_READ | FILE_SHARE_WRITE, &sa,
                           append ? OPEN_ALWAYS : CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL,
                           NULL);
    REQUIRE(h != INVALID_HANDLE_VALUE, "cannot open %ls: %lu", path, GetLastError());
    return h;
}

/* Starts exe with the command line line (its first word the program, as
 * CreateProcessW wants, which may write to it; a NULL exe: the program is
 * found from line). With out or err, the child's stdout and stderr go
 * there (the same handle for both is the usual log) and its stdin is
 * none; handles are inherited then only, since that is what passes them.
 * With neither, the child shares this console. The process handle (close
 * it), or NULL with the reason on stderr. */
/* The job every process wt_start starts is put in: when the test ends,
 * however it ends, its handle closes and the job's processes are ended
 * (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE). A process left behind would hold
 * the test's output open, and ctest would wait for it to its timeout after
 * the test itself had finished. NULL where jobs cannot be made. */
static inline HANDLE wt_job(void)
{
    static HANDLE job;
    static bool tried;
    if (!tried) {
        tried = true;
        job = CreateJobObjectW(NULL, NULL);
        JOBOBJECT_EXTENDED_LIMIT_INFORMATION li = {0};
        li.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        if (job && !SetInformationJobObject(job, JobObjectExtendedLimitInformation,
                                            &li, sizeof(li))) {
            CloseHandle(job);
            job = NULL;
        }
    }
    return job;
}

static inline HANDLE wt_start(const wchar_t *exe, wchar_t *line, HANDLE out, HANDLE err)
{
    STARTUPINFOW si = {.cb = sizeof(si)};
    bool redirect = out != NULL || err != NULL;
    if (redirect) {
        si.dwFlags = STARTF_USESTDHANDLES;
        si.hStdInput = NULL;
        si.hStdOutput = out;
        si.hStdError = err;
    }
    PROCESS_INFORMATION pi;
    /* ERROR_INTERNAL_ERROR is wine's word for a new process that ended
     * before it started (its loader died, under load: no line of the
     * program ran): started again, saying so, at most twice. Any other
     * failure is the answer. */
    BOOL ok;
    DWORD why = 0;
    for (int attempt = 0;; attempt++) {
        /* Suspended until it is in the job, so that what it starts is too. */
        ok = CreateProcessW(exe, line, NULL, NULL, redirect, CREATE_SUSPENDED, NULL,
                            NULL, &si, &pi);
        why = ok ? 0 : GetLastError();
        if (ok || why != ERROR_INTERNAL_ERROR || attempt == 2)
            break;
        fprintf(stderr, "CreateProcessW(%ls): %lu (the new process ended before it "
                "started); starting it again\n", exe ? exe : line, why);
    }
    if (!ok) {
        fprintf(stderr, "CreateProcessW(%ls): %lu\n", exe ? exe : line, why);
        return NULL;
    }
    if (wt_job())
        AssignProcessToJobObject(wt_job(), pi.hProcess); /* best effort */
    ResumeThread(pi.hThread);
    CloseHandle(pi.hThread);
    return pi.hProcess;
}

/* p's exit code once it ends within ms; WT_TIMED_OUT if it does not (it is
 * left running: the caller decides whether to end it), WT_NOT_STARTED for
 * a NULL p, so that a failed wt_start reads as a failed exit code. */
static inline DWORD wt_wait_exit(HANDLE p, DWORD ms)
{
    if (!p)
        return WT_NOT_STARTED;
    if (WaitForSingleObject(p, ms) != WAIT_OBJECT_0)
        return WT_TIMED_OUT;
    DWORD code = WT_NO_CODE;
    GetExitCodeProcess(p, &code);
    return code;
}

/* Waits up to ms until the pipe exists, i.e. server (vramd, or NULL for
 * none to watch) listens: WaitNamedPipeW says so without connecting (a
 * connection would be a client the server counts and logs); all instances
 * busy (ERROR_SEM_TIMEOUT) means it exists too. False at the deadline, or
 * at once when the server has ended (it never will listen). */
static inline bool wt_wait_pipe(const wchar_t *name, HANDLE server, int ms)
{
    for (int t = 0; t < ms; t += 50) {
        if (WaitNamedPipeW(name, 0) || GetLastError() == ERROR_SEM_TIMEOUT)
            return true;
        if (!server)
            Sleep(50);
        else if (WaitForSingleObject(server, 50) == WAIT_OBJECT_0)
            return false;
    }
    return false;
}

/* The same for a name in the ANSI code page, as WaitNamedPipeA takes it
 * (the tests that spawn with vp_spawn keep their names narrow). */
static inline bool wt_wait_pipe_a(const char *name, HANDLE server, int ms)
{
    wchar_t w[256];
    if (!MultiByteToWideChar(CP_ACP, 0, name, -1, w, 256))
        return false;
    return wt_wait_pipe(w, server, ms);
}

/* The rest of f (closed here) as a NUL-terminated string (free it), its
 * length in *len when len is given; "" for a NULL f (a file that cannot
 * be opened: a log not written yet reads as empty, so callers need not
 * tell the two apart). The whole file, however long: a log cut at a
 * buffer's size would hide what came last. Out of memory aborts: not a
 * CHECK (see above), and not an answer a check could take for "absent". */
static inline char *wt_slurp_file(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        abort();
    while (f) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *more = realloc(buf, cap * 2);
        if (!more)
            abort();
        buf = more;
        cap *= 2;
    }
    if (f)
        fclose(f);
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

static inline char *wt_slurp(const wchar_t *path, size_t *len)
{
    return wt_slurp_file(_wfopen(path, L"rb"), len);
}

/* For a path in the ANSI code page (fopen's). */
static inline char *wt_slurp_a(const char *path, size_t *len)
{
    return wt_slurp_file(fopen(path, "rb"), len);
}

/* Whether the file holds what now. */
static inline bool wt_file_has(const wchar_t *path, const char *what)
{
    char *t = wt_slurp(path, NULL);
    bool yes = strstr(t, what) != NULL;
    free(t);
    return yes;
}

/* Polls the file every 50 ms, up to ms, until it holds what: a child
 * writes it in its own time (and the C runtime may write a line in
 * pieces). proc: the writer, or NULL; once it has ended, false at once
 * (nothing more will come). */
static inline bool wt_file_wait(const wchar_t *path, const char *what, HANDLE proc, int ms)
{
    for (int t = 0;; t += 50) {
        if (wt_file_has(path, what))
            return true;
        if (t >= ms)
            return false;
        if (!proc)
            Sleep(50);
        else if (WaitForSingleObject(proc, 50) == WAIT_OBJECT_0)
            return false;
    }
}

/* vramd's log on stderr, between markers, for whoever reads a failed
 * run's output: where (the log's path, or NULL) names it. */
static inline void wt_print_log(const char *where, const char *text)
{
    fprintf(stderr, "---- vramd's log%s%s%s ----\n%s---- end of the log ----\n",
            where ? " (" : "", where ? where : "", where ? ")" : "", text);
}

/* The same, read from the log at path. */
static inline void wt_show_log(const wchar_t *path, const char *where)
{
    char *t = wt_slurp(path, NULL);
    wt_print_log(where, t);
    free(t);
}

/* After wt_start of vramd (d) on pipe: REQUIREs that it started and that
 * its pipe appeared within 20 s, showing its log (path) first when it did
 * not, since the log says why. */
static inline void wt_require_serving(HANDLE d, const wchar_t *pipe, const wchar_t *path)
{
    REQUIRE(d != NULL, "vramd.exe did not start");
    bool up = wt_wait_pipe(pipe, d, 20000);
    if (!up)
        wt_show_log(path, NULL);
    REQUIRE(up, "vramd's pipe %ls did not appear", pipe);
}

/* Ends vramd (d, closed here) at a test's end: TerminateProcess, since no
 * console control event reaches a process under wine's ctest, and its log
 * (path) shown when a check failed. */
static inline void wt_end_daemon(HANDLE d, const wchar_t *path)
{
    TerminateProcess(d, 9);
    WaitForSingleObject(d, 10000);
    if (check_failures)
        wt_show_log(path, NULL);
    CloseHandle(d);
}

#endif
