/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/codec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A frame's handles, waiting in the send buffer at offset at. */
struct vw_codec_attach {
    size_t at;
    vp_handle h[VW_MAX_FDS_PER_FRAME];
    int n;
};

/* The receive buffer keeps this much room, and returns to it once drained. */
#define RX_KEEP (64u << 10)

void vw_codec_init(struct vw_codec *c, bool inline_handles)
{
    memset(c, 0, sizeof(*c));
    c->inline_handles = inline_handles;
    c->version = VW_PROTOCOL_OLDEST;
    c->max_tx_bytes = VW_CODEC_MAX_TX_BYTES;
    c->max_tx_handles = VW_CODEC_MAX_TX_HANDLES;
    for (int i = 0; i < VW_MAX_FDS_PER_FRAME; i++)
        c->cur.handles[i] = VP_NONE;
}

static void close_all(vp_handle *h, int n)
{
    for (int i = 0; i < n; i++)
        vp_close(&h[i]);
}

/* The frame delivered last is done: its NUL goes, unclaimed handles close. */
static void cur_release(struct vw_codec *c)
{
    if (!c->cur_live)
        return;
    c->rx[c->cur_nul] = c->cur_saved;
    close_all(c->cur.handles, c->cur.nhandles);
    c->cur.nhandles = 0;
    c->cur_live = false;
}

static void rx_reset(struct vw_codec *c)
{
    cur_release(c);
    close_all(c->parked, c->nparked);
    c->nparked = 0;
    c->rx_start = c->rx_end = 0;
}

void vw_codec_fini(struct vw_codec *c)
{
    if (!c)
        return;
    rx_reset(c);
    free(c->rx);
    if (!c->inline_handles)
        for (size_t i = c->att_first; i < c->natt; i++)
            close_all(c->att[i].h, c->att[i].n);
    free(c->att);
    free(c->tx);
    memset(c, 0, sizeof(*c));
}

void vw_codec_tx_drop(struct vw_codec *c)
{
    if (!c->inline_handles)
        for (size_t i = c->att_first; i < c->natt; i++)
            close_all(c->att[i].h, c->att[i].n);
    free(c->att);
    free(c->tx);
    c->att = NULL;
    c->att_first = c->natt = c->att_cap = 0;
    c->tx = NULL;
    c->tx_start = c->tx_end = c->tx_cap = 0;
    c->tx_handles = 0;
}

/* ---- receiving ---------------------------------------------------------- */

uint8_t *vw_codec_rx_space(struct vw_codec *c, size_t want, size_t *room)
{
    cur_release(c);
    if (c->rx_start == c->rx_end) {
        c->rx_start = c->rx_end = 0;
        /* A drained buffer goes back to its usual size: a peer that once
         * sent a large frame does not keep our memory. */
        if (c->rx_cap > RX_KEEP && want <= RX_KEEP) {
            free(c->rx);
            c->rx = NULL;
            c->rx_cap = 0;
        }
    }
    /* +1: room for the NUL written after a payload that ends the buffer. */
    if (c->rx_cap - c->rx_end < want + 1 && c->rx_start > 0) {
        memmove(c->rx, c->rx + c->rx_start, c->rx_end - c->rx_start);
        c->rx_end -= c->rx_start;
        c->rx_start = 0;
    }
    if (c->rx_cap - c->rx_end < want + 1) {
        size_t cap = c->rx_cap ? c->rx_cap : RX_KEEP;
        while (cap - c->rx_end < want + 1)
            cap *= 2;
        uint8_t *p = realloc(c->rx, cap);
        if (!p)
            return NULL;
        c->rx = p;
        c->rx_cap = cap;
    }
    *room = c->rx_cap - c->rx_end - 1;
    return c->rx + c->rx_end;
}

void vw_codec_rx_wrote(struct vw_codec *c, size_t n)
{
    c->rx_end += n;
}

int vw_codec_rx_bytes(struct vw_codec *c, const void *p, size_t n)
{
    size_t room;
    uint8_t *dst = vw_codec_rx_space(c, n, &room);
    if (!dst)
        return -ENOMEM;
    memcpy(dst, p, n);
    vw_codec_rx_wrote(c, n);
    return 0;
}

int vw_codec_rx_handles(struct vw_codec *c, vp_handle *hs, int n,
                          char *why, size_t whylen)
{
    if (c->inline_handles && n > 0) {
        close_all(hs, n);
        rx_reset(c);
        snprintf(why, whylen, "%d handles arrived beside the bytes on a "
                 "connection that carries them inline", n);
        return -EPROTO;
    }
    if (c->nparked + n > VW_CODEC_MAX_PARKED) {
        int total = c->nparked + n;
        close_all(hs, n);
        rx_reset(c);
        snprintf(why, whylen, "%d fds arrived that no frame has claimed yet "
                 "(at most %d)", total, VW_CODEC_MAX_PARKED);
        return -E2BIG;
    }
    for (int i = 0; i < n; i++) {
        c->parked[c->nparked++] = hs[i];
        hs[i] = VP_NONE;
    }
    c->handles_in += (uint64_t)n;
    return 0;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int vw_codec_next(struct vw_codec *c, struct vw_codec_frame **f,
                    char *why, size_t whylen)
{
    cur_release(c);
    size_t have = c->rx_end - c->rx_start;
    if (have < VW_FRAME_HEADER_SIZE) {
        /* Handles with no frame to claim them: they came with no byte of
         * theirs (see the header comment). */
        if (have == 0 && c->nparked) {
            snprintf(why, whylen, "%d fds arrived with no frame that "
                     "announces them", c->nparked);
            rx_reset(c);
            return -EBADMSG;
        }
        return 0;
    }
    struct vw_frame_header h;
    uint8_t *p = c->rx + c->rx_start;
    int r = vw_frame_header_decode(p, &h, why, whylen);
    if (r < 0) {
        rx_reset(c);
        return r;
    }
    size_t trailer = c->inline_handles ? (size_t)h.nfds * VW_CODEC_INLINE_BYTES : 0;
    size_t total = VW_FRAME_HEADER_SIZE + h.payload_len + trailer;
    if (have < total) {
        size_t room;
        if (!vw_codec_rx_space(c, total - have, &room)) {
            snprintf(why, whylen, "out of memory for a %u-byte frame",
                     h.payload_len);
            rx_reset(c);
            return -ENOMEM;
        }
        return 0;
    }
    struct vw_codec_frame *out = &c->cur;
    out->version = h.version;
    out->len = h.payload_len;
    out->nhandles = 0;
    if (c->inline_handles) {
        const uint8_t *t = p + VW_FRAME_HEADER_SIZE + h.payload_len;
        for (int i = 0; i < h.nfds; i++)
            out->handles[i].v = (intptr_t)get64(t + (size_t)i * VW_CODEC_INLINE_BYTES);
        out->nhandles = h.nfds;
        c->handles_in += h.nfds;
    } else {
        bool more = have > total; /* bytes of a later frame have come */
        if (c->nparked < h.nfds || (c->nparked > h.nfds && !more)) {
            snprintf(why, whylen, "frame header announces %u fds but %d "
                     "arrived with it", h.nfds, c->nparked);
            rx_reset(c);
            return -EBADMSG;
        }
        memcpy(out->handles, c->parked, sizeof(vp_handle) * h.nfds);
        out->nhandles = h.nfds;
        c->nparked -= h.nfds;
        memmove(c->parked, c->parked + h.nfds, sizeof(vp_handle) * (size_t)c->nparked);
    }
    out->payload = (char *)p + VW_FRAME_HEADER_SIZE;
    c->cur_nul = c->rx_start + VW_FRAME_HEADER_SIZE + h.payload_len;
    c->cur_saved = c->rx[c->cur_nul]; /* rx_space keeps a byte beyond */
    c->rx[c->cur_nul] = '\0';
    c->cur_live = true;
    c->rx_start += total;
    c->frames_in++;
    *f = out;
    return 1;
}

void vw_codec_rx_drop(struct vw_codec *c)
{
    rx_reset(c);
}

bool vw_codec_rx_idle(const struct vw_codec *c)
{
    return c->rx_end == c->rx_start && c->nparked == 0;
}

size_t vw_codec_rx_buffered(const struct vw_codec *c)
{
    return c->rx_end - c->rx_start;
}

/* ---- sending ------------------------------------------------------------ */

static int tx_room(struct vw_codec *c, size_t n)
{
    if (c->tx_start == c->tx_end) {
        c->tx_start = c->tx_end = 0;
        if (c->tx_cap > RX_KEEP && n <= RX_KEEP) { /* give a burst back */
            free(c->tx);
            c->tx = NULL;
            c->tx_cap = 0;
        }
    }
    if (c->tx_cap - c->tx_end >= n)
        return 0;
    if (c->tx_start > 0) {
        memmove(c->tx, c->tx + c->tx_start, c->tx_end - c->tx_start);
        for (size_t i = c->att_first; i < c->natt; i++)
            c->att[i].at -= c->tx_start;
        c->tx_end -= c->tx_start;
        c->tx_start = 0;
    }
    if (c->tx_cap - c->tx_end >= n)
        return 0;
    size_t cap = c->tx_cap ? c->tx_cap : 4096;
    while (cap - c->tx_end < n)
        cap *= 2;
    uint8_t *p = realloc(c->tx, cap);
    if (!p)
        return -ENOMEM;
    c->tx = p;
    c->tx_cap = cap;
    return 0;
}

static int att_push(struct vw_codec *c, size_t at, vp_handle *hs, int n)
{
    if (c->att_first == c->natt)
        c->att_first = c->natt = 0;
    if (c->natt == c->att_cap) {
        if (c->att_first > 0) {
            memmove(c->att, c->att + c->att_first,
                    (c->natt - c->att_first) * sizeof(*c->att));
            c->natt -= c->att_first;
            c->att_first = 0;
        }
        if (c->natt == c->att_cap) {
            size_t cap = c->att_cap ? c->att_cap * 2 : 16;
            struct vw_codec_attach *v = realloc(c->att, cap * sizeof(*v));
            if (!v)
                return -ENOMEM;
            c->att = v;
            c->att_cap = cap;
        }
    }
    struct vw_codec_attach *a = &c->att[c->natt++];
    a->at = at;
    a->n = n;
    memcpy(a->h, hs, sizeof(vp_handle) * (size_t)n);
    return 0;
}

int vw_codec_tx(struct vw_codec *c, const char *payload, size_t len,
                  vp_handle *hs, int n)
{
    int e = 0;
    size_t trailer = c->inline_handles ? (size_t)n * VW_CODEC_INLINE_BYTES : 0;
    size_t total = VW_FRAME_HEADER_SIZE + len + trailer;
    if (len > VW_MAX_PAYLOAD)
        e = -EMSGSIZE;
    else if (n < 0 || n > VW_MAX_FDS_PER_FRAME)
        e = -E2BIG;
    else if (vw_codec_tx_bytes(c) + total > c->max_tx_bytes ||
             (!c->inline_handles && c->tx_handles + n > c->max_tx_handles))
        e = -ENOBUFS;
    else
        e = tx_room(c, total);
    if (e == 0 && n > 0 && !c->inline_handles)
        e = att_push(c, c->tx_end, hs, n);
    if (e < 0) {
        if (!c->inline_handles && n > 0)
            close_all(hs, n);
        return e;
    }
    struct vw_frame_header h = {
        .magic = VW_FRAME_MAGIC,
        .version = c->version,
        .payload_len = (uint32_t)len,
        .nfds = (uint16_t)n,
    };
    uint8_t *p = c->tx + c->tx_end;
    vw_frame_header_encode(&h, p);
    memcpy(p + VW_FRAME_HEADER_SIZE, payload, len);
    if (c->inline_handles) {
        for (int i = 0; i < n; i++)
            put64(p + VW_FRAME_HEADER_SIZE + len + (size_t)i * VW_CODEC_INLINE_BYTES,
                  (uint64_t)hs[i].v);
    } else {
        for (int i = 0; i < n; i++)
            hs[i] = VP_NONE; /* ours now */
        c->tx_handles += n;
    }
    c->tx_end += total;
    c->tx_frames++;
    c->frames_out++;
    return 0;
}

int vw_codec_tx_peek(const struct vw_codec *c, const uint8_t **p,
                       size_t *len, const vp_handle **hs, int *nh)
{
    if (c->tx_end == c->tx_start)
        return 0;
    size_t end = c->tx_end;
    *hs = NULL;
    *nh = 0;
    size_t i = c->att_first;
    if (i < c->natt && c->att[i].at == c->tx_start) {
        *hs = c->att[i].h;
        *nh = c->att[i].n;
        i++;
    }
    /* A later frame with handles starts a send of its own. */
    if (i < c->natt)
        end = c->att[i].at;
    *p = c->tx + c->tx_start;
    *len = end - c->tx_start;
    return 1;
}

void vw_codec_tx_sent(struct vw_codec *c, size_t n)
{
    if (n == 0)
        return;
    size_t i = c->att_first;
    if (i < c->natt && c->att[i].at == c->tx_start) {
        /* They went with the first byte; never attach them again. */
        c->handles_out += (uint64_t)c->att[i].n;
        c->tx_handles -= c->att[i].n;
        close_all(c->att[i].h, c->att[i].n);
        c->att_first++;
    }
    c->tx_start += n;
}
