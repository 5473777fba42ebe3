/* SPDX-License-Identifier: Apache-2.0 */
/* Frames on the connection to vramd: queued and flushed within the
 * client's timeout, and read until the layer above has what it waits for.
 * A blocking connection's receives wait by themselves (bounded, so that
 * the deadline is checked); another's are preceded by a wait for it to be
 * readable. */
#include <errno.h>
#include <string.h>

#include "client/lib/client_record.h"
#include "client/lib/error.h"
#include "platform/platform.h"
#include "client/lib/transport.h"

void vc_conn_setup(vram_client *c)
{
    vw_wire_init(&c->wire, c->h);
    c->blocking = vp_conn_blocking(c->h);
    if (c->blocking) /* bounds each blocking receive; deadlines are ours */
        vp_conn_set_recv_timeout(c->h, 200);
}

static int flush_blocking(vram_client *c)
{
    int64_t deadline = vp_now_ms() + c->timeout_ms;
    for (;;) {
        int r = vw_wire_flush(&c->wire);
        if (r == 0)
            return 0;
        if (r != -EAGAIN) {
            c->broken = true;
            return vc_set_error(c, r, "lost the connection to vramd: %s",
                                strerror(-r));
        }
        int64_t left = deadline - vp_now_ms();
        if (left <= 0)
            return vc_set_error(c, -ETIMEDOUT, "timed out sending to vramd");
        vp_conn_wait(c->h, VP_WRITABLE, (int)left);
    }
}

int vc_transport_send(vram_client *c, const char *payload, size_t len)
{
    int r = vw_wire_queue(&c->wire, payload, len, NULL, 0);
    if (r < 0)
        return vc_set_error(c, r, "cannot queue a request: %s", strerror(-r));
    return flush_blocking(c);
}

void vc_transport_receive(vram_client *c, bool wait, const struct vc_receiver *rx)
{
    int64_t deadline = vp_now_ms() + c->timeout_ms;
    /* Waiting for a reply on a blocking connection, receives simply wait
     * (up to the receive timeout): no poll before each. */
    c->wire.rx_block = wait && c->blocking;
    if (wait && !c->blocking)
        vp_conn_wait(c->h, VP_READABLE, c->timeout_ms);
    for (;;) {
        char why[256];
        int r = vw_wire_read(&c->wire, rx->frame, rx->ud, why, sizeof(why));
        if (r < 0 && !*rx->err) {
            c->broken = true;
            *rx->err = vc_set_error(c, r == -ENOTCONN ? -ECONNRESET : r,
                                    "lost the connection to vramd: %s", why);
        }
        if (*rx->err && (c->broken || r < 0))
            break;
        if (!wait || rx->done(rx->ud))
            break;
        if (c->wire.rx_block) { /* the receive timed out: check the deadline */
            if (vp_now_ms() >= deadline) {
                *rx->err = vc_set_error(c, -ETIMEDOUT, "no reply from vramd "
                                        "within %d ms", c->timeout_ms);
                break;
            }
            continue;
        }
        int64_t left = deadline - vp_now_ms();
        if (left <= 0) {
            *rx->err = vc_set_error(c, -ETIMEDOUT, "no reply from vramd within "
                                    "%d ms", c->timeout_ms);
            break;
        }
        vp_conn_wait(c->h, VP_READABLE, (int)left);
    }
    c->wire.rx_block = false;
}

bool vc_transport_buffered(const vram_client *c)
{
    return vw_codec_rx_buffered(&c->wire.codec) > 0;
}
