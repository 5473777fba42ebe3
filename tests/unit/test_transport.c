/* SPDX-License-Identifier: Apache-2.0 */
/* The wire (proto/wire.c: the codec over platform/posix/conn_posix.c) on a real
 * socketpair: fds arrive working, in their own frame, exactly once, with
 * FD_CLOEXEC; every lie a peer can tell about fds (a wrong count, fds too
 * many for the control buffer, fds with a frame that announced none) fails
 * the read and leaves no fd open in this process; partial writes never
 * re-attach fds; the outgoing queue takes the fds it is given and is
 * bounded.
 *
 * Lying peers are written by hand with sendmsg, since vw_wire_queue refuses
 * to produce such frames. Leaks are measured by counting /proc/self/fd. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tests/check.h"

/* check.h's REQUIRE evaluates its condition twice; MUST evaluates it once,
 * for conditions that call something (socketpair, queue, flush...). */
#define MUST(cond, ...)                                                        \
    do {                                                                       \
        int must_failures_ = check_failures;                                   \
        CHECK(cond, __VA_ARGS__);                                              \
        if (check_failures != must_failures_)                                  \
            exit(1);                                                           \
    } while (0)
#include "proto/frame.h"
#include "proto/wire.h"

/* A socket or fd as the platform's handle. */
static vp_handle H(int fd)
{
    return (vp_handle){fd};
}

/* Copies of fds for a queue, which takes what it is given. */
static vp_handle *dups(const int *fds, int n)
{
    static vp_handle v[4 * VW_MAX_FDS_PER_FRAME];
    for (int i = 0; i < n; i++)
        v[i] = H(fcntl(fds[i], F_DUPFD_CLOEXEC, 3));
    return v;
}

#define MAXF 16
#define NFD VW_MAX_FDS_PER_FRAME

/* ---- helpers ------------------------------------------------------------ */

/* Open fds of this process (the directory's own fd is counted every time, so
 * differences are exact). */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    REQUIRE(d != NULL, "opendir /proc/self/fd: %s", strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static int highest_fd(void)
{
    DIR *d = opendir("/proc/self/fd");
    REQUIRE(d != NULL, "opendir /proc/self/fd: %s", strerror(errno));
    int hi = -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && atoi(e->d_name) > hi)
            hi = atoi(e->d_name);
    closedir(d);
    return hi;
}

static void make_pair(int sv[2])
{
    MUST(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0,
            "socketpair: %s", strerror(errno));
}

/* A memfd without MFD_CLOEXEC, so FD_CLOEXEC on a received copy can only come
 * from the receive. */
static int make_memfd(const char *content)
{
    int fd = memfd_create("test_transport", 0);
    REQUIRE(fd >= 0, "memfd_create: %s", strerror(errno));
    if (content)
        MUST(write(fd, content, strlen(content)) == (ssize_t)strlen(content),
                "write memfd");
    return fd;
}

static ino_t inode_of(int fd)
{
    struct stat st;
    MUST(fstat(fd, &st) == 0, "fstat(%d): %s", fd, strerror(errno));
    return st.st_ino;
}

static bool same_file(int a, int b)
{
    struct stat sa, sb;
    if (fstat(a, &sa) != 0 || fstat(b, &sb) != 0)
        return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* One sendmsg with any number of fds (up to 64), as a hostile peer would. */
static void send_raw(int s, const void *buf, size_t len, const int *fds,
                     int nfds)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * 64)];
    } ctl;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    REQUIRE(nfds <= 64, "send_raw: too many fds");
    if (nfds > 0) {
        memset(&ctl, 0, sizeof(ctl));
        msg.msg_control = ctl.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n = sendmsg(s, &msg, MSG_NOSIGNAL);
    REQUIRE(n == (ssize_t)len, "sendmsg: %zd (%s)", n, strerror(errno));
}

/* Header announcing (len, nfds) followed by payload; returns bytes written. */
static size_t craft(uint8_t *buf, uint32_t len, uint16_t nfds,
                    const char *payload)
{
    struct vw_frame_header h = {
        .magic = VW_FRAME_MAGIC,
        .version = VW_PROTOCOL_OLDEST,
        .payload_len = len,
        .nfds = nfds,
    };
    vw_frame_header_encode(&h, buf);
    size_t plen = payload ? strlen(payload) : 0;
    if (plen)
        memcpy(buf + VW_FRAME_HEADER_SIZE, payload, plen);
    return VW_FRAME_HEADER_SIZE + plen;
}

/* Collects delivered frames; optionally takes ownership of their fds. */
struct got {
    char *payload;
    size_t len;
    uint16_t version;
    int fds[NFD];
    int nfds;
};

struct collector {
    struct got f[MAXF];
    int n;
    bool take_fds;
    int ret;        /* what the callback returns */
    int bad_cloexec;
    int bad_nul;
};

static int on_frame(void *ud, struct vw_codec_frame *f)
{
    struct collector *c = ud;
    REQUIRE(c->n < MAXF, "too many frames");
    struct got *g = &c->f[c->n++];
    g->payload = malloc(f->len + 1);
    REQUIRE(g->payload != NULL, "malloc");
    memcpy(g->payload, f->payload, f->len + 1);
    if (f->payload[f->len] != '\0')
        c->bad_nul++;
    g->len = f->len;
    g->version = f->version;
    g->nfds = f->nhandles;
    for (int i = 0; i < f->nhandles; i++) {
        int fl = fcntl((int)f->handles[i].v, F_GETFD);
        if (fl < 0 || !(fl & FD_CLOEXEC))
            c->bad_cloexec++;
        g->fds[i] = -1;
        if (c->take_fds) {
            g->fds[i] = (int)f->handles[i].v;
            f->handles[i] = VP_NONE;
        }
    }
    return c->ret;
}

static void collector_free(struct collector *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->f[i].payload);
        for (int j = 0; j < c->f[i].nfds; j++)
            if (c->f[i].fds[j] >= 0)
                close(c->f[i].fds[j]);
    }
    memset(c, 0, sizeof(*c));
}

/* ---- tests -------------------------------------------------------------- */

static void test_fds_arrive_working(void)
{
    int base = count_fds();
    int sv[2], p[2];
    make_pair(sv);
    MUST(pipe(p) == 0, "pipe");
    int m = make_memfd("hello from the sender");
    struct vw_wire tx, rx;
    vw_wire_init(&tx, H(sv[0]));
    vw_wire_init(&rx, H(sv[1]));

    const char *json = "{\"type\":\"status\",\"id\":7}";
    int fds[2] = {m, p[1]};
    CHECK(vw_wire_queue(&tx, json, strlen(json), dups(fds, 2), 2) == 0, "queue");
    CHECK(vw_wire_pending(&tx), "nothing pending after queue");
    /* An fd-less frame and an fd-only (empty payload) frame behind it. */
    CHECK(vw_wire_queue(&tx, "{}", 2, NULL, 0) == 0, "queue no fds");
    CHECK(vw_wire_queue(&tx, "", 0, dups(&m, 1), 1) == 0, "queue empty payload");
    CHECK(vw_wire_flush(&tx) == 0, "flush");
    CHECK(!vw_wire_pending(&tx), "still pending after flush");

    struct collector c = {.take_fds = true};
    char why[256];
    int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
    CHECK(r == 0, "read returned %d: %s", r, why);
    REQUIRE(c.n == 3, "%d frames delivered, expected 3", c.n);
    CHECK(vw_wire_idle_rx(&rx), "receiver not idle between frames");

    CHECK_EQ_U(c.f[0].len, strlen(json));
    CHECK(strcmp(c.f[0].payload, json) == 0, "payload differs: %s",
          c.f[0].payload);
    CHECK_EQ_U(c.f[0].version, VW_PROTOCOL_OLDEST);
    REQUIRE(c.f[0].nfds == 2, "frame 0 has %d fds", c.f[0].nfds);
    CHECK(c.f[0].fds[0] != m && c.f[0].fds[1] != p[1], "fds not new");
    CHECK(same_file(c.f[0].fds[0], m), "memfd is another file");
    char buf[64] = "";
    ssize_t n = pread(c.f[0].fds[0], buf, sizeof(buf) - 1, 0);
    CHECK(n == 21 && strcmp(buf, "hello from the sender") == 0,
          "memfd content through the received fd: %zd '%s'", n, buf);
    /* Write through the received pipe end, read from our own read end. */
    CHECK(write(c.f[0].fds[1], "ping", 4) == 4, "write received pipe fd");
    memset(buf, 0, sizeof(buf));
    CHECK(read(p[0], buf, sizeof(buf)) == 4 && memcmp(buf, "ping", 4) == 0,
          "pipe data did not arrive through the received fd");

    CHECK(c.f[1].nfds == 0 && c.f[1].len == 2 &&
              strcmp(c.f[1].payload, "{}") == 0,
          "fd-less frame: %d fds, '%s'", c.f[1].nfds, c.f[1].payload);
    CHECK(c.f[2].nfds == 1 && c.f[2].len == 0 && c.f[2].payload[0] == '\0',
          "empty-payload frame: %d fds, len %zu", c.f[2].nfds, c.f[2].len);
    if (c.f[2].nfds == 1)
        CHECK(same_file(c.f[2].fds[0], m), "empty-payload frame: wrong fd");
    CHECK(c.bad_cloexec == 0, "%d received fds without FD_CLOEXEC",
          c.bad_cloexec);
    CHECK(c.bad_nul == 0, "payload not NUL-terminated");
    CHECK_EQ_U(tx.codec.frames_out, 3);
    CHECK_EQ_U(tx.codec.handles_out, 3);
    CHECK_EQ_U(rx.codec.frames_in, 3);
    CHECK_EQ_U(rx.codec.handles_in, 3);

    /* Nothing more to read: would block, not an error. */
    r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
    CHECK(r == 0, "empty socket: read returned %d: %s", r, why);

    collector_free(&c);
    vw_wire_fini(&tx);
    vw_wire_fini(&rx);
    close(m);
    close(p[0]);
    close(p[1]);
    close(sv[0]);
    close(sv[1]);
    CHECK(count_fds() == base, "fd leak: %d open, %d before", count_fds(), base);
}

/* Fds the callback leaves in the frame are closed by the wire; fds it takes
 * stay open. */
static void test_callback_ownership(void)
{
    int sv[2];
    make_pair(sv);
    int m1 = make_memfd(NULL), m2 = make_memfd(NULL);
    struct vw_wire tx, rx;
    vw_wire_init(&tx, H(sv[0]));
    vw_wire_init(&rx, H(sv[1]));
    int fds[2] = {m1, m2};
    MUST(vw_wire_queue(&tx, "x", 1, dups(fds, 2), 2) == 0, "queue");
    MUST(vw_wire_flush(&tx) == 0, "flush");
    int base = count_fds();

    struct collector c = {.take_fds = false};
    char why[256];
    CHECK(vw_wire_read(&rx, on_frame, &c, why, sizeof(why)) == 0, "read: %s",
          why);
    CHECK(c.n == 1 && c.f[0].nfds == 2, "frame not delivered");
    CHECK(count_fds() == base, "fds not taken by the callback were left open");

    /* Now take them: both stay open, exactly two more fds. */
    collector_free(&c);
    c.take_fds = true;
    MUST(vw_wire_queue(&tx, "y", 1, dups(fds, 2), 2) == 0, "queue");
    MUST(vw_wire_flush(&tx) == 0, "flush");
    CHECK(vw_wire_read(&rx, on_frame, &c, why, sizeof(why)) == 0, "read: %s",
          why);
    CHECK(count_fds() == base + 2, "taken fds: %d open, expected %d",
          count_fds(), base + 2);
    if (c.n == 1 && c.f[0].nfds == 2)
        CHECK(same_file(c.f[0].fds[0], m1) && same_file(c.f[0].fds[1], m2),
              "taken fds are not the sent files, in order");
    collector_free(&c);

    /* A callback returning >0 stops after its frame; the next read goes on.
     * One returning <0 fails the read with a reason. */
    MUST(vw_wire_queue(&tx, "a", 1, NULL, 0) == 0, "queue");
    MUST(vw_wire_queue(&tx, "b", 1, NULL, 0) == 0, "queue");
    MUST(vw_wire_flush(&tx) == 0, "flush");
    c.ret = 5;
    int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
    CHECK(r == 5 && c.n == 1, "stop: read returned %d after %d frames", r, c.n);
    c.ret = -EPERM;
    r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
    CHECK(r == -EPERM && c.n == 2, "fail: read returned %d after %d frames", r,
          c.n);
    CHECK(why[0] != '\0', "no reason for a failing handler");
    if (c.n == 2)
        CHECK(strcmp(c.f[1].payload, "b") == 0, "second frame is '%s'",
              c.f[1].payload);
    collector_free(&c);

    vw_wire_fini(&tx);
    vw_wire_fini(&rx);
    close(m1);
    close(m2);
    close(sv[0]);
    close(sv[1]);
}

/* Several full frames back to back, read in one call: each frame gets exactly
 * its own fds, in order. */
static void test_batched_fds(void)
{
    enum { FRAMES = 4 };
    int base = count_fds();
    int sv[2];
    make_pair(sv);
    struct vw_wire tx, rx;
    vw_wire_init(&tx, H(sv[0]));
    vw_wire_init(&rx, H(sv[1]));

    int m[FRAMES][NFD];
    ino_t ino[FRAMES][NFD];
    for (int k = 0; k < FRAMES; k++) {
        for (int i = 0; i < NFD; i++) {
            m[k][i] = make_memfd(NULL);
            ino[k][i] = inode_of(m[k][i]);
        }
        char json[64];
        snprintf(json, sizeof(json), "{\"batch\":%d}", k);
        MUST(vw_wire_queue(&tx, json, strlen(json), dups(m[k], NFD), NFD) == 0,
                "queue frame %d", k);
    }
    CHECK(tx.codec.tx_handles == FRAMES * NFD, "queued handles %d",
          tx.codec.tx_handles);
    /* The queue holds what it was given: closing ours changes nothing. */
    for (int k = 0; k < FRAMES; k++)
        for (int i = 0; i < NFD; i++)
            close(m[k][i]);
    MUST(vw_wire_flush(&tx) == 0, "flush");
    CHECK(tx.codec.tx_handles == 0, "queued handles %d after flush",
          tx.codec.tx_handles);

    struct collector c = {.take_fds = true};
    char why[256];
    int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
    CHECK(r == 0, "read returned %d: %s", r, why);
    REQUIRE(c.n == FRAMES, "%d frames delivered in one read, expected %d", c.n,
            FRAMES);
    for (int k = 0; k < FRAMES; k++) {
        char json[64];
        snprintf(json, sizeof(json), "{\"batch\":%d}", k);
        CHECK(strcmp(c.f[k].payload, json) == 0, "frame %d payload '%s'", k,
              c.f[k].payload);
        CHECK(c.f[k].nfds == NFD, "frame %d has %d fds", k, c.f[k].nfds);
        for (int i = 0; i < c.f[k].nfds && i < NFD; i++)
            CHECK(inode_of(c.f[k].fds[i]) == ino[k][i],
                  "frame %d fd %d is not the fd sent at that place", k, i);
    }
    CHECK(c.bad_cloexec == 0, "%d received fds without FD_CLOEXEC",
          c.bad_cloexec);
    CHECK_EQ_U(rx.codec.handles_in, FRAMES * NFD);
    collector_free(&c);

    vw_wire_fini(&tx);
    vw_wire_fini(&rx);
    close(sv[0]);
    close(sv[1]);
    CHECK(count_fds() == base, "fd leak: %d open, %d before", count_fds(), base);
}

/* Two frames in one sendmsg with one fd: Linux attaches it to the first byte,
 * so it belongs to the first frame; the second frame arrives with none. */
static void test_two_frames_one_sendmsg(void)
{
    int sv[2];
    make_pair(sv);
    int m = make_memfd(NULL);
    struct vw_wire rx;
    vw_wire_init(&rx, H(sv[1]));
    uint8_t buf[128];
    size_t n = craft(buf, 3, 1, "one");
    n += craft(buf + n, 3, 0, "two");
    send_raw(sv[0], buf, n, &m, 1);

    struct collector c = {.take_fds = true};
    char why[256];
    int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
    CHECK(r == 0, "read returned %d: %s", r, why);
    CHECK(c.n == 2, "%d frames", c.n);
    if (c.n == 2) {
        CHECK(c.f[0].nfds == 1 && same_file(c.f[0].fds[0], m),
              "first frame did not get its fd");
        CHECK(c.f[1].nfds == 0, "second frame got %d fds", c.f[1].nfds);
    }
    collector_free(&c);
    vw_wire_fini(&rx);
    close(m);
    close(sv[0]);
    close(sv[1]);
}

/* Sends buf with fds from a fresh socketpair, reads it, and expects the read
 * to fail with err after delivering `frames` good frames, with no fd of ours
 * left open, before vw_wire_fini. */
static void expect_refused(const char *what, const uint8_t *const *parts,
                           const size_t *lens, const int *nfds_per_part,
                           int nparts, int frames, int err, const char *in_why)
{
    int sv[2];
    make_pair(sv);
    int m = make_memfd(NULL);
    int fds[64];
    for (int i = 0; i < 64; i++)
        fds[i] = m; /* the same file many times is fine for SCM_RIGHTS */
    int base = count_fds();
    for (int i = 0; i < nparts; i++)
        send_raw(sv[0], parts[i], lens[i], fds, nfds_per_part[i]);

    struct vw_wire rx;
    vw_wire_init(&rx, H(sv[1]));
    struct collector c = {.take_fds = false};
    char why[256];
    int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
    CHECK(r == err, "%s: read returned %d (%s), expected %d (%s); why: %s",
          what, r, strerror(-r), err, strerror(-err), why);
    CHECK(why[0] != '\0', "%s: no reason", what);
    if (in_why)
        CHECK(strstr(why, in_why) != NULL, "%s: reason '%s' lacks '%s'", what,
              why, in_why);
    CHECK(c.n == frames, "%s: %d frames delivered, expected %d", what, c.n,
          frames);
    /* The received fds are closed by the failing read itself: a daemon that
     * logs and drops the peer later must not hold them meanwhile. */
    CHECK(count_fds() == base, "%s: %d fds open after the refusal, %d before",
          what, count_fds(), base);
    vw_wire_fini(&rx);
    CHECK(count_fds() == base, "%s: %d fds open after fini, %d before", what,
          count_fds(), base);
    collector_free(&c);
    close(m);
    close(sv[0]);
    close(sv[1]);
}

static void test_spoofed_fd_count(void)
{
    uint8_t a[64], b[64];
    const uint8_t *parts[2] = {a, b};
    size_t lens[2];
    int nf[2];

    /* Announces 2, sends 1. */
    lens[0] = craft(a, 2, 2, "{}");
    nf[0] = 1;
    expect_refused("announces 2 sends 1", parts, lens, nf, 1, 0, -EBADMSG,
                   NULL);
    /* Announces 0, sends 1. */
    lens[0] = craft(a, 2, 0, "{}");
    expect_refused("announces 0 sends 1", parts, lens, nf, 1, 0, -EBADMSG,
                   NULL);
    /* Announces 2, sends 3. */
    lens[0] = craft(a, 2, 2, "{}");
    nf[0] = 3;
    expect_refused("announces 2 sends 3", parts, lens, nf, 1, 0, -EBADMSG,
                   NULL);
    /* Announces 1 and sends none, and the next frame announces none and
     * carries one: fds are matched to frames by count in arrival order, so
     * the first frame takes it (the sender only fooled itself), and the
     * second has none. */
    {
        int sv[2];
        make_pair(sv);
        int m = make_memfd(NULL);
        lens[0] = craft(a, 2, 1, "{}");
        lens[1] = craft(b, 2, 0, "{}");
        send_raw(sv[0], a, lens[0], NULL, 0);
        send_raw(sv[0], b, lens[1], &m, 1);
        struct vw_wire rx;
        vw_wire_init(&rx, H(sv[1]));
        struct collector c = {.take_fds = true};
        char why[256];
        int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
        CHECK(r == 0 && c.n == 2, "fd sent with the next frame: read %d, %d "
              "frames: %s", r, c.n, why);
        if (c.n == 2)
            CHECK(c.f[0].nfds == 1 && same_file(c.f[0].fds[0], m) &&
                      c.f[1].nfds == 0,
                  "fds not matched by count in order: %d, %d", c.f[0].nfds,
                  c.f[1].nfds);
        collector_free(&c);
        vw_wire_fini(&rx);
        close(m);
        close(sv[0]);
        close(sv[1]);
    }
}

static void test_unsolicited_fds(void)
{
    uint8_t a[64], b[64], c[64];
    const uint8_t *parts[3] = {a, b, c};
    size_t lens[3];
    int nf[3];

    /* A good frame, then a frame announcing 0 whose header goes alone and
     * whose payload bytes carry 2 fds. */
    lens[0] = craft(a, 2, 0, "{}");
    nf[0] = 0;
    lens[1] = craft(b, 5, 0, NULL);
    nf[1] = 0;
    memcpy(c, "hello", 5);
    lens[2] = 5;
    nf[2] = 2;
    expect_refused("unsolicited fds with the payload", parts, lens, nf, 3, 1,
                   -EBADMSG, NULL);

    /* fds with a frame that announces none and has no payload. */
    lens[0] = craft(a, 0, 0, NULL);
    nf[0] = 4;
    expect_refused("unsolicited fds, empty frame", parts, lens, nf, 1, 0,
                   -EBADMSG, NULL);
}

/* More fds than one frame may carry, spread over two sendmsg calls of the same
 * frame, so that no single receive is truncated. */
static void test_too_many_fds_in_pieces(void)
{
    uint8_t a[64], b[64];
    const uint8_t *parts[2] = {a, b};
    size_t lens[2];
    int nf[2];
    lens[0] = craft(a, 4, NFD, NULL);
    nf[0] = NFD;
    memcpy(b, "abcd", 4);
    lens[1] = 4;
    nf[1] = 1;
    /* One fd more than the frame announces, and no frame after it to claim
     * it: a lie about counts. */
    expect_refused("fds over the limit in two pieces", parts, lens, nf, 2, 0,
                   -EBADMSG, NULL);

    /* The same frame with exactly its fds in two pieces is fine. */
    int sv[2];
    make_pair(sv);
    int m = make_memfd(NULL);
    int fds[NFD];
    for (int i = 0; i < NFD; i++)
        fds[i] = m;
    send_raw(sv[0], a, lens[0], fds, NFD / 2);
    send_raw(sv[0], b, lens[1], fds, NFD - NFD / 2);
    struct vw_wire rx;
    vw_wire_init(&rx, H(sv[1]));
    struct collector c = {0};
    char why[256];
    int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
    CHECK(r == 0 && c.n == 1 && c.f[0].nfds == NFD,
          "fds in two pieces: read %d, %d frames: %s", r, c.n, why);
    collector_free(&c);
    vw_wire_fini(&rx);
    close(m);
    close(sv[0]);
    close(sv[1]);
}

/* More fds in one sendmsg than the receiver's control buffer holds: the
 * kernel sets MSG_CTRUNC; every fd that did arrive must be closed. */
static void test_truncated_control_data(void)
{
    uint8_t a[64];
    const uint8_t *parts[1] = {a};
    size_t lens[1];
    int nf[1];
    lens[0] = craft(a, 2, NFD, "{}"); /* the header itself is valid */
    nf[0] = NFD + 5;
    expect_refused("MSG_CTRUNC", parts, lens, nf, 1, 0, -EPROTO, "MSG_CTRUNC");
}

/* The same MSG_CTRUNC when the fd table is full: the kernel installs what it
 * can and truncates the rest. */
static void test_full_fd_table(void)
{
    int sv[2];
    make_pair(sv);
    int m = make_memfd(NULL);
    int fds[3] = {m, m, m};
    uint8_t a[64];
    size_t len = craft(a, 2, 3, "{}");
    send_raw(sv[0], a, len, fds, 3);
    struct vw_wire rx;
    vw_wire_init(&rx, H(sv[1]));
    int base = count_fds();

    struct rlimit old;
    MUST(getrlimit(RLIMIT_NOFILE, &old) == 0, "getrlimit");
    int hi = highest_fd();
    struct rlimit lim = old;
    lim.rlim_cur = (rlim_t)hi + 2;
    MUST(setrlimit(RLIMIT_NOFILE, &lim) == 0, "setrlimit: %s",
            strerror(errno));
    /* Fill every free slot, then free exactly one. */
    int filler[256], nfill = 0;
    for (;;) {
        REQUIRE(nfill < 256, "too many holes in the fd table");
        int d = dup(m);
        if (d < 0) {
            CHECK(errno == EMFILE, "dup: %s", strerror(errno));
            break;
        }
        filler[nfill++] = d;
    }
    REQUIRE(nfill > 0, "no slot to fill");
    close(filler[--nfill]);

    struct collector c = {0};
    char why[256] = "";
    int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));

    for (int i = 0; i < nfill; i++)
        close(filler[i]);
    MUST(setrlimit(RLIMIT_NOFILE, &old) == 0, "setrlimit restore");

    CHECK(r == -EPROTO, "full fd table: read returned %d: %s", r, why);
    CHECK(strstr(why, "MSG_CTRUNC") != NULL, "reason: '%s'", why);
    CHECK(c.n == 0, "frame delivered although its fds were cut");
    CHECK(count_fds() == base, "full fd table: %d fds open, %d before",
          count_fds(), base);
    collector_free(&c);
    vw_wire_fini(&rx);
    close(m);
    close(sv[0]);
    close(sv[1]);
}

static void test_bad_headers(void)
{
    uint8_t a[64];
    const uint8_t *parts[1] = {a};
    size_t lens[1];
    int nf[1] = {1}; /* each carries an fd, which must be closed too */

    /* Only the header is sent: the read must fail at once, not wait for a
     * megabyte that will never come. */
    lens[0] = craft(a, VW_MAX_PAYLOAD + 1, 1, NULL);
    expect_refused("oversized frame", parts, lens, nf, 1, 0, -EMSGSIZE, NULL);
    lens[0] = craft(a, 2, NFD + 1, NULL);
    expect_refused("too many fds announced", parts, lens, nf, 1, 0, -E2BIG,
                   NULL);
    lens[0] = craft(a, 2, 1, "{}");
    a[0] ^= 0x20;
    expect_refused("bad magic", parts, lens, nf, 1, 0, -EPROTO, NULL);
    lens[0] = craft(a, 2, 1, "{}");
    a[6] = 1;
    expect_refused("flags set", parts, lens, nf, 1, 0, -EPROTO, NULL);
    lens[0] = craft(a, 2, 1, "{}");
    a[15] = 0x80;
    expect_refused("reserved set", parts, lens, nf, 1, 0, -EPROTO, NULL);

    /* The largest payload is accepted (boundary of the check above). */
    int sv[2];
    make_pair(sv);
    uint8_t *big = malloc(VW_FRAME_HEADER_SIZE + VW_MAX_PAYLOAD);
    REQUIRE(big != NULL, "malloc");
    craft(big, VW_MAX_PAYLOAD, 0, NULL);
    memset(big + VW_FRAME_HEADER_SIZE, 'z', VW_MAX_PAYLOAD);
    struct vw_wire rx;
    vw_wire_init(&rx, H(sv[1]));
    struct collector c = {0};
    char why[256];
    size_t sent = 0;
    int r = 0;
    while (sent < VW_FRAME_HEADER_SIZE + VW_MAX_PAYLOAD && r == 0) {
        ssize_t n = send(sv[0], big + sent,
                         VW_FRAME_HEADER_SIZE + VW_MAX_PAYLOAD - sent,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0)
            sent += (size_t)n;
        else
            REQUIRE(errno == EAGAIN, "send: %s", strerror(errno));
        r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
    }
    r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
    CHECK(r == 0 && c.n == 1, "max payload: read %d, %d frames: %s", r, c.n,
          why);
    if (c.n == 1)
        CHECK(c.f[0].len == VW_MAX_PAYLOAD &&
                  memcmp(c.f[0].payload, big + VW_FRAME_HEADER_SIZE,
                         VW_MAX_PAYLOAD) == 0,
              "max payload differs");
    free(big);
    collector_free(&c);
    vw_wire_fini(&rx);
    close(sv[0]);
    close(sv[1]);
}

static void test_eof(void)
{
    char why[256];
    uint8_t a[64];

    /* Nothing sent, peer still there: would block. */
    {
        int sv[2];
        make_pair(sv);
        struct vw_wire rx;
        vw_wire_init(&rx, H(sv[1]));
        struct collector c = {0};
        int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
        CHECK(r == 0, "idle socket: %d %s", r, why);
        close(sv[0]);
        r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
        CHECK(r == -ENOTCONN, "EOF without any frame: %d %s", r, why);
        CHECK(why[0] != '\0', "no reason for EOF");
        vw_wire_fini(&rx);
        close(sv[1]);
    }
    /* A whole frame then EOF: the frame is delivered, then ENOTCONN. */
    {
        int sv[2];
        make_pair(sv);
        size_t n = craft(a, 2, 0, "{}");
        send_raw(sv[0], a, n, NULL, 0);
        close(sv[0]);
        struct vw_wire rx;
        vw_wire_init(&rx, H(sv[1]));
        struct collector c = {0};
        int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
        CHECK(r == -ENOTCONN && c.n == 1,
              "clean EOF between frames: %d after %d frames: %s", r, c.n, why);
        collector_free(&c);
        vw_wire_fini(&rx);
        close(sv[1]);
    }
    /* Part of a header, then EOF; the fd sent with it is closed. */
    {
        int sv[2];
        make_pair(sv);
        int m = make_memfd(NULL);
        int base = count_fds();
        craft(a, 2, 1, "{}");
        send_raw(sv[0], a, 7, &m, 1);
        struct vw_wire rx;
        vw_wire_init(&rx, H(sv[1]));
        struct collector c = {0};
        int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
        CHECK(r == 0, "partial header: %d %s", r, why);
        CHECK(!vw_wire_idle_rx(&rx), "idle with 7 header bytes buffered");
        close(sv[0]);
        r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
        CHECK(r == -ECONNRESET, "truncated header then EOF: %d %s", r, why);
        CHECK(strstr(why, "mid-frame") != NULL, "reason: '%s'", why);
        CHECK(count_fds() == base - 1, "truncated header: %d fds open, %d",
              count_fds(), base - 1);
        CHECK(c.n == 0, "frame delivered");
        vw_wire_fini(&rx);
        close(m);
        close(sv[1]);
    }
    /* A header and part of the payload, then EOF. */
    {
        int sv[2];
        make_pair(sv);
        size_t n = craft(a, 10, 0, "abcde");
        send_raw(sv[0], a, n, NULL, 0);
        close(sv[0]);
        struct vw_wire rx;
        vw_wire_init(&rx, H(sv[1]));
        struct collector c = {0};
        int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
        CHECK(r == -ECONNRESET, "truncated payload then EOF: %d %s", r, why);
        CHECK(strstr(why, "mid-frame") != NULL, "reason: '%s'", why);
        CHECK(c.n == 0, "frame delivered");
        vw_wire_fini(&rx);
        close(sv[1]);
    }
}

/* A frame with fds and a payload much larger than the socket buffer: many
 * partial writes, the fds go with the first one only and arrive exactly
 * once, the bytes arrive intact, and the frames behind it keep their own
 * fds. Sender and receiver alternate in this thread. */
static void test_partial_writes(void)
{
    int base = count_fds();
    int sv[2], p[2];
    make_pair(sv);
    MUST(pipe(p) == 0, "pipe");
    int sndbuf = 4096; /* the kernel doubles it and clamps to its minimum */
    MUST(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf,
                       sizeof(sndbuf)) == 0,
            "SO_SNDBUF: %s", strerror(errno));
    int m1 = make_memfd("one"), m2 = make_memfd("two"), m3 = make_memfd("3");

    struct vw_wire tx, rx;
    vw_wire_init(&tx, H(sv[0]));
    vw_wire_init(&rx, H(sv[1]));
    const size_t lens[3] = {VW_MAX_PAYLOAD, 5, VW_MAX_PAYLOAD / 2 + 3};
    char *pay[3];
    for (int k = 0; k < 3; k++) {
        pay[k] = malloc(lens[k]);
        REQUIRE(pay[k] != NULL, "malloc");
        for (size_t i = 0; i < lens[k]; i++) /* a pattern that shows shifts */
            pay[k][i] = (char)('a' + (i * 7 + i / 4093 + (size_t)k) % 26);
    }
    int f0[3] = {m1, p[1], m2};
    MUST(vw_wire_queue(&tx, pay[0], lens[0], dups(f0, 3), 3) == 0, "queue 0");
    MUST(vw_wire_queue(&tx, pay[1], lens[1], dups(&m3, 1), 1) == 0, "queue 1");
    MUST(vw_wire_queue(&tx, pay[2], lens[2], NULL, 0) == 0, "queue 2");
    close(p[1]); /* the queue holds its own copy */

    struct collector c = {.take_fds = true};
    char why[256];
    int eagain = 0, iter;
    bool fds_dropped_after_first_write = true;
    for (iter = 0; iter < 1000000; iter++) {
        if (vw_wire_pending(&tx)) {
            int r = vw_wire_flush(&tx);
            if (r == -EAGAIN) {
                eagain++;
                /* Frame 0 has started with the first flush: its fds went
                 * with it and are gone from the queue; what is queued is
                 * only what has not been sent. */
                if (tx.codec.handles_out < 3 ||
                    tx.codec.tx_handles + (int)tx.codec.handles_out != 4)
                    fds_dropped_after_first_write = false;
            } else {
                REQUIRE(r == 0, "flush: %d", r);
            }
        }
        int r = vw_wire_read(&rx, on_frame, &c, why, sizeof(why));
        REQUIRE(r == 0, "read returned %d: %s", r, why);
        if (!vw_wire_pending(&tx) && c.n == 3)
            break;
    }
    REQUIRE(c.n == 3, "%d frames after %d rounds", c.n, iter);
    /* Otherwise this test did not test partial writes at all. */
    REQUIRE(eagain > 10, "only %d partial flushes: socket buffer too big?",
            eagain);
    CHECK(fds_dropped_after_first_write,
          "queued fds of a started frame still held for a later sendmsg");

    for (int k = 0; k < 3; k++)
        CHECK(c.f[k].len == lens[k] &&
                  memcmp(c.f[k].payload, pay[k], lens[k]) == 0,
              "frame %d: payload of %zu bytes differs", k, c.f[k].len);
    CHECK(c.f[0].nfds == 3, "frame 0 got %d fds", c.f[0].nfds);
    CHECK(c.f[1].nfds == 1, "frame 1 got %d fds", c.f[1].nfds);
    CHECK(c.f[2].nfds == 0, "frame 2 got %d fds", c.f[2].nfds);
    CHECK_EQ_U(rx.codec.handles_in, 4);
    CHECK_EQ_U(tx.codec.handles_out, 4);
    if (c.f[0].nfds == 3) {
        CHECK(same_file(c.f[0].fds[0], m1), "frame 0 fd 0");
        CHECK(same_file(c.f[0].fds[2], m2), "frame 0 fd 2");
        CHECK(write(c.f[0].fds[1], "pipe", 4) == 4, "write received pipe fd");
        char buf[8] = "";
        CHECK(read(p[0], buf, sizeof(buf)) == 4 && memcmp(buf, "pipe", 4) == 0,
              "pipe through the received fd");
    }
    if (c.f[1].nfds == 1)
        CHECK(same_file(c.f[1].fds[0], m3), "frame 1 fd 0");
    CHECK(c.bad_cloexec == 0, "%d received fds without FD_CLOEXEC",
          c.bad_cloexec);

    for (int k = 0; k < 3; k++)
        free(pay[k]);
    collector_free(&c);
    vw_wire_fini(&tx);
    vw_wire_fini(&rx);
    close(m1);
    close(m2);
    close(m3);
    close(p[0]);
    close(sv[0]);
    close(sv[1]);
    CHECK(count_fds() == base, "fd leak: %d open, %d before", count_fds(), base);
}

/* vw_wire_queue takes the fds it is given (no copy: a grant of thousands
 * of chunks costs no extra fds): each is closed once it has gone with its
 * frame, or at fini for a frame never sent. */
static void test_queue_takes_fds(void)
{
    int base = count_fds();
    int sv[2];
    make_pair(sv);
    struct vw_wire tx, rx;
    vw_wire_init(&tx, H(sv[0]));
    vw_wire_init(&rx, H(sv[1]));

    int a = make_memfd("A");
    ino_t ino_a = inode_of(a);
    int before = count_fds();
    vp_handle ha = H(a);
    MUST(vw_wire_queue(&tx, "x", 1, &ha, 1) == 0, "queue");
    CHECK(!vp_ok(ha), "the queue did not take the fd");
    CHECK(count_fds() == before, "queue duplicated the fd");
    MUST(vw_wire_flush(&tx) == 0, "flush");
    CHECK(count_fds() == before - 1, "queued fd not closed after the send");

    struct collector c = {.take_fds = true};
    char why[256];
    CHECK(vw_wire_read(&rx, on_frame, &c, why, sizeof(why)) == 0, "read: %s",
          why);
    REQUIRE(c.n == 1 && c.f[0].nfds == 1, "frame not received");
    CHECK(inode_of(c.f[0].fds[0]) == ino_a, "another file arrived");
    char buf[4] = "";
    CHECK(pread(c.f[0].fds[0], buf, 1, 0) == 1 && buf[0] == 'A',
          "content '%c'", buf[0]);
    collector_free(&c);

    /* fini closes the fds of a queue that was never sent. */
    int m = make_memfd(NULL);
    int fds[NFD];
    for (int i = 0; i < NFD; i++)
        fds[i] = m;
    before = count_fds();
    MUST(vw_wire_queue(&tx, "y", 1, dups(fds, NFD), NFD) == 0, "queue");
    MUST(vw_wire_queue(&tx, "z", 1, dups(fds, 3), 3) == 0, "queue");
    CHECK(count_fds() == before + NFD + 3, "%d fds, expected %d", count_fds(),
          before + NFD + 3);
    vw_wire_fini(&tx);
    CHECK(count_fds() == before, "fini left queued fds open");
    CHECK(!vw_wire_pending(&tx), "queue not empty after fini");
    close(m);

    vw_wire_fini(&rx);
    close(sv[0]);
    close(sv[1]);
    CHECK(count_fds() == base, "fd leak: %d open, %d before", count_fds(), base);
}

static void test_queue_limits(void)
{
    int base = count_fds();
    int sv[2];
    make_pair(sv);
    struct vw_wire w;
    vw_wire_init(&w, H(sv[0]));
    int m = make_memfd(NULL);
    int fds[NFD + 1];
    for (int i = 0; i <= NFD; i++)
        fds[i] = m;
    char *big = calloc(1, VW_MAX_PAYLOAD + 1);
    REQUIRE(big != NULL, "calloc");

    /* Per-frame limits; a refused frame's fds are closed (they were
     * given). */
    CHECK(vw_wire_queue(&w, big, VW_MAX_PAYLOAD + 1, NULL, 0) == -EMSGSIZE,
          "payload over the limit accepted");
    CHECK(vw_wire_queue(&w, "x", 1, dups(fds, NFD + 1), NFD + 1) == -E2BIG,
          "too many fds accepted");
    CHECK(vw_wire_queue(&w, "x", 1, dups(fds, 1), -1) < 0,
          "negative nfds accepted");
    close((int)dups(fds, 0)[0].v); /* the one a negative count left */
    CHECK(!vw_wire_pending(&w) && vw_codec_tx_bytes(&w.codec) == 0 &&
              w.codec.tx_handles == 0,
          "a refused frame changed the queue");
    CHECK(count_fds() == base + 3, "refused frames left fds open");

    /* A bad fd (or one of several) refuses the frame and closes the others. */
    vp_handle mixed[3];
    memcpy(mixed, dups(fds, 2), 2 * sizeof(vp_handle));
    mixed[2] = H(999999);
    CHECK(vw_wire_queue(&w, "x", 1, mixed, 3) == -EBADF, "bad fd accepted");
    CHECK(count_fds() == base + 3, "fds of a refused frame left open");
    CHECK(!vw_wire_pending(&w), "a refused frame was queued");

    /* Byte limit, to the exact byte: 63 full frames fit in 64 MiB. */
    size_t frame = VW_FRAME_HEADER_SIZE + VW_MAX_PAYLOAD;
    size_t nfull = VW_CODEC_MAX_TX_BYTES / frame;
    for (size_t i = 0; i < nfull; i++)
        MUST(vw_wire_queue(&w, big, VW_MAX_PAYLOAD, NULL, 0) == 0,
                "full frame %zu refused", i);
    CHECK(vw_wire_queue(&w, big, VW_MAX_PAYLOAD, NULL, 0) == -ENOBUFS,
          "frame past the byte limit accepted");
    size_t room = VW_CODEC_MAX_TX_BYTES - nfull * frame;
    REQUIRE(room > VW_FRAME_HEADER_SIZE, "no room left to test the edge");
    CHECK(vw_wire_queue(&w, big, room - VW_FRAME_HEADER_SIZE + 1, NULL,
                          0) == -ENOBUFS,
          "frame one byte past the limit accepted");
    CHECK(vw_wire_queue(&w, big, room - VW_FRAME_HEADER_SIZE, NULL, 0) == 0,
          "frame filling the queue exactly refused");
    CHECK_EQ_U(vw_codec_tx_bytes(&w.codec), VW_CODEC_MAX_TX_BYTES);
    CHECK(vw_wire_queue(&w, NULL, 0, NULL, 0) == -ENOBUFS,
          "an empty frame fits in a full queue");
    vw_wire_fini(&w);
    CHECK(!vw_wire_pending(&w), "fini left a queue");

    /* fd limit: the queue holds at most VW_CODEC_MAX_TX_HANDLES fds. */
    struct rlimit lim;
    MUST(getrlimit(RLIMIT_NOFILE, &lim) == 0, "getrlimit");
    rlim_t need = (rlim_t)VW_CODEC_MAX_TX_HANDLES + (rlim_t)highest_fd() + 128;
    if (lim.rlim_cur < need && lim.rlim_max >= need) {
        lim.rlim_cur = need;
        MUST(setrlimit(RLIMIT_NOFILE, &lim) == 0, "setrlimit");
    }
    REQUIRE(lim.rlim_cur >= need,
            "RLIMIT_NOFILE %llu is below the %llu this test needs",
            (unsigned long long)lim.rlim_cur, (unsigned long long)need);
    vw_wire_init(&w, H(sv[0]));
    int frames = VW_CODEC_MAX_TX_HANDLES / NFD;
    for (int i = 0; i < frames; i++)
        MUST(vw_wire_queue(&w, "f", 1, dups(fds, NFD), NFD) == 0,
                "frame %d with fds refused", i);
    CHECK_EQ_U(w.codec.tx_handles, VW_CODEC_MAX_TX_HANDLES);
    CHECK(vw_wire_queue(&w, "f", 1, dups(fds, 1), 1) == -ENOBUFS,
          "fd past the queue's fd limit accepted");
    CHECK(vw_wire_queue(&w, "f", 1, NULL, 0) == 0,
          "an fd-less frame refused while only fds are at their limit");
    CHECK(count_fds() == base + 3 + VW_CODEC_MAX_TX_HANDLES,
          "%d fds open, expected %d", count_fds(),
          base + 3 + VW_CODEC_MAX_TX_HANDLES);
    vw_wire_fini(&w);
    CHECK(count_fds() == base + 3, "fini left %d queued fds open",
          count_fds() - base - 3);

    free(big);
    close(m);
    close(sv[0]);
    close(sv[1]);
    CHECK(count_fds() == base, "fd leak: %d open, %d before", count_fds(), base);
}

/* A peer that went away: flush fails with EPIPE instead of raising SIGPIPE,
 * and the queued fds are released by fini. */
static void test_flush_to_closed_peer(void)
{
    int base = count_fds();
    int sv[2];
    make_pair(sv);
    int m = make_memfd(NULL);
    struct vw_wire tx;
    vw_wire_init(&tx, H(sv[0]));
    close(sv[1]);
    MUST(vw_wire_queue(&tx, "x", 1, dups(&m, 1), 1) == 0, "queue");
    int r = vw_wire_flush(&tx);
    CHECK(r == -EPIPE, "flush to a closed peer returned %d", r);
    vw_wire_fini(&tx);
    close(m);
    close(sv[0]);
    CHECK(count_fds() == base, "fd leak: %d open, %d before", count_fds(), base);
}

int main(void)
{
    test_fds_arrive_working();
    test_callback_ownership();
    test_batched_fds();
    test_two_frames_one_sendmsg();
    test_spoofed_fd_count();
    test_unsolicited_fds();
    test_too_many_fds_in_pieces();
    test_truncated_control_data();
    test_full_fd_table();
    test_bad_headers();
    test_eof();
    test_partial_writes();
    test_queue_takes_fds();
    test_queue_limits();
    test_flush_to_closed_peer();
    return check_report("test_transport");
}
