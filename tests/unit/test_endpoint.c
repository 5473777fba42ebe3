/* SPDX-License-Identifier: Apache-2.0 */
/* platform/endpoint.h on POSIX (platform/posix/endpoint_posix.c), on a real libuv
 * loop and a socket in a temporary directory: the endpoint makes the
 * socket's directory and the socket, accepts a dialled connection as a
 * link, names its peer (this process), delivers bytes and the fd that came
 * beside them, sends bytes with an fd (vp_link_give passes it on as it
 * is), says when there is room again after a short write once the peer has
 * read, reports the peer's end, and takes its path away when closed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "tests/check.h"
#include "platform/conn.h"
#include "platform/endpoint.h"
#include "platform/handle.h"

struct t {
    struct vp_link *link;
    int accept_errors;
    uint8_t buf[1 << 16];
    size_t got;
    vp_handle fds[8];
    int nfds;
    int ended; /* read 0 */
    int written;
    int closed;
};

static void on_accept(void *data, struct vp_link *link)
{
    struct t *t = data;
    t->link = link;
}

static void on_accept_error(void *data, int err, int paused_ms)
{
    (void)err;
    (void)paused_ms;
    ((struct t *)data)->accept_errors++;
}

static uint8_t *on_alloc(void *ud, size_t want, size_t *room)
{
    struct t *t = ud;
    (void)want;
    *room = sizeof(t->buf) - t->got;
    return t->buf + t->got;
}

static void on_read(void *ud, long n, vp_handle *hs, int nh, const char *why)
{
    (void)why;
    struct t *t = ud;
    if (n == 0)
        t->ended++;
    if (n > 0)
        t->got += (size_t)n;
    for (int i = 0; i < nh; i++) {
        if (t->nfds < 8)
            t->fds[t->nfds++] = hs[i];
        else
            vp_close(&hs[i]);
    }
}

static void on_written(void *ud, int status)
{
    struct t *t = ud;
    if (status == 0)
        t->written++;
}

static void on_closed(void *ud)
{
    ((struct t *)ud)->closed++;
}

static const struct vp_link_cbs cbs = {
    .alloc = on_alloc, .read = on_read, .written = on_written};

/* Runs the loop until *flag is set (or about two seconds went by). */
static int run_until(uv_loop_t *loop, const int *flag)
{
    for (int i = 0; i < 2000 && !*flag; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        if (!*flag)
            usleep(1000);
    }
    return *flag;
}

int main(void)
{
    static struct t t;
    char dir[] = "/tmp/vram-endpoint-XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    char path[128];
    snprintf(path, sizeof(path), "%s/run/ep.sock", dir);
    unsetenv("LISTEN_PID");
    uv_loop_t loop;
    REQUIRE(uv_loop_init(&loop) == 0, "uv_loop_init");

    struct vp_endpoint *ep = NULL;
    unsigned how = 0;
    char why[256] = "";
    CHECK(vp_endpoint_prepare(&loop, path, &ep, &how, why, sizeof(why)) == 0,
          "prepare: %s", why);
    REQUIRE(ep, "no endpoint");
    CHECK(how == VP_ENDPOINT_DIR_MADE, "how %u: the directory was made", how);
    CHECK(strcmp(vp_endpoint_path(ep), path) == 0, "path %s", vp_endpoint_path(ep));
    struct vp_endpoint_access acc = {.mode = 0600};
    CHECK(vp_endpoint_listen(ep, &acc, on_accept, on_accept_error, &t, why,
                             sizeof(why)) == 0, "listen: %s", why);
    struct stat st;
    CHECK(stat(path, &st) == 0 && S_ISSOCK(st.st_mode) &&
              (st.st_mode & 0777) == 0600, "the socket, mode 0600");
    CHECK(vp_endpoint_access_text(ep) == NULL, "nothing to log on POSIX");

    vp_handle c = VP_NONE;
    REQUIRE(vp_dial(path, &c) == 0, "dial %s", path);
    for (int i = 0; i < 2000 && !t.link; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        if (!t.link)
            usleep(1000);
    }
    REQUIRE(t.link, "no link accepted");
    struct vp_link *l = t.link;
    CHECK(t.accept_errors == 0, "accept errors: %d", t.accept_errors);
    vp_link_start(l, &cbs, &t);

    struct vp_peer peer;
    CHECK(vp_link_peer(l, &peer, why, sizeof(why)) == 0, "peer: %s", why);
    CHECK(peer.pid == getpid() && peer.uid == (uint32_t)geteuid(),
          "peer pid %lld uid %u: this process", (long long)peer.pid, peer.uid);

    /* Bytes with an fd beside them, in. Nothing is delivered before
     * reading starts. */
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE(devnull >= 0, "open /dev/null");
    vp_handle dn = {devnull};
    CHECK(vp_send(c, "hello", 5, &dn, 1) == 5, "client sends 5 bytes and an fd");
    for (int i = 0; i < 20; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(t.got == 0, "delivered before vp_link_read");
    CHECK(vp_link_read(l, true) == 0, "read on");
    for (int i = 0; i < 2000 && t.got < 5; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        if (t.got < 5)
            usleep(1000);
    }
    CHECK(t.got == 5 && memcmp(t.buf, "hello", 5) == 0, "got %zu bytes", t.got);
    CHECK(t.nfds == 1 && vp_valid(t.fds[0]), "the fd came with them (%d)", t.nfds);

    /* Bytes with an fd, out: given as it is, attached to the first byte. */
    vp_handle give = t.fds[0], vals[1] = {VP_NONE};
    CHECK(vp_link_give(l, &give, 1, VP_PUSH_MAP_READ, vals) == 0 &&
              vp_same(vals[0], give), "vp_link_give passes the fd on");
    CHECK(vp_link_write(l, "ok", 2, vals, 1) == 2, "link writes 2 bytes and an fd");
    CHECK(vp_link_pending(l) == 0, "nothing held by the link");
    vp_close(&vals[0]); /* the writer keeps its handles */
    uint8_t rb[64];
    vp_handle rh[4];
    int rn = 0;
    CHECK(vp_recv(c, rb, sizeof(rb), rh, 4, &rn, VP_RECV_WAIT, why, sizeof(why)) == 2 &&
              memcmp(rb, "ok", 2) == 0 && rn == 1, "client got 2 bytes and %d fds", rn);
    for (int i = 0; i < rn; i++)
        vp_close(&rh[i]);
    vp_close(&dn);

    /* A short write, then room again once the peer reads. */
    static uint8_t big[1 << 16];
    long w = 0;
    size_t sent = 0;
    for (int i = 0; i < 4096; i++) {
        w = vp_link_write(l, big, sizeof(big), NULL, 0);
        if (w < 0 || (size_t)w < sizeof(big))
            break;
        sent += (size_t)w;
    }
    CHECK(w == -EAGAIN || (w >= 0 && (size_t)w < sizeof(big)),
          "the socket filled (%ld after %zu bytes)", w, sent);
    CHECK(t.written == 0, "written before the peer read");
    CHECK(vp_conn_set_blocking(c, false) == 0, "client non-blocking");
    for (int i = 0; i < 2000 && !t.written; i++) {
        uint8_t sink[1 << 16];
        while (vp_recv(c, sink, sizeof(sink), rh, 4, &rn, 0, why, sizeof(why)) > 0)
            ;
        uv_run(&loop, UV_RUN_NOWAIT);
        if (!t.written)
            usleep(1000);
    }
    CHECK(t.written == 1, "written once the peer read (%d)", t.written);

    /* The peer's end, then the link's. */
    vp_close(&c);
    CHECK(run_until(&loop, &t.ended), "the peer's end is read as 0");
    vp_link_close(l, on_closed);
    CHECK(run_until(&loop, &t.closed), "the link's close ran");

    vp_endpoint_stop(ep);
    vp_endpoint_close(&ep);
    CHECK(ep == NULL, "closed");
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(access(path, F_OK) < 0 && errno == ENOENT, "the socket is gone");
    CHECK(uv_loop_close(&loop) == 0, "every handle closed");
    char sub[160];
    snprintf(sub, sizeof(sub), "%s/run", dir);
    rmdir(sub);
    rmdir(dir);
    return check_report("test_endpoint");
}
