/* SPDX-License-Identifier: Apache-2.0 */
/* The frame header: its byte layout (frame.h documents it and foreign peers
 * rely on it), the round trip, and every check decode makes. */
#include <errno.h>
#include <string.h>

#include "tests/check.h"
#include "proto/frame.h"

static struct vw_frame_header good(void)
{
    return (struct vw_frame_header){
        .magic = VW_FRAME_MAGIC,
        .version = VW_PROTOCOL_VERSION,
        .payload_len = 1234,
        .nfds = 3,
    };
}

/* Decodes h and expects err, with a reason; *out must stay untouched. */
static void expect_reject(const struct vw_frame_header *h, int err,
                          const char *what)
{
    uint8_t b[VW_FRAME_HEADER_SIZE];
    vw_frame_header_encode(h, b);
    struct vw_frame_header out;
    memset(&out, 0xa5, sizeof(out));
    struct vw_frame_header before = out;
    char why[128] = "";
    int r = vw_frame_header_decode(b, &out, why, sizeof(why));
    CHECK(r == err, "%s: decode returned %d (%s), expected %d", what, r,
          strerror(-r), err);
    CHECK(why[0] != '\0', "%s: no reason given", what);
    CHECK(memcmp(&out, &before, sizeof(out)) == 0,
          "%s: header written although decode failed", what);
}

static void test_layout(void)
{
    /* The wire layout is fixed little-endian, whatever the host order. */
    struct vw_frame_header h = {
        .magic = VW_FRAME_MAGIC,
        .version = 0x0102,
        .flags = 0,
        .payload_len = 0x0a0b0c0d,
        .nfds = 0x1112,
        .reserved = 0,
    };
    uint8_t b[VW_FRAME_HEADER_SIZE];
    memset(b, 0xee, sizeof(b));
    vw_frame_header_encode(&h, b);
    static const uint8_t want[VW_FRAME_HEADER_SIZE] = {
        'V', 'R', 'M', 'D', 0x02, 0x01, 0x00, 0x00,
        0x0d, 0x0c, 0x0b, 0x0a, 0x12, 0x11, 0x00, 0x00,
    };
    CHECK(memcmp(b, want, sizeof(want)) == 0, "encoded bytes differ from frame.h");
    CHECK_EQ_U(sizeof(want), 16);
}

static void test_round_trip(void)
{
    const uint32_t lens[] = {0, 1, 2, 255, 256, 65535, 65536,
                             VW_MAX_PAYLOAD - 1, VW_MAX_PAYLOAD};
    const uint16_t nfds[] = {0, 1, 17, VW_MAX_FDS_PER_FRAME};
    const uint16_t versions[] = {0, 1, VW_PROTOCOL_VERSION, 0x7fff, 0xffff};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (size_t j = 0; j < sizeof(nfds) / sizeof(nfds[0]); j++)
            for (size_t k = 0; k < sizeof(versions) / sizeof(versions[0]); k++) {
                struct vw_frame_header h = good(), out;
                h.payload_len = lens[i];
                h.nfds = nfds[j];
                h.version = versions[k];
                uint8_t b[VW_FRAME_HEADER_SIZE];
                vw_frame_header_encode(&h, b);
                memset(&out, 0, sizeof(out));
                char why[128] = "";
                int r = vw_frame_header_decode(b, &out, why, sizeof(why));
                CHECK(r == 0, "len %u nfds %u version %u: %d %s", lens[i],
                      nfds[j], versions[k], r, why);
                CHECK(out.magic == h.magic && out.version == h.version &&
                          out.flags == 0 && out.payload_len == h.payload_len &&
                          out.nfds == h.nfds && out.reserved == 0,
                      "len %u nfds %u version %u: round trip differs",
                      lens[i], nfds[j], versions[k]);
            }
}

static void test_rejects(void)
{
    struct vw_frame_header h = good();
    h.magic = 0x444d5257; /* one bit off */
    expect_reject(&h, -EPROTO, "bad magic");
    h.magic = 0x56524d44; /* "VRMD" in the wrong byte order */
    expect_reject(&h, -EPROTO, "byte-swapped magic");
    h.magic = 0;
    expect_reject(&h, -EPROTO, "zero magic");

    for (int bit = 0; bit < 16; bit++) {
        h = good();
        h.flags = (uint16_t)(1u << bit);
        expect_reject(&h, -EPROTO, "flags bit");
        h = good();
        h.reserved = (uint16_t)(1u << bit);
        expect_reject(&h, -EPROTO, "reserved bit");
    }

    h = good();
    h.payload_len = VW_MAX_PAYLOAD + 1;
    expect_reject(&h, -EMSGSIZE, "payload one over the limit");
    h.payload_len = UINT32_MAX;
    expect_reject(&h, -EMSGSIZE, "payload of 4 GiB");

    h = good();
    h.nfds = VW_MAX_FDS_PER_FRAME + 1;
    expect_reject(&h, -E2BIG, "fds one over the limit");
    h.nfds = UINT16_MAX;
    expect_reject(&h, -E2BIG, "65535 fds");
}

static void test_truncated_reason(void)
{
    /* A tiny reason buffer is still NUL-terminated and decode still fails. */
    struct vw_frame_header h = good(), out;
    h.magic = 1;
    uint8_t b[VW_FRAME_HEADER_SIZE];
    vw_frame_header_encode(&h, b);
    char why[8];
    memset(why, 'x', sizeof(why));
    int r = vw_frame_header_decode(b, &out, why, sizeof(why));
    CHECK(r == -EPROTO, "decode returned %d", r);
    CHECK(memchr(why, '\0', sizeof(why)) != NULL, "reason not terminated");
}

int main(void)
{
    test_layout();
    test_round_trip();
    test_rejects();
    test_truncated_reason();
    return check_report("test_frame");
}
