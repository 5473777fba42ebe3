/* SPDX-License-Identifier: Apache-2.0 */
/* The tools on Windows: the real vramd.exe (host backend, a configuration,
 * run directory and pipe of its own, as in test_win_vramd) and vramctl.exe
 * and vram-replay.exe run against it as separate processes, each a program
 * an operator would type, their standard output and error caught in files
 * and checked:
 *   - vramctl status: the device's table (backend, chunk, capacity), the
 *     configured stages, the client table with vramctl itself;
 *   - status --json: the same as JSON (parsed: capacity_bytes, the stages,
 *     vramctl's own row);
 *   - weights (the table's header, no set) and weights --json (an empty
 *     array), the status's WEIGHTS columns; weights drop of no set (exit
 *     1, vramd's message);
 *   - vram-replay --one-client --hold as an engine holding memory, and
 *     vramctl clients (table and --json) showing it with its pid and what
 *     it holds, stages and loans naming its stages;
 *   - vram-replay in its default mode, one worker process per stage
 *     (vp_spawn_piped), every step's line for both stages;
 *   - metrics (the exposition), top with its output not a terminal (one
 *     frame), watch --count 2, and metrics --listen (libuv's TCP under
 *     wine: a GET /metrics over Windows sockets);
 *   - errors: an unknown command and an unknown option (exit 2, what was
 *     wrong named), a pipe nobody serves (exit 3, the pipe named), a
 *     socket path that is not a pipe name (exit 3, the path named), an
 *     option before the command (--json status) and one vramctl lacks.
 * vramd and the background tools are ended with TerminateProcess (no
 * console control event reaches a process under wine's ctest). vramd's log
 * is printed when a check fails. */
#define WIN32_LEAN_AND_MEAN
#include <winsock2.h>
#include <windows.h>
#include <ws2tcpip.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tests/check.h"
#include "tests/win/winproc.h"

static wchar_t dir[MAX_PATH];   /* this program's directory */
static wchar_t tmp[MAX_PATH];   /* the test's run directory */
static wchar_t log_path[MAX_PATH];
static wchar_t pipe_name[128];
static int runs; /* output files' numbers */

static void init_paths(void)
{
    wt_run_dir(L"vramctl-test", dir, tmp, log_path);
}

/* One host device; two configured stages, small enough for wine's page
 * file (sizes multiples of Windows' 64 KiB granularity); the scenario part
 * is vram-replay's. Filled with the device's capacity, each stage's loan
 * member (or nothing) and the scenario. */
static const char config_fmt[] =
    "{\"devices\": [{\"id\": 0, \"backend\": \"host\", \"capacity\": \"%s\","
    "  \"chunk\": \"2MiB\"}],\n"
    " \"pool\": {\"prefill_chunks\": 2},\n"
    " \"stages\": [\n"
    "  {\"id\": 0, \"name\": \"s0\", \"device\": 0, \"first_layer\": 0, \"last_layer\": 3,\n"
    "   \"kv_lanes\": [{\"name\": \"kv\", \"bytes_per_token\": 512, \"count\": 2}],\n"
    "   \"native_context\": 32768, \"initial_tokens\": 4096, \"step_tokens\": 4096,\n"
    "   \"expert_slot\": \"2MiB\",\n"
    "   \"fixed\": [{\"name\": \"weights\", \"kind\": \"fixed\", \"bytes\": \"8MiB\"}]%s},\n"
    "  {\"id\": 1, \"name\": \"s1\", \"device\": 0, \"first_layer\": 4, \"last_layer\": 7,\n"
    "   \"kv_lanes\": [{\"name\": \"kv\", \"bytes_per_token\": 512, \"count\": 2}],\n"
    "   \"native_context\": 32768, \"initial_tokens\": 4096, \"step_tokens\": 4096,\n"
    "   \"expert_slot\": \"2MiB\",\n"
    "   \"fixed\": [{\"name\": \"weights\", \"kind\": \"fixed\", \"bytes\": \"4MiB\"}]%s}],\n"
    " \"scenario\": %s}\n";

static const char scenario[] =
    "{\"steps\": [{\"prompt_tokens\": 16384, \"output_tokens\": 1024},\n"
    "           {\"prompt_tokens\": 4096, \"output_tokens\": 512}]}";

static void write_config_of(const wchar_t *path, const char *capacity, const char *loan,
                            const char *scen)
{
    FILE *f = _wfopen(path, L"wb");
    REQUIRE(f != NULL, "cannot write the configuration %ls", path);
    fprintf(f, config_fmt, capacity, loan, loan, scen);
    fclose(f);
}

static void write_config(const wchar_t *path)
{
    write_config_of(path, "128MiB", "", scenario);
}

/* Starts dir\exe with args, its stdout to out and its stderr to err. */
static HANDLE start(const wchar_t *exe, const wchar_t *args, HANDLE out, HANDLE err)
{
    wchar_t path[MAX_PATH], line[4096];
    _snwprintf(path, MAX_PATH, L"%ls\\%ls", dir, exe);
    _snwprintf(line, 4096, L"\"%ls\" %ls", path, args);
    return wt_start(path, line, out, err);
}

/* What one run of a tool gave. */
struct run {
    DWORD code;
    char *out, *err;
    wchar_t out_path[MAX_PATH];
};

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
}

/* Starts a tool with stdout and stderr in files of their own. */
static HANDLE start_tool(const wchar_t *exe, const wchar_t *args, struct run *r,
                         wchar_t *err_path)
{
    int n = runs++;
    _snwprintf(r->out_path, MAX_PATH, L"%ls\\out-%d.txt", tmp, n);
    _snwprintf(err_path, MAX_PATH, L"%ls\\err-%d.txt", tmp, n);
    HANDLE out = wt_open_out(r->out_path, false), err = wt_open_out(err_path, false);
    HANDLE p = start(exe, args, out, err);
    CloseHandle(out);
    CloseHandle(err);
    return p;
}

/* Runs a tool to its end (a minute at most) and reads what it printed. */
static struct run tool(const wchar_t *exe, const wchar_t *args)
{
    struct run r = {.code = WT_NOT_STARTED};
    wchar_t err_path[MAX_PATH];
    HANDLE p = start_tool(exe, args, &r, err_path);
    if (p) {
        r.code = wt_wait_exit(p, 60000);
        if (r.code == WT_TIMED_OUT)
            TerminateProcess(p, 9);
        CloseHandle(p);
    }
    r.out = wt_slurp(r.out_path, NULL);
    r.err = wt_slurp(err_path, NULL);
    return r;
}

static struct run vramctl(const wchar_t *args)
{
    wchar_t line[2048];
    _snwprintf(line, 2048, L"--socket %ls %ls", pipe_name, args);
    return tool(L"vramctl.exe", line);
}

/* The line of table text that starts with prefix (copied into line). */
static bool row(const char *text, const char *prefix, char *line, size_t len)
{
    for (const char *at = text; at && *at; at = strchr(at, '\n'), at = at ? at + 1 : NULL) {
        if (strncmp(at, prefix, strlen(prefix)) != 0)
            continue;
        size_t n = strcspn(at, "\r\n");
        snprintf(line, len, "%.*s", (int)(n < len ? n : len - 1), at);
        return true;
    }
    return false;
}

/* The client named name in a status's or clients' JSON array. */
static const cJSON *client_named(const cJSON *arr, const char *name)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) {
        const cJSON *n = cJSON_GetObjectItem(c, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return c;
    }
    return NULL;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void check_status(void)
{
    struct run r = vramctl(L"status");
    CHECK(r.code == 0, "status exited %lu: %s", r.code, r.err);
    char line[512];
    CHECK(strstr(r.out, "DEVICE BACKEND CHUNK     CAPACITY") != NULL,
          "status: no device table:\n%s", r.out);
    CHECK(row(r.out, "0      host    2 MiB     128 MiB", line, sizeof(line)),
          "status: device 0 is not host, 2 MiB chunks, 128 MiB:\n%s", r.out);
    CHECK(row(r.out, "0      host memory pool 0     128 MiB", line, sizeof(line)),
          "status: no device name and total:\n%s", r.out);
    CHECK(row(r.out, "STAGE DEVICE LAYERS", line, sizeof(line)) &&
              row(r.out, "0     0      0-3", line, sizeof(line)) &&
              row(r.out, "1     0      4-7", line, sizeof(line)),
          "status: the two stages are not listed:\n%s", r.out);
    CHECK(row(r.out, "CLIENT NAME", line, sizeof(line)), "status: no client table");
    CHECK(strstr(r.out, " vramctl ") && strstr(r.out, " ctl    connected "),
          "status: vramctl's own row is missing:\n%s", r.out);
    CHECK(r.err[0] == 0, "status wrote to stderr: %s", r.err);
    run_free(&r);

    r = vramctl(L"status --json");
    CHECK(r.code == 0, "status --json exited %lu: %s", r.code, r.err);
    cJSON *j = cJSON_Parse(r.out);
    CHECK(j != NULL, "status --json is not JSON:\n%s", r.out);
    const cJSON *dev = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "devices"), 0);
    CHECK(num(dev, "capacity_bytes") == 134217728.0 &&
              num(dev, "chunk_bytes") == 2097152.0,
          "status --json: device 0's capacity or chunk is wrong:\n%s", r.out);
    const cJSON *be = cJSON_GetObjectItem(j, "backend");
    CHECK(cJSON_IsString(be) && strcmp(be->valuestring, "host") == 0,
          "status --json: the backend is not host");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(j, "stages")) == 2,
          "status --json: not two stages");
    const cJSON *me = client_named(cJSON_GetObjectItem(j, "clients"), "vramctl");
    const cJSON *role = cJSON_GetObjectItem(me, "role");
    CHECK(me && cJSON_IsString(role) && strcmp(role->valuestring, "ctl") == 0 &&
              num(me, "held_bytes") == 0,
          "status --json: vramctl's row (role ctl, nothing held) is missing");
    cJSON_Delete(j);
    run_free(&r);

    /* Weight sets: none here, listed as none. */
    r = vramctl(L"status");
    CHECK(r.code == 0 && strstr(r.out, " QUARANTINED WEIGHTS    WEIGHTS-CACHED"),
          "status: no WEIGHTS columns:\n%s", r.out);
    run_free(&r);
    r = vramctl(L"weights");
    CHECK(r.code == 0 && row(r.out, "NAME DEVICE SIZE       ALLOC-SIZE ALLOCATIONS KEY",
                             line, sizeof(line)) &&
              strcspn(r.out, "\r\n") + 2 >= strlen(r.out) && r.err[0] == 0,
          "weights: %lu:\n%s%s", r.code, r.out, r.err);
    run_free(&r);
    r = vramctl(L"weights --json");
    j = cJSON_Parse(r.out);
    CHECK(r.code == 0 && num(j, "schema") == 1 &&
              cJSON_IsArray(cJSON_GetObjectItem(j, "sets")) &&
              cJSON_GetArraySize(cJSON_GetObjectItem(j, "sets")) == 0,
          "weights --json: %lu:\n%s%s", r.code, r.out, r.err);
    cJSON_Delete(j);
    run_free(&r);
    r = vramctl(L"weights drop no/such");
    CHECK(r.code == 1 && strstr(r.err, "no weight set 'no/such'"),
          "weights drop of no set: %lu:\n%s", r.code, r.err);
    run_free(&r);
}

/* An engine (vram-replay holding its memory) as vramctl sees it. */
static void check_clients(void)
{
    wchar_t args[1024], err_path[MAX_PATH], cfg[MAX_PATH];
    _snwprintf(cfg, MAX_PATH, L"%ls\\vramd.json", tmp);
    _snwprintf(args, 1024, L"--socket %ls --one-client --hold \"%ls\"", pipe_name, cfg);
    struct run rp = {0};
    HANDLE replay = start_tool(L"vram-replay.exe", args, &rp, err_path);
    REQUIRE(replay != NULL, "vram-replay.exe did not start");
    bool holding = wt_file_wait(rp.out_path, "\"event\":\"holding\"", replay, 60000);
    CHECK(holding, "vram-replay --hold did not get to holding its memory");
    DWORD pid = GetProcessId(replay);

    struct run r = vramctl(L"clients");
    CHECK(r.code == 0, "clients exited %lu: %s", r.code, r.err);
    char line[512], want[64];
    CHECK(row(r.out, "CLIENT NAME                 PID      ROLE   STATE", line,
              sizeof(line)),
          "clients: no header:\n%s", r.out);
    /* Its row: id, name, pid, role, state, held (not 0 B), stages 0,1. */
    const char *at = strstr(r.out, "replay ");
    CHECK(at != NULL, "clients: no row for vram-replay:\n%s", r.out);
    if (at) {
        snprintf(want, sizeof(want), " %lu ", pid);
        size_t n = strcspn(at, "\r\n");
        snprintf(line, sizeof(line), "%.*s", (int)n, at);
        CHECK(strstr(line, want) && strstr(line, " engine ") &&
                  strstr(line, " connected ") && !strstr(line, " 0 B        0 B") &&
                  strstr(line, " 0,1"),
              "clients: vram-replay's row is not pid %lu, engine, connected, "
              "holding memory, stages 0,1: '%s'", pid, line);
    }
    run_free(&r);

    r = vramctl(L"clients --json");
    CHECK(r.code == 0, "clients --json exited %lu: %s", r.code, r.err);
    cJSON *j = cJSON_Parse(r.out);
    const cJSON *list = cJSON_GetObjectItem(j, "clients");
    const cJSON *c = client_named(list, "replay");
    CHECK(cJSON_IsArray(list) && c && num(c, "pid") == (double)pid &&
              num(c, "held_bytes") > 0 &&
              cJSON_GetArraySize(cJSON_GetObjectItem(c, "stages")) == 2,
          "clients --json: vram-replay (pid %lu) holding memory on two stages "
          "is missing:\n%s", pid, r.out);
    cJSON_Delete(j);
    run_free(&r);

    r = vramctl(L"stages --no-legend");
    CHECK(r.code == 0 && !strstr(r.out, "STAGE") && row(r.out, "0     0      0-3", line,
                                                         sizeof(line)),
          "stages --no-legend: %lu:\n%s", r.code, r.out);
    run_free(&r);
    r = vramctl(L"loans");
    CHECK(r.code == 0 && strstr(r.out, "EXPERT-LOANS") && row(r.out, "1     0", line,
                                                              sizeof(line)),
          "loans: %lu:\n%s", r.code, r.out);
    run_free(&r);

    TerminateProcess(replay, 9);
    WaitForSingleObject(replay, 10000);
    CloseHandle(replay);
    free(rp.out);
}

/* vram-replay's default mode: a worker process per stage, its steps and
 * results over the worker's standard input and output. */
static void check_replay(void)
{
    wchar_t args[1024], cfg[MAX_PATH];
    _snwprintf(cfg, MAX_PATH, L"%ls\\vramd.json", tmp);
    _snwprintf(args, 1024, L"--socket %ls \"%ls\"", pipe_name, cfg);
    struct run r = tool(L"vram-replay.exe", args);
    CHECK(r.code == 0, "vram-replay (a process per stage) exited %lu: %s", r.code,
          r.err);
    int lines = 0;
    for (char *s = strtok(r.out, "\r\n"); s; s = strtok(NULL, "\r\n")) {
        cJSON *j = cJSON_Parse(s);
        const cJSON *st = cJSON_GetObjectItem(j, "stages");
        CHECK(j && num(j, "step") == lines + 1 && cJSON_GetArraySize(st) == 2 &&
                  num(cJSON_GetArrayItem(st, 0), "kv_mapped_bytes") >=
                      num(cJSON_GetArrayItem(st, 0), "kv_needed_bytes") &&
                  num(cJSON_GetArrayItem(st, 1), "stage") == 1,
              "vram-replay: step line %d is not both stages' figures: %s",
              lines + 1, s);
        cJSON_Delete(j);
        lines++;
    }
    CHECK(lines == 2, "vram-replay printed %d step lines, not 2", lines);
    run_free(&r);

    r = tool(L"vram-replay.exe", L"--no-such-option x.json");
    CHECK(r.code == 2 && strstr(r.err, "Usage: vram-replay"),
          "vram-replay with a bad option: %lu: %s", r.code, r.err);
    run_free(&r);
}

/* Loans and recalls across Windows processes: a second vramd.exe whose two
 * stages lend their unused KV windows to experts (loan.enabled), and
 * vram-replay's scenario asking for every expert loan at the start, then
 * growing KV out of them (a recall: the experts' chunks move to the KV
 * region) and trimming back (the loans come back). The figures follow from
 * the configuration: 2 lanes of 512 bytes a token in 2 MiB chunks are
 * 4,096 tokens a chunk a lane; the native 32,768 tokens are 8 chunks a
 * lane, 16 in all (32 MiB), of which the initial 4,096-token window maps
 * 2 and lends the other 14 to 2 MiB expert slots. They are Linux's for
 * the same scenario. The configuration is config_fmt's at 256 MiB, with
 * this loan member in each stage. */
static const char loans_member[] =
    ",\n   \"loan\": {\"enabled\": true, \"headroom\": 0, \"recall_deadline_ms\": 2000,"
    " \"hold_ms\": 10000}";
static const char loans_scenario[] =
    "{\"expert_request_at_start\": true, \"trim_after_each_step\": true,\n"
    "  \"steps\": [{\"prompt_tokens\": 16384, \"output_tokens\": 1024},\n"
    "            {\"prompt_tokens\": 30720, \"output_tokens\": 1024},\n"
    "            {\"prompt_tokens\": 2048, \"output_tokens\": 1024}]}";

#define MIB (1024.0 * 1024.0)

/* Step i's expected figures for each stage: KV mapped, loaned to experts,
 * slots backed, chunks recalled. */
static const struct {
    double needed, mapped, loaned, slots, recalled;
} loans_want[3] = {
    /* 17,408 tokens: a 20,480-token window, 5 chunks a lane; 8 recalled. */
    {2.0 * 17408 * 512, 20 * MIB, 12 * MIB, 6, 8},
    /* 31,744 tokens: the whole native window; every loan recalled. */
    {2.0 * 31744 * 512, 32 * MIB, 0, 0, 14},
    /* 3,072 tokens: the initial window; after the trims, all lent again. */
    {2.0 * 3072 * 512, 4 * MIB, 28 * MIB, 14, 0},
};

static void check_loans_replay(const wchar_t *pipe, const wchar_t *cfg, const wchar_t *mode)
{
    wchar_t args[1024];
    _snwprintf(args, 1024, L"--socket %ls %ls \"%ls\"", pipe, mode, cfg);
    struct run r = tool(L"vram-replay.exe", args);
    CHECK(r.code == 0, "vram-replay %ls (loans) exited %lu: %s", mode, r.code, r.err);
    int lines = 0;
    for (char *s = strtok(r.out, "\r\n"); s; s = strtok(NULL, "\r\n"), lines++) {
        cJSON *j = cJSON_Parse(s);
        const cJSON *st = cJSON_GetObjectItem(j, "stages");
        CHECK(j && lines < 3 && cJSON_GetArraySize(st) == 2, "vram-replay %ls: line %d: %s",
              mode, lines + 1, s);
        for (int k = 0; j && lines < 3 && k < 2; k++) {
            const cJSON *o = cJSON_GetArrayItem(st, k);
            CHECK(num(o, "stage") == k && num(o, "kv_needed_bytes") == loans_want[lines].needed &&
                      num(o, "kv_mapped_bytes") == loans_want[lines].mapped &&
                      num(o, "expert_loaned_bytes") == loans_want[lines].loaned &&
                      num(o, "expert_slots_backed") == loans_want[lines].slots &&
                      num(o, "recalled_chunks") == loans_want[lines].recalled,
                  "vram-replay %ls: step %d, stage %d: needed %.0f mapped %.0f loaned %.0f "
                  "slots %.0f recalled %.0f",
                  mode, lines + 1, k, num(o, "kv_needed_bytes"), num(o, "kv_mapped_bytes"),
                  num(o, "expert_loaned_bytes"), num(o, "expert_slots_backed"),
                  num(o, "recalled_chunks"));
        }
        cJSON_Delete(j);
    }
    CHECK(lines == 3, "vram-replay %ls printed %d step lines, not 3", mode, lines);
    run_free(&r);
}

static void check_loans(void)
{
    wchar_t cfg[MAX_PATH], pipe[128], line[2048];
    _snwprintf(cfg, MAX_PATH, L"%ls\\loans.json", tmp);
    wt_unique_w(pipe, 128, L"\\\\.\\pipe\\vramd-test-loans");
    write_config_of(cfg, "256MiB", loans_member, loans_scenario);
    _snwprintf(line, 2048, L"-s %ls -r \"%ls\" -c \"%ls\" -l debug", pipe, tmp, cfg);
    HANDLE log = wt_open_out(log_path, true);
    HANDLE d = start(L"vramd.exe", line, log, log);
    REQUIRE(d != NULL && wt_wait_pipe(pipe, d, 20000), "the loans vramd did not start");
    check_loans_replay(pipe, cfg, L"");            /* a process per stage */
    check_loans_replay(pipe, cfg, L"--one-client"); /* one connection */
    _snwprintf(line, 2048, L"--socket %ls status --json", pipe);
    struct run r = tool(L"vramctl.exe", line);
    cJSON *j = cJSON_Parse(r.out);
    const cJSON *ctr = cJSON_GetObjectItem(j, "counters");
    CHECK(r.code == 0 && num(ctr, "moves") > 0 && num(ctr, "recalls_missed") == 0,
          "the loans vramd's counters: moves %.0f, missed recalls %.0f: %s",
          num(ctr, "moves"), num(ctr, "recalls_missed"), r.out);
    cJSON_Delete(j);
    run_free(&r);
    CHECK(WaitForSingleObject(d, 0) == WAIT_TIMEOUT, "the loans vramd ended");
    TerminateProcess(d, 9);
    WaitForSingleObject(d, 10000);
    CloseHandle(d);
    CloseHandle(log);
}

/* GET /metrics from 127.0.0.1:port; the reply (free it), or NULL. */
static char *http_get(int port, const char *path)
{
    WSADATA wsa;
    if (WSAStartup(MAKEWORD(2, 2), &wsa) != 0)
        return NULL;
    char *reply = NULL;
    SOCKET s = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    if (s == INVALID_SOCKET)
        goto cleanup;
    DWORD ms = 10000;
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, (const char *)&ms, sizeof(ms));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((u_short)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&a, sizeof(a)) != 0)
        goto cleanup;
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Connection: close\r\n\r\n", path);
    if (send(s, req, n, 0) != n)
        goto cleanup;
    size_t len = 0, room = 1 << 16;
    reply = calloc(1, room + 1);
    if (!reply)
        goto cleanup;
    int got;
    while (len < room && (got = recv(s, reply + len, (int)(room - len), 0)) > 0)
        len += (size_t)got;
    reply[len] = 0;
cleanup:
    if (s != INVALID_SOCKET)
        closesocket(s);
    WSACleanup();
    return reply;
}

static void check_metrics_and_views(void)
{
    struct run r = vramctl(L"metrics");
    CHECK(r.code == 0 && strstr(r.out, "\nvramd_up 1") &&
              strstr(r.out, "vramd_info{version=\"" VRAM_VERSION "\",backend=\"host\"} 1"),
          "metrics: %lu:\n%s", r.code, r.out);
    run_free(&r);

    /* Not a terminal: one frame without escapes. */
    r = vramctl(L"top");
    CHECK(r.code == 0 && strstr(r.out, "vramctl top  vramd " VRAM_VERSION " (host)") &&
              strstr(r.out, "DEVICE 0  host memory pool 0  capacity 128 MiB") &&
              !strchr(r.out, '\033'),
          "top (not on a terminal): %lu:\n%s%s", r.code, r.out, r.err);
    run_free(&r);

    r = vramctl(L"watch --count 2 --interval 100");
    const char *first = strstr(r.out, "vramd at ");
    CHECK(r.code == 0 && first && strstr(first + 1, "vramd at ") &&
              !strstr(strstr(first + 1, "vramd at ") + 1, "vramd at "),
          "watch --count 2: %lu:\n%s", r.code, r.out);
    run_free(&r);

    /* The HTTP endpoint: libuv's TCP listener under wine. */
    wchar_t args[512], err_path[MAX_PATH];
    _snwprintf(args, 512, L"--socket %ls metrics --listen 127.0.0.1:0", pipe_name);
    struct run l = {0};
    HANDLE srv = start_tool(L"vramctl.exe", args, &l, err_path);
    REQUIRE(srv != NULL, "vramctl metrics --listen did not start");
    bool serving = wt_file_wait(l.out_path, "/metrics for vramd on", srv, 30000);
    char *said = wt_slurp(l.out_path, NULL);
    const char *at = strstr(said, "http://127.0.0.1:");
    int port = at ? atoi(at + strlen("http://127.0.0.1:")) : 0;
    CHECK(serving && port > 0, "metrics --listen did not say where it serves: %s", said);
    if (port > 0) {
        char *reply = http_get(port, "/metrics");
        CHECK(reply && strncmp(reply, "HTTP/1.1 200", 12) == 0 &&
                  strstr(reply, "\nvramd_up 1"),
              "GET /metrics: %s", reply ? reply : "(no reply)");
        free(reply);
        reply = http_get(port, "/nope");
        CHECK(reply && strncmp(reply, "HTTP/1.1 404", 12) == 0, "GET /nope: %s",
              reply ? reply : "(no reply)");
        free(reply);
    }
    free(said);
    TerminateProcess(srv, 9);
    WaitForSingleObject(srv, 10000);
    CloseHandle(srv);
}

static void check_errors(void)
{
    struct run r = vramctl(L"frobnicate");
    CHECK(r.code == 2 && strstr(r.err, "vramctl: unknown command 'frobnicate' (try --help)"),
          "a bad command: exit %lu, '%s'", r.code, r.err);
    CHECK(r.out[0] == 0, "a bad command printed on stdout: %s", r.out);
    run_free(&r);

    r = vramctl(L"status --bogus");
    CHECK(r.code == 2 && strstr(r.err, "vramctl status: unknown option '--bogus'"),
          "a bad option: exit %lu, '%s'", r.code, r.err);
    run_free(&r);

    /* Options before the command as after it; one the command lacks. */
    wchar_t line[2048];
    _snwprintf(line, 2048, L"--json --socket=%ls status", pipe_name);
    r = tool(L"vramctl.exe", line);
    CHECK(r.code == 0 && r.out[0] == '{' && r.err[0] == 0,
          "--json before the command: exit %lu, '%.100s' '%s'", r.code, r.out, r.err);
    run_free(&r);
    r = vramctl(L"--json evict 3");
    CHECK(r.code == 2 && strstr(r.err, "vramctl evict: no --json option"),
          "--json before a command without it: exit %lu, '%s'", r.code, r.err);
    run_free(&r);

    r = tool(L"vramctl.exe", L"--socket \\\\.\\pipe\\vramd-test-nobody status");
    CHECK(r.code == 3 &&
              strstr(r.err, "vramctl: no vramd at \\\\.\\pipe\\vramd-test-nobody "
                            "(is it running? VRAM_SOCKET"),
          "no daemon: exit %lu, '%s'", r.code, r.err);
    run_free(&r);

    /* A POSIX socket path means nothing here: libvram refuses it (-EINVAL)
     * and the message names it; no daemon can be there (3). */
    r = tool(L"vramctl.exe", L"--socket /run/vramd/vramd.sock status");
    CHECK(r.code == 3 &&
              strstr(r.err, "vramctl: cannot connect to vramd at /run/vramd/vramd.sock: "
                            "invalid argument"),
          "a path that is not a pipe: exit %lu, '%s'", r.code, r.err);
    run_free(&r);

    r = tool(L"vramctl.exe", L"--help");
    CHECK(r.code == 0 && strstr(r.out, "default $VRAM_SOCKET, else \\\\.\\pipe\\vramd)"),
          "--help does not name the pipe as the default: %s", r.out);
    run_free(&r);
}

int main(void)
{
    init_paths();
    wchar_t cfg[MAX_PATH], line[2048];
    _snwprintf(cfg, MAX_PATH, L"%ls\\vramd.json", tmp);
    wt_unique_w(pipe_name, 128, L"\\\\.\\pipe\\vramd-test-ctl");
    write_config(cfg);
    _snwprintf(line, 2048, L"-s %ls -r \"%ls\" -c \"%ls\" -l debug", pipe_name, tmp, cfg);
    HANDLE log = wt_open_out(log_path, true);
    HANDLE d = start(L"vramd.exe", line, log, log);
    wt_require_serving(d, pipe_name, log_path);

    check_status();
    check_clients();
    check_replay();
    check_loans();
    check_metrics_and_views();
    check_errors();
    CHECK(WaitForSingleObject(d, 0) == WAIT_TIMEOUT, "vramd ended while serving");

    wt_end_daemon(d, log_path);
    CloseHandle(log);
    return check_report("test_win_vramctl");
}
