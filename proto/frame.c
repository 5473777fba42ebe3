/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/frame.h"

#include <errno.h>
#include <stdio.h>

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)get16(p) | ((uint32_t)get16(p + 2) << 16);
}

void vw_frame_header_encode(const struct vw_frame_header *h,
                              uint8_t out[VW_FRAME_HEADER_SIZE])
{
    put32(out, h->magic);
    put16(out + 4, h->version);
    put16(out + 6, h->flags);
    put32(out + 8, h->payload_len);
    put16(out + 12, h->nfds);
    put16(out + 14, h->reserved);
}

int vw_frame_header_decode(const uint8_t in[VW_FRAME_HEADER_SIZE],
                             struct vw_frame_header *h, char *why,
                             size_t whylen)
{
    struct vw_frame_header t = {
        .magic = get32(in),
        .version = get16(in + 4),
        .flags = get16(in + 6),
        .payload_len = get32(in + 8),
        .nfds = get16(in + 12),
        .reserved = get16(in + 14),
    };

    if (t.magic != VW_FRAME_MAGIC) {
        snprintf(why, whylen, "bad frame magic 0x%08x", t.magic);
        return -EPROTO;
    }
    if (t.flags != 0 || t.reserved != 0) {
        snprintf(why, whylen, "reserved header bits set (flags 0x%x)",
                 t.flags);
        return -EPROTO;
    }
    if (t.payload_len > VW_MAX_PAYLOAD) {
        snprintf(why, whylen, "payload of %u bytes exceeds the limit of %u",
                 t.payload_len, VW_MAX_PAYLOAD);
        return -EMSGSIZE;
    }
    if (t.nfds > VW_MAX_FDS_PER_FRAME) {
        snprintf(why, whylen, "frame announces %u fds, the limit is %d",
                 t.nfds, VW_MAX_FDS_PER_FRAME);
        return -E2BIG;
    }
    *h = t;
    return 0;
}
