/* SPDX-License-Identifier: Apache-2.0 */
/* Receives as the daemon makes them (one receive per readiness): one
 * receive takes several frames, fds go to the frame they were sent with,
 * partial frames are finished by later receives, and a stop leaves the rest
 * for the next call. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/check.h"
#include "proto/frame.h"
#include "proto/wire.h"

struct got {
    int n;
    char payload[8][16384];
    int nfds[8];
    ino_t ino[8][4];
    int stop_after;
};

static int on_frame(void *ud, struct vw_codec_frame *f)
{
    struct got *g = ud;
    if (g->n < 8) {
        memcpy(g->payload[g->n], f->payload, f->len + 1);
        g->nfds[g->n] = f->nhandles;
        for (int i = 0; i < f->nhandles && i < 4; i++) {
            struct stat st;
            fstat((int)f->handles[i].v, &st);
            g->ino[g->n][i] = st.st_ino;
        }
    }
    g->n++;
    return g->stop_after && g->n >= g->stop_after ? 1 : 0;
}

/* Sends one frame with an explicit fd count claim. */
static void send_frame(int fd, const char *payload, size_t len, int claim,
                       const int *fds, int nfds)
{
    uint8_t hdr[VW_FRAME_HEADER_SIZE];
    struct vw_frame_header h = {.magic = VW_FRAME_MAGIC,
                                  .version = VW_PROTOCOL_OLDEST,
                                  .payload_len = (uint32_t)len,
                                  .nfds = (uint16_t)claim};
    vw_frame_header_encode(&h, hdr);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)payload, len}};
    char ctl[CMSG_SPACE(sizeof(int) * 4)];
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
    if (nfds) {
        memset(ctl, 0, sizeof(ctl));
        m.msg_control = ctl;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    REQUIRE(sendmsg(fd, &m, 0) == (ssize_t)(sizeof(hdr) + len), "sendmsg");
}

static void pair(int sv[2], struct vw_wire *w)
{
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    vw_wire_init(w, (vp_handle){sv[0]});
    w->max_recvs = 1;
}

int main(void)
{
    char why[256];
    int sv[2];
    struct vw_wire w;

    /* Three frames waiting: one call delivers them all. */
    {
        struct got g = {0};
        pair(sv, &w);
        send_frame(sv[1], "{\"a\":1}", 7, 0, NULL, 0);
        send_frame(sv[1], "{\"b\":2}", 7, 0, NULL, 0);
        send_frame(sv[1], "{\"c\":3}", 7, 0, NULL, 0);
        int r = vw_wire_read(&w, on_frame, &g, why, sizeof(why));
        CHECK(r == 0, "read: %d %s", r, why);
        CHECK_EQ_U(g.n, 3);
        CHECK(strcmp(g.payload[2], "{\"c\":3}") == 0, "third: %s", g.payload[2]);
        r = vw_wire_read(&w, on_frame, &g, why, sizeof(why));
        CHECK(r == 0 && g.n == 3, "nothing more: %d", r);
        close(sv[1]);
        r = vw_wire_read(&w, on_frame, &g, why, sizeof(why));
        CHECK(r == -ENOTCONN, "EOF: %d", r);
        vw_wire_fini(&w);
        close(sv[0]);
    }
    /* fds go to the frame that carried them, not to the one before. */
    {
        struct got g = {0};
        pair(sv, &w);
        int m1 = memfd_create("one", 0), m2 = memfd_create("two", 0);
        struct stat s1, s2;
        fstat(m1, &s1);
        fstat(m2, &s2);
        int fds[2] = {m1, m2};
        send_frame(sv[1], "{\"plain\":1}", 11, 0, NULL, 0);
        send_frame(sv[1], "{\"with\":2}", 10, 2, fds, 2);
        int r = 0;
        for (int i = 0; i < 4 && g.n < 2; i++)
            r = vw_wire_read(&w, on_frame, &g, why, sizeof(why));
        CHECK(r == 0 && g.n == 2, "frames %d, r %d %s", g.n, r, why);
        CHECK_EQ_U(g.nfds[0], 0);
        CHECK_EQ_U(g.nfds[1], 2);
        CHECK(g.ino[1][0] == s1.st_ino && g.ino[1][1] == s2.st_ino,
              "the fds are not the ones sent");
        close(m1);
        close(m2);
        vw_wire_fini(&w);
        close(sv[0]);
        close(sv[1]);
    }
    /* A frame larger than one receive, then a small one. */
    {
        static struct got g;
        memset(&g, 0, sizeof(g));
        pair(sv, &w);
        static char big[12001];
        memset(big, 'x', 12000);
        big[0] = '"';
        big[11999] = '"';
        send_frame(sv[1], big, 12000, 0, NULL, 0);
        send_frame(sv[1], "{\"after\":1}", 11, 0, NULL, 0);
        int r = 0;
        for (int i = 0; i < 8 && g.n < 2; i++)
            r = vw_wire_read(&w, on_frame, &g, why, sizeof(why));
        CHECK(r == 0 && g.n == 2, "frames %d, r %d %s", g.n, r, why);
        CHECK(strlen(g.payload[0]) == 12000 && g.payload[0][5000] == 'x',
              "big frame damaged");
        CHECK(strcmp(g.payload[1], "{\"after\":1}") == 0, "second: %s", g.payload[1]);
        vw_wire_fini(&w);
        close(sv[0]);
        close(sv[1]);
    }
    /* A header cut in two sends. */
    {
        struct got g = {0};
        pair(sv, &w);
        uint8_t hdr[VW_FRAME_HEADER_SIZE];
        struct vw_frame_header h = {.magic = VW_FRAME_MAGIC,
                                      .version = VW_PROTOCOL_OLDEST,
                                      .payload_len = 2};
        vw_frame_header_encode(&h, hdr);
        REQUIRE(write(sv[1], hdr, 5) == 5, "write");
        int r = vw_wire_read(&w, on_frame, &g, why, sizeof(why));
        CHECK(r == 0 && g.n == 0, "partial: %d", r);
        REQUIRE(write(sv[1], hdr + 5, 11) == 11, "write");
        REQUIRE(write(sv[1], "{}", 2) == 2, "write");
        r = vw_wire_read(&w, on_frame, &g, why, sizeof(why));
        CHECK(r == 0 && g.n == 1, "completed: %d %d %s", r, g.n, why);
        vw_wire_fini(&w);
        close(sv[0]);
        close(sv[1]);
    }
    /* fd count lies: refused, fds closed. */
    {
        struct got g = {0};
        pair(sv, &w);
        int m1 = memfd_create("lie", MFD_CLOEXEC);
        int before = m1;
        send_frame(sv[1], "{}", 2, 2, &m1, 1);
        close(m1);
        int r = vw_wire_read(&w, on_frame, &g, why, sizeof(why));
        CHECK(r == -EBADMSG, "mismatch: %d %s", r, why);
        /* Nothing of ours still open at that number. */
        CHECK(fcntl(before, F_GETFD) < 0, "a received fd was left open");
        vw_wire_fini(&w);
        close(sv[0]);
        close(sv[1]);
    }
    /* A stop returns after its frame; what is left of the receive comes
     * with the next call, which needs no new data on the socket. */
    {
        struct got g = {.stop_after = 1};
        pair(sv, &w);
        send_frame(sv[1], "{\"a\":1}", 7, 0, NULL, 0);
        send_frame(sv[1], "{\"b\":2}", 7, 0, NULL, 0);
        int r = vw_wire_read(&w, on_frame, &g, why, sizeof(why));
        CHECK(r == 1 && g.n == 1, "stop: %d %d", r, g.n);
        g.stop_after = 0;
        r = vw_wire_read(&w, on_frame, &g, why, sizeof(why));
        CHECK(r == 0 && g.n == 2 && strcmp(g.payload[1], "{\"b\":2}") == 0,
              "after a stop: %d %d", r, g.n);
        vw_wire_fini(&w);
        close(sv[0]);
        close(sv[1]);
    }
    return check_report("test_transport_greedy");
}
