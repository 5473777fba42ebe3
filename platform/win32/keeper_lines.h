/* SPDX-License-Identifier: Apache-2.0 */
/* What vramd and its holder say to each other on Windows (keeper_win32.c,
 * holder_win32.c): lines of text on a named pipe, one request or answer each.
 * Handles travel as values in the process that is to use them, and the
 * holder makes every copy itself (DuplicateHandle from vramd's process on
 * a put, into it for a list), so a value vramd sends can only name one of
 * vramd's own handles, never one of the holder's.
 *
 *   vramd                    holder
 *   hello 1               -> ok 1 HELD MAX | err 16 PID (it serves another
 *                            vramd) | err 71 VERSION | err 1 (another user)
 *   put NAME VALUE        -> ok | err ERRNO     (VALUE: vramd's handle)
 *   remove NAME           -> ok | err ERRNO
 *   list                  -> entry NAME VALUE (vramd's now) ..., end COUNT
 *
 * The holder's pipe: "<vramd's pipe>.keeper". */
#ifndef VRAM_WIN32_KEEPER_LINES_H
#define VRAM_WIN32_KEEPER_LINES_H

#include <stddef.h>

#include "platform/handle.h"

#define VPW_KEEPER_VERSION 1
#define VPW_KEEPER_SUFFIX ".keeper"
#define VPW_LINE_MAX 256

struct vpw_lines {
    vp_handle c;
    char buf[VPW_LINE_MAX * 2];
    size_t have;
};

/* Sends one line (the '\n' added), waiting up to timeout_ms for room: 0,
 * -EPIPE (the other end is gone), -ETIMEDOUT, or another negative errno. */
int vpw_line_send(vp_handle c, int timeout_ms, const char *fmt, ...)
    __attribute__((format(gnu_printf, 3, 4)));
/* The next line, without its '\n', waiting up to timeout_ms (0: for ever):
 * 0, -ECONNRESET at the end of the stream, -ETIMEDOUT, -EPROTO for a line
 * longer than VPW_LINE_MAX. */
int vpw_line_recv(struct vpw_lines *l, char *out, size_t len, int timeout_ms);

#endif
