/* SPDX-License-Identifier: Apache-2.0 */
/* The frame: the unit of the vramd wire protocol.
 *
 * A frame is a fixed 16-byte little-endian header followed by a JSON payload.
 * Handles travel beside the frame (POSIX: the socket's ancillary data, sent by
 * platform/) or after its payload
 * (Windows: their values in the receiver's process) and are referenced from
 * the JSON by index; the header says how many belong to the frame, and the
 * codec (codec.h) matches them by that count, in order.
 *
 *   offset size field
 *   0      4    magic        "VRMD" (0x444d5256 little-endian)
 *   4      2    version      the connection's protocol version (hello's frame:
 *                            the oldest, 1, that every vramd reads)
 *   6      2    flags        reserved, must be 0
 *   8      4    payload_len  bytes of JSON that follow (<= VW_MAX_PAYLOAD)
 *   12     2    nfds         fds attached to this frame (<= VW_MAX_FDS_PER_FRAME)
 *   14     2    reserved     must be 0
 *
 * proto/PROTOCOL.md is the prose description; proto/messages.json lists every
 * message. This header holds only what every party needs to frame bytes.
 */
#ifndef VW_PROTO_FRAME_H
#define VW_PROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define VW_FRAME_MAGIC 0x444d5256u /* "VRMD" */
/* The newest protocol version this build speaks, and the oldest it still
 * serves (PROTOCOL.md, "Versions"): a connection speaks one of them, the one
 * its hello agreed on, in every frame's header after the hello's. */
#define VW_PROTOCOL_VERSION 2
#define VW_PROTOCOL_OLDEST 1
#define VW_FRAME_HEADER_SIZE 16

/* Limits every peer enforces. Larger fd sets are split over several frames. */
#define VW_MAX_PAYLOAD (1u << 20)
#define VW_MAX_FDS_PER_FRAME 32 /* handles */
#define VW_MAX_REQUESTS_IN_FLIGHT 64

struct vw_frame_header {
    uint32_t magic;
    uint16_t version;
    uint16_t flags;
    uint32_t payload_len;
    uint16_t nfds;
    uint16_t reserved;
};

void vw_frame_header_encode(const struct vw_frame_header *h,
                              uint8_t out[VW_FRAME_HEADER_SIZE]);

/* Decodes and checks a header. Returns 0, or a negative errno with a
 * human-readable reason written to why:
 *   -EPROTO   bad magic, flags or reserved bits
 *   -EMSGSIZE payload over VW_MAX_PAYLOAD
 *   -E2BIG    more fds than VW_MAX_FDS_PER_FRAME
 * A version different from ours is not an error here: the receiver decides
 * (the daemon answers it with a "client X, server Y" error). */
int vw_frame_header_decode(const uint8_t in[VW_FRAME_HEADER_SIZE],
                             struct vw_frame_header *h, char *why,
                             size_t whylen);

#endif
