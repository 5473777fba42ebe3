/* SPDX-License-Identifier: Apache-2.0 */
/* The first integration test on Windows: the real vramd.exe, in the
 * foreground with a configuration and a run directory of its own (a
 * temporary one) and a pipe name of its own, serving separate client
 * processes (win_vramd_client.exe, linked against libvram.dll.a only) over
 * the named pipe: hello, ping, an ad-hoc stage, a fixed region grown by host
 * chunks that vramd pushes into the client as section handles (inline in
 * the frame), written and read there, shrunk and released. Two clients one
 * after the other (the second gets chunks the first gave back, zeroed),
 * then two at once; one that exits holding its chunks (quarantined until
 * vramd sees its process end, then back in the pool). A second vramd on the same run directory and pipe is
 * refused. Last, vramd is killed and started again under two clients
 * holding chunks, which connect again and resume (the same chunks at the
 * same addresses, their bytes kept). The daemon is ended with TerminateProcess (no console control
 * event reaches a process under wine's ctest); its log is printed when a
 * check fails.
 *
 * The programs are found beside this one (ctest runs it from the build
 * directory). */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "tests/win/winproc.h"

static wchar_t dir[MAX_PATH];   /* this program's directory */
static wchar_t tmp[MAX_PATH];   /* the test's run directory */
static wchar_t log_path[MAX_PATH];

static void init_paths(void)
{
    wt_run_dir(L"vramd-test", dir, tmp, log_path);
}

/* access: the "access" member, or "" for none. */
static void write_config(const wchar_t *path, const char *access)
{
    FILE *f = _wfopen(path, L"wb");
    REQUIRE(f != NULL, "cannot write the configuration");
    /* One small host device in 2 MiB chunks (the configuration's unit; a multiple of Windows' 64 KiB
     * granularity); a small pool so that chunks are made and reused. */
    fprintf(f, "{\"devices\": [{\"id\": 0, \"backend\": \"host\", \"capacity\": \"64MiB\","
            " \"chunk\": \"2MiB\"}], \"pool\": {\"prefill_chunks\": 2},"
            " \"weights\": {\"alloc\": \"2MiB\"}%s%s}\n",
            access[0] ? ", " : "", access);
    fclose(f);
}

static bool log_has(const char *what)
{
    return wt_file_has(log_path, what);
}

static HANDLE client_mode(const wchar_t *pipe, unsigned fill, const wchar_t *mode,
                          HANDLE out)
{
    wchar_t exe[MAX_PATH], line[1024];
    _snwprintf(exe, MAX_PATH, L"%ls\\win_vramd_client.exe", dir);
    _snwprintf(line, 1024, L"\"%ls\" %ls 0x%x %ls", exe, pipe, fill, mode);
    return wt_start(exe, line, out, out);
}

static HANDLE client(const wchar_t *pipe, unsigned fill, HANDLE out)
{
    return client_mode(pipe, fill, L"", out);
}

/* Polls the log for what, up to ms. */
static bool log_wait(const char *what, int ms)
{
    return wt_file_wait(log_path, what, NULL, ms);
}

int main(void)
{
    init_paths();
    wchar_t cfg[MAX_PATH], pipe[128], exe[MAX_PATH], line[2048];
    _snwprintf(cfg, MAX_PATH, L"%ls\\vramd.json", tmp);
    wt_unique_w(pipe, 128, L"\\\\.\\pipe\\vramd-test");
    _snwprintf(exe, MAX_PATH, L"%ls\\vramd.exe", dir);
    _snwprintf(line, 2048, L"\"%ls\" -s %ls -r \"%ls\" -c \"%ls\" -l debug", exe,
               pipe, tmp, cfg);
    HANDLE log = wt_open_out(log_path, true);
    /* The run directory must be a directory of vramd's: a file is refused
     * (exit 1, with the reason), as a junction or another user's would be. */
    {
        wchar_t notdir[MAX_PATH], bad_line[2048];
        _snwprintf(notdir, MAX_PATH, L"%ls\\not-a-dir", tmp);
        HANDLE f = CreateFileW(notdir, GENERIC_WRITE, 0, NULL, CREATE_NEW, 0, NULL);
        REQUIRE(f != INVALID_HANDLE_VALUE, "cannot make %ls", notdir);
        CloseHandle(f);
        write_config(cfg, "");
        _snwprintf(bad_line, 2048, L"\"%ls\" -s %ls -r \"%ls\" -c \"%ls\"", exe, pipe,
                   notdir, cfg);
        HANDLE b = wt_start(exe, bad_line, log, log);
        DWORD sd = wt_wait_exit(b, 30000);
        CHECK(sd == 1, "vramd.exe with a file for its run directory exited with %lu", sd);
        CHECK(log_has("run directory: data directory") && log_has("is not a directory"),
              "vramd.exe did not say why it refused its run directory");
        if (b)
            CloseHandle(b);
        DeleteFileW(notdir);
    }
    /* Access lists are of account names and SIDs here: a numeric uid is a
     * configuration error, and vramd.exe says so and exits 1. */
    write_config(cfg, "\"access\": {\"allow\": {\"uids\": [1000]}}");
    HANDLE bad = wt_start(exe, line, log, log);
    DWORD sb = wt_wait_exit(bad, 30000);
    CHECK(sb == 1, "vramd.exe with numeric uids exited with %lu, not 1", sb);
    CHECK(log_has("access.allow.uids[0]: uids and gids are POSIX numbers"),
          "vramd.exe did not say why it refused the numeric uids");
    if (bad)
        CloseHandle(bad);
    /* The lists by name and SID: this user, the group Users, and a SID no
     * account has (the pipe's descriptor names them all). Under wine
     * every client is an administrator and served whatever the lists say
     * (test_win_access judges tokens of other users). */
    wchar_t wuser[256];
    DWORD ulen = 256;
    REQUIRE(GetUserNameW(wuser, &ulen), "GetUserNameW");
    char user[512], access[1024];
    WideCharToMultiByte(CP_UTF8, 0, wuser, -1, user, sizeof(user), NULL, NULL);
    snprintf(access, sizeof(access), "\"access\": {\"allow\": {\"users\": [\"%s\", "
             "\"S-1-5-21-111-222-333-4001\"], \"groups\": [\"Users\"]}}", user);
    write_config(cfg, access);
    HANDLE d = wt_start(exe, line, log, log);
    wt_require_serving(d, pipe, log_path);

    /* One client, then another that gets the chunks the first gave back. */
    HANDLE c1 = client(pipe, 0x11, log);
    DWORD s1 = wt_wait_exit(c1, 60000);
    CHECK(s1 == 0, "the first client exited with %lu", s1);
    HANDLE c2 = client(pipe, 0x22, log);
    DWORD s2 = wt_wait_exit(c2, 60000);
    CHECK(s2 == 0, "the second client exited with %lu", s2);
    /* Two at once. */
    HANDLE c3 = client(pipe, 0x33, log), c4 = client(pipe, 0x44, log);
    DWORD s3 = wt_wait_exit(c3, 60000), s4 = wt_wait_exit(c4, 60000);
    CHECK(s3 == 0 && s4 == 0, "the concurrent clients exited with %lu and %lu", s3, s4);
    CHECK(WaitForSingleObject(d, 0) == WAIT_TIMEOUT, "vramd ended while serving");

    /* A client that exits holding its chunks: quarantined until vramd sees
     * its process gone (the pin's wait), then back in the pool, and a
     * client after it gets them zeroed. */
    HANDLE c6 = client_mode(pipe, 0x66, L"hold", log);
    DWORD s6 = wt_wait_exit(c6, 60000);
    CHECK(s6 == 0, "the holding client exited with %lu", s6);
    CHECK(log_wait("chunks quarantined until pid", 10000),
          "its chunks were not quarantined");
    CHECK(log_wait("quarantined chunks back in the pool", 10000),
          "its chunks did not come back when its process ended");
    HANDLE c7 = client(pipe, 0x77, log);
    DWORD s7 = wt_wait_exit(c7, 60000);
    CHECK(s7 == 0, "the client after it exited with %lu", s7);

    /* A weight set: written and sealed by one client, read by another,
     * whose handles map only for reading (win_vramd_client.c, weights). */
    HANDLE w1 = client_mode(pipe, 0x5e, L"weights-write", log);
    DWORD sw1 = wt_wait_exit(w1, 60000);
    CHECK(sw1 == 0, "the weight set's writer exited with %lu", sw1);
    HANDLE w2 = client_mode(pipe, 0x5e, L"weights-read", log);
    DWORD sw2 = wt_wait_exit(w2, 60000);
    CHECK(sw2 == 0, "the weight set's reader exited with %lu", sw2);
    CHECK(log_has("read the sealed set: 2 sections, none writable"),
          "the reader did not check its sections");
    /* Dropped: vramd's holder, which kept it, has nothing left and exits
     * (else it would outlive the test). */
    HANDLE w3 = client_mode(pipe, 0x5e, L"weights-drop", log);
    DWORD sw3 = wt_wait_exit(w3, 60000);
    CHECK(sw3 == 0, "the weight set's drop exited with %lu", sw3);

    /* A second daemon on the same run directory and pipe: refused. */
    HANDLE d2 = wt_start(exe, line, log, log);
    DWORD s5 = wt_wait_exit(d2, 30000);
    CHECK(s5 == 1, "a second vramd exited with %lu, not 1", s5);
    CHECK(WaitForSingleObject(d, 0) == WAIT_TIMEOUT, "the first vramd ended");

    /* The pipe's descriptor gives the listed ones read and write-data
     * (0x12008b, platform/win32/pipe_listener.c), and nothing to others. */
    CHECK(log_has("(A;;0x12008b;;;S-1-5-21-111-222-333-4001)") &&
              log_has("(A;;0x12008b;;;S-1-5-32-545)"),
          "the pipe's descriptor lacks the access list's SIDs");
    CHECK(log_has("(wine-engine, pid ") && log_has("said hello as engine"),
          "no hello in vramd's log");
    CHECK(log_has("another vramd runs"), "the second vramd did not say why");

    /* Restart and resume: two clients hold chunks (one with libvram's
     * event thread), vramd is killed and started again over its state
     * file, and each client's library connects again by itself and takes
     * its memory back (win_vramd_client.c, "resume"). The file go says
     * the new vramd listens. */
    wchar_t go[MAX_PATH];
    _snwprintf(go, MAX_PATH, L"%ls\\go", tmp);
    SetEnvironmentVariableW(L"VRAM_TEST_GO", go);
    HANDLE r1 = client_mode(pipe, 0x88, L"resume", log);
    HANDLE r2 = client_mode(pipe, 0x99, L"resume thread", log);
    CHECK(log_wait("holding 3 chunks for a restart (fill 0x88)", 30000) &&
              log_wait("holding 3 chunks for a restart (fill 0x99)", 30000),
          "the resuming clients did not get their chunks");
    TerminateProcess(d, 9);
    WaitForSingleObject(d, 10000);
    CloseHandle(d);
    d = wt_start(exe, line, log, log);
    REQUIRE(d != NULL, "vramd.exe did not start again");
    CHECK(wt_wait_pipe(pipe, d, 20000), "vramd's pipe did not come back after the restart");
    CHECK(log_has("held memory before the restart"),
          "the new vramd did not find the clients' memory in its state file");
    HANDLE g = CreateFileW(go, GENERIC_WRITE, 0, NULL, CREATE_NEW, 0, NULL);
    CHECK(g != INVALID_HANDLE_VALUE, "cannot write %ls", go);
    if (g != INVALID_HANDLE_VALUE)
        CloseHandle(g);
    DWORD sr1 = wt_wait_exit(r1, 90000), sr2 = wt_wait_exit(r2, 90000);
    CHECK(sr1 == 0 && sr2 == 0, "the resuming clients exited with %lu and %lu", sr1, sr2);
    CHECK(log_has("reconnected (on the next call)") && log_has("reconnected (event thread)"),
          "a client did not say how it reconnected");
    CHECK(log_has("chunks kept, 0 freed, 0 lost"), "vramd did not log the resume");
    CHECK(WaitForSingleObject(d, 0) == WAIT_TIMEOUT, "the restarted vramd ended");
    HANDLE c8 = client(pipe, 0x12, log);
    DWORD s8 = wt_wait_exit(c8, 60000);
    CHECK(s8 == 0, "a client after the resume exited with %lu", s8);

    wt_end_daemon(d, log_path);
    CloseHandle(log);
    for (HANDLE *h = (HANDLE[]){c1, c2, c3, c4, c6, c7, w1, w2, w3, d2, r1, r2, c8, NULL};
         *h; h++)
        CloseHandle(*h);
    return check_report("test_win_vramd");
}
