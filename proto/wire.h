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
#ifndef VRAM_PROTO_WIRE_H
#define VRAM_PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/codec.h"
#include "platform/handle.h"

/* Bytes asked of one receive. */
#define VRAM_WIRE_RECV 4096

/* Called once per complete frame. The callback owns f->handles[i] once it
 * sets the entry to VP_NONE; the others are closed after it returns.
 * Return 0 to go on, >0 to stop (vram_wire_read returns it; frames not yet
 * delivered stay buffered for the next call), <0 to fail the connection. */
typedef int (*vram_wire_frame_fn)(void *ud, struct vram_codec_frame *f);

struct vram_wire {
    vp_handle h;
    struct vram_codec codec;
    bool rx_block;
    /* Receives one call makes at most (0: until the connection would
     * block): 1 for a level-triggered poll, so a flood from one peer does
     * not hold the loop. */
    int max_recvs;
};

void vram_wire_init(struct vram_wire *w, vp_handle h);
/* Frees buffers and closes the handles the codec holds; not w->h, which the
 * caller owns. NULL-tolerant. */
void vram_wire_fini(struct vram_wire *w);

/* Delivers buffered frames, then receives and delivers until the
 * connection would block (or max_recvs). Returns 0 when it would block, >0
 * when fn asked to stop, -ENOTCONN on an orderly close between frames, or
 * another negative errno with a reason in why (-ECONNRESET: closed
 * mid-frame). */
int vram_wire_read(struct vram_wire *w, vram_wire_frame_fn fn, void *ud,
                   char *why, size_t whylen);

/* Queues a frame; takes the handles (see vram_codec_tx), closing them when
 * it refuses the frame: -EBADF when one names nothing, or the codec's
 * refusals. */
int vram_wire_queue(struct vram_wire *w, const char *payload, size_t len,
                    vp_handle *hs, int n);
/* Writes what is queued: 0 when all went, -EAGAIN when the connection is
 * full, or another negative errno (-EPIPE: the peer is gone). */
int vram_wire_flush(struct vram_wire *w);

static inline bool vram_wire_pending(const struct vram_wire *w)
{
    return vram_codec_tx_pending(&w->codec);
}

/* Between frames: nothing of a frame is buffered. */
static inline bool vram_wire_idle_rx(const struct vram_wire *w)
{
    return vram_codec_rx_idle(&w->codec);
}

#endif
