#include "transport.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

struct vram_wire_out {
    struct vram_wire_out *next;
    uint8_t *buf;
    size_t len, off;
    int fds[VRAM_MAX_FDS_PER_FRAME];
    int nfds;
};

static void close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
}

void vram_wire_init(struct vram_wire *w, int fd)
{
    memset(w, 0, sizeof(*w));
    w->fd = fd;
}

static void reset_rx(struct vram_wire *w)
{
    free(w->payload);
    w->payload = NULL;
    w->payload_got = 0;
    w->hdr_got = 0;
    close_fds(w->rxfds, w->nrxfds);
    w->nrxfds = 0;
}

void vram_wire_fini(struct vram_wire *w)
{
    if (!w)
        return;
    reset_rx(w);
    struct vram_wire_out *o = w->out_head;
    while (o) {
        struct vram_wire_out *n = o->next;
        close_fds(o->fds, o->nfds);
        free(o->buf);
        free(o);
        o = n;
    }
    w->out_head = w->out_tail = NULL;
    w->out_bytes = 0;
    w->out_fds = 0;
}

/* One recvmsg of at most len bytes. Stores received fds for the current
 * frame. Returns bytes read, 0 for EOF, or a negative errno. */
static ssize_t recv_some(struct vram_wire *w, void *dst, size_t len,
                         char *why, size_t whylen)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * VRAM_MAX_FDS_PER_FRAME)];
    } ctl;
    struct iovec iov = {.iov_base = dst, .iov_len = len};
    struct msghdr msg = {
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = ctl.buf,
        .msg_controllen = sizeof(ctl.buf),
    };
    ssize_t n;

    do {
        n = recvmsg(w->fd, &msg, (w->rx_block ? 0 : MSG_DONTWAIT) | MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;

    int got = 0;
    bool overflow = false;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *p = (int *)(void *)CMSG_DATA(c);
        for (size_t i = 0; i < k; i++) {
            if (w->nrxfds < VRAM_MAX_FDS_PER_FRAME) {
                w->rxfds[w->nrxfds++] = p[i];
            } else {
                close(p[i]);
                overflow = true;
            }
            got++;
        }
    }
    w->fds_in += (uint64_t)got;
    if (msg.msg_flags & MSG_CTRUNC) {
        snprintf(why, whylen,
                 "control data truncated (MSG_CTRUNC): too many fds, a full "
                 "fd table or a denied fd; %d fds received and closed", got);
        return -EPROTO;
    }
    if (overflow) {
        snprintf(why, whylen, "more than %d fds sent with one frame",
                 VRAM_MAX_FDS_PER_FRAME);
        return -E2BIG;
    }
    return n;
}

static int deliver(struct vram_wire *w, vram_wire_frame_fn fn, void *ud,
                   char *why, size_t whylen)
{
    if (w->nrxfds != w->cur.nfds) {
        snprintf(why, whylen,
                 "frame header announces %u fds but %d arrived with it",
                 w->cur.nfds, w->nrxfds);
        /* Close the fds now, as every other refusal does: the caller may
         * log and keep the wire a while before vram_wire_fini. */
        reset_rx(w);
        return -EBADMSG;
    }
    struct vram_wire_frame f = {
        .version = w->cur.version,
        .payload = w->payload,
        .len = w->cur.payload_len,
        .nfds = w->nrxfds,
    };
    memcpy(f.fds, w->rxfds, sizeof(int) * (size_t)w->nrxfds);
    w->nrxfds = 0;
    w->payload = NULL;
    w->payload_got = 0;
    w->hdr_got = 0;
    w->frames_in++;

    int r = fn(ud, &f);
    close_fds(f.fds, f.nfds);
    free(f.payload);
    if (r < 0 && why[0] == '\0')
        snprintf(why, whylen, "frame handler failed: %s", strerror(-r));
    return r;
}

/* Greedy mode, for a receiver that takes no fds in normal operation (the
 * daemon: no request carries any): one receive of up to VRAM_WIRE_GREEDY
 * bytes at a frame boundary, and every complete frame in it delivered. fds
 * arriving with such a read are attributed to the last frame that starts in
 * it: the kernel hands out an skb's fds when it is read and then ends the
 * receive, and a well-formed sender attaches fds only to the sendmsg that
 * starts a frame. A misattribution can only come from a malformed sender and
 * ends in the usual count mismatch. Returns 1 when the buffer was used up
 * (stop), 0 when a partial frame is left for the exact reads, or <0.
 * *ret collects what the callbacks returned (>0: a stop was asked). */
static int read_greedy(struct vram_wire *w, vram_wire_frame_fn fn, void *ud,
                       char *why, size_t whylen, int *ret)
{
    uint8_t buf[VRAM_WIRE_GREEDY];
    ssize_t n = recv_some(w, buf, sizeof(buf), why, whylen);
    if (n == 0) {
        bool fds = w->nrxfds != 0;
        reset_rx(w);
        snprintf(why, whylen, fds ? "peer closed the connection mid-frame"
                                  : "peer closed the connection");
        return fds ? -ECONNRESET : -ENOTCONN;
    }
    if (n < 0) {
        if (n == -EAGAIN || n == -EWOULDBLOCK)
            return 1;
        if (why[0] == '\0')
            snprintf(why, whylen, "receive failed: %s", strerror((int)-n));
        reset_rx(w);
        return (int)n;
    }
    /* Where the last frame starts. */
    size_t last = 0, off = 0;
    while (off < (size_t)n) {
        last = off;
        if ((size_t)n - off < VRAM_FRAME_HEADER_SIZE)
            break;
        struct vram_frame_header h;
        int r = vram_frame_header_decode(buf + off, &h, why, whylen);
        if (r < 0) {
            reset_rx(w);
            return r;
        }
        off += VRAM_FRAME_HEADER_SIZE + h.payload_len;
    }
    int fds[VRAM_MAX_FDS_PER_FRAME], nfds = w->nrxfds;
    memcpy(fds, w->rxfds, sizeof(int) * (size_t)nfds);
    w->nrxfds = 0;
    for (off = 0; off < (size_t)n;) {
        bool is_last = off == last;
        if (is_last) { /* this frame takes the read's fds */
            memcpy(w->rxfds, fds, sizeof(int) * (size_t)nfds);
            w->nrxfds = nfds;
        }
        size_t have = (size_t)n - off;
        if (have < VRAM_FRAME_HEADER_SIZE) { /* a partial header */
            memcpy(w->hdr, buf + off, have);
            w->hdr_got = have;
            return 0;
        }
        memcpy(w->hdr, buf + off, VRAM_FRAME_HEADER_SIZE);
        vram_frame_header_decode(w->hdr, &w->cur, why, whylen);
        w->payload = malloc(w->cur.payload_len + 1);
        if (!w->payload) {
            if (!is_last)
                close_fds(fds, nfds);
            snprintf(why, whylen, "out of memory for a %u-byte frame",
                     w->cur.payload_len);
            reset_rx(w);
            return -ENOMEM;
        }
        w->hdr_got = VRAM_FRAME_HEADER_SIZE;
        size_t body = have - VRAM_FRAME_HEADER_SIZE;
        if (body > w->cur.payload_len)
            body = w->cur.payload_len;
        memcpy(w->payload, buf + off + VRAM_FRAME_HEADER_SIZE, body);
        w->payload_got = body;
        if (body < w->cur.payload_len)
            return 0; /* the rest by exact reads */
        w->payload[w->cur.payload_len] = '\0';
        off += VRAM_FRAME_HEADER_SIZE + w->cur.payload_len;
        int r = deliver(w, fn, ud, why, whylen);
        if (r != 0) {
            /* A stop or a failure: what is left of the buffer goes. */
            if (!is_last)
                close_fds(fds, nfds);
            if (r < 0)
                return r;
            *ret = r;
            return 1;
        }
    }
    return 1;
}

int vram_wire_read(struct vram_wire *w, vram_wire_frame_fn fn, void *ud,
                   char *why, size_t whylen)
{
    ssize_t n = 0;
    bool greedy_done = false;
    int ret = 0;

    why[0] = '\0';
    for (;;) {
        if (w->rx_greedy && w->hdr_got == 0 && w->nrxfds == 0) {
            if (greedy_done || ret > 0)
                return ret; /* one greedy receive a call: what is left wakes
                               a level-triggered poll again */
            greedy_done = true;
            int g = read_greedy(w, fn, ud, why, whylen, &ret);
            if (g < 0)
                return g;
            if (g > 0)
                return ret;
            continue; /* finish the partial frame */
        }
        if (w->hdr_got < VRAM_FRAME_HEADER_SIZE) {
            n = recv_some(w, w->hdr + w->hdr_got,
                          VRAM_FRAME_HEADER_SIZE - w->hdr_got, why, whylen);
            if (n == 0) {
                bool mid = w->hdr_got != 0 || w->nrxfds != 0;
                reset_rx(w);
                if (mid) {
                    snprintf(why, whylen, "peer closed the connection mid-frame");
                    return -ECONNRESET;
                }
                snprintf(why, whylen, "peer closed the connection");
                return -ENOTCONN;
            }
            if (n < 0)
                goto fail;
            w->hdr_got += (size_t)n;
            if (w->hdr_got < VRAM_FRAME_HEADER_SIZE)
                continue;
            int r = vram_frame_header_decode(w->hdr, &w->cur, why, whylen);
            if (r < 0) {
                reset_rx(w);
                return r;
            }
            w->payload = malloc(w->cur.payload_len + 1);
            if (!w->payload) {
                snprintf(why, whylen, "out of memory for a %u-byte frame",
                         w->cur.payload_len);
                reset_rx(w);
                return -ENOMEM;
            }
            w->payload_got = 0;
        }
        if (w->payload_got < w->cur.payload_len) {
            n = recv_some(w, w->payload + w->payload_got,
                          w->cur.payload_len - w->payload_got, why, whylen);
            if (n == 0) {
                reset_rx(w);
                snprintf(why, whylen, "peer closed the connection mid-frame");
                return -ECONNRESET;
            }
            if (n < 0)
                goto fail;
            w->payload_got += (size_t)n;
            if (w->payload_got < w->cur.payload_len)
                continue;
        }
        w->payload[w->cur.payload_len] = '\0';
        int r = deliver(w, fn, ud, why, whylen);
        if (r < 0 || (r > 0 && !w->rx_greedy))
            return r;
        if (r > 0)
            ret = r;
    }
fail:
    if (n == -EAGAIN || n == -EWOULDBLOCK)
        return ret;
    if (why[0] == '\0')
        snprintf(why, whylen, "receive failed: %s", strerror((int)-n));
    reset_rx(w);
    return (int)n;
}

int vram_wire_queue(struct vram_wire *w, const char *payload, size_t len,
                    const int *fds, int nfds)
{
    if (len > VRAM_MAX_PAYLOAD)
        return -EMSGSIZE;
    if (nfds < 0 || nfds > VRAM_MAX_FDS_PER_FRAME)
        return -E2BIG;
    if (w->out_bytes + len + VRAM_FRAME_HEADER_SIZE > VRAM_WIRE_MAX_QUEUED_BYTES ||
        w->out_fds + nfds > VRAM_WIRE_MAX_QUEUED_FDS)
        return -ENOBUFS;

    struct vram_wire_out *o = calloc(1, sizeof(*o));
    if (!o)
        return -ENOMEM;
    o->buf = malloc(VRAM_FRAME_HEADER_SIZE + len);
    if (!o->buf) {
        free(o);
        return -ENOMEM;
    }
    for (int i = 0; i < nfds; i++) {
        int d = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
        if (d < 0) {
            int e = -errno;
            close_fds(o->fds, o->nfds);
            free(o->buf);
            free(o);
            return e;
        }
        o->fds[o->nfds++] = d;
    }
    struct vram_frame_header h = {
        .magic = VRAM_FRAME_MAGIC,
        .version = VRAM_PROTOCOL_VERSION,
        .payload_len = (uint32_t)len,
        .nfds = (uint16_t)nfds,
    };
    vram_frame_header_encode(&h, o->buf);
    memcpy(o->buf + VRAM_FRAME_HEADER_SIZE, payload, len);
    o->len = VRAM_FRAME_HEADER_SIZE + len;

    if (w->out_tail)
        w->out_tail->next = o;
    else
        w->out_head = o;
    w->out_tail = o;
    w->out_bytes += o->len;
    w->out_fds += nfds;
    return 0;
}

int vram_wire_flush(struct vram_wire *w)
{
    while (w->out_head) {
        struct vram_wire_out *o = w->out_head;
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * VRAM_MAX_FDS_PER_FRAME)];
        } ctl;
        struct iovec iov = {.iov_base = o->buf + o->off,
                            .iov_len = o->len - o->off};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};

        if (o->nfds > 0) {
            memset(&ctl, 0, sizeof(ctl));
            msg.msg_control = ctl.buf;
            msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)o->nfds);
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)o->nfds);
            memcpy(CMSG_DATA(c), o->fds, sizeof(int) * (size_t)o->nfds);
        }
        ssize_t n;
        do {
            n = sendmsg(w->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return -EAGAIN;
            return -errno;
        }
        if (o->nfds > 0) {
            /* The fds went with the first byte; never attach them again. */
            w->fds_out += (uint64_t)o->nfds;
            w->out_fds -= o->nfds;
            close_fds(o->fds, o->nfds);
            o->nfds = 0;
        }
        o->off += (size_t)n;
        if (o->off < o->len)
            continue;
        w->out_head = o->next;
        if (!w->out_head)
            w->out_tail = NULL;
        w->out_bytes -= o->len;
        w->frames_out++;
        free(o->buf);
        free(o);
    }
    return 0;
}
