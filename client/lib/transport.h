/* SPDX-License-Identifier: Apache-2.0 */
/* libvram's transport layer (transport.c): frames and their handles on the
 * connection to vramd, within the client's timeout. It knows nothing of
 * what the frames say: each one received goes up through the callback the
 * protocol layer gives. */
#ifndef VRAM_CLIENT_TRANSPORT_H
#define VRAM_CLIENT_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/codec.h"
#include "client/include/vram.h"

/* The wire and receive settings of a connection, new or made again. */
void vc_conn_setup(vram_client *c);
/* Queues one frame and sends it (waiting while the socket is full, up to
 * the timeout). A lost connection marks the client broken. */
int vc_transport_send(vram_client *c, const char *payload, size_t len);

/* Where the frames a receive reads go (the protocol layer's). */
struct vc_receiver {
    /* One frame, as vw_wire_read gives it: 0 to read on, 1 to stop (the
     * rest stays buffered), a negative errno to give up. */
    int (*frame)(void *ud, struct vw_codec_frame *f);
    /* Whether what the receive waits for is in. */
    bool (*done)(void *ud);
    void *ud;
    int *err; /* the first error, the frame callback's or the receive's */
};
/* Reads what arrived; with wait, until done says so or the timeout
 * passes (the error then in *rx->err). */
void vc_transport_receive(vram_client *c, bool wait, const struct vc_receiver *rx);
/* Frames (or part of one) wait in the receive buffer. */
bool vc_transport_buffered(const vram_client *c);

#endif
