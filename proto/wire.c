/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/wire.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "platform/conn.h"

void vw_wire_init(struct vw_wire *w, vp_handle h)
{
    memset(w, 0, sizeof(*w));
    w->h = h;
    vw_codec_init(&w->codec, vp_handles_inline());
}

void vw_wire_fini(struct vw_wire *w)
{
    if (w)
        vw_codec_fini(&w->codec);
}

/* Every complete frame the codec holds, to fn. */
static int deliver(struct vw_wire *w, vw_wire_frame_fn fn, void *ud,
                   char *why, size_t whylen)
{
    for (;;) {
        struct vw_codec_frame *f;
        int r = vw_codec_next(&w->codec, &f, why, whylen);
        if (r <= 0)
            return r;
        r = fn(ud, f);
        if (r < 0 && why[0] == '\0')
            snprintf(why, whylen, "frame handler failed: %s", strerror(-r));
        if (r != 0)
            return r;
    }
}

int vw_wire_read(struct vw_wire *w, vw_wire_frame_fn fn, void *ud,
                   char *why, size_t whylen)
{
    why[0] = '\0';
    int r = deliver(w, fn, ud, why, whylen);
    for (int n = 0; r == 0 && (!w->max_recvs || n < w->max_recvs); n++) {
        size_t room;
        uint8_t *buf = vw_codec_rx_space(&w->codec, VW_WIRE_RECV, &room);
        if (!buf) {
            snprintf(why, whylen, "out of memory for a receive");
            return -ENOMEM;
        }
        vp_handle hs[VW_MAX_FDS_PER_FRAME];
        int nh = 0;
        long got = vp_recv(w->h, buf, room, hs, VW_MAX_FDS_PER_FRAME, &nh,
                           w->rx_block ? VP_RECV_WAIT : 0, why, whylen);
        if (got == -EAGAIN)
            return 0;
        if (got < 0) {
            if (why[0] == '\0')
                snprintf(why, whylen, "%s", got == -ECONNRESET
                                                ? "the peer reset the connection"
                                                : strerror((int)-got));
            vw_codec_rx_drop(&w->codec);
            return (int)got;
        }
        if (got == 0) {
            bool mid = !vw_codec_rx_idle(&w->codec) || nh;
            for (int i = 0; i < nh; i++)
                vp_close(&hs[i]);
            vw_codec_rx_drop(&w->codec);
            snprintf(why, whylen, mid ? "peer closed the connection mid-frame"
                                      : "peer closed the connection");
            return mid ? -ECONNRESET : -ENOTCONN;
        }
        vw_codec_rx_wrote(&w->codec, (size_t)got);
        if (nh && (r = vw_codec_rx_handles(&w->codec, hs, nh, why, whylen)) < 0)
            return r;
        r = deliver(w, fn, ud, why, whylen);
        /* A waiting receive returns what came; the caller decides whether
         * to wait again (its reply may still be on its way). */
        if (w->rx_block)
            break;
    }
    return r;
}

int vw_wire_queue(struct vw_wire *w, const char *payload, size_t len,
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
    return vw_codec_tx(&w->codec, payload, len, hs, n);
}

int vw_wire_flush(struct vw_wire *w)
{
    const uint8_t *p;
    size_t len;
    const vp_handle *hs;
    int nh;
    while (vw_codec_tx_peek(&w->codec, &p, &len, &hs, &nh)) {
        long n = vp_send(w->h, p, len, hs, nh);
        if (n < 0)
            return (int)n;
        vw_codec_tx_sent(&w->codec, (size_t)n);
    }
    return 0;
}
