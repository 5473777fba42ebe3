/* SPDX-License-Identifier: Apache-2.0 */
/* Hostile peers against the real vramd.exe: the Windows side of
 * tests/integration/test_bad_input.c and tests/attack/ (which are POSIX
 * only), as far as they apply to a named pipe.
 *
 * vramd.exe runs in the foreground (host backend, 64 MiB in 2 MiB chunks)
 * with a pipe, run directory and configuration of its own: limits.clients
 * 4 with 2 admin slots (under wine every process is an administrator, so
 * 6 connections in all), hello and half-frame deadlines of 2.5 s and 1.5 s,
 * and limits.queued_bytes at its minimum, 1 MiB. Its log (-l debug) goes to
 * a file. The attackers are raw clients of this test: the pipe opened with
 * GENERIC_READ | FILE_WRITE_DATA, as platform/win32/conn_win32.c's vp_dial opens
 * it, valid frames made with the project's encoder (proto/frame.h) and
 * malformed ones written byte by byte; handles travel inline (8 bytes a
 * value after the payload, proto/codec.h).
 *
 * After each attack the same check: vramd.exe still runs, its handle count
 * comes back to within HANDLE_SLACK of the baseline within 3 s,
 * win_vramd_client.exe (a real libvram client: a stage, a region grown by
 * pushed sections, written, read, released) exits 0, the handle count is
 * back again after it, the ledger adds up and holds nothing and nobody
 * (a status over a raw connection), and the log names the attack's reason.
 *
 * The handle count: GetProcessHandleCount on an OpenProcess(PROCESS_QUERY_
 * LIMITED_INFORMATION) handle. Wine 8 answers 0 for every process there,
 * so where it says 0 the count is vramd's entries in the system's handle
 * table (NtQuerySystemInformation(SystemExtendedHandleInformation)), which
 * wine keeps. The test checks that the count it uses moves while
 * connections are held, so a dead counter cannot pass. */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tests/check.h"
#include "proto/frame.h"
#include "tests/win/winproc.h"

#define MIB (1ull << 20)
#define CLIENTS 4     /* limits.clients */
#define ADMIN_SLOTS 2 /* limits.admin_connections */
#define SLOTS (CLIENTS + ADMIN_SLOTS) /* for an administrator, as under wine */
#define HELLO_MS 2500 /* limits.hello_timeout_ms */
#define FRAME_MS 1500 /* limits.frame_timeout_ms */
#define HANDLE_SLACK 6

static wchar_t dir[MAX_PATH], tmp[MAX_PATH], log_path[MAX_PATH];
static wchar_t wpipe[128];
static HANDLE vramd, vramd_query, log_file;
static long base_handles;
static const char *count_source = "";
static unsigned fill = 0x10;

/* Plumbing that fails (out of memory, no event): no check of vramd's. */
static void fail_hard(const char *what)
{
    fprintf(stderr, "test_win_attack: %s failed (%lu)\n", what, GetLastError());
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        fail_hard("malloc");
    return p;
}

/* ---- vramd.exe and its log ---------------------------------------------- */

/* How often needle is in the log. */
static int log_count(const char *needle)
{
    char *t = wt_slurp(log_path, NULL);
    int n = 0;
    for (const char *p = t; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    free(t);
    return n;
}

/* Up to ms for the log to hold needle more than mark times. */
static bool log_wait(const char *needle, int mark, int ms)
{
    for (int t = 0;; t += 50) {
        if (log_count(needle) > mark)
            return true;
        if (t >= ms)
            return false;
        Sleep(50);
    }
}

/* The run directory and its files (the configuration, the log, the state
 * file and the lock), once every check passed. */
static void remove_run_dir(void)
{
    wchar_t pat[MAX_PATH], p[MAX_PATH];
    _snwprintf(pat, MAX_PATH, L"%ls\\*", tmp);
    WIN32_FIND_DATAW fd;
    HANDLE fh = FindFirstFileW(pat, &fd);
    if (fh != INVALID_HANDLE_VALUE) {
        do {
            _snwprintf(p, MAX_PATH, L"%ls\\%ls", tmp, fd.cFileName);
            if (!(fd.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY))
                DeleteFileW(p);
        } while (FindNextFileW(fh, &fd));
        FindClose(fh);
    }
    RemoveDirectoryW(tmp);
}

/* ---- vramd's handles ---------------------------------------------------- */

typedef LONG(NTAPI *qsi_fn)(ULONG, PVOID, ULONG, PULONG);
struct xhandle { /* SYSTEM_HANDLE_TABLE_ENTRY_INFO_EX */
    PVOID object;
    ULONG_PTR pid;
    ULONG_PTR value;
    ULONG access;
    USHORT backtrace, type;
    ULONG attributes, reserved;
};
struct xhandles {
    ULONG_PTR n, reserved;
    struct xhandle h[1];
};

/* vramd's entries in the system's handle table, or -1. */
static long table_count(DWORD pid)
{
    static qsi_fn q;
    if (!q)
        q = (qsi_fn)(void (*)(void))GetProcAddress(GetModuleHandleW(L"ntdll.dll"),
                                                  "NtQuerySystemInformation");
    if (!q)
        return -1;
    ULONG len = 1 << 18, got = 0;
    for (int i = 0; i < 8; i++, len *= 2) {
        struct xhandles *x = malloc(len);
        if (!x)
            return -1;
        LONG st = q(64 /* SystemExtendedHandleInformation */, x, len, &got);
        if (st == (LONG)0xC0000004) { /* STATUS_INFO_LENGTH_MISMATCH */
            free(x);
            continue;
        }
        long n = -1;
        if (st == 0) {
            n = 0;
            for (ULONG_PTR k = 0; k < x->n; k++)
                n += x->h[k].pid == pid;
        }
        free(x);
        return n;
    }
    return -1;
}

static long handle_count(void)
{
    DWORD n = 0;
    if (GetProcessHandleCount(vramd_query, &n) && n > 0) {
        count_source = "GetProcessHandleCount";
        return (long)n;
    }
    /* Wine 8: 0 for every process. */
    count_source = "the system's handle table (GetProcessHandleCount gave 0)";
    return table_count(GetProcessId(vramd));
}

/* Up to ms for the count to come back to within the slack of the
 * baseline; the last count read. */
static long handles_settle(int ms)
{
    long n = handle_count();
    for (int t = 0; t < ms && labs(n - base_handles) > HANDLE_SLACK; t += 100) {
        Sleep(100);
        n = handle_count();
    }
    return n;
}

/* ---- raw clients -------------------------------------------------------- */

enum { IO_ERROR = -2, IO_CLOSED = -1, IO_TIMEOUT = 0, IO_OK = 1 };

static bool pipe_gone(DWORD e)
{
    return e == ERROR_BROKEN_PIPE || e == ERROR_PIPE_NOT_CONNECTED || e == ERROR_NO_DATA;
}

/* One overlapped read or write, waited for up to ms (then cancelled). */
static int io_once(HANDLE h, bool wr, void *buf, DWORD len, DWORD *done, DWORD ms)
{
    OVERLAPPED ov;
    memset(&ov, 0, sizeof(ov));
    ov.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
    if (!ov.hEvent)
        fail_hard("CreateEventW");
    *done = 0;
    BOOL ok = wr ? WriteFile(h, buf, len, NULL, &ov) : ReadFile(h, buf, len, NULL, &ov);
    DWORD e = ok ? 0 : GetLastError();
    int r;
    if (!ok && e != ERROR_IO_PENDING) {
        r = pipe_gone(e) ? IO_CLOSED : IO_ERROR;
    } else {
        if (!ok && WaitForSingleObject(ov.hEvent, ms) != WAIT_OBJECT_0)
            CancelIoEx(h, &ov);
        if (GetOverlappedResult(h, &ov, done, TRUE)) {
            r = IO_OK;
        } else {
            e = GetLastError();
            r = e == ERROR_OPERATION_ABORTED ? (*done ? IO_OK : IO_TIMEOUT)
                : pipe_gone(e)               ? IO_CLOSED
                                             : IO_ERROR;
        }
    }
    CloseHandle(ov.hEvent);
    if (r == IO_ERROR)
        fprintf(stderr, "pipe %s: error %lu\n", wr ? "write" : "read", e);
    return r;
}

static int io_all(HANDLE h, bool wr, void *buf, size_t len, DWORD ms)
{
    DWORD t0 = GetTickCount();
    for (size_t off = 0; off < len;) {
        DWORD spent = GetTickCount() - t0;
        if (spent >= ms)
            return IO_TIMEOUT;
        DWORD n;
        int r = io_once(h, wr, (char *)buf + off, (DWORD)(len - off), &n, ms - spent);
        if (r != IO_OK)
            return r;
        off += n;
    }
    return IO_OK;
}

/* The pipe opened as libvram opens it. NULL when it cannot be. */
static HANDLE raw_open(void)
{
    for (int i = 0; i < 100; i++) {
        HANDLE h = CreateFileW(wpipe, GENERIC_READ | FILE_WRITE_DATA, 0, NULL,
                               OPEN_EXISTING,
                               FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT |
                                   SECURITY_IDENTIFICATION,
                               NULL);
        if (h != INVALID_HANDLE_VALUE)
            return h;
        DWORD e = GetLastError();
        if (e != ERROR_PIPE_BUSY) {
            fprintf(stderr, "CreateFileW(%ls): %lu\n", wpipe, e);
            return NULL;
        }
        WaitNamedPipeW(wpipe, 100);
    }
    return NULL;
}

static void raw_close(HANDLE *h)
{
    if (*h)
        CloseHandle(*h);
    *h = NULL;
}

static bool send_bytes(HANDLE h, const void *p, size_t n)
{
    return io_all(h, true, (void *)p, n, 5000) == IO_OK;
}

/* A frame with the header's fields as given (to lie on purpose): json's
 * bytes (all of them) and nvalues inline handle values after them. */
static bool send_frame(HANDLE h, uint16_t version, uint16_t flags, const char *json,
                       uint32_t len_claim, uint16_t nfds, const uint64_t *values,
                       int nvalues)
{
    struct vw_frame_header fh = {.magic = VW_FRAME_MAGIC, .version = version,
                                   .flags = flags, .payload_len = len_claim,
                                   .nfds = nfds};
    size_t jl = json ? strlen(json) : 0;
    size_t n = VW_FRAME_HEADER_SIZE + jl + 8 * (size_t)nvalues;
    uint8_t *b = xmalloc(n);
    vw_frame_header_encode(&fh, b);
    if (jl)
        memcpy(b + VW_FRAME_HEADER_SIZE, json, jl);
    for (int i = 0; i < nvalues; i++)
        for (int k = 0; k < 8; k++)
            b[VW_FRAME_HEADER_SIZE + jl + 8 * (size_t)i + (size_t)k] =
                (uint8_t)(values[i] >> (8 * k));
    bool ok = send_bytes(h, b, n);
    free(b);
    return ok;
}

static bool send_json(HANDLE h, const char *json)
{
    return send_frame(h, VW_PROTOCOL_OLDEST, 0, json, (uint32_t)strlen(json), 0,
                      NULL, 0);
}

/* The next frame within ms: its JSON, and the handle values that came
 * inline into vals (closed here when vals is NULL). NULL on a timeout or
 * a close (*closed says which). */
static cJSON *recv_frame(HANDLE h, DWORD ms, uint64_t *vals, int *nvals, bool *closed)
{
    uint8_t hdr[VW_FRAME_HEADER_SIZE];
    if (nvals)
        *nvals = 0;
    int r = io_all(h, false, hdr, sizeof(hdr), ms);
    if (closed)
        *closed = r == IO_CLOSED;
    if (r != IO_OK)
        return NULL;
    struct vw_frame_header fh;
    char why[128];
    if (vw_frame_header_decode(hdr, &fh, why, sizeof(why)) < 0) {
        CHECK(false, "vramd sent a bad header: %s", why);
        return NULL;
    }
    if (fh.version != VW_PROTOCOL_OLDEST)
        CHECK(false, "vramd's frame has version %u", fh.version);
    size_t trailer = 8 * (size_t)fh.nfds;
    char *p = xmalloc(fh.payload_len + trailer + 1);
    r = io_all(h, false, p, fh.payload_len + trailer, ms);
    if (closed)
        *closed = r == IO_CLOSED;
    if (r != IO_OK) {
        free(p);
        return NULL;
    }
    for (int i = 0; i < fh.nfds; i++) {
        uint64_t v = 0;
        for (int k = 7; k >= 0; k--)
            v = v << 8 | (uint8_t)p[fh.payload_len + 8 * (size_t)i + (size_t)k];
        if (vals)
            vals[i] = v;
        else
            CloseHandle((HANDLE)(uintptr_t)v);
    }
    if (nvals)
        *nvals = fh.nfds;
    p[fh.payload_len] = 0;
    cJSON *j = cJSON_Parse(p);
    if (!j)
        CHECK(false, "vramd's payload is not JSON: %.200s", p);
    free(p);
    return j;
}

static cJSON *ask(HANDLE h, const char *json)
{
    if (!send_json(h, json))
        return NULL;
    return recv_frame(h, 10000, NULL, NULL, NULL);
}

static const char *str_of(const cJSON *o, const char *k)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
    return s ? s : "";
}

static uint64_t num_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : 0;
}

static bool is_ok(const cJSON *r)
{
    return r && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok"));
}

/* r (taken) is an error reply with code and a message that holds needle. */
static bool error_is(cJSON *r, const char *code, const char *needle, const char *what)
{
    CHECK(r != NULL, "%s: no reply", what);
    if (!r)
        return false;
    const char *err = str_of(r, "error"), *msg = str_of(r, "message");
    bool ok = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "ok")) &&
              strcmp(err, code) == 0 && strstr(msg, needle);
    CHECK(ok, "%s: ok %s, error '%s' (expected %s), message '%s' (expected '%s')",
          what, is_ok(r) ? "true" : "not true", err, code, msg, needle);
    cJSON_Delete(r);
    return ok;
}

static bool expect_error(HANDLE h, const char *json, const char *code,
                         const char *needle, const char *what)
{
    return error_is(ask(h, json), code, needle, what);
}

static bool expect_ok(HANDLE h, const char *json, const char *what)
{
    cJSON *r = ask(h, json);
    bool ok = is_ok(r);
    CHECK(ok, "%s: %s %s", what, r ? str_of(r, "error") : "no reply",
          r ? str_of(r, "message") : "");
    cJSON_Delete(r);
    return ok;
}

/* Hello; the client id, or 0. */
static uint32_t hello(HANDLE h, const char *name, const char *role)
{
    char m[256];
    snprintf(m, sizeof(m), "{\"type\":\"hello\",\"id\":1,\"version\":1,\"name\":\"%s\","
             "\"role\":\"%s\"}", name, role);
    cJSON *r = ask(h, m);
    uint32_t id = is_ok(r) ? (uint32_t)num_of(r, "client") : 0;
    CHECK(id > 0, "hello as %s: %s %s", name, r ? str_of(r, "error") : "no reply",
          r ? str_of(r, "message") : "");
    cJSON_Delete(r);
    return id;
}

/* Whether vramd closed h within ms; what it sent before goes to *bytes. */
static bool closed_within(HANDLE h, DWORD ms, size_t *bytes)
{
    DWORD t0 = GetTickCount();
    size_t got = 0;
    bool closed = false;
    for (;;) {
        DWORD spent = GetTickCount() - t0;
        if (spent >= ms)
            break;
        char buf[65536];
        DWORD n;
        int r = io_once(h, false, buf, sizeof(buf), &n, ms - spent);
        if (r == IO_OK) {
            got += n;
            continue;
        }
        closed = r == IO_CLOSED;
        break;
    }
    if (bytes)
        *bytes = got;
    return closed;
}

/* The connection was closed at once and sent nothing before. */
static void expect_silent_close(HANDLE h, const char *what)
{
    size_t bytes = 0;
    bool closed = closed_within(h, 5000, &bytes);
    CHECK(closed, "%s: not disconnected within 5 s", what);
    CHECK(bytes == 0, "%s: %zu bytes came before the close", what, bytes);
}

/* ---- the check after each attack ---------------------------------------- */

static DWORD run_client(void)
{
    wchar_t exe[MAX_PATH], line[1024];
    _snwprintf(exe, MAX_PATH, L"%ls\\win_vramd_client.exe", dir);
    _snwprintf(line, 1024, L"\"%ls\" %ls 0x%x", exe, wpipe, fill);
    fill += 0x10;
    HANDLE p = wt_start(exe, line, log_file, log_file);
    DWORD s = wt_wait_exit(p, 90000);
    if (p) {
        if (s == WT_TIMED_OUT)
            TerminateProcess(p, 1);
        CloseHandle(p);
    }
    return s;
}

/* A status over a raw connection: the devices add up to their capacity,
 * nothing is granted or quarantined, and no client is left but this one. */
static void ledger_clean(const char *what)
{
    HANDLE h = raw_open();
    CHECK(h != NULL, "%s: cannot connect for a status", what);
    if (!h)
        return;
    hello(h, "after-attack", "ctl");
    cJSON *st = ask(h, "{\"type\":\"status\",\"id\":2}");
    CHECK(is_ok(st), "%s: status refused", what);
    const cJSON *dev;
    int ndev = 0;
    cJSON_ArrayForEach(dev, cJSON_GetObjectItemCaseSensitive(st, "devices")) {
        ndev++;
        uint64_t sum = num_of(dev, "free_bytes") + num_of(dev, "fixed_bytes") +
                       num_of(dev, "kv_bytes") + num_of(dev, "loaned_bytes") +
                       num_of(dev, "quarantined_bytes");
        CHECK(sum == num_of(dev, "capacity_bytes") && sum == 64 * MIB,
              "%s: device %llu: free+fixed+kv+loaned+quarantined = %llu, capacity "
              "%llu", what, (unsigned long long)num_of(dev, "id"),
              (unsigned long long)sum,
              (unsigned long long)num_of(dev, "capacity_bytes"));
        CHECK(num_of(dev, "granted_bytes") == 0 && num_of(dev, "quarantined_bytes") == 0,
              "%s: %llu bytes granted, %llu quarantined after the attack", what,
              (unsigned long long)num_of(dev, "granted_bytes"),
              (unsigned long long)num_of(dev, "quarantined_bytes"));
    }
    CHECK(ndev == 1, "%s: %d devices", what, ndev);
    int nclients = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "clients"));
    CHECK(nclients == 1, "%s: %d clients in the status, only the asker expected",
          what, nclients);
    cJSON_Delete(st);
    raw_close(&h);
}

/* needle: what the log must hold more often than mark times (NULL: no
 * reason to look for). */
static void after(const char *what, const char *needle, int mark)
{
    DWORD code = 0;
    if (WaitForSingleObject(vramd, 0) != WAIT_TIMEOUT) {
        GetExitCodeProcess(vramd, &code);
        wt_show_log(log_path, NULL);
    }
    REQUIRE(WaitForSingleObject(vramd, 0) == WAIT_TIMEOUT,
            "%s: vramd.exe is gone (exit %lu)", what, code);
    long n = handles_settle(3000);
    CHECK(labs(n - base_handles) <= HANDLE_SLACK,
          "%s: vramd holds %ld handles 3 s after, %ld before (%s)", what, n,
          base_handles, count_source);
    DWORD s = run_client();
    CHECK(s == 0, "%s: win_vramd_client.exe exited with %lu", what, s);
    n = handles_settle(3000);
    CHECK(labs(n - base_handles) <= HANDLE_SLACK,
          "%s: vramd holds %ld handles after a client, %ld before (%s)", what, n,
          base_handles, count_source);
    ledger_clean(what);
    if (needle)
        CHECK(log_wait(needle, mark, 2000), "%s: the log does not say '%s'", what,
              needle);
    printf("after %s: client exit %lu, %ld handles (baseline %ld)\n", what, s, n,
           base_handles);
    fflush(stdout);
}

/* ---- the attacks -------------------------------------------------------- */

/* One attack: its connection (and a second one, peer, where it takes two),
 * and what vramd's log must say for it, counted before it began so that
 * the after-check sees this attack's line and not an earlier one's. */
struct attack {
    HANDLE h, peer;
    const char *logged;
    int mark;
};

static struct attack attack_begin(const char *logged, bool two)
{
    struct attack at = {.logged = logged, .mark = log_count(logged)};
    at.h = raw_open();
    at.peer = two ? raw_open() : NULL;
    REQUIRE(at.h && (at.peer || !two), "connect");
    return at;
}

/* The connections closed, then the check after each attack. */
static void attack_end(struct attack *at, const char *what)
{
    raw_close(&at->h);
    raw_close(&at->peer);
    after(what, at->logged, at->mark);
}

/* The end of an attack that vramd must answer by closing the connection at
 * once, sending nothing first; sent: whether the attack's bytes went out. */
static void attack_end_silent(struct attack *at, bool sent, const char *what)
{
    CHECK(sent, "%s: write", what);
    expect_silent_close(at->h, what);
    attack_end(at, what);
}

/* Bad headers and payloads on fresh connections: each closed, the reason
 * logged (as on Linux: frame.c and the core's dispatch are shared). */
static void bad_frames(void)
{
    struct attack at = attack_begin("bad frame magic 0x42524147", false);
    attack_end_silent(&at, send_bytes(at.h, "GARBAGE GARBAGE GARBAGE!", 24),
                      "garbage bytes");

    /* Another version in the header: an error frame, then closed. */
    at = attack_begin("closed after a fatal error reply", false);
    const char *hello3 = "{\"type\":\"hello\",\"id\":1,\"version\":3}";
    CHECK(send_frame(at.h, 3, 0, hello3, (uint32_t)strlen(hello3), 0, NULL, 0), "write");
    bool closed = false;
    cJSON *r = recv_frame(at.h, 5000, NULL, NULL, &closed);
    CHECK(r && num_of(r, "id") == 0, "header version: the refusal's id is not 0");
    error_is(r, "EPROTONOSUPPORT", "protocol version mismatch: client 3, vramd 1 to 2",
             "header version");
    CHECK(closed_within(at.h, 5000, NULL), "header version: not disconnected");
    attack_end(&at, "a header of version 3");

    /* Reserved bits. */
    at = attack_begin("reserved header bits set (flags 0x1)", false);
    const char *ping = "{\"type\":\"ping\",\"id\":1}";
    attack_end_silent(&at, send_frame(at.h, 1, 1, ping, (uint32_t)strlen(ping), 0, NULL, 0),
                      "reserved header bits");

    /* A length over the limit: refused from the header alone. */
    at = attack_begin("payload of 1048577 bytes exceeds the limit of 1048576", false);
    attack_end_silent(&at, send_frame(at.h, 1, 0, NULL, VW_MAX_PAYLOAD + 1, 0, NULL, 0),
                      "a length over the frame limit");

    /* More handles announced than a frame may carry. */
    at = attack_begin("frame announces 33 fds, the limit is 32", false);
    attack_end_silent(&at,
                      send_frame(at.h, 1, 0, NULL, 0, VW_MAX_FDS_PER_FRAME + 1, NULL, 0),
                      "33 handles announced");

    /* A payload that is not JSON. */
    at = attack_begin("frame payload is not a JSON object", false);
    attack_end_silent(&at, send_json(at.h, "this is not json"),
                      "a payload that is not JSON");

    /* A hello of another version: refused, then closed. */
    at = attack_begin("closed after a fatal error reply", false);
    error_is(ask(at.h, "{\"type\":\"hello\",\"id\":1,\"version\":7}"), "EPROTONOSUPPORT",
             "client 7 to 7, vramd 1 to 2", "hello version");
    CHECK(closed_within(at.h, 5000, NULL), "hello version: not disconnected");
    attack_end(&at, "a hello of version 7");
}

/* Requests out of order and of unknown types: error replies, and the
 * connection stays usable (test_bad_input.c's case 6), until a payload
 * that is no object. */
static void bad_requests(void)
{
    int mark_obj = log_count("frame payload is not a JSON object");
    struct attack at = attack_begin("refused: EPROTO: say hello first", false);
    HANDLE h = at.h;
    expect_error(h, "{\"type\":\"status\",\"id\":5}", "EPROTO", "say hello first",
                 "status before hello");
    expect_error(h, "{\"type\":\"region_grow\",\"id\":5,\"chunks\":\"many\"}", "EPROTO",
                 "hello first", "a malformed request before hello");
    uint32_t id = hello(h, "raw", "engine");
    CHECK(id > 0, "hello after the errors");
    expect_error(h, "{\"type\":\"hello\",\"id\":2,\"version\":1,\"name\":\"other\"}",
                 "EPROTO", "already", "a second hello");
    expect_error(h, "{\"type\":\"frobnicate\",\"id\":6}", "ENOSYS",
                 "unknown message type 'frobnicate'", "an unknown type");
    expect_error(h, "{\"type\":\"region_grow\",\"id\":7,\"region\":1,\"chunks\":\"many\"}",
                 "EINVAL", "chunks", "a field of the wrong type");
    expect_error(h, "{\"type\":\"region_grow\",\"id\":8,\"region\":1}", "EINVAL",
                 "chunks", "a missing field");
    expect_error(h, "{\"type\":\"region_grow\",\"id\":9,\"region\":1e300,\"chunks\":1}",
                 "EINVAL", "region_grow.region: must be a u32", "a huge number");
    expect_error(h, "{\"type\":\"status\"}", "EINVAL", "id", "no id");
    expect_error(h, "{\"type\":\"reply\",\"id\":99,\"ok\":true}", "ENOSYS", "reply",
                 "a reply sent to the daemon");
    expect_ok(h, "{\"type\":\"ping\",\"id\":10}", "ping after the errors");
    CHECK(send_json(h, "[1,2,3]"), "write");
    expect_silent_close(h, "an array payload");
    attack_end(&at, "requests before hello, unknown and malformed");
    CHECK(log_count("frame payload is not a JSON object") > mark_obj,
          "the array payload's close is not logged");
}

/* A frame that announces handles: on Windows their values would name
 * handles in the client's process, which vramd must never take for its
 * own (daemon/io/session.c): refused and closed, nothing sent first. The
 * values sent are the lowest handle values, which in vramd name its own
 * handles: were they closed as its own, its handle count would drop and
 * it would likely stop serving. */
static void handles_sent(void)
{
    struct attack at = attack_begin("sent handles (no request carries any)", false);
    hello(at.h, "handles", "engine");
    uint64_t vals[VW_MAX_FDS_PER_FRAME];
    for (int i = 0; i < VW_MAX_FDS_PER_FRAME; i++)
        vals[i] = 4 * (uint64_t)(i + 1);
    const char *st = "{\"type\":\"status\",\"id\":2}";
    attack_end_silent(&at,
                      send_frame(at.h, 1, 0, st, (uint32_t)strlen(st),
                                 VW_MAX_FDS_PER_FRAME, vals, VW_MAX_FDS_PER_FRAME),
                      "a request with 32 handle values");
}

/* Silence: without hello the connection is closed at the hello deadline,
 * and a frame left half-sent at the frame deadline, neither earlier; a
 * client that said hello may be idle as long as it likes. */
static void deadlines(void)
{
    char needle[128];
    snprintf(needle, sizeof(needle), "said no hello within %u ms "
             "(limits.hello_timeout_ms)", HELLO_MS);
    struct attack at = attack_begin(needle, false);
    DWORD t0 = GetTickCount();
    CHECK(!closed_within(at.h, HELLO_MS - 200, NULL),
          "silent: closed before the hello deadline");
    CHECK(closed_within(at.h, 5000, NULL), "silent: not closed after the hello deadline");
    DWORD took = GetTickCount() - t0;
    CHECK(took >= HELLO_MS - 50, "silent: closed after %lu ms", took);
    attack_end(&at, "a connection that says nothing");

    snprintf(needle, sizeof(needle), "left a frame half-sent for %u ms "
             "(limits.frame_timeout_ms)", FRAME_MS);
    const char *ping = "{\"type\":\"ping\",\"id\":2}";
    for (int part = 0; part < 2; part++) {
        /* Half a header, then half a payload. */
        at = attack_begin(needle, false);
        hello(at.h, "half", "engine");
        uint8_t b[64];
        struct vw_frame_header fh = {.magic = VW_FRAME_MAGIC,
                                       .version = VW_PROTOCOL_OLDEST,
                                       .payload_len = (uint32_t)strlen(ping)};
        vw_frame_header_encode(&fh, b);
        memcpy(b + VW_FRAME_HEADER_SIZE, ping, strlen(ping));
        size_t n = part == 0 ? VW_FRAME_HEADER_SIZE / 2 : VW_FRAME_HEADER_SIZE + 8;
        t0 = GetTickCount();
        CHECK(send_bytes(at.h, b, n), "write");
        CHECK(!closed_within(at.h, FRAME_MS - 200, NULL),
              "half a %s: closed before the frame deadline",
              part == 0 ? "header" : "payload");
        CHECK(closed_within(at.h, 5000, NULL), "half a %s: not closed after the frame "
              "deadline", part == 0 ? "header" : "payload");
        took = GetTickCount() - t0;
        CHECK(took >= FRAME_MS - 50, "half a %s: closed after %lu ms",
              part == 0 ? "header" : "payload", took);
        attack_end(&at, part == 0 ? "half a header, then silence"
                                  : "half a payload, then silence");
    }

    /* Hello, then silence past both deadlines: still served. */
    snprintf(needle, sizeof(needle), "said no hello within");
    int mark_half = log_count("left a frame half-sent");
    at = attack_begin(needle, false);
    uint32_t id = hello(at.h, "idle", "engine");
    CHECK(!closed_within(at.h, HELLO_MS + FRAME_MS + 1000, NULL),
          "an idle client that said hello was disconnected");
    expect_ok(at.h, "{\"type\":\"ping\",\"id\":2}", "ping after being idle");
    char gone[128];
    snprintf(gone, sizeof(gone), "client %u (idle, pid %lu): disconnected", id,
             GetCurrentProcessId());
    int mark_gone = log_count(gone);
    CHECK(mark_gone == 0, "the idle client's end is logged before it ended");
    raw_close(&at.h);
    CHECK(log_count(needle) == at.mark && log_count("left a frame half-sent") == mark_half,
          "an idle client was taken for a silent one");
    /* Its end is its own: the log says it went. */
    after("hello, then idle past the deadlines", gone, mark_gone);
}

/* A peer that asks and never reads: what is queued towards it counts
 * against limits.queued_bytes (1 MiB here), and past it the peer that
 * queues most is dropped; a bystander is served throughout. */
static void never_reads(void)
{
    const char *cap = "the peers' queued output passed limits.queued_bytes (1 MiB)";
    struct attack at = attack_begin(cap, true);
    HANDLE by = at.h, fl = at.peer;
    hello(by, "bystander", "engine");
    uint32_t id = hello(fl, "flood", "ctl");
    int sent = 0;
    bool dropped = false;
    DWORD t0 = GetTickCount();
    for (; sent < 100000 && !dropped && GetTickCount() - t0 < 60000; sent++) {
        char m[64];
        snprintf(m, sizeof(m), "{\"type\":\"status\",\"id\":%d}", sent + 2);
        if (!send_json(fl, m))
            break; /* dropped: the pipe is broken */
        if (sent % 200 == 199)
            dropped = log_count(cap) > at.mark;
    }
    CHECK(log_wait(cap, at.mark, 20000), "the flood was not dropped for the cap "
          "(%d requests sent in %lu ms)", sent, GetTickCount() - t0);
    char who[160];
    snprintf(who, sizeof(who), "client %u (flood, pid %lu): %s", id,
             GetCurrentProcessId(), cap);
    CHECK(log_count(who) == 1, "the log does not name the flooding client: '%s'", who);
    /* What the pipe held is still readable; then it is closed. */
    size_t bytes = 0;
    CHECK(closed_within(fl, 20000, &bytes), "the flooding client was not "
          "disconnected (%zu bytes read)", bytes);
    printf("never reads: %d requests sent, dropped, %zu bytes left in the pipe\n",
           sent, bytes);
    expect_ok(by, "{\"type\":\"ping\",\"id\":2}", "the bystander's ping");
    attack_end(&at, "a peer that never reads its replies");
}

/* limits.clients: the connections up to it (and an administrator's slots
 * above it) are served; the next ones get E2BIG with the reason and are
 * closed; those served go on. */
static void too_many(void)
{
    const char *logged = "limit of 4 clients reached, and the admins' slots are taken";
    int mark = log_count(logged);
    HANDLE hs[SLOTS];
    uint32_t ids[SLOTS];
    for (int i = 0; i < SLOTS; i++) {
        hs[i] = raw_open();
        REQUIRE(hs[i], "connect %d", i);
        char nm[32];
        snprintf(nm, sizeof(nm), "slot-%d", i);
        ids[i] = hello(hs[i], nm, "engine");
    }
    /* The count moves with connections (a dead one would pass every
     * after-check). */
    long held = handle_count();
    CHECK(held >= base_handles + SLOTS, "with %d connections vramd holds %ld "
          "handles, %ld without (%s)", SLOTS, held, base_handles, count_source);
    for (int k = 0; k < 2; k++) {
        HANDLE x = raw_open();
        CHECK(x != NULL, "the pipe refused connection %d over the limit", k);
        if (!x)
            continue;
        bool closed = false;
        cJSON *r = recv_frame(x, 5000, NULL, NULL, &closed);
        CHECK(r && num_of(r, "id") == 0, "over the limit: the refusal's id is not 0");
        error_is(r, "E2BIG", "too many clients connected (limits.clients 4 and "
                 "limits.admin_connections)", "a connection over the limit");
        CHECK(closed_within(x, 5000, NULL), "a connection over the limit was not closed");
        raw_close(&x);
    }
    for (int i = 0; i < SLOTS; i++) {
        char m[64];
        snprintf(m, sizeof(m), "{\"type\":\"ping\",\"id\":%d}", 2 + i);
        CHECK(ids[i] && expect_ok(hs[i], m, "a served connection's ping"),
              "connection %d was disturbed by the refused ones", i);
    }
    for (int i = 0; i < SLOTS; i++)
        raw_close(&hs[i]);
    after("connections over limits.clients", logged, mark);
}

static uint64_t stage_of(HANDLE h, const char *what)
{
    cJSON *r = ask(h, "{\"type\":\"stage_register\",\"id\":3,\"device\":0,"
                      "\"first_layer\":0,\"last_layer\":1}");
    uint64_t st = is_ok(r) ? num_of(cJSON_GetObjectItemCaseSensitive(r, "stage"), "id") : 0;
    CHECK(st > 0, "%s: no ad-hoc stage: %s", what, r ? str_of(r, "message") : "no reply");
    cJSON_Delete(r);
    return st;
}

/* Requests over the limits, through valid frames: error replies, not a
 * disconnect, and nothing changes. */
static void over_limits(void)
{
    struct attack at = attack_begin("refused: ENOSPC: device 0: 48 chunks asked", false);
    HANDLE h = at.h;
    hello(h, "greedy", "engine");
    uint64_t st = stage_of(h, "over limits");
    char m[256];
    snprintf(m, sizeof(m), "{\"type\":\"region_create\",\"id\":4,\"stage\":%llu,"
             "\"kind\":\"fixed\",\"bytes\":%llu}", (unsigned long long)st,
             (unsigned long long)(64ull << 30));
    expect_error(h, m, "E2BIG", "(the device's capacity)", "a region larger than the device");
    snprintf(m, sizeof(m), "{\"type\":\"region_create\",\"id\":5,\"stage\":%llu,"
             "\"kind\":\"cache\",\"bytes\":2097152}", (unsigned long long)st);
    expect_error(h, m, "EINVAL", "kind", "an unknown region kind");
    /* Two lanes of 48 MiB: 96 MiB of slots over 64 MiB. */
    snprintf(m, sizeof(m), "{\"type\":\"region_create\",\"id\":6,\"stage\":%llu,"
             "\"kind\":\"fixed\",\"bytes\":%llu,\"lanes\":2}", (unsigned long long)st,
             48 * MIB);
    cJSON *r = ask(h, m);
    uint64_t region = is_ok(r) ? num_of(cJSON_GetObjectItemCaseSensitive(r, "region"), "id")
                               : 0;
    CHECK(region > 0, "a region of two 48 MiB lanes: %s", r ? str_of(r, "message") : "");
    cJSON_Delete(r);
    snprintf(m, sizeof(m), "{\"type\":\"region_grow\",\"id\":7,\"region\":%llu,"
             "\"chunks\":24}", (unsigned long long)region);
    expect_error(h, m, "ENOSPC", "48 chunks asked", "a grow beyond the capacity");
    snprintf(m, sizeof(m), "{\"type\":\"region_grow\",\"id\":8,\"region\":%llu,"
             "\"chunks\":25}", (unsigned long long)region);
    expect_error(h, m, "E2BIG", "25 chunks asked, room for 24", "a grow beyond the region");
    expect_ok(h, "{\"type\":\"ping\",\"id\":9}", "ping after the refusals");
    snprintf(m, sizeof(m), "{\"type\":\"stage_release\",\"id\":10,\"stage\":%llu}",
             (unsigned long long)st);
    expect_ok(h, m, "stage release");
    attack_end(&at, "requests over the limits");
}

/* Another client's chunk and region: ENOENT, and the owner keeps them. */
static void foreign(void)
{
    struct attack at = attack_begin("is not held by you", true);
    HANDLE a = at.h, b = at.peer;
    hello(a, "owner", "engine");
    hello(b, "thief", "engine");
    uint64_t st = stage_of(a, "foreign");
    char m[256];
    snprintf(m, sizeof(m), "{\"type\":\"region_create\",\"id\":4,\"stage\":%llu,"
             "\"kind\":\"fixed\",\"bytes\":%llu}", (unsigned long long)st, 4 * MIB);
    cJSON *r = ask(a, m);
    uint64_t region = is_ok(r) ? num_of(cJSON_GetObjectItemCaseSensitive(r, "region"), "id")
                               : 0;
    CHECK(region > 0, "the owner's region");
    cJSON_Delete(r);
    snprintf(m, sizeof(m), "{\"type\":\"region_grow\",\"id\":5,\"region\":%llu,"
             "\"chunks\":1}", (unsigned long long)region);
    /* The chunk comes as a section pushed into this process, its value
     * inline. */
    uint64_t vals[VW_MAX_FDS_PER_FRAME];
    int nv = 0;
    REQUIRE(send_json(a, m), "write");
    r = recv_frame(a, 10000, vals, &nv, NULL);
    const cJSON *e0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "map"), 0);
    uint64_t chunk = num_of(e0, "chunk");
    CHECK(is_ok(r) && e0 && nv == 1 && num_of(e0, "fd") == 0,
          "the owner's grow: ok %d, %d handles", is_ok(r), nv);
    cJSON_Delete(r);
    HANDLE sec = nv == 1 ? (HANDLE)(uintptr_t)vals[0] : NULL;
    void *view = sec ? MapViewOfFile(sec, FILE_MAP_READ | FILE_MAP_WRITE, 0, 0, 2 * MIB)
                     : NULL;
    CHECK(view != NULL, "the pushed chunk does not map here: %lu", GetLastError());
    if (view) {
        memset(view, 0x5c, 2 * MIB);
        UnmapViewOfFile(view);
    }
    char rel[128];
    snprintf(rel, sizeof(rel), "{\"type\":\"chunk_release\",\"id\":2,\"chunks\":[%llu]}",
             (unsigned long long)chunk);
    char want[64];
    snprintf(want, sizeof(want), "chunk %llu is not held by you", (unsigned long long)chunk);
    expect_error(b, rel, "ENOENT", want, "a release of another client's chunk");
    snprintf(m, sizeof(m), "{\"type\":\"region_grow\",\"id\":3,\"region\":%llu,"
             "\"chunks\":1}", (unsigned long long)region);
    expect_error(b, m, "ENOENT", "not yours", "a grow of another client's region");
    snprintf(m, sizeof(m), "{\"type\":\"chunk_move\",\"id\":4,\"chunk\":%llu,"
             "\"region\":%llu,\"slot\":1}", (unsigned long long)chunk,
             (unsigned long long)region);
    snprintf(want, sizeof(want), "chunk %llu is not a granted chunk of yours",
             (unsigned long long)chunk);
    expect_error(b, m, "ENOENT", want, "a move of another client's chunk");
    expect_ok(b, "{\"type\":\"ping\",\"id\":5}", "the thief's ping after the refusals");
    /* The owner still holds it: it gives it back itself. */
    if (sec)
        CloseHandle(sec);
    snprintf(rel, sizeof(rel), "{\"type\":\"chunk_release\",\"id\":6,\"chunks\":[%llu]}",
             (unsigned long long)chunk);
    r = ask(a, rel);
    CHECK(is_ok(r) && num_of(r, "released") == 1, "the owner's release of chunk %llu: "
          "%s", (unsigned long long)chunk, r ? str_of(r, "message") : "no reply");
    cJSON_Delete(r);
    snprintf(m, sizeof(m), "{\"type\":\"stage_release\",\"id\":7,\"stage\":%llu}",
             (unsigned long long)st);
    expect_ok(a, m, "the owner's stage release");
    attack_end(&at, "another client's chunk and region");
}

int main(void)
{
    wt_run_dir(L"vramd-attack", dir, tmp, log_path);
    wchar_t cfg[MAX_PATH], exe[MAX_PATH], line[2048];
    _snwprintf(cfg, MAX_PATH, L"%ls\\vramd.json", tmp);
    wt_unique_w(wpipe, 128, L"\\\\.\\pipe\\vramd-attack");
    _snwprintf(exe, MAX_PATH, L"%ls\\vramd.exe", dir);
    _snwprintf(line, 2048, L"\"%ls\" -s %ls -r \"%ls\" -c \"%ls\" -l debug", exe, wpipe,
               tmp, cfg);
    FILE *f = _wfopen(cfg, L"wb");
    REQUIRE(f != NULL, "cannot write the configuration");
    fprintf(f, "{\"devices\": [{\"id\": 0, \"backend\": \"host\", \"capacity\": \"64MiB\","
            " \"chunk\": \"2MiB\"}], \"pool\": {\"prefill_chunks\": 2},"
            " \"limits\": {\"clients\": %d, \"admin_connections\": %d,"
            " \"hello_timeout_ms\": %d, \"frame_timeout_ms\": %d,"
            " \"queued_bytes\": \"1MiB\"}}\n", CLIENTS, ADMIN_SLOTS, HELLO_MS, FRAME_MS);
    fclose(f);
    log_file = wt_open_out(log_path, true);
    vramd = wt_start(exe, line, log_file, log_file);
    wt_require_serving(vramd, wpipe, log_path);
    vramd_query = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, GetProcessId(vramd));
    REQUIRE(vramd_query != NULL, "OpenProcess(vramd): %lu", GetLastError());

    /* The baseline: after a first client (the pool made, a chunk or two
     * kept). */
    DWORD s = run_client();
    REQUIRE(s == 0, "the first win_vramd_client.exe exited with %lu", s);
    Sleep(500);
    base_handles = handle_count();
    REQUIRE(base_handles > 0, "no handle count for vramd (%s)", count_source);
    printf("vramd holds %ld handles (%s)\n", base_handles, count_source);
    ledger_clean("the start");

    bad_frames();
    bad_requests();
    handles_sent();
    deadlines();
    never_reads();
    too_many();
    over_limits();
    foreign();

    /* The protocol errors were counted: 7 frames refused by the io layer
     * or the dispatch (garbage, flags, length, 33 handles, not JSON, an
     * array, handles sent). */
    HANDLE h = raw_open();
    REQUIRE(h, "connect");
    hello(h, "counters", "ctl");
    cJSON *st = ask(h, "{\"type\":\"status\",\"id\":2}");
    uint64_t pe = num_of(cJSON_GetObjectItemCaseSensitive(st, "counters"), "protocol_errors");
    CHECK(pe >= 7, "protocol_errors is %llu, 7 at least expected", (unsigned long long)pe);
    cJSON_Delete(st);
    raw_close(&h);
    CHECK(WaitForSingleObject(vramd, 0) == WAIT_TIMEOUT, "vramd.exe ended");

    wt_end_daemon(vramd, log_path);
    CloseHandle(vramd_query);
    CloseHandle(log_file);
    if (!check_failures)
        remove_run_dir();
    return check_report("test_win_attack");
}
