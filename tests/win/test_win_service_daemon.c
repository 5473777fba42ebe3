/* SPDX-License-Identifier: Apache-2.0 */
/* vramd.exe itself as a Windows service under wine's Service Control
 * Manager: installed by its own --install-service (with a configuration,
 * a run directory and a pipe of this test's, which go into the service's
 * command line), started (START_PENDING with checkpoints and wait hints,
 * then RUNNING once it serves), serving win_vramd_client.exe (libvram.dll.a
 * only) over its pipe, PARAMCHANGE reloading the configuration through
 * SIGHUP's path (the log says so, the new capacity, and the pipe's new
 * security descriptor with a user added to access.allow), STOP (the loop
 * ends, the state file is written, STOPPED with exit code 0), started
 * again, and removed (running) by its own --uninstall-service. Also: --service outside the SCM, two
 * modes at once, installing twice, uninstalling what is not there, and
 * --console serving a client in the foreground.
 *
 * Runs under scripts/windows-test.sh's persistent wineserver: wineserver
 * kills services 3 s after the last ordinary process ends. The service's
 * name and pipe carry this process's id, and the service is removed at
 * exit whatever happened (a failed check must not leave a vramd running in
 * the prefix). */
#include "tests/win/wintest.h"

#include <aclapi.h>
#include <sddl.h>

#include <errno.h>

#include "windows-service/install.h"
#include "platform/win32/service_dirs.h"
#include "platform/proc.h"
#include "tests/win/winproc.h"

static char name[64], pipe_name[128], dir[MAX_PATH * 3], exe[MAX_PATH * 3],
    client_exe[MAX_PATH * 3], cfg_path[MAX_PATH * 3], log_path[MAX_PATH * 3];

/* access: the "access" member, or "" for none. */
static void write_config(const char *capacity, const char *access)
{
    FILE *f = fopen(cfg_path, "wb");
    MUST(f, "cannot write %s", cfg_path);
    /* One small host device in 2 MiB chunks (as test_win_vramd's). */
    fprintf(f, "{\"devices\": [{\"id\": 0, \"backend\": \"host\", \"capacity\": \"%s\","
               " \"chunk\": \"2MiB\"}], \"pool\": {\"prefill_chunks\": 2}%s%s}\n",
            capacity, access[0] ? ", " : "", access);
    fclose(f);
}

/* Runs argv (argv[0] the program) to its end within timeout_ms: its exit
 * status, or -1 (not started, or killed at the timeout). */
static int run_prog(char *const argv[], DWORD timeout_ms)
{
    int64_t pid;
    if (vp_spawn(argv[0], argv, &pid) < 0)
        return -1;
    vp_handle pin;
    bool late = false;
    if (vp_proc_pin(pid, &pin) == 0) {
        if (WaitForSingleObject((HANDLE)pin.v, timeout_ms) != WAIT_OBJECT_0) {
            late = true;
            vp_proc_kill(pin);
        }
        vp_close(&pin);
    }
    int status = -1;
    if (vp_wait_child(pid, &status) < 0 || late)
        return -1;
    return status;
}

/* vramd's log, for winproc.h's readers (log_path is the same name in the
 * ANSI code page, for messages). */
static wchar_t wlog_path[MAX_PATH * 3];

static bool log_has(const char *what)
{
    return wt_file_has(wlog_path, what);
}

static bool log_wait(const char *what, int ms)
{
    return wt_file_wait(wlog_path, what, NULL, ms);
}

/* Whether one line of the log has both a and b, b after a. */
static bool log_line_has(const char *a, const char *b)
{
    char *buf = wt_slurp(wlog_path, NULL);
    bool yes = false;
    for (const char *p = strstr(buf, a); p && !yes; p = strstr(p + 1, a)) {
        const char *eol = strchr(p, '\n'), *q = strstr(p, b);
        yes = q && (!eol || q < eol);
    }
    free(buf);
    return yes;
}

/* The DACL of the pipe as a client reads it (READ_CONTROL is part of the
 * read access every client gets), as SDDL into buf; false if it cannot. */
static bool pipe_dacl(const char *pipe, char *buf, size_t len)
{
    HANDLE h = INVALID_HANDLE_VALUE;
    for (int t = 0; t < 5000 && h == INVALID_HANDLE_VALUE; t += 50) {
        h = CreateFileA(pipe, GENERIC_READ | FILE_WRITE_DATA, 0, NULL, OPEN_EXISTING, 0,
                        NULL);
        if (h == INVALID_HANDLE_VALUE)
            WaitNamedPipeA(pipe, 50);
    }
    if (h == INVALID_HANDLE_VALUE)
        return false;
    PSECURITY_DESCRIPTOR sd = NULL;
    char *s = NULL;
    bool ok = GetSecurityInfo(h, SE_KERNEL_OBJECT, DACL_SECURITY_INFORMATION, NULL, NULL,
                              NULL, NULL, &sd) == 0 &&
              ConvertSecurityDescriptorToStringSecurityDescriptorA(
                  sd, SDDL_REVISION_1, DACL_SECURITY_INFORMATION, &s, NULL);
    if (ok)
        snprintf(buf, len, "%s", s);
    LocalFree(s);
    LocalFree(sd);
    CloseHandle(h);
    return ok;
}

static void print_log(void)
{
    wt_show_log(wlog_path, log_path);
}

static struct vpw_scm_status wait_state(uint32_t want, int timeout_ms, bool *saw_pending,
                                            uint32_t *max_checkpoint, uint32_t *hint)
{
    struct vpw_scm_status st = {0};
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
        int e = vram_service_query(name, &st);
        MUST(e == 0, "query: %d", e);
        if (st.state == SERVICE_START_PENDING) {
            if (saw_pending)
                *saw_pending = true;
            if (max_checkpoint && st.checkpoint > *max_checkpoint)
                *max_checkpoint = st.checkpoint;
            if (hint && st.wait_hint_ms > *hint)
                *hint = st.wait_hint_ms;
        }
        if (st.state == want)
            return st;
        /* Stopped while waiting for something else: it failed to start. */
        if (st.state == SERVICE_STOPPED && want != SERVICE_STOPPED)
            break;
        Sleep(10);
    }
    CHECK(false, "state %s (exit %u/%u), waited for %s", vram_service_state_name(st.state),
          st.win32_exit, st.service_exit, vram_service_state_name(want));
    return st;
}

static int client(unsigned fill)
{
    char f[16];
    snprintf(f, sizeof(f), "0x%x", fill);
    char *argv[] = {client_exe, pipe_name, f, NULL};
    return run_prog(argv, 60000);
}

/* win_vramd_client.exe on pipe with $VRAM_SERVICE set to service (NULL:
 * unset), expecting the connection refused with errno `refused` (0: served
 * in full). Its exit status. */
static int client_with_service(const char *pipe, const char *service, int refused)
{
    char f[16] = "0x55", e[16];
    snprintf(e, sizeof(e), "%d", refused);
    char *argv[] = {client_exe, (char *)pipe, f, refused ? "refused" : NULL, e, NULL};
    SetEnvironmentVariableA("VRAM_SERVICE", service);
    int s = run_prog(argv, 60000);
    SetEnvironmentVariableA("VRAM_SERVICE", NULL);
    return s;
}

/* A vramd.exe run by hand (--console) on a pipe and run directory of its
 * own, while the service is installed: the server a client must tell from
 * the service's. */
static char hand_pipe[128], hand_dir[MAX_PATH * 3];
static int64_t hand_pid;
static vp_handle hand_pin = {-1}; /* VP_NONE */

static bool start_by_hand(void)
{
    unique_pipe(hand_pipe, sizeof(hand_pipe), "byhand");
    snprintf(hand_dir, sizeof(hand_dir), "%s-byhand", dir);
    char why[512];
    MUST(vpw_svc_prepare_dir(hand_dir, why, sizeof(why)) >= 0, "run dir: %s", why);
    char *argv[] = {exe, "--console", "-s", hand_pipe, "-r", hand_dir, "-c", cfg_path,
                    "-l", "warning", NULL};
    MUST(vp_spawn(exe, argv, &hand_pid) == 0, "spawn vramd by hand");
    MUST(vp_proc_pin(hand_pid, &hand_pin) == 0, "pin");
    return wt_wait_pipe_a(hand_pipe, (HANDLE)hand_pin.v, 20000);
}

static void stop_by_hand(void)
{
    if (!vp_ok(hand_pin))
        return;
    vp_proc_kill(hand_pin);
    vp_close(&hand_pin);
    int status;
    vp_wait_child(hand_pid, &status);
}

/* Whatever happened: no service of this test left in the prefix. */
static void remove_service(void)
{
    char why[256];
    vram_service_uninstall(name, 15000, why, sizeof(why));
}

static void test_outside_scm(void)
{
    /* The SCM did not start it: the dispatcher says so at once (1063). */
    char *a1[] = {exe, "--service", "-s", pipe_name, "-r", dir, "-c", cfg_path, NULL};
    ULONGLONG t0 = GetTickCount64();
    CHECK(run_prog(a1, 60000) == 1, "--service outside the SCM exits 1");
    CHECK(GetTickCount64() - t0 < 60000, "and at once");
    char *a2[] = {exe, "--service", "--console", NULL};
    CHECK(run_prog(a2, 30000) == 2, "two modes: a usage error (2)");
    char *a3[] = {exe, "--uninstall-service", "--service-name", name, NULL};
    CHECK(run_prog(a3, 30000) == 1, "uninstalling what is not there fails (1)");
}

static void test_service(void)
{
    struct vpw_scm_status st;
    CHECK(vram_service_query(name, &st) == -ENOENT, "not installed yet");
    char *inst[] = {exe,      "--install-service", "--service-name", name, "-s", pipe_name,
                    "-r",     dir,                 "-c",             cfg_path, "-l",
                    "debug",  NULL};
    int s = run_prog(inst, 30000);
    REQUIRE(s == 0, "vramd --install-service exited %d", s);
    atexit(remove_service);
    CHECK(run_prog(inst, 30000) == 1, "installing twice fails (1)");

    /* What the SCM was told: LocalSystem, automatic, and the command line
     * with --service and this test's options. */
    SC_HANDLE m = OpenSCManagerW(NULL, NULL, SC_MANAGER_CONNECT);
    wchar_t wname[64];
    MultiByteToWideChar(CP_UTF8, 0, name, -1, wname, 64);
    SC_HANDLE h = m ? OpenServiceW(m, wname, SERVICE_QUERY_CONFIG) : NULL;
    MUST(h, "OpenServiceW");
    static BYTE buf[8192];
    DWORD n;
    QUERY_SERVICE_CONFIGW *qc = (void *)buf;
    MUST(QueryServiceConfigW(h, qc, sizeof(buf), &n), "QueryServiceConfigW");
    CHECK(qc->dwStartType == SERVICE_AUTO_START, "automatic start");
    CHECK(qc->lpServiceStartName && _wcsicmp(qc->lpServiceStartName, L"LocalSystem") == 0,
          "as LocalSystem: %ls", qc->lpServiceStartName);
    wchar_t wpipe[128];
    MultiByteToWideChar(CP_UTF8, 0, pipe_name, -1, wpipe, 128);
    CHECK(wcsstr(qc->lpBinaryPathName, L"vramd.exe\" --service ") &&
              wcsstr(qc->lpBinaryPathName, L"--service-name") &&
              wcsstr(qc->lpBinaryPathName, wpipe) && wcsstr(qc->lpBinaryPathName, L" -r "),
          "the command line: %ls", qc->lpBinaryPathName);
    if (WINDOWS_ONLY("the failure actions of vramd's service (restart)",
                     "wine stores no failure actions: QueryServiceConfig2W says 124")) {
        SERVICE_FAILURE_ACTIONSW *fa = (void *)buf;
        CHECK(QueryServiceConfig2W(h, SERVICE_CONFIG_FAILURE_ACTIONS, buf, sizeof(buf), &n) &&
                  fa->cActions == 3 && fa->lpsaActions[0].Type == SC_ACTION_RESTART,
              "restarted on failure");
    }
    CloseServiceHandle(h);
    CloseServiceHandle(m);

    /* Start: START_PENDING with vramd's checkpoints, RUNNING once it
     * serves. */
    CHECK(vram_service_start(name) == 0, "start");
    bool pending = false;
    uint32_t cp = 0, hint = 0;
    st = wait_state(SERVICE_RUNNING, 30000, &pending, &cp, &hint);
    if (st.state != SERVICE_RUNNING)
        print_log();
    REQUIRE(st.state == SERVICE_RUNNING, "vramd's service did not run");
    /* The pending states last moments, which a query under load may miss
     * (it saw them or not: said, not checked); what the SCM was told is in
     * the log (platform/win32/entry_win32.c), every report. */
    printf("test_win_service_daemon: START_PENDING %s by a query (checkpoint up to %u, "
           "wait hint %u ms)\n", pending ? "seen" : "not seen", cp, hint);
    unsigned told_cp = 0, told_hint = 0;
    {
        char *t = wt_slurp_a(log_path, NULL);
        for (const char *p = t; (p = strstr(p, "service status START_PENDING, checkpoint "));) {
            unsigned c = 0, w = 0;
            if (sscanf(p, "service status START_PENDING, checkpoint %u, wait hint %u ms",
                       &c, &w) == 2) {
                told_cp = c > told_cp ? c : told_cp;
                told_hint = w > told_hint ? w : told_hint;
            }
            p++;
        }
        free(t);
    }
    CHECK(told_cp >= 2 && told_hint >= 10000,
          "vramd told the SCM START_PENDING with checkpoints (up to %u, wait hint %u ms)",
          told_cp, told_hint);
    CHECK((st.controls & SERVICE_ACCEPT_STOP) && (st.controls & SERVICE_ACCEPT_PARAMCHANGE),
          "STOP and PARAMCHANGE accepted: %lx", (unsigned long)st.controls);
    int64_t pid = st.pid;
    CHECK(log_wait("ready on ", 5000), "the log file %s says it is ready", log_path);
    CHECK(WaitNamedPipeA(pipe_name, 0) || GetLastError() == ERROR_SEM_TIMEOUT,
          "its pipe %s is there", pipe_name);

    /* It serves. */
    CHECK(client(0x11) == 0, "a client served by the service");
    CHECK(log_wait("said hello as engine", 5000), "the hello is in the service's log");

    /* libvram talks only to the service's process where $VRAM_SERVICE
     * (or, for the default pipe, the default service) is installed: by the
     * service manager's pid against the pipe server's. */
    bool by_hand = start_by_hand();
    CHECK(by_hand, "a vramd by hand serves %s", hand_pipe);
    CHECK(client_with_service(pipe_name, name, 0) == 0,
          "VRAM_SERVICE=%s: its own pipe is served", name);
    if (by_hand) {
        CHECK(client_with_service(hand_pipe, name, EPERM) == 0,
              "VRAM_SERVICE=%s: another process's pipe is refused (-EPERM)", name);
        CHECK(client_with_service(hand_pipe, "", 0) == 0,
              "VRAM_SERVICE empty: no check, served");
        CHECK(client_with_service(hand_pipe, NULL, 0) == 0,
              "no VRAM_SERVICE and not the default pipe: no check, served");
        CHECK(client_with_service(hand_pipe, "vramd-no-such-service", 0) == 0,
              "a service that is not installed: no check, served");
    }

    /* PARAMCHANGE: the new configuration through SIGHUP's path, with a
     * user added to access.allow (this one, and a SID no account has):
     * the pipe's descriptor gets it without a restart. */
    const char *added = "S-1-5-21-111-222-333-4002";
    char dacl[4096] = "";
    CHECK(log_wait(": security descriptor D:P(", 5000) && !log_has(added),
          "the descriptor at start, without the SID to add");
    CHECK(pipe_dacl(pipe_name, dacl, sizeof(dacl)) && !strstr(dacl, added),
          "the pipe's DACL at start: %s", dacl);
    wchar_t wuser[256];
    DWORD ulen = 256;
    MUST(GetUserNameW(wuser, &ulen), "GetUserNameW");
    char user[512], access[1024];
    WideCharToMultiByte(CP_UTF8, 0, wuser, -1, user, sizeof(user), NULL, NULL);
    snprintf(access, sizeof(access), "\"access\": {\"allow\": {\"users\": [\"%s\", \"%s\"]}}",
             user, added);
    write_config("32MiB", access);
    CHECK(vram_service_control(name, SERVICE_CONTROL_PARAMCHANGE) == 0, "paramchange");
    CHECK(log_wait("reload asked by the service manager (PARAMCHANGE)", 10000),
          "the log shows PARAMCHANGE");
    CHECK(log_wait("SIGHUP: reloaded ", 10000), "the log shows the reload");
    CHECK(log_wait("capacity 32 MiB (was 64)", 10000), "the new capacity taken");
    char line_start[200], ace[128];
    snprintf(line_start, sizeof(line_start), "SIGHUP: %s: security descriptor D:P(",
             pipe_name);
    snprintf(ace, sizeof(ace), "(A;;0x12008b;;;%s)", added);
    /* Polled whole: the C99 printf may write a long line in pieces, so
     * the line's start can be in the file before its end. */
    bool shown = false;
    for (int t = 0; t < 10000 && !(shown = log_line_has(line_start, ace)); t += 50)
        Sleep(50);
    CHECK(shown, "the log shows the pipe's new descriptor with %s", ace);
    CHECK(pipe_dacl(pipe_name, dacl, sizeof(dacl)) && strstr(dacl, added),
          "the pipe's DACL has %s after the reload: %s", added, dacl);
    CHECK(client(0x22) == 0, "a client after the reload");
    CHECK(vram_service_query(name, &st) == 0 && st.state == SERVICE_RUNNING && st.pid == pid,
          "still running, the same process");

    /* An engine holding chunks across the service's STOP and start: its
     * library connects again to the new process and resumes
     * (win_vramd_client.c, "resume"). $VRAM_TEST_HELD says it holds them,
     * $VRAM_TEST_GO that the service runs again. */
    char held[MAX_PATH * 3], go[MAX_PATH * 3];
    snprintf(held, sizeof(held), "%s\\held", dir);
    snprintf(go, sizeof(go), "%s\\go", dir);
    SetEnvironmentVariableA("VRAM_TEST_HELD", held);
    SetEnvironmentVariableA("VRAM_TEST_GO", go);
    char *rargv[] = {client_exe, pipe_name, "0xaa", "resume", NULL};
    int64_t rpid = 0;
    bool resuming = vp_spawn(client_exe, rargv, &rpid) == 0;
    SetEnvironmentVariableA("VRAM_TEST_HELD", NULL);
    SetEnvironmentVariableA("VRAM_TEST_GO", NULL);
    CHECK(resuming, "cannot start the resuming client");
    for (int t = 0; resuming && t < 30000 && GetFileAttributesA(held) == INVALID_FILE_ATTRIBUTES;
         t += 50)
        Sleep(50);
    CHECK(GetFileAttributesA(held) != INVALID_FILE_ATTRIBUTES,
          "the resuming client does not hold its chunks");

    /* STOP: the loop ends, the state is saved, STOPPED with 0 (with that
     * client connected and holding). */
    CHECK(vram_service_control(name, SERVICE_CONTROL_STOP) == 0, "stop");
    st = wait_state(SERVICE_STOPPED, 30000, NULL, NULL, NULL);
    CHECK(st.state == SERVICE_STOPPED && st.win32_exit == 0 && st.service_exit == 0,
          "stopped with exit code 0 (%u/%u)", st.win32_exit, st.service_exit);
    CHECK(log_wait("stop asked by the service manager: shutting down", 5000),
          "the log shows the stop");
    CHECK(log_wait("notice: stopped", 5000) || log_wait("stopped\r\n", 1000),
          "the loop ended (\"stopped\")");
    const char *leaf = strrchr(pipe_name, '\\') + 1;
    char state_path[MAX_PATH * 3];
    snprintf(state_path, sizeof(state_path), "%s\\%s.state", dir, leaf);
    CHECK(GetFileAttributesA(state_path) != INVALID_FILE_ATTRIBUTES, "the state file %s",
          state_path);
    HANDLE p = OpenProcess(SYNCHRONIZE, FALSE, (DWORD)pid);
    if (p) {
        CHECK(WaitForSingleObject(p, 10000) == WAIT_OBJECT_0, "its process ended");
        CloseHandle(p);
    }
    /* Installed but stopped: whoever serves is not the service. */
    if (by_hand)
        CHECK(client_with_service(hand_pipe, name, ECONNREFUSED) == 0,
              "VRAM_SERVICE=%s, the service stopped: refused (-ECONNREFUSED)", name);
    stop_by_hand();

    /* Started again over the state it saved (the old file is let go
     * before the new one replaces it: Windows refuses to replace a mapped
     * file). */
    CHECK(vram_service_start(name) == 0, "start again over the saved state");
    st = wait_state(SERVICE_RUNNING, 30000, NULL, NULL, NULL);
    CHECK(st.state == SERVICE_RUNNING && st.pid != pid, "running again as a new process");
    CHECK(log_wait("held memory before the restart", 10000),
          "the restarted service did not find the engine's memory in its state");
    HANDLE g = CreateFileA(go, GENERIC_WRITE, 0, NULL, CREATE_NEW, 0, NULL);
    if (g != INVALID_HANDLE_VALUE)
        CloseHandle(g);
    int rs = -1;
    if (resuming)
        vp_wait_child(rpid, &rs);
    CHECK(rs == 0, "the engine across the service's restart exited %d (resume)", rs);
    CHECK(log_wait("chunks kept, 0 freed, 0 lost", 10000),
          "the restarted service did not log the engine's resume");
    CHECK(client(0x33) == 0, "a client of the restarted service");

    /* --uninstall-service stops the running one and removes it. */
    char *un[] = {exe, "--uninstall-service", "--service-name", name, NULL};
    s = run_prog(un, 60000);
    CHECK(s == 0, "vramd --uninstall-service exited %d", s);
    CHECK(vram_service_query(name, &st) == -ENOENT, "gone");
    if (check_failures)
        print_log();
    printf("NOT TESTED: SHUTDOWN and boot-time start (wine's SCM sends neither "
           "to a test's service)\n");
}

/* --console: the same main in the foreground. No console control event
 * reaches a process under wine's ctest (test_win_vramd), so it is ended
 * with TerminateProcess. */
static void test_console(void)
{
    unique_pipe(pipe_name, sizeof(pipe_name), "console");
    char *argv[] = {exe, "--console", "-s", pipe_name, "-r", dir, "-c", cfg_path, "-l",
                    "warning", NULL};
    int64_t pid;
    MUST(vp_spawn(exe, argv, &pid) == 0, "spawn --console");
    vp_handle pin = VP_NONE;
    MUST(vp_proc_pin(pid, &pin) == 0, "pin");
    bool up = wt_wait_pipe_a(pipe_name, (HANDLE)pin.v, 20000);
    CHECK(up, "--console serves on %s", pipe_name);
    if (up)
        CHECK(client(0x44) == 0, "a client of --console");
    CHECK(!vp_proc_exited(pin), "--console still runs");
    vp_proc_kill(pin);
    vp_close(&pin);
    int status;
    vp_wait_child(pid, &status);
}

int main(void)
{
    unique_service(name, sizeof(name), "svcd");
    unique_pipe(pipe_name, sizeof(pipe_name), "svcd");
    beside_me("vramd.exe", exe, sizeof(exe));
    beside_me("win_vramd_client.exe", client_exe, sizeof(client_exe));
    beside_me("", dir, sizeof(dir));
    size_t n = strlen(dir);
    wt_unique(dir + n, sizeof(dir) - n, "svcd");
    char why[512];
    MUST(vpw_svc_prepare_dir(dir, why, sizeof(why)) >= 0, "run dir: %s", why);
    snprintf(cfg_path, sizeof(cfg_path), "%s\\vramd.json", dir);
    snprintf(log_path, sizeof(log_path), "%s\\vramd.log", dir);
    MultiByteToWideChar(CP_ACP, 0, log_path, -1, wlog_path, MAX_PATH * 3);
    write_config("64MiB", "");
    test_outside_scm();
    test_service();
    test_console();
    /* Leave nothing behind. */
    remove_dir(dir);
    if (hand_dir[0])
        remove_dir(hand_dir);
    return win_report("test_win_service_daemon");
}
