/* SPDX-License-Identifier: Apache-2.0 */
/* A connection with its codec: receives bytes and handles from the platform
 * layer into the codec and hands out whole frames; writes what the codec
 * queued. Used by libvram and by the daemon's sessions. The rules about
 * what arrives (cut control data, handle counts) live in platform/conn.h
 * and proto/codec.h; this file only moves data between them.
 *
 * The connection may block or not; sends never block, receives wait only
 * when rx_block is set (a client waiting for its reply, on a blocking
 * connection whose receive timeout bounds each wait). */
#ifndef VW_PROTO_WIRE_H
#define VW_PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/codec.h"
#include "platform/handle.h"

/* Bytes asked of one receive. */
#define VW_WIRE_RECV 4096

/* Called once per complete frame. The callback owns f->handles[i] once it
 * sets the entry to VP_NONE; the others are closed after it returns.
 * Return 0 to go on, >0 to stop (vw_wire_read returns it; frames not yet
 * delivered stay buffered for the next call), <0 to fail the connection. */
typedef int (*vw_wire_frame_fn)(void *ud, struct vw_codec_frame *f);

struct vw_wire {
    vp_handle h;
    struct vw_codec codec;
    bool rx_block;
    /* Receives one call makes at most (0: until the connection would
     * block): 1 for a level-triggered poll, so a flood from one peer does
     * not hold the loop. */
    int max_recvs;
};

void vw_wire_init(struct vw_wire *w, vp_handle h);
/* Frees buffers and closes the handles the codec holds; not w->h, which the
 * caller owns. NULL-tolerant. */
void vw_wire_fini(struct vw_wire *w);

/* Delivers buffered frames, then receives and delivers until the
 * connection would block (or max_recvs). Returns 0 when it would block, >0
 * when fn asked to stop, -ENOTCONN on an orderly close between frames, or
 * another negative errno with a reason in why (-ECONNRESET: closed
 * mid-frame). */
int vw_wire_read(struct vw_wire *w, vw_wire_frame_fn fn, void *ud,
                   char *why, size_t whylen);

/* Queues a frame; takes the handles (see vw_codec_tx), closing them when
 * it refuses the frame: -EBADF when one names nothing, or the codec's
 * refusals. */
int vw_wire_queue(struct vw_wire *w, const char *payload, size_t len,
                    vp_handle *hs, int n);
/* Writes what is queued: 0 when all went, -EAGAIN when the connection is
 * full, or another negative errno (-EPIPE: the peer is gone). */
int vw_wire_flush(struct vw_wire *w);

static inline bool vw_wire_pending(const struct vw_wire *w)
{
    return vw_codec_tx_pending(&w->codec);
}

/* Between frames: nothing of a frame is buffered. */
static inline bool vw_wire_idle_rx(const struct vw_wire *w)
{
    return vw_codec_rx_idle(&w->codec);
}

#endif
