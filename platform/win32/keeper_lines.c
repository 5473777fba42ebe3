/* SPDX-License-Identifier: Apache-2.0 */
/* Lines on a pipe, for the keeper and its holder. */
#include "platform/win32/keeper_lines.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "platform/clock.h"
#include "platform/conn.h"

int vpw_line_send(vp_handle c, int timeout_ms, const char *fmt, ...)
{
    char buf[VPW_LINE_MAX + 2];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, VPW_LINE_MAX + 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n > VPW_LINE_MAX)
        return -EINVAL;
    buf[n++] = '\n';
    int64_t end = vp_now_ms() + timeout_ms;
    size_t sent = 0;
    while (sent < (size_t)n) {
        long k = vp_send(c, buf + sent, (size_t)n - sent, NULL, 0);
        if (k > 0) {
            sent += (size_t)k;
            continue;
        }
        if (k != -EAGAIN && k != 0)
            return (int)k;
        int64_t left = end - vp_now_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        int w = vp_conn_wait(c, VP_WRITABLE, (int)left);
        if (w < 0)
            return w;
    }
    /* A write still in flight counts as sent (conn.h): wait for it, so a
     * close right after does not lose the line. */
    int64_t left = end - vp_now_ms();
    int w = vp_conn_wait(c, VP_WRITABLE, left > 0 ? (int)left : 0);
    return w < 0 ? w : 0;
}

int vpw_line_recv(struct vpw_lines *l, char *out, size_t len, int timeout_ms)
{
    int64_t end = vp_now_ms() + timeout_ms;
    for (;;) {
        char *nl = memchr(l->buf, '\n', l->have);
        if (nl) {
            size_t n = (size_t)(nl - l->buf);
            if (n >= len)
                return -EPROTO;
            memcpy(out, l->buf, n);
            out[n] = '\0';
            if (n && out[n - 1] == '\r')
                out[n - 1] = '\0';
            l->have -= n + 1;
            memmove(l->buf, nl + 1, l->have);
            return 0;
        }
        if (l->have > VPW_LINE_MAX)
            return -EPROTO;
        int ms = 0;
        if (timeout_ms) {
            int64_t left = end - vp_now_ms();
            if (left <= 0)
                return -ETIMEDOUT;
            ms = (int)left;
        }
        vp_conn_set_recv_timeout(l->c, ms);
        int nh;
        char why[64];
        long k = vp_recv(l->c, l->buf + l->have, sizeof(l->buf) - l->have,
                         NULL, 0, &nh, VP_RECV_WAIT, why, sizeof(why));
        if (k == 0)
            return -ECONNRESET;
        if (k == -EAGAIN) {
            if (timeout_ms && vp_now_ms() >= end)
                return -ETIMEDOUT;
            continue;
        }
        if (k < 0)
            return (int)k == -EPIPE ? -ECONNRESET : (int)k;
        l->have += (size_t)k;
    }
}
