/* SPDX-License-Identifier: Apache-2.0 */
/* Connected instances as libuv streams (platform/win32/stream.h) under wine: the
 * acceptor thread delivers instances of vramd's own pipe to a libuv loop,
 * which names each client (vp_identity_of_pipe), opens it as a uv_pipe_t
 * and reads and writes it with uv_read_start and uv_write; the client
 * checks the server's pid (vp_dial_server). A client's end works as a
 * libuv stream too. Stopping the acceptor frees everything: the loop
 * closes with no handle left. */
#include "tests/win/wintest.h"

#include <errno.h>

#include <uv.h>

#include "platform/conn.h"
#include "platform/win32/identity.h"
#include "platform/win32/pipe_listener.h"
#include "platform/win32/stream.h"

#define CLIENTS 3
#define BIG (1u << 20) /* one client sends a MiB: many reads, a long write */

static char pipe_name[128];

struct session {
    uv_pipe_t p;
    size_t got;
    uint64_t sum;
    bool big;
    char head[64];
    size_t headlen;
};

static struct {
    uv_loop_t loop;
    struct vp_acceptor *acc;
    int accepted, closed, answered, errors;
    int64_t self_pid;
} T;

static void on_closed(uv_handle_t *h)
{
    free(h->data);
    if (++T.closed == CLIENTS)
        vp_acceptor_stop(T.acc);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    static char space[65536];
    *buf = uv_buf_init(space, sizeof(space));
}

static void on_written(uv_write_t *w, int status)
{
    CHECK(status == 0, "uv_write: %s", uv_strerror(status));
    free(w->data);
    free(w);
    T.answered++;
}

/* Each client sends "N bytes\n" and then N bytes; the answer is their sum
 * as a line, after which the client closes. */
static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    struct session *s = st->data;
    if (n < 0) {
        CHECK(n == UV_EOF, "read: %s", uv_strerror((int)n));
        uv_close((uv_handle_t *)st, on_closed);
        return;
    }
    for (ssize_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)buf->base[i];
        if (s->headlen < sizeof(s->head) - 1 && !strchr(s->head, '\n')) {
            s->head[s->headlen++] = (char)ch;
            continue;
        }
        s->got++;
        s->sum += ch;
    }
    unsigned long want = 0;
    if (strchr(s->head, '\n') && sscanf(s->head, "%lu", &want) == 1 && s->got == want) {
        char *line = malloc(64);
        snprintf(line, 64, "sum %llu\n", (unsigned long long)s->sum);
        uv_write_t *w = malloc(sizeof(*w));
        w->data = line;
        uv_buf_t b = uv_buf_init(line, (unsigned)strlen(line));
        CHECK(uv_write(w, st, &b, 1, on_written) == 0, "uv_write");
        s->got++; /* answered once */
    }
}

static void on_conn(void *data, struct vp_pipe_conn conn)
{
    T.accepted++;
    struct vp_identity *id = calloc(1, sizeof(*id));
    char why[256];
    CHECK(id && vp_identity_of_pipe(conn.h, conn.connected_at, id, NULL, why, sizeof(why)) == 0 &&
              id->pid == T.self_pid,
          "the client is known before libuv takes it: %s", why);
    free(id);
    struct session *s = calloc(1, sizeof(*s));
    int e = vp_stream_open(&T.loop, &s->p, &conn.h);
    CHECK(e == 0 && !vp_ok(conn.h), "vp_stream_open: %d", e);
    s->p.data = s;
    CHECK(uv_is_readable((uv_stream_t *)&s->p) && uv_is_writable((uv_stream_t *)&s->p),
          "readable and writable");
    CHECK(uv_read_start((uv_stream_t *)&s->p, on_alloc, on_read) == 0, "uv_read_start");
}

static void on_err(void *data, int err)
{
    T.errors++;
    fprintf(stderr, "accept failed: %d\n", err);
}

/* The clients, on a thread of their own: blocking platform calls. */
static DWORD WINAPI clients(void *arg)
{
    for (int k = 0; k < CLIENTS; k++) {
        vp_handle c;
        char why[256];
        CHECK(vp_dial_server(pipe_name, T.self_pid, &c, why, sizeof(why)) == 0,
              "client %d: %s", k, why);
        size_t n = k == 1 ? BIG : 1000 + (size_t)k;
        unsigned char *data = malloc(n);
        unsigned long long sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += data[i] = (unsigned char)(i * 31 + k);
        char head[32];
        snprintf(head, sizeof(head), "%zu\n", n);
        CHECK(send_all(c, head), "head");
        size_t off = 0;
        while (off < n) {
            long r = vp_send(c, data + off, n - off, NULL, 0);
            if (r == -EAGAIN) {
                vp_conn_wait(c, VP_WRITABLE, 1000);
                continue;
            }
            if (r <= 0)
                break;
            off += (size_t)r;
        }
        CHECK(off == n, "sent %zu of %zu", off, n);
        char line[64], want[64];
        snprintf(want, sizeof(want), "sum %llu", sum);
        CHECK(recv_line(c, line, sizeof(line), 20000) > 0 && strcmp(line, want) == 0,
              "client %d: the loop answered %s (want %s)", k, line, want);
        free(data);
        vp_close(&c);
    }
    return 0;
}

static void test_server_streams(void)
{
    unique_pipe(pipe_name, sizeof(pipe_name), "uv");
    T.self_pid = GetCurrentProcessId();
    MUST(uv_loop_init(&T.loop) == 0, "loop");
    struct vp_pipe_listen_cfg cfg = {.name = pipe_name};
    struct vp_pipe_listener *l;
    char why[256];
    MUST(vp_pipe_listen(&cfg, &l, why, sizeof(why)) == 0, "listen: %s", why);
    MUST(vp_acceptor_start(&T.loop, l, on_conn, on_err, NULL, &T.acc) == 0, "acceptor");
    HANDLE th = CreateThread(NULL, 0, clients, NULL, 0, NULL);
    MUST(th, "thread");
    /* Runs until the last session closed and the acceptor stopped. */
    CHECK(uv_run(&T.loop, UV_RUN_DEFAULT) == 0, "uv_run");
    WaitForSingleObject(th, INFINITE);
    CloseHandle(th);
    CHECK(T.accepted == CLIENTS && T.closed == CLIENTS && T.answered == CLIENTS,
          "accepted %d, answered %d, closed %d", T.accepted, T.answered, T.closed);
    CHECK(T.errors == 0, "no accept failed");
    CHECK(uv_loop_close(&T.loop) == 0, "nothing left on the loop: the acceptor is freed");
    vp_pipe_listen_close(&l);
}

/* The client's end as a libuv stream, and an acceptor stopped with a
 * connection not yet delivered. */
static int client_reads;
static char client_buf[64];

static void client_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    if (n > 0) {
        memcpy(client_buf, buf->base, (size_t)n < 63 ? (size_t)n : 63);
        client_reads++;
    }
    uv_close((uv_handle_t *)st, NULL);
}

static void client_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    static char space[256];
    *buf = uv_buf_init(space, sizeof(space));
}

static void client_written(uv_write_t *w, int status)
{
    CHECK(status == 0, "client write: %s", uv_strerror(status));
}

static void test_client_stream_and_stop(void)
{
    char name[128], why[256];
    unique_pipe(name, sizeof(name), "uvc");
    struct vp_pipe_listen_cfg cfg = {.name = name};
    struct vp_pipe_listener *l;
    MUST(vp_pipe_listen(&cfg, &l, why, sizeof(why)) == 0, "listen: %s", why);
    vp_handle c;
    MUST(vp_dial(name, &c) == 0, "dial");
    struct vp_pipe_conn sc;
    MUST(vp_pipe_accept(l, 2000, &sc) == 0, "accept");
    uv_loop_t loop;
    uv_pipe_t p;
    MUST(uv_loop_init(&loop) == 0, "loop");
    CHECK(vp_stream_open(&loop, &p, &c) == 0 && !vp_ok(c), "the client's end into libuv");
    uv_write_t w;
    uv_buf_t b = uv_buf_init("from-uv\n", 8);
    CHECK(uv_write(&w, (uv_stream_t *)&p, &b, 1, client_written) == 0, "write");
    CHECK(send_all(sc.h, "to-uv"), "the server writes");
    CHECK(uv_read_start((uv_stream_t *)&p, client_alloc, client_read) == 0, "read");
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(client_reads == 1 && strcmp(client_buf, "to-uv") == 0, "read %s", client_buf);
    char line[64];
    CHECK(recv_line(sc.h, line, sizeof(line), 2000) > 0 && strcmp(line, "from-uv") == 0,
          "the server read %s", line);
    vp_close(&sc.h);

    /* Not a pipe: refused, the handle consumed, p still to be closed. */
    vp_handle ev = {(intptr_t)CreateEventW(NULL, TRUE, FALSE, NULL)};
    HANDLE raw = (HANDLE)ev.v;
    uv_pipe_t bad;
    CHECK(vp_stream_open(&loop, &bad, &ev) < 0 && !vp_ok(ev), "an event is no stream");
    DWORD fl;
    CHECK(!GetHandleInformation(raw, &fl), "and it was closed");
    uv_close((uv_handle_t *)&bad, NULL);

    /* Stop with a client connected but not delivered (the loop never ran
     * after it came): the acceptor closes it. */
    struct vp_acceptor *a;
    MUST(vp_acceptor_start(&loop, l, on_conn, NULL, NULL, &a) == 0, "acceptor");
    vp_handle c2;
    MUST(vp_dial(name, &c2) == 0, "dial");
    Sleep(200); /* the thread takes it and queues it */
    vp_acceptor_stop(a);
    CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0, "the stop's close runs");
    char x;
    int nh;
    vp_conn_set_recv_timeout(c2, 2000);
    CHECK(vp_recv(c2, &x, 1, NULL, 0, &nh, VP_RECV_WAIT, why, sizeof(why)) == 0,
          "the undelivered client sees the end");
    vp_close(&c2);
    CHECK(uv_loop_close(&loop) == 0, "the loop is empty");
    vp_pipe_listen_close(&l);
}

int main(void)
{
    test_server_streams();
    test_client_stream_and_stop();
    return win_report("test_win_stream");
}
