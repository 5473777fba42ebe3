/* SPDX-License-Identifier: Apache-2.0 */
/* platform/win32/ under wine: handles, clocks, and connections over named
 * pipes (conn.h) on their own and under the wire (proto/wire.c). The
 * server end is made here with CreateNamedPipeW, as the listener will make
 * it; the client end by vp_dial. */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "platform/clock.h"
#include "platform/conn.h"
#include "proto/frame.h"
#include "platform/handle.h"
#include "tests/win/unique.h"
#include "proto/wire.h"

#define MUST(cond, ...)                                                        \
    do {                                                                       \
        int must_failures_ = check_failures;                                   \
        CHECK(cond, __VA_ARGS__);                                              \
        if (check_failures != must_failures_)                                  \
            exit(1);                                                           \
    } while (0)

static char pipe_path[128];

/* A server instance of a fresh pipe name, with a small buffer so that
 * sends fill it; the client dials it. */
static void pair(vp_handle *server, vp_handle *client, DWORD bufsize)
{
    wt_unique(pipe_path, sizeof(pipe_path), "\\\\.\\pipe\\vramd-test-conn");
    wchar_t w[128];
    MultiByteToWideChar(CP_UTF8, 0, pipe_path, -1, w, 128);
    HANDLE s = CreateNamedPipeW(w, PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED,
                                PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT |
                                    PIPE_REJECT_REMOTE_CLIENTS,
                                1, bufsize, bufsize, 0, NULL);
    MUST(s != INVALID_HANDLE_VALUE, "CreateNamedPipeW: %lu", GetLastError());
    OVERLAPPED ov = {0};
    ov.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
    BOOL r = ConnectNamedPipe(s, &ov);
    DWORD err = GetLastError();
    MUST(!r && (err == ERROR_IO_PENDING || err == ERROR_PIPE_CONNECTED),
         "ConnectNamedPipe: %lu", err);
    MUST(vp_dial(pipe_path, client) == 0, "vp_dial %s", pipe_path);
    DWORD x;
    if (err == ERROR_IO_PENDING)
        MUST(GetOverlappedResult(s, &ov, &x, TRUE), "connect");
    CloseHandle(ov.hEvent);
    server->v = (intptr_t)s;
}

static void test_handles_and_clock(void)
{
    HANDLE e = CreateEventW(NULL, TRUE, FALSE, NULL);
    vp_handle h = {(intptr_t)e}, d = VP_NONE;
    CHECK(vp_valid(h), "an event is valid");
    CHECK(vp_dup(h, &d) == 0 && vp_valid(d) && !vp_same(h, d), "dup");
    DWORD fl = 1;
    CHECK(GetHandleInformation((HANDLE)d.v, &fl) && !(fl & HANDLE_FLAG_INHERIT),
          "the dup is not inheritable");
    SetHandleInformation(e, HANDLE_FLAG_INHERIT, HANDLE_FLAG_INHERIT);
    CHECK(vp_set_noinherit(h) == 0 && GetHandleInformation(e, &fl) &&
              !(fl & HANDLE_FLAG_INHERIT),
          "noinherit");
    CHECK(vp_replace(d, &h) == -ENOSYS && vp_valid(h), "replace: ENOSYS, src open");
    vp_close(&d);
    CHECK(!vp_ok(d), "close sets VP_NONE");
    vp_close(&h);
    vp_close(&h); /* a no-op on VP_NONE */
    CHECK(!vp_valid(VP_NONE) && !vp_valid((vp_handle){0}), "none and 0 invalid");
    CHECK(vp_handles_inline(), "handles travel inline on Windows");
    vp_raise_handle_limit();

    uint64_t t0 = vp_now_ns();
    int64_t m0 = vp_now_ms();
    vp_sleep_ms(50);
    uint64_t t1 = vp_now_ns();
    CHECK(t1 > t0 && t1 - t0 >= 45000000u && t1 - t0 < 5000000000u,
          "50 ms slept as %llu ns", (unsigned long long)(t1 - t0));
    CHECK(vp_now_ms() - m0 >= 45, "ms clock");
    char wall[32];
    vp_wall_time(wall, sizeof(wall));
    CHECK(strlen(wall) == 12 && wall[2] == ':' && wall[5] == ':' && wall[8] == '.',
          "wall time %s", wall);
}

static void test_dial_errors(void)
{
    vp_handle h = VP_NONE;
    CHECK(vp_dial("/run/vramd/vramd.sock", &h) == -EINVAL && !vp_ok(h),
          "a path outside \\\\.\\pipe\\");
    CHECK(vp_dial("\\\\.\\pipe\\vramd-test-nobody-listens", &h) == -ENOENT &&
              !vp_ok(h),
          "no such pipe");
    char longname[400] = "\\\\.\\pipe\\";
    memset(longname + 9, 'x', 300);
    CHECK(vp_dial(longname, &h) == -ENAMETOOLONG, "a name too long");
    /* A synchronous pipe is no connection: sends on it would block. */
    HANDLE r, w;
    MUST(CreatePipe(&r, &w, NULL, 0), "CreatePipe");
    vp_handle a = {(intptr_t)w};
    CHECK(vp_send(a, "x", 1, NULL, 0) == -ENOTSOCK, "a synchronous pipe");
    vp_handle ev = {(intptr_t)CreateEventW(NULL, TRUE, FALSE, NULL)};
    CHECK(vp_send(ev, "x", 1, NULL, 0) == -ENOTSOCK, "an event");
    vp_close(&ev);
    CloseHandle(r);
    CloseHandle(w);
}

static void test_send_recv(void)
{
    vp_handle s, c;
    pair(&s, &c, 4096);
    char buf[256];
    vp_handle hs[4];
    int nh = 7;
    char why[128] = "";
    CHECK(vp_recv(c, buf, sizeof(buf), hs, 4, &nh, 0, why, sizeof(why)) == -EAGAIN &&
              nh == 0,
          "nothing there");
    CHECK(vp_send(c, "hello", 5, NULL, 0) == 5, "client sends");
    CHECK(vp_conn_wait(s, VP_READABLE | VP_WRITABLE, 1000) ==
              (VP_READABLE | VP_WRITABLE),
          "server readable and writable");
    long n = vp_recv(s, buf, sizeof(buf), hs, 4, &nh, 0, why, sizeof(why));
    CHECK(n == 5 && memcmp(buf, "hello", 5) == 0, "server got %ld", n);
    CHECK(vp_send(s, "world!", 6, NULL, 0) == 6, "server sends");
    n = vp_recv(c, buf, 3, hs, 4, &nh, 0, why, sizeof(why));
    CHECK(n == 3 && memcmp(buf, "wor", 3) == 0, "a short receive: %ld", n);
    n = vp_recv(c, buf, sizeof(buf), hs, 4, &nh, 0, why, sizeof(why));
    CHECK(n == 3 && memcmp(buf, "ld!", 3) == 0, "the rest: %ld", n);
    vp_handle one = c;
    CHECK(vp_send(c, "x", 1, &one, 1) == -EINVAL, "handles beside the bytes");

    char path[160];
    CHECK(vp_conn_peer_path(c, path, sizeof(path)) == 0 && strcmp(path, pipe_path) == 0,
          "peer path %s", path);
    CHECK(vp_conn_peer_path(s, path, sizeof(path)) == -ENOENT, "server: no path");

    /* Modes. */
    CHECK(vp_conn_blocking(c), "dialled connections block");
    CHECK(vp_conn_set_blocking(c, false) == 0 && !vp_conn_blocking(c), "non-blocking");
    int64_t t0 = vp_now_ms();
    CHECK(vp_recv(c, buf, sizeof(buf), hs, 4, &nh, VP_RECV_WAIT, why, sizeof(why)) ==
              -EAGAIN && vp_now_ms() - t0 < 50,
          "a non-blocking connection does not wait");
    CHECK(vp_conn_set_blocking(c, true) == 0 && vp_conn_blocking(c), "blocking");
    CHECK(vp_conn_set_recv_timeout(c, 100) == 0, "timeout");
    t0 = vp_now_ms();
    n = vp_recv(c, buf, sizeof(buf), hs, 4, &nh, VP_RECV_WAIT, why, sizeof(why));
    int64_t took = vp_now_ms() - t0;
    CHECK(n == -EAGAIN && took >= 90 && took < 2000, "timed out: %ld after %lld ms",
          n, (long long)took);
    CHECK(vp_conn_wait(c, VP_READABLE, 50) == 0, "not readable");
    vp_send(s, "z", 1, NULL, 0);
    n = vp_recv(c, buf, sizeof(buf), hs, 4, &nh, VP_RECV_WAIT, why, sizeof(why));
    CHECK(n == 1 && buf[0] == 'z', "a waiting receive: %ld", n);
    CHECK(vp_conn_error(c) == 0, "no error");

    /* The server goes: what it sent still arrives, then the end. */
    vp_send(s, "bye", 3, NULL, 0);
    vp_close(&s);
    CHECK(vp_conn_wait(c, VP_READABLE, 1000) == VP_READABLE, "readable");
    n = vp_recv(c, buf, sizeof(buf), hs, 4, &nh, 0, why, sizeof(why));
    CHECK(n == 3 && memcmp(buf, "bye", 3) == 0, "sent before the close: %ld", n);
    CHECK(vp_conn_wait(c, VP_READABLE, 1000) == VP_READABLE, "the end is readable");
    CHECK(vp_recv(c, buf, sizeof(buf), hs, 4, &nh, 0, why, sizeof(why)) == 0,
          "end of stream");
    CHECK(vp_recv(c, buf, sizeof(buf), hs, 4, &nh, VP_RECV_WAIT, why, sizeof(why)) == 0,
          "end of stream, waiting");
    CHECK(vp_send(c, "x", 1, NULL, 0) == -EPIPE, "sending to nobody: EPIPE");
    vp_close(&c);
}

/* Sends fill the pipe, the last one stays in flight; nothing is lost or
 * sent twice while the reader drains it. */
static void test_full_pipe(void)
{
    vp_handle s, c;
    pair(&s, &c, 4096);
    static uint8_t out[1 << 20], in[1 << 20];
    for (size_t i = 0; i < sizeof(out); i++)
        out[i] = (uint8_t)(i * 7 + i / 251);
    size_t sent = 0;
    long n;
    while ((n = vp_send(c, out + sent, sizeof(out) - sent, NULL, 0)) > 0)
        sent += (size_t)n;
    CHECK(n == -EAGAIN && sent > 0 && sent < sizeof(out), "full after %zu: %ld",
          sent, n);
    CHECK(vp_conn_wait(c, VP_WRITABLE, 50) == 0, "a full pipe is not writable");
    size_t got = 0;
    char why[64];
    vp_handle hs[1];
    int nh;
    int64_t deadline = vp_now_ms() + 20000;
    while (got < sizeof(in) && vp_now_ms() < deadline) {
        n = vp_recv(s, in + got, 3000, hs, 1, &nh, 0, why, sizeof(why));
        if (n > 0)
            got += (size_t)n;
        else
            CHECK(n == -EAGAIN, "receive: %ld", n);
        if (sent < sizeof(out)) {
            n = vp_send(c, out + sent, sizeof(out) - sent, NULL, 0);
            if (n > 0)
                sent += (size_t)n;
            else
                CHECK(n == -EAGAIN, "send: %ld", n);
        }
        if (n == -EAGAIN)
            vp_conn_wait(s, VP_READABLE, 100);
    }
    CHECK(sent == sizeof(out) && got == sizeof(in), "sent %zu, received %zu", sent,
          got);
    CHECK(memcmp(in, out, sizeof(in)) == 0, "bytes changed on the way");
    CHECK(vp_conn_wait(c, VP_WRITABLE, 1000) == VP_WRITABLE, "writable once drained");
    vp_close(&c);
    vp_close(&s);
}

/* A write in flight when the reader goes fails the next send. */
static void test_reader_gone(void)
{
    vp_handle s, c;
    pair(&s, &c, 4096);
    static uint8_t big[65536];
    long n = vp_send(c, big, sizeof(big), NULL, 0);
    CHECK(n > 0, "send %ld", n);
    vp_close(&s);
    int64_t deadline = vp_now_ms() + 5000;
    do
        n = vp_send(c, big, sizeof(big), NULL, 0);
    while (n == -EAGAIN && vp_now_ms() < deadline && (vp_sleep_ms(5), 1));
    CHECK(n == -EPIPE, "send after the reader went: %ld", n);
    vp_close(&c);
}

struct shut_arg {
    vp_handle c;
    int mode; /* 0: receive, 1: wait */
    long r;
};

static DWORD WINAPI blocked(void *p)
{
    struct shut_arg *a = p;
    char buf[16], why[64];
    vp_handle hs[1];
    int nh;
    if (a->mode == 0)
        a->r = vp_recv(a->c, buf, sizeof(buf), hs, 1, &nh, VP_RECV_WAIT, why,
                       sizeof(why));
    else
        a->r = vp_conn_wait(a->c, VP_READABLE, -1);
    return 0;
}

/* vp_conn_shut_receive wakes a receive or a wait on another thread. */
static void test_shut_receive(void)
{
    for (int mode = 0; mode < 2; mode++) {
        vp_handle s, c;
        pair(&s, &c, 4096);
        vp_conn_set_recv_timeout(c, 0); /* wait for ever */
        struct shut_arg a = {.c = c, .mode = mode, .r = -999};
        HANDLE t = CreateThread(NULL, 0, blocked, &a, 0, NULL);
        MUST(t != NULL, "CreateThread");
        CHECK(WaitForSingleObject(t, 200) == WAIT_TIMEOUT, "%s returned early: %ld",
              mode ? "wait" : "receive", a.r);
        CHECK(vp_conn_shut_receive(c) == 0, "shut");
        CHECK(WaitForSingleObject(t, 5000) == WAIT_OBJECT_0, "%s not woken",
              mode ? "wait" : "receive");
        CHECK(mode ? a.r == VP_READABLE : a.r == 0, "%s returned %ld",
              mode ? "wait" : "receive", a.r);
        CloseHandle(t);
        char buf[4], why[8];
        vp_handle hs[1];
        int nh;
        vp_send(s, "x", 1, NULL, 0);
        CHECK(vp_recv(c, buf, 4, hs, 1, &nh, 0, why, sizeof(why)) == 0,
              "a shut receive reads the end");
        CHECK(vp_send(c, "y", 1, NULL, 0) == 1, "sends still work");
        vp_close(&c);
        vp_close(&s);
    }
}

struct frames {
    int n;
    size_t len[4];
    char first[4];
};

static int on_frame(void *ud, struct vw_codec_frame *f)
{
    struct frames *x = ud;
    if (x->n < 4) {
        x->len[x->n] = f->len;
        x->first[x->n] = f->payload[0];
    }
    x->n++;
    return 0;
}

/* The wire over a pipe: frames, a large one over several flushes. */
static void test_wire(void)
{
    vp_handle s, c;
    pair(&s, &c, 4096);
    struct vw_wire tx, rx;
    vw_wire_init(&tx, c);
    vw_wire_init(&rx, s);
    CHECK(tx.codec.inline_handles, "inline codec");
    static char big[1 << 20];
    memset(big, 'b', sizeof(big));
    CHECK(vw_wire_queue(&tx, "{\"a\":1}", 7, NULL, 0) == 0, "queue a");
    CHECK(vw_wire_queue(&tx, big, sizeof(big), NULL, 0) == 0, "queue big");
    CHECK(vw_wire_queue(&tx, "{\"c\":3}", 7, NULL, 0) == 0, "queue c");
    struct frames got = {0};
    char why[256];
    int64_t deadline = vp_now_ms() + 20000;
    int r = -EAGAIN;
    while ((r == -EAGAIN || got.n < 3) && vp_now_ms() < deadline) {
        r = vw_wire_flush(&tx);
        CHECK(r == 0 || r == -EAGAIN, "flush %d", r);
        int e = vw_wire_read(&rx, on_frame, &got, why, sizeof(why));
        CHECK(e == 0, "read %d: %s", e, why);
        if (r == -EAGAIN)
            vp_conn_wait(c, VP_WRITABLE, 10);
    }
    CHECK(got.n == 3 && got.len[0] == 7 && got.len[1] == sizeof(big) &&
              got.len[2] == 7 && got.first[0] == '{' && got.first[1] == 'b',
          "%d frames", got.n);
    vw_wire_fini(&tx);
    vw_wire_fini(&rx);
    vp_close(&c);
    vp_close(&s);
}

int main(void)
{
    test_handles_and_clock();
    test_dial_errors();
    test_send_recv();
    test_full_pipe();
    test_reader_gone();
    test_shut_receive();
    test_wire();
    return check_report("test_win_conn");
}
