/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/wire.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "platform/conn.h"

void vram_wire_init(struct vram_wire *w, vp_handle h)
{
    memset(w, 0, sizeof(*w));
    w->h = h;
    vram_codec_init(&w->codec, vp_handles_inline());
}

void vram_wire_fini(struct vram_wire *w)
{
    if (w)
        vram_codec_fini(&w->codec);
}

/* Every complete frame the codec holds, to fn. */
static int deliver(struct vram_wire *w, vram_wire_frame_fn fn, void *ud,
                   char *why, size_t whylen)
{
    for (;;) {
        struct vram_codec_frame *f;
        int r = vram_codec_next(&w->codec, &f, why, whylen);
        if (r <= 0)
            return r;
        r = fn(ud, f);
        if (r < 0 && why[0] == '\0')
            snprintf(why, whylen, "frame handler failed: %s", strerror(-r));
        if (r != 0)
            return r;
    }
}

int vram_wire_read(struct vram_wire *w, vram_wire_frame_fn fn, void *ud,
                   char *why, size_t whylen)
{
    why[0] = '\0';
    int r = deliver(w, fn, ud, why, whylen);
    for (int n = 0; r == 0 && (!w->max_recvs || n < w->max_recvs); n++) {
        size_t room;
        uint8_t *buf = vram_codec_rx_space(&w->codec, VRAM_WIRE_RECV, &room);
        if (!buf) {
            snprintf(why, whylen, "out of memory for a receive");
            return -ENOMEM;
        }
        vp_handle hs[VRAM_MAX_FDS_PER_FRAME];
        int nh = 0;
        long got = vp_recv(w->h, buf, room, hs, VRAM_MAX_FDS_PER_FRAME, &nh,
                           w->rx_block ? VP_RECV_WAIT : 0, why, whylen);
        if (got == -EAGAIN)
            return 0;
        if (got < 0) {
            if (why[0] == '\0')
                snprintf(why, whylen, "%s", got == -ECONNRESET
                                                ? "the peer reset the connection"
                                                : strerror((int)-got));
            vram_codec_rx_drop(&w->codec);
            return (int)got;
        }
        if (got == 0) {
            bool mid = !vram_codec_rx_idle(&w->codec) || nh;
            for (int i = 0; i < nh; i++)
                vp_close(&hs[i]);
            vram_codec_rx_drop(&w->codec);
            snprintf(why, whylen, mid ? "peer closed the connection mid-frame"
                                      : "peer closed the connection");
            return mid ? -ECONNRESET : -ENOTCONN;
        }
        vram_codec_rx_wrote(&w->codec, (size_t)got);
        if (nh && (r = vram_codec_rx_handles(&w->codec, hs, nh, why, whylen)) < 0)
            return r;
        r = deliver(w, fn, ud, why, whylen);
        /* A waiting receive returns what came; the caller decides whether
         * to wait again (its reply may still be on its way). */
        if (w->rx_block)
            break;
    }
    return r;
}

int vram_wire_queue(struct vram_wire *w, const char *payload, size_t len,
                    vp_handle *hs, int n)
{
    /* A handle that names nothing would fail the send of every frame behind
     * it: refuse its frame now. */
    for (int i = 0; !w->codec.inline_handles && i < n; i++)
        if (!vp_valid(hs[i])) {
            for (int k = 0; k < n; k++)
                vp_close(&hs[k]);
            return -EBADF;
        }
    return vram_codec_tx(&w->codec, payload, len, hs, n);
}

int vram_wire_flush(struct vram_wire *w)
{
    const uint8_t *p;
    size_t len;
    const vp_handle *hs;
    int nh;
    while (vram_codec_tx_peek(&w->codec, &p, &len, &hs, &nh)) {
        long n = vp_send(w->h, p, len, hs, nh);
        if (n < 0)
            return (int)n;
        vram_codec_tx_sent(&w->codec, (size_t)n);
    }
    return 0;
}
