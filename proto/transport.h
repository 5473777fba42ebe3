/* The transport: moves frames and file descriptors over a Unix stream socket.
 *
 * This module owns every fd rule of the project; nothing else calls sendmsg
 * or recvmsg.
 *  - Receives use MSG_CMSG_CLOEXEC, so no received fd leaks into a child.
 *  - MSG_CTRUNC (control data cut: too many fds, full fd table, an LSM veto)
 *    closes every fd received for the frame and fails the connection.
 *  - The header's fd count must equal the fds that arrived with the frame's
 *    bytes. To know which frame an fd came with, a receive never reads past
 *    the end of the current frame: Linux hands out an skb's fds when its
 *    first byte is read, so every fd received while reading a frame's bytes
 *    was sent with that frame. (Greedy mode, below, reads ahead and says how
 *    it attributes fds.)
 *  - fds that arrive with a frame that announces none are closed (and the
 *    frame is refused).
 *  - Queued outgoing fds are duplicated (F_DUPFD_CLOEXEC), so the caller may
 *    close its copies at once; they are attached only to the first sendmsg of
 *    their frame and never re-attached after a partial write.
 *  - The outgoing queue is bounded in bytes and fds; a peer that does not
 *    read is failed rather than allowed to grow our memory.
 * The socket may be blocking or not; every call uses MSG_DONTWAIT.
 */
#ifndef VRAM_PROTO_TRANSPORT_H
#define VRAM_PROTO_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"

#define VRAM_WIRE_MAX_QUEUED_BYTES (64u << 20)
#define VRAM_WIRE_MAX_QUEUED_FDS 4096
#define VRAM_WIRE_GREEDY 4096 /* bytes of one greedy receive */

struct vram_wire_frame {
    uint16_t version;
    char *payload;     /* NUL-terminated; owned by the wire, valid in callback */
    size_t len;
    int fds[VRAM_MAX_FDS_PER_FRAME];
    int nfds;
};

/* Called once per complete frame. The callback owns fds[i] once it sets the
 * entry to -1; fds left in the array are closed by the wire after it returns.
 * Return 0 to keep reading, >0 to stop reading (returned by vram_wire_read),
 * <0 to fail the connection with that error. */
typedef int (*vram_wire_frame_fn)(void *ud, struct vram_wire_frame *f);

struct vram_wire_out;

struct vram_wire {
    int fd;
    /* incoming frame being assembled */
    uint8_t hdr[VRAM_FRAME_HEADER_SIZE];
    size_t hdr_got;
    struct vram_frame_header cur;
    char *payload;
    size_t payload_got;
    int rxfds[VRAM_MAX_FDS_PER_FRAME];
    int nrxfds;
    /* outgoing queue */
    struct vram_wire_out *out_head, *out_tail;
    size_t out_bytes;
    int out_fds;
    /* Receives wait instead of failing with EAGAIN (a blocking socket's
     * SO_RCVTIMEO bounds the wait): for a client waiting for its reply,
     * which then needs no poll before each receive. */
    bool rx_block;
    /* One receive of up to VRAM_WIRE_GREEDY bytes at a frame boundary, all
     * complete frames in it delivered, then return (for a level-triggered
     * poll): the daemon's side, where a small request costs one receive. */
    bool rx_greedy;
    /* statistics */
    uint64_t frames_in, frames_out, fds_in, fds_out;
};

void vram_wire_init(struct vram_wire *w, int fd);
/* Frees buffers and closes queued and half-received fds. Does not close
 * w->fd, which the caller owns. NULL-tolerant. */
void vram_wire_fini(struct vram_wire *w);

/* Reads what is available and calls fn for each complete frame.
 * Returns 0 when the socket would block, >0 when fn asked to stop,
 * -ENOTCONN on an orderly close between frames, and another negative errno
 * (with a reason in why) when the connection must be dropped. */
int vram_wire_read(struct vram_wire *w, vram_wire_frame_fn fn, void *ud,
                   char *why, size_t whylen);

/* Queues one frame. fds are duplicated. Returns 0, -EMSGSIZE or -E2BIG for
 * a frame over the limits, -ENOBUFS when the peer has too much unread. */
int vram_wire_queue(struct vram_wire *w, const char *payload, size_t len,
                    const int *fds, int nfds);

/* Writes queued frames. Returns 0 when the queue is empty, -EAGAIN when the
 * socket is full, or another negative errno when the connection failed. */
int vram_wire_flush(struct vram_wire *w);

static inline bool vram_wire_pending(const struct vram_wire *w)
{
    return w->out_head != NULL;
}

/* True between frames: no partial frame is buffered. */
static inline bool vram_wire_idle_rx(const struct vram_wire *w)
{
    return w->hdr_got == 0;
}

#endif
