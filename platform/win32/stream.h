/* SPDX-License-Identifier: Apache-2.0 */
/* Connections as libuv streams, and a listener that delivers connected
 * instances to a libuv loop.
 *
 * libuv cannot wait for a pipe instance to be connected by someone else's
 * listener (it polls only sockets on Windows, and uv_listen would make its
 * own, unprotected, pipe): an acceptor thread waits in vp_pipe_accept and
 * wakes the loop with uv_async_send; the loop's thread takes the instance
 * and opens it as a uv_pipe_t (_open_osfhandle + uv_pipe_open). */
#ifndef VRAM_PLATFORM_STREAM_H
#define VRAM_PLATFORM_STREAM_H

#include <uv.h>

#include "platform/handle.h"
#include "platform/win32/pipe_listener.h"

/* Initialises p on loop and gives it the connection *h (a pipe opened for
 * overlapped I/O: a connected instance, or one vp_dial made). The handle
 * is libuv's from then on, whatever the outcome: *h is set to VP_NONE, and
 * p must be closed with uv_close even when this fails (0 or a negative
 * errno; p unusable then). */
int vp_stream_open(uv_loop_t *loop, uv_pipe_t *p, vp_handle *h);

/* Delivers each connected instance on the loop's thread, in order; the
 * callee owns conn.h (vp_stream_open it, or vp_close it). */
typedef void (*vp_acceptor_fn)(void *data, struct vp_pipe_conn conn);
/* A failed accept (other than out of handles or memory, after which the
 * thread pauses 250 ms and tries again): err, on the loop's thread; the
 * acceptor goes on. NULL: ignored. */
typedef void (*vp_acceptor_err_fn)(void *data, int err);

struct vp_acceptor;

/* Starts accepting on l (which must outlive the acceptor) from a thread of
 * its own. */
int vp_acceptor_start(uv_loop_t *loop, struct vp_pipe_listener *l,
                      vp_acceptor_fn fn, vp_acceptor_err_fn err_fn, void *data,
                      struct vp_acceptor **out);
/* Stops the thread (waits for it), closes what it accepted that was not
 * delivered yet, and closes its uv_async_t: the acceptor is freed once the
 * loop has run that close. From the loop's thread; NULL-tolerant. */
void vp_acceptor_stop(struct vp_acceptor *a);

#endif
