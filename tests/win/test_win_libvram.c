/* SPDX-License-Identifier: Apache-2.0 */
/* libvram.dll as an engine uses it: this program is built from vram.h and
 * linked against the import library libvram.dll.a only (no static part of
 * the library, none of its internal headers), and runs under wine.
 *
 * No vramd runs on Windows yet, so the daemon here is a stand-in: a thread
 * of this process serving a named pipe, answering the frames the library
 * sends with fixed replies (proto/frame.h's header, JSON as
 * proto/messages.json says). It grants host chunks as vramd will on
 * Windows: sections whose handle values travel after the payload (inline
 * handles, proto/codec.h). The stand-in shares this process, so a value it
 * duplicated here is valid for the library as one pushed into the client's
 * process by vramd would be (platform/win32/push.h). */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vram.h>

#include "tests/check.h"
#include "tests/win/unique.h"

#define MUST(cond, ...) REQUIRE(cond, __VA_ARGS__)

#define CHUNK_BYTES 65536u /* Windows' allocation granularity */
#define NCHUNKS 2
#define CLIENT_ID 7u
#define STAGE_ID 3u
#define REGION_ID 5u

/* ---- the stand-in daemon ------------------------------------------------ */

struct fake {
    wchar_t name[128];
    HANDLE pipe;
    HANDLE thread;
    uint64_t base; /* the region's address, free in this process */
    HANDLE sections[NCHUNKS];
    uint8_t *views[NCHUNKS]; /* the daemon's own views of them */
    /* what it saw */
    int hellos, pings, registers, creates, grows, stage_releases, statuses,
        others;
    char other_types[256];
    char hello_payload[512];
    int eof; /* the client hung up between frames */
};

static int read_all(HANDLE h, void *buf, DWORD n)
{
    uint8_t *p = buf;
    while (n) {
        DWORD got;
        if (!ReadFile(h, p, n, &got, NULL) || got == 0)
            return -1;
        p += got;
        n -= got;
    }
    return 0;
}

static int write_all(HANDLE h, const void *buf, DWORD n)
{
    const uint8_t *p = buf;
    while (n) {
        DWORD put;
        if (!WriteFile(h, p, n, &put, NULL))
            return -1;
        p += put;
        n -= put;
    }
    return 0;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* One frame: header, payload, then n handle values of 8 bytes each. */
static int send_frame(HANDLE h, const char *json, const HANDLE *hs, int n)
{
    size_t len = strlen(json);
    uint8_t hdr[16] = {0};
    put32(hdr, 0x444d5256u); /* "VRMD" */
    put16(hdr + 4, 1);       /* protocol version */
    put32(hdr + 8, (uint32_t)len);
    put16(hdr + 12, (uint16_t)n);
    uint8_t trailer[8 * NCHUNKS] = {0};
    for (int i = 0; i < n; i++) {
        uint64_t v = (uint64_t)(uintptr_t)hs[i];
        for (int k = 0; k < 8; k++)
            trailer[8 * i + k] = (uint8_t)(v >> (8 * k));
    }
    if (write_all(h, hdr, sizeof(hdr)) < 0 || write_all(h, json, (DWORD)len) < 0)
        return -1;
    return n ? write_all(h, trailer, (DWORD)(8 * n)) : 0;
}

/* The request's "type" and "id", read the simple way: the library writes
 * them as plain JSON members. */
static void request_head(const char *json, char *type, size_t tlen, unsigned *id)
{
    type[0] = '\0';
    *id = 0;
    const char *t = strstr(json, "\"type\":\"");
    if (t) {
        t += 8;
        size_t k = 0;
        while (t[k] && t[k] != '"' && k + 1 < tlen) {
            type[k] = t[k];
            k++;
        }
        type[k] = '\0';
    }
    const char *i = strstr(json, "\"id\":");
    if (i)
        *id = (unsigned)strtoul(i + 5, NULL, 10);
}

static void region_json(const struct fake *f, char *buf, size_t len, unsigned chunks)
{
    snprintf(buf, len,
             "{\"id\":%u,\"stage\":%u,\"kind\":\"fixed\",\"device\":0,"
             "\"base\":%llu,\"lane_stride\":%u,\"va_bytes\":%u,\"lanes\":1,"
             "\"lane_slots\":%u,\"stride_slots\":%u,\"chunk_bytes\":%u,"
             "\"chunks\":%u}",
             REGION_ID, STAGE_ID, (unsigned long long)f->base,
             NCHUNKS * CHUNK_BYTES, NCHUNKS * CHUNK_BYTES, NCHUNKS, NCHUNKS,
             CHUNK_BYTES, chunks);
}

static DWORD WINAPI serve(void *arg)
{
    struct fake *f = arg;
    if (!ConnectNamedPipe(f->pipe, NULL) && GetLastError() != ERROR_PIPE_CONNECTED)
        return 1;
    static char payload[1 << 16];
    static char reply[4096];
    for (;;) {
        uint8_t hdr[16];
        if (read_all(f->pipe, hdr, sizeof(hdr)) < 0) {
            f->eof = 1;
            break;
        }
        uint32_t len = get32(hdr + 8);
        if (len >= sizeof(payload) || read_all(f->pipe, payload, len) < 0)
            break;
        payload[len] = '\0';
        char type[32];
        unsigned id;
        request_head(payload, type, sizeof(type), &id);
        HANDLE hs[NCHUNKS];
        int nh = 0;
        if (strcmp(type, "hello") == 0) {
            f->hellos++;
            snprintf(f->hello_payload, sizeof(f->hello_payload), "%s", payload);
            snprintf(reply, sizeof(reply),
                     "{\"type\":\"reply\",\"id\":%u,\"ok\":true,\"version\":1,"
                     "\"capabilities\":[\"fd-passing\"],\"client\":%u,"
                     "\"backend\":\"host\"}",
                     id, CLIENT_ID);
        } else if (strcmp(type, "ping") == 0) {
            f->pings++;
            snprintf(reply, sizeof(reply), "{\"type\":\"reply\",\"id\":%u,\"ok\":true}", id);
        } else if (strcmp(type, "status") == 0) {
            /* An error reply: its name becomes this system's errno. */
            f->statuses++;
            snprintf(reply, sizeof(reply),
                     "{\"type\":\"reply\",\"id\":%u,\"ok\":false,\"error\":"
                     "\"EACCES\",\"message\":\"the stand-in shows no status\"}",
                     id);
        } else if (strcmp(type, "stage_register") == 0) {
            f->registers++;
            snprintf(reply, sizeof(reply),
                     "{\"type\":\"reply\",\"id\":%u,\"ok\":true,\"stage\":{"
                     "\"id\":%u,\"device\":0,\"first_layer\":0,\"last_layer\":0,"
                     "\"configured\":false,\"owner\":%u,\"kv_mapped_bytes\":0,"
                     "\"kv_needed_bytes\":0,\"kv_max_bytes\":0,"
                     "\"expert_loaned_bytes\":0,\"expert_slots_backed\":0,"
                     "\"expert_slot_bytes\":0,\"recalls_pending\":0,"
                     "\"residency_version\":0,\"fixed_bytes\":0,"
                     "\"fixed_reserved_bytes\":0,\"regions\":[]}}",
                     id, STAGE_ID, CLIENT_ID);
        } else if (strcmp(type, "region_create") == 0) {
            f->creates++;
            char r[512];
            region_json(f, r, sizeof(r), 0);
            snprintf(reply, sizeof(reply),
                     "{\"type\":\"reply\",\"id\":%u,\"ok\":true,\"region\":%s}", id, r);
        } else if (strcmp(type, "region_grow") == 0) {
            /* Two fresh chunks, their sections' values inline: what
             * vramd's vp_handle_push gives a client, read and write. */
            f->grows++;
            for (int i = 0; i < NCHUNKS; i++) {
                if (!DuplicateHandle(GetCurrentProcess(), f->sections[i],
                                     GetCurrentProcess(), &hs[i],
                                     FILE_MAP_READ | FILE_MAP_WRITE, FALSE, 0))
                    return 2;
                nh++;
            }
            snprintf(reply, sizeof(reply),
                     "{\"type\":\"reply\",\"id\":%u,\"ok\":true,\"map\":["
                     "{\"chunk\":100,\"region\":%u,\"slot\":0,\"fd\":0},"
                     "{\"chunk\":101,\"region\":%u,\"slot\":1,\"fd\":1}]}",
                     id, REGION_ID, REGION_ID);
        } else {
            if (strcmp(type, "stage_release") == 0)
                f->stage_releases++;
            else {
                f->others++;
                size_t used = strlen(f->other_types);
                snprintf(f->other_types + used, sizeof(f->other_types) - used,
                         "%s ", type);
            }
            snprintf(reply, sizeof(reply), "{\"type\":\"reply\",\"id\":%u,\"ok\":true}", id);
        }
        if (send_frame(f->pipe, reply, hs, nh) < 0)
            break;
    }
    return 0;
}

static void fake_start(struct fake *f, const char *path)
{
    memset(f, 0, sizeof(*f));
    MultiByteToWideChar(CP_UTF8, 0, path, -1, f->name, 128);
    f->pipe = CreateNamedPipeW(f->name, PIPE_ACCESS_DUPLEX,
                               PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT, 1,
                               65536, 65536, 0, NULL);
    MUST(f->pipe != INVALID_HANDLE_VALUE, "CreateNamedPipeW: %lu", GetLastError());
    /* An address range free in this process, for the region: vramd picks
     * it on its own address plan, high and 1 GiB-aligned; here, the middle
     * of a GiB the system just gave back from the top, away from where the
     * heap grows into in the meantime. */
    SIZE_T span = (SIZE_T)1 << 30;
    void *p = VirtualAlloc(NULL, span, MEM_RESERVE | MEM_TOP_DOWN, PAGE_NOACCESS);
    MUST(p, "VirtualAlloc: %lu", GetLastError());
    f->base = (uint64_t)(uintptr_t)p + span / 2;
    VirtualFree(p, 0, MEM_RELEASE);
    for (int i = 0; i < NCHUNKS; i++) {
        f->sections[i] = CreateFileMappingW(INVALID_HANDLE_VALUE, NULL,
                                            PAGE_READWRITE | SEC_COMMIT, 0,
                                            CHUNK_BYTES, NULL);
        MUST(f->sections[i], "CreateFileMappingW: %lu", GetLastError());
        f->views[i] = MapViewOfFile(f->sections[i], FILE_MAP_READ | FILE_MAP_WRITE,
                                    0, 0, CHUNK_BYTES);
        MUST(f->views[i], "MapViewOfFile: %lu", GetLastError());
        memset(f->views[i], 0x41 + i, CHUNK_BYTES);
    }
    f->thread = CreateThread(NULL, 0, serve, f, 0, NULL);
    MUST(f->thread, "CreateThread: %lu", GetLastError());
}

static void fake_stop(struct fake *f)
{
    CHECK(WaitForSingleObject(f->thread, 10000) == WAIT_OBJECT_0,
          "the stand-in did not see the client go");
    CloseHandle(f->thread);
    CloseHandle(f->pipe);
    for (int i = 0; i < NCHUNKS; i++) {
        UnmapViewOfFile(f->views[i]);
        CloseHandle(f->sections[i]);
    }
}

/* ---- the tests ---------------------------------------------------------- */

static void test_loaded_from_dll(void)
{
    /* The calls resolve to libvram.dll through its import library. */
    HMODULE m = GetModuleHandleW(L"libvram.dll");
    CHECK(m != NULL, "libvram.dll is not loaded in this process");
    CHECK(m && (void *)GetProcAddress(m, "vram_client_connect") != NULL,
          "libvram.dll does not export vram_client_connect");
    /* What vram.h does not declare stays inside. */
    CHECK(m && GetProcAddress(m, "vp_dial") == NULL, "libvram.dll exports vp_dial");
    CHECK(m && GetProcAddress(m, "vw_codec_init") == NULL,
          "libvram.dll exports vw_codec_init");
}

static void test_strerror(void)
{
    const char *s = vram_strerror(-E2BIG);
    CHECK(s && strstr(s, "limit"), "E2BIG reads %s", s ? s : "(null)");
    s = vram_strerror(-ENOENT);
    CHECK(s && *s, "ENOENT has no text");
    s = vram_strerror(-123456);
    CHECK(s && *s, "an unknown code has no text");
}

static void test_no_daemon(void)
{
    char path[128], err[512];
    wt_unique(path, sizeof(path), "\\\\.\\pipe\\vramd-none");
    vram_client *c = (vram_client *)(uintptr_t)0x1;
    struct vram_client_options o = {.error = err, .error_len = sizeof(err)};
    int e = vram_client_connect(path, &o, &c);
    CHECK(e == -ENOENT, "connect to a pipe nobody serves: %d (%s)", e, err);
    CHECK(c == (vram_client *)(uintptr_t)0x1, "out written on failure");
    CHECK(strstr(err, path) != NULL, "the error does not name the pipe: %s", err);

    /* $VRAM_SOCKET names the pipe when the caller names none (the same
     * C runtime as the DLL's: msvcrt). */
    char env[160];
    snprintf(env, sizeof(env), "VRAM_SOCKET=%s-env", path);
    _putenv(env);
    err[0] = '\0';
    e = vram_client_connect(NULL, &o, &c);
    CHECK(e == -ENOENT, "connect by $VRAM_SOCKET: %d (%s)", e, err);
    CHECK(strstr(err, "-env") != NULL, "the error does not name $VRAM_SOCKET's pipe: %s",
          err);
    _putenv("VRAM_SOCKET=");

    /* A POSIX path is no pipe name: refused before anything is opened. */
    err[0] = '\0';
    e = vram_client_connect("/run/vramd/vramd.sock", &o, &c);
    CHECK(e == -EINVAL, "a POSIX path: %d (%s)", e, err);
    CHECK(strstr(err, "/run/vramd/vramd.sock") != NULL, "the error does not name it: %s",
          err);
    vram_client_close(NULL); /* NULL-tolerant */
}

static void test_stand_in(void)
{
    char path[128], err[512] = "";
    wt_unique(path, sizeof(path), "\\\\.\\pipe\\vramd-test-libvram");
    struct fake f;
    fake_start(&f, path);
    struct vram_client_options o = {.name = "wine-engine", .error = err,
                                    .error_len = sizeof(err)};
    vram_client *c = NULL;
    int e = vram_client_connect(path, &o, &c);
    MUST(e == 0 && c, "connect to the stand-in: %d (%s)", e, err);
    CHECK_EQ_U(vram_client_id(c), CLIENT_ID);
    CHECK(strcmp(vram_client_backend(c), "host") == 0, "backend %s",
          vram_client_backend(c));
    CHECK(strstr(f.hello_payload, "\"wine-engine\"") != NULL, "hello: %s",
          f.hello_payload);
    CHECK(vram_client_fd(c) != -1, "no handle to wait on");
    CHECK(vram_client_ping(c) == 0, "ping: %s", vram_client_last_error(c));

    char *json = (char *)(uintptr_t)0x1;
    e = vram_status_json(c, &json);
    CHECK(e == -EACCES, "status refused: %d", e);
    CHECK(json == (char *)(uintptr_t)0x1, "out written on failure");
    CHECK(strstr(vram_client_last_error(c), "no status") != NULL,
          "the daemon's message: %s", vram_client_last_error(c));

    uint32_t stage = 0, region = 0;
    e = vram_stage_register_adhoc(c, 0, 0, 0, &stage);
    MUST(e == 0, "register: %d (%s)", e, vram_client_last_error(c));
    CHECK_EQ_U(stage, STAGE_ID);
    e = vram_region_create(c, stage, VRAM_REGION_FIXED, NCHUNKS * CHUNK_BYTES, 1,
                           &region);
    MUST(e == 0, "region: %d (%s)", e, vram_client_last_error(c));
    CHECK_EQ_U(region, REGION_ID);
    uint8_t *s0 = vram_region_slot(c, region, 0, 0);
    uint8_t *s1 = vram_region_slot(c, region, 0, 1);
    CHECK((uint64_t)(uintptr_t)s0 == f.base, "slot 0 at %p, base 0x%llx", (void *)s0,
          (unsigned long long)f.base);
    CHECK(s1 == s0 + CHUNK_BYTES, "slot 1 at %p", (void *)s1);
    MEMORY_BASIC_INFORMATION mbi;
    CHECK(VirtualQuery(s0, &mbi, sizeof(mbi)) && mbi.State == MEM_RESERVE,
          "the region is not reserved before it is grown (state 0x%lx)", mbi.State);

    /* The grant: handle values in the frame, sections mapped at the
     * region's slots. */
    e = vram_region_grow(c, region, NCHUNKS);
    MUST(e == 0, "grow: %d (%s)", e, vram_client_last_error(c));
    uint64_t id = 0;
    CHECK(vram_region_chunk(c, region, 0, 1, &id) == 0 && id == 101, "slot 1 holds %llu",
          (unsigned long long)id);
    CHECK_EQ_U(vram_client_chunks_held(c), NCHUNKS);
    CHECK(s0[0] == 0x41 && s0[CHUNK_BYTES - 1] == 0x41, "slot 0 reads 0x%x", s0[0]);
    CHECK(s1[0] == 0x42 && s1[CHUNK_BYTES - 1] == 0x42, "slot 1 reads 0x%x", s1[0]);
    s0[17] = 0x5a;
    s1[CHUNK_BYTES - 2] = 0xa5;
    CHECK(f.views[0][17] == 0x5a && f.views[1][CHUNK_BYTES - 2] == 0xa5,
          "a write through the slots does not reach the sections");

    vram_client_close(c);
    CHECK(VirtualQuery(s0, &mbi, sizeof(mbi)) && mbi.State == MEM_FREE,
          "the region is still there after close (state 0x%lx)", mbi.State);
    fake_stop(&f);
    CHECK(f.eof, "the stand-in did not see the client hang up");
    CHECK(f.hellos == 1 && f.pings == 1 && f.statuses == 1 && f.registers == 1 &&
              f.creates == 1 && f.grows == 1 && f.stage_releases == 1,
          "requests: hello %d ping %d status %d register %d create %d grow %d "
          "stage_release %d",
          f.hellos, f.pings, f.statuses, f.registers, f.creates, f.grows,
          f.stage_releases);
    CHECK(f.others == 0, "other requests: %s", f.other_types);
}

/* The library's event thread (platform/win32/thread_win32.c: a thread and a
 * recursive lock) beside the engine's own calls. */
static void test_event_thread(void)
{
    char path[128], err[512] = "";
    wt_unique(path, sizeof(path), "\\\\.\\pipe\\vramd-test-thread");
    struct fake f;
    fake_start(&f, path);
    struct vram_client_options o = {.error = err, .error_len = sizeof(err)};
    vram_client *c = NULL;
    int e = vram_client_connect(path, &o, &c);
    MUST(e == 0 && c, "connect to the stand-in: %d (%s)", e, err);
    e = vram_client_start_event_thread(c);
    CHECK(e == 0, "event thread: %d (%s)", e, vram_client_last_error(c));
    CHECK(vram_client_start_event_thread(c) == -EALREADY, "a second event thread");
    for (int i = 0; i < 3; i++)
        CHECK(vram_client_ping(c) == 0, "ping %d with the thread: %s", i,
              vram_client_last_error(c));
    vram_client_close(c); /* stops and joins the thread */
    fake_stop(&f);
    CHECK(f.eof && f.pings == 3 && f.others == 0, "eof %d pings %d others %s",
          f.eof, f.pings, f.other_types);
}

int main(void)
{
    test_loaded_from_dll();
    test_strerror();
    test_no_daemon();
    test_stand_in();
    test_event_thread();
    return check_report("test_win_libvram");
}
