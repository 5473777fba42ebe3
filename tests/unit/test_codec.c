/* SPDX-License-Identifier: Apache-2.0 */
/* The codec alone (proto/codec.c), with no connection: bytes pushed in any
 * split come out as the same frames; handles are matched to frames by the
 * header's count in arrival order; lies about counts fail and close what
 * arrived; inline handles round-trip; the send side coalesces frames
 * without handles and starts a send at each frame that has some, and closes
 * what it was given once sent, refused or dropped.
 *
 * Handles are real (fds of /dev/null; events on Windows) so that leaks can
 * be counted. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#else
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#endif

#include "tests/check.h"
#include "proto/codec.h"

#ifdef _WIN32
/* wine has no handle count (GetProcessHandleCount says 0): the handles
 * counted are those of this test's that are open (the codec makes none),
 * each value once, as one may be made again after a close. */
static HANDLE made[4096];
static int nmade;

static int count_fds(void)
{
    int n = 0;
    for (int i = 0; i < nmade; i++) {
        bool again = false;
        for (int k = 0; k < i && !again; k++)
            again = made[k] == made[i];
        DWORD flags;
        if (!again && GetHandleInformation(made[i], &flags))
            n++;
    }
    return n;
}

static vp_handle fresh(void)
{
    HANDLE h = CreateEventW(NULL, TRUE, FALSE, NULL);
    REQUIRE(h != NULL && nmade < 4096, "CreateEventW");
    made[nmade++] = h;
    return (vp_handle){(intptr_t)h};
}
#else
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    REQUIRE(d != NULL, "opendir");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static vp_handle fresh(void)
{
    return (vp_handle){open("/dev/null", O_RDONLY | O_CLOEXEC)};
}
#endif

/* A frame as a sender writes it: header + payload. */
static size_t frame(uint8_t *buf, const char *payload, uint16_t nfds)
{
    struct vw_frame_header h = {.magic = VW_FRAME_MAGIC,
                                  .version = VW_PROTOCOL_OLDEST,
                                  .payload_len = (uint32_t)strlen(payload),
                                  .nfds = nfds};
    vw_frame_header_encode(&h, buf);
    memcpy(buf + VW_FRAME_HEADER_SIZE, payload, strlen(payload));
    return VW_FRAME_HEADER_SIZE + strlen(payload);
}

/* Drains every complete frame: payloads joined by '|', handle counts. */
static int drain(struct vw_codec *c, char *out, size_t outlen, int *counts,
                 int *err)
{
    int n = 0;
    struct vw_codec_frame *f;
    char why[256];
    int r;
    while ((r = vw_codec_next(c, &f, why, sizeof(why))) > 0) {
        size_t l = strlen(out);
        snprintf(out + l, outlen - l, "%s%s", l ? "|" : "", f->payload);
        counts[n++] = f->nhandles;
    }
    *err = r;
    return n;
}

/* Three frames, pushed one byte at a time, with their handles arriving with
 * the first byte of their frame. */
static void test_bytewise(void)
{
    int base = count_fds();
    uint8_t buf[256];
    size_t a = frame(buf, "{\"a\":1}", 2);
    size_t b = frame(buf + a, "{}", 0);
    size_t c3 = frame(buf + a + b, "{\"c\":3}", 1);
    struct vw_codec c;
    vw_codec_init(&c, false);
    char out[256] = "";
    int counts[8], err = 0, n = 0;
    char why[256];
    for (size_t i = 0; i < a + b + c3; i++) {
        if (i == 0 || i == a + b) {
            vp_handle hs[2] = {fresh(), fresh()};
            int k = i == 0 ? 2 : 1;
            CHECK(vw_codec_rx_handles(&c, hs, k, why, sizeof(why)) == 0,
                  "handles: %s", why);
            if (k == 1)
                vp_close(&hs[1]);
        }
        CHECK(vw_codec_rx_bytes(&c, buf + i, 1) == 0, "push");
        n += drain(&c, out, sizeof(out), counts + n, &err);
        CHECK(err == 0, "byte %zu: error %d", i, err);
    }
    CHECK(n == 3, "%d frames", n);
    CHECK(strcmp(out, "{\"a\":1}|{}|{\"c\":3}") == 0, "payloads: %s", out);
    CHECK(counts[0] == 2 && counts[1] == 0 && counts[2] == 1,
          "handle counts %d %d %d", counts[0], counts[1], counts[2]);
    CHECK(vw_codec_rx_idle(&c), "not idle after the last frame");
    vw_codec_fini(&c);
    CHECK(count_fds() == base, "handles left open: %d, %d before", count_fds(),
          base);
}

/* A receive may bring the end of one frame and the start of the next with
 * the next frame's handles: they wait for it (FIFO), and the first frame
 * does not take them. */
static void test_handles_of_the_next_frame(void)
{
    int base = count_fds();
    uint8_t buf[256];
    size_t a = frame(buf, "{\"first\":0}", 1);
    size_t b = frame(buf + a, "{\"second\":2}", 2);
    struct vw_codec c;
    vw_codec_init(&c, false);
    char why[256];
    vp_handle h1 = fresh();
    intptr_t v1 = h1.v;
    CHECK(vw_codec_rx_handles(&c, &h1, 1, why, sizeof(why)) == 0, "h1");
    CHECK(!vp_ok(h1), "the codec did not take the handle");
    CHECK(vw_codec_rx_bytes(&c, buf, a - 3) == 0, "push");
    /* The rest of frame one, the head of frame two and its handles. */
    vp_handle h2[2] = {fresh(), fresh()};
    intptr_t v2[2] = {h2[0].v, h2[1].v};
    CHECK(vw_codec_rx_bytes(&c, buf + a - 3, 10) == 0, "push");
    CHECK(vw_codec_rx_handles(&c, h2, 2, why, sizeof(why)) == 0, "h2");
    struct vw_codec_frame *f;
    CHECK(vw_codec_next(&c, &f, why, sizeof(why)) == 1, "first frame: %s", why);
    CHECK(f->nhandles == 1 && f->handles[0].v == v1,
          "first frame took %d handles", f->nhandles);
    CHECK(vw_codec_next(&c, &f, why, sizeof(why)) == 0, "second not complete");
    CHECK(!vw_codec_rx_idle(&c), "idle with a frame half there");
    CHECK(vw_codec_rx_bytes(&c, buf + a + 7, b - 7) == 0, "push");
    CHECK(vw_codec_next(&c, &f, why, sizeof(why)) == 1, "second frame: %s", why);
    CHECK(f->nhandles == 2 && f->handles[0].v == v2[0] &&
              f->handles[1].v == v2[1],
          "second frame's handles");
    CHECK(strcmp(f->payload, "{\"second\":2}") == 0, "payload %s", f->payload);
    vw_codec_fini(&c);
    CHECK(count_fds() == base, "handles left open");
}

/* Lies about counts: fewer handles than announced, handles with no frame to
 * claim them; every handle that arrived is closed. */
static void test_lies(void)
{
    int base = count_fds();
    uint8_t buf[64];
    char why[256];
    struct vw_codec_frame *f;
    struct vw_codec c;

    vw_codec_init(&c, false);
    size_t n = frame(buf, "{}", 2);
    vp_handle h = fresh();
    vw_codec_rx_handles(&c, &h, 1, why, sizeof(why));
    vw_codec_rx_bytes(&c, buf, n);
    CHECK(vw_codec_next(&c, &f, why, sizeof(why)) == -EBADMSG,
          "announces 2, 1 came");
    CHECK(count_fds() == base, "handle of a refused frame left open");
    vw_codec_fini(&c);

    vw_codec_init(&c, false);
    n = frame(buf, "{}", 0);
    h = fresh();
    vw_codec_rx_handles(&c, &h, 1, why, sizeof(why));
    vw_codec_rx_bytes(&c, buf, n);
    CHECK(vw_codec_next(&c, &f, why, sizeof(why)) == -EBADMSG,
          "announces 0, 1 came, no frame after it");
    CHECK(strstr(why, "announces 0") != NULL, "why: %s", why);
    CHECK(count_fds() == base, "unsolicited handle left open");
    vw_codec_fini(&c);

    /* Handles with no byte at all. */
    vw_codec_init(&c, false);
    h = fresh();
    vw_codec_rx_handles(&c, &h, 1, why, sizeof(why));
    CHECK(vw_codec_next(&c, &f, why, sizeof(why)) == -EBADMSG,
          "handles with no frame");
    CHECK(count_fds() == base, "handle with no frame left open");
    vw_codec_fini(&c);

    /* More handles parked than two frames may carry. */
    vw_codec_init(&c, false);
    vp_handle many[VW_CODEC_MAX_PARKED + 1];
    for (int i = 0; i <= VW_CODEC_MAX_PARKED; i++)
        many[i] = fresh();
    CHECK(vw_codec_rx_handles(&c, many, VW_CODEC_MAX_PARKED, why,
                                sizeof(why)) == 0, "parked at the limit");
    CHECK(vw_codec_rx_handles(&c, many + VW_CODEC_MAX_PARKED, 1, why,
                                sizeof(why)) == -E2BIG, "parked over the limit");
    CHECK(count_fds() == base, "parked handles left open after the refusal");
    vw_codec_fini(&c);

    /* A bad header fails at once. */
    vw_codec_init(&c, false);
    n = frame(buf, "{}", 0);
    buf[0] ^= 1;
    vw_codec_rx_bytes(&c, buf, VW_FRAME_HEADER_SIZE);
    CHECK(vw_codec_next(&c, &f, why, sizeof(why)) == -EPROTO, "bad magic");
    vw_codec_fini(&c);

    /* Inline mode takes no handles beside the bytes. */
    vw_codec_init(&c, true);
    h = fresh();
    CHECK(vw_codec_rx_handles(&c, &h, 1, why, sizeof(why)) == -EPROTO,
          "handles beside the bytes in inline mode");
    CHECK(count_fds() == base, "refused inline handle left open");
    vw_codec_fini(&c);
}

/* Inline mode: a frame's handle values follow its payload; what one codec
 * sends, another reads back, split anywhere. */
static void test_inline_round_trip(void)
{
    struct vw_codec tx, rx;
    vw_codec_init(&tx, true);
    vw_codec_init(&rx, true);
    vp_handle hs[3] = {{0x1234}, {(intptr_t)0x7fffffff00000001ll}, {42}};
    CHECK(vw_codec_tx(&tx, "{\"h\":3}", 7, hs, 3) == 0, "tx");
    CHECK(vw_codec_tx(&tx, "{}", 2, NULL, 0) == 0, "tx");
    CHECK(hs[0].v == 0x1234, "inline values are not the codec's to take");
    const uint8_t *p;
    size_t len;
    const vp_handle *ah;
    int nh;
    CHECK(vw_codec_tx_peek(&tx, &p, &len, &ah, &nh) == 1 && nh == 0,
          "inline frames attach nothing");
    CHECK(len == 2 * VW_FRAME_HEADER_SIZE + 9 + 3 * VW_CODEC_INLINE_BYTES,
          "bytes %zu", len);
    char why[256];
    struct vw_codec_frame *f;
    int got = 0;
    for (size_t i = 0; i < len; i += 5) {
        vw_codec_rx_bytes(&rx, p + i, len - i < 5 ? len - i : 5);
        while (vw_codec_next(&rx, &f, why, sizeof(why)) == 1) {
            if (got == 0) {
                CHECK(f->nhandles == 3 && f->handles[0].v == 0x1234 &&
                          f->handles[1].v == (intptr_t)0x7fffffff00000001ll &&
                          f->handles[2].v == 42,
                      "inline values changed");
                CHECK(strcmp(f->payload, "{\"h\":3}") == 0, "payload");
            }
            for (int k = 0; k < f->nhandles; k++)
                f->handles[k] = VP_NONE; /* values, not ours */
            got++;
        }
    }
    CHECK(got == 2, "%d frames", got);
    vw_codec_tx_sent(&tx, len);
    CHECK(!vw_codec_tx_pending(&tx), "still pending");
    vw_codec_fini(&tx);
    vw_codec_fini(&rx);
}

/* The send side: handle-less frames go in one send; a frame with handles
 * starts a send of its own, with its handles, and they are closed once it
 * went; a refused frame's handles and a dropped queue's are closed too. */
static void test_send_side(void)
{
    int base = count_fds();
    struct vw_codec c;
    vw_codec_init(&c, false);
    CHECK(vw_codec_tx(&c, "a", 1, NULL, 0) == 0, "a");
    CHECK(vw_codec_tx(&c, "b", 1, NULL, 0) == 0, "b");
    vp_handle h[2] = {fresh(), fresh()};
    CHECK(vw_codec_tx(&c, "c", 1, h, 2) == 0, "c");
    CHECK(!vp_ok(h[0]) && !vp_ok(h[1]), "handles not taken");
    CHECK(vw_codec_tx(&c, "d", 1, NULL, 0) == 0, "d");
    vp_handle e1 = fresh();
    CHECK(vw_codec_tx(&c, "e", 1, &e1, 1) == 0, "e");
    CHECK(count_fds() == base + 3, "queued handles");
    const uint8_t *p;
    size_t len;
    const vp_handle *ah;
    int nh;
    CHECK(vw_codec_tx_peek(&c, &p, &len, &ah, &nh) == 1, "peek");
    CHECK(nh == 0 && len == 2 * (VW_FRAME_HEADER_SIZE + 1),
          "a and b together, stopping before c: %zu bytes, %d handles", len, nh);
    vw_codec_tx_sent(&c, len);
    CHECK(vw_codec_tx_peek(&c, &p, &len, &ah, &nh) == 1, "peek");
    CHECK(nh == 2 && len == 2 * (VW_FRAME_HEADER_SIZE + 1),
          "c with its handles and d: %zu bytes, %d handles", len, nh);
    /* A partial send: the handles went with its first byte. */
    vw_codec_tx_sent(&c, 3);
    CHECK(count_fds() == base + 1, "sent handles not closed");
    CHECK(vw_codec_tx_peek(&c, &p, &len, &ah, &nh) == 1 && nh == 0,
          "the handles of a started frame are offered again");
    vw_codec_tx_sent(&c, len);
    CHECK(vw_codec_tx_peek(&c, &p, &len, &ah, &nh) == 1 && nh == 1,
          "e with its handle");
    /* Dropped unsent: fini closes it. */
    vw_codec_fini(&c);
    CHECK(count_fds() == base, "queued handle left open by fini");

    /* Refusals close what they were given. */
    vw_codec_init(&c, false);
    c.max_tx_bytes = 64;
    vp_handle r1 = fresh();
    static char big[100];
    CHECK(vw_codec_tx(&c, big, sizeof(big), &r1, 1) == -ENOBUFS, "byte limit");
    CHECK(count_fds() == base, "refused frame's handle left open");
    c.max_tx_bytes = VW_CODEC_MAX_TX_BYTES;
    c.max_tx_handles = 1;
    vp_handle r2[2] = {fresh(), fresh()};
    CHECK(vw_codec_tx(&c, "x", 1, r2, 2) == -ENOBUFS, "handle limit");
    CHECK(count_fds() == base, "refused frame's handles left open");
    vw_codec_fini(&c);

    /* Dropped on purpose (a peer that does not read): its handles closed,
     * nothing queued, and the codec queues again afterwards. */
    vw_codec_init(&c, false);
    vp_handle q[3] = {fresh(), fresh(), fresh()};
    CHECK(vw_codec_tx(&c, "q", 1, q, 3) == 0 && vw_codec_tx(&c, "r", 1, NULL, 0) == 0,
          "queue");
    vw_codec_tx_drop(&c);
    CHECK(count_fds() == base, "dropped handles left open");
    CHECK(vw_codec_tx_bytes(&c) == 0 && !vw_codec_tx_pending(&c), "still queued");
    CHECK(vw_codec_tx(&c, "s", 1, NULL, 0) == 0 &&
          vw_codec_tx_peek(&c, &p, &len, &ah, &nh) == 1 &&
          len == VW_FRAME_HEADER_SIZE + 1, "queueing after a drop");
    vw_codec_fini(&c);
}

int main(void)
{
    test_bytewise();
    test_handles_of_the_next_frame();
    test_lies();
    test_inline_round_trip();
    test_send_side();
    return check_report("test_codec");
}
