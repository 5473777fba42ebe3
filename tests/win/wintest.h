/* SPDX-License-Identifier: Apache-2.0 */
/* What the Windows tests share: telling wine from Windows (what wine does
 * not enforce is checked on real Windows only, and skipped under wine with
 * the reason, never faked), the path of a helper program beside the test,
 * and lines over a connection. */
#ifndef VRAM_TEST_WINTEST_H
#define VRAM_TEST_WINTEST_H

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "platform/conn.h"
#include "platform/handle.h"
#include "tests/win/unique.h"

/* REQUIRE that also works in helpers returning void. */
#define MUST(cond, ...) REQUIRE(cond, __VA_ARGS__)

/* wine's ntdll exports wine_get_version; Windows' does not. */
static inline const char *wine_version(void)
{
    HMODULE nt = GetModuleHandleW(L"ntdll.dll");
    const char *(*get)(void) =
        nt ? (const char *(*)(void))(void (*)(void))GetProcAddress(nt, "wine_get_version")
           : NULL;
    return get ? get() : NULL;
}

static inline bool under_wine(void)
{
    return wine_version() != NULL;
}

__attribute__((weak)) int skip_count;

/* A check that only real Windows can make: run it there, say why not here. */
#define WINDOWS_ONLY(what, reason)                                             \
    (under_wine() ? (skip_count++,                                             \
                     printf("SKIP (real Windows only): %s: %s\n", what, reason), \
                     false)                                                    \
                  : true)

static inline int win_report(const char *name)
{
    printf("%s: %d checks, %d failed, %d skipped under wine%s%s\n", name,
           check_count, check_failures, skip_count, under_wine() ? " " : "",
           under_wine() ? wine_version() : "");
    return check_failures ? 1 : 0;
}

/* dir-of-this-exe\name */
static inline void beside_me(const char *name, char *buf, size_t len)
{
    char self[MAX_PATH * 3];
    DWORD n = GetModuleFileNameA(NULL, self, sizeof(self));
    MUST(n > 0 && n < sizeof(self), "GetModuleFileName");
    char *slash = strrchr(self, '\\');
    if (slash)
        slash[1] = 0;
    snprintf(buf, len, "%s%s", slash ? self : "", name);
}

/* A pipe name no other test run uses (unique.h: random, not the pid). */
static inline void unique_pipe(char *buf, size_t len, const char *what)
{
    snprintf(buf, len, "\\\\.\\pipe\\vramd-test-%s-%016llx", what,
             (unsigned long long)wt_random64());
}

/* A service name of the test's own: "vramd-WHAT-<random>". Not the pid:
 * wine's pids repeat from run to run, and a service deleted while wine's
 * SCM still held it open can outlive a run in the prefix's registry. */
static inline void unique_service(char *buf, size_t len, const char *what)
{
    snprintf(buf, len, "vramd-%s-%016llx", what, (unsigned long long)wt_random64());
}

/* Removes directory d and the files in it (a test's run directory). */
static inline void remove_dir(const char *d)
{
    WIN32_FIND_DATAA fd;
    char pat[MAX_PATH * 3];
    snprintf(pat, sizeof(pat), "%s\\*", d);
    HANDLE fh = FindFirstFileA(pat, &fd);
    if (fh != INVALID_HANDLE_VALUE) {
        do {
            char p[MAX_PATH * 3];
            snprintf(p, sizeof(p), "%s\\%s", d, fd.cFileName);
            if (!(fd.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY))
                DeleteFileA(p);
        } while (FindNextFileA(fh, &fd));
        FindClose(fh);
    }
    RemoveDirectoryA(d);
}

/* Sends all of s. */
static inline bool send_all(vp_handle c, const char *s)
{
    size_t len = strlen(s), off = 0;
    while (off < len) {
        long n = vp_send(c, s + off, len - off, NULL, 0);
        if (n == -EAGAIN) {
            vp_conn_wait(c, VP_WRITABLE, 1000);
            continue;
        }
        if (n <= 0)
            return false;
        off += (size_t)n;
    }
    return true;
}

/* Reads one line (without its '\n') within timeout_ms: its length, or -1
 * (timeout, end of stream or error). One byte a receive: slow, simple, and
 * nothing of the next line is taken. */
static inline int recv_line(vp_handle c, char *buf, size_t len, int timeout_ms)
{
    size_t n = 0;
    vp_conn_set_recv_timeout(c, timeout_ms);
    while (n + 1 < len) {
        char ch;
        int nh;
        char why[64];
        long r = vp_recv(c, &ch, 1, NULL, 0, &nh, VP_RECV_WAIT, why, sizeof(why));
        if (r <= 0)
            return -1;
        if (ch == '\n')
            break;
        buf[n++] = ch;
    }
    buf[n] = 0;
    return (int)n;
}

#endif
