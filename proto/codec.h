/* SPDX-License-Identifier: Apache-2.0 */
/* The codec: frames to bytes and bytes to frames, with no system calls.
 *
 * Bytes and handles are pushed in as they arrive; whole frames come out.
 * Frames and handles are pushed in; bytes come out, with the handles to
 * send beside them. The codec never reads or writes a connection, so it runs
 * the same over a Unix socket (POSIX) and a named pipe (Windows), and is
 * unit-tested alone (tests/unit/test_codec.c).
 *
 * Handles travel in one of two ways:
 *  - beside the bytes (POSIX: the socket's ancillary data, which platform/
 *    sends and receives): they are matched to frames by the
 *    header's count, in arrival order, as PipeWire's and Wayland's
 *    connections do. A sender attaches a frame's handles to a send that
 *    starts at that frame's first byte, so a handle arrives no earlier than
 *    the first byte of its frame and no later than its last: when a frame
 *    is complete, the handles it announces must have arrived, and any
 *    handles beyond them belong to frames whose bytes have started. Anything
 *    else is a lie about counts, and fails the connection.
 *  - inline (Windows): the sender has pushed each handle into the
 *    receiver's process already, and its value follows the payload as 8
 *    little-endian bytes; the header counts them the same way.
 * Either way JSON names a handle by its index among its frame's handles.
 *
 * Handles the codec holds are its own: received ones until a frame takes
 * them, queued ones until they are sent. It closes whatever it still holds
 * when a frame is refused and at vw_codec_fini. */
#ifndef VW_PROTO_CODEC_H
#define VW_PROTO_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"
#include "platform/handle.h"

/* Handles received but not yet claimed by a frame, at most. */
#define VW_CODEC_MAX_PARKED (2 * VW_MAX_FDS_PER_FRAME)
/* Bytes of each trailer entry in inline mode. */
#define VW_CODEC_INLINE_BYTES 8

struct vw_codec_frame {
    uint16_t version;
    char *payload; /* NUL-terminated; valid until the next vw_codec_next */
    size_t len;
    vp_handle handles[VW_MAX_FDS_PER_FRAME];
    int nhandles; /* a receiver takes handles[i] by setting it to VP_NONE;
                     the codec closes the rest at the next call */
};

struct vw_codec_attach; /* outgoing handles and where they go */

struct vw_codec {
    bool inline_handles;
    uint16_t version; /* what sent frames' headers carry (VW_PROTOCOL_OLDEST
                         until the hello agreed on one) */
    /* receiving */
    uint8_t *rx;
    size_t rx_cap, rx_start, rx_end;
    vp_handle parked[VW_CODEC_MAX_PARKED];
    int nparked;
    struct vw_codec_frame cur; /* the frame delivered last */
    bool cur_live;
    uint8_t cur_saved; /* the byte the payload's NUL replaced */
    size_t cur_nul;    /* where that byte is, in rx */
    /* sending: one byte buffer, handles attached at frame starts */
    uint8_t *tx;
    size_t tx_cap, tx_start, tx_end;
    struct vw_codec_attach *att;
    size_t natt, att_cap, att_first;
    size_t tx_frames;   /* frames queued, for statistics */
    int tx_handles;     /* handles queued, not yet sent */
    /* limits of the outgoing queue */
    size_t max_tx_bytes;
    int max_tx_handles;
    /* statistics */
    uint64_t frames_in, frames_out, handles_in, handles_out;
};

#define VW_CODEC_MAX_TX_BYTES (64u << 20)
#define VW_CODEC_MAX_TX_HANDLES 4096

void vw_codec_init(struct vw_codec *c, bool inline_handles);
/* Closes every handle it holds and frees its buffers. NULL-tolerant. */
void vw_codec_fini(struct vw_codec *c);

/* ---- receiving ---- */

/* Room for at least want bytes at the end of the receive buffer (received
 * into directly); NULL when out of memory. Then vw_codec_rx_wrote. */
uint8_t *vw_codec_rx_space(struct vw_codec *c, size_t want, size_t *room);
void vw_codec_rx_wrote(struct vw_codec *c, size_t n);
/* The same, copying n bytes in. 0 or -ENOMEM. */
int vw_codec_rx_bytes(struct vw_codec *c, const void *p, size_t n);
/* Handles that arrived (beside the bytes), in order; the codec owns them
 * from now on. -E2BIG (all closed, with why) when more would be parked
 * than VW_CODEC_MAX_PARKED; -EPROTO in inline mode, where none may come
 * beside the bytes. */
int vw_codec_rx_handles(struct vw_codec *c, vp_handle *hs, int n,
                          char *why, size_t whylen);
/* The next complete frame: 1 and *f, 0 when more bytes are needed, or a
 * negative errno with a reason in why when the stream is broken (bad
 * header: -EPROTO, -EMSGSIZE, -E2BIG; a lie about handle counts: -EBADMSG;
 * out of memory: -ENOMEM). After an error the codec has closed every
 * received handle and dropped what it buffered. */
int vw_codec_next(struct vw_codec *c, struct vw_codec_frame **f,
                    char *why, size_t whylen);
/* The stream ended or failed: drops what is buffered and closes every
 * received handle not yet taken. */
void vw_codec_rx_drop(struct vw_codec *c);
/* No partial frame and no unclaimed handle is buffered. */
bool vw_codec_rx_idle(const struct vw_codec *c);
/* Bytes buffered of frames not delivered yet. */
size_t vw_codec_rx_buffered(const struct vw_codec *c);

/* ---- sending ---- */

/* Queues a frame of len bytes of payload with n handles. Beside-the-bytes
 * mode: the codec takes the handles (closing them when it refuses the
 * frame too). Inline mode: hs are values already valid in the peer's
 * process; the codec writes them and never closes them. Returns 0,
 * -EMSGSIZE or -E2BIG for a frame over the limits, -ENOBUFS when the
 * queue's bytes or handles would pass its limits, -ENOMEM. */
int vw_codec_tx(struct vw_codec *c, const char *payload, size_t len,
                  vp_handle *hs, int n);
/* What to send next: 1 with the bytes, and the handles to attach to their
 * first byte (none when *nh is 0), or 0 when nothing is queued. The bytes
 * stop before the next frame that has handles of its own. */
int vw_codec_tx_peek(const struct vw_codec *c, const uint8_t **p,
                       size_t *len, const vp_handle **hs, int *nh);
/* n > 0 bytes of what tx_peek offered were sent; the handles it offered
 * went with them, and the codec closes its copies. */
void vw_codec_tx_sent(struct vw_codec *c, size_t n);
/* Throws away everything queued (its handles closed) and its memory: for a
 * peer dropped for not reading, whose queue would never go out. */
void vw_codec_tx_drop(struct vw_codec *c);
static inline bool vw_codec_tx_pending(const struct vw_codec *c)
{
    return c->tx_end > c->tx_start;
}
static inline size_t vw_codec_tx_bytes(const struct vw_codec *c)
{
    return c->tx_end - c->tx_start;
}

#endif
