/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's transport, driven by its libuv loop: an endpoint that
 * listens and accepts, and links (accepted connections) that deliver bytes,
 * handles and the peer's identity, and send bytes with handles. One
 * implementation per system, as libuv has src/unix/pipe.c beside
 * src/win/pipe.c: platform/posix/endpoint_posix.c (a Unix socket watched on the
 * loop, handles as SCM_RIGHTS beside the bytes) and platform/win32/
 * endpoint_win32.c (vramd's own named pipe accepted on by a thread, connections as
 * libuv streams, handles pushed into the peer's process and sent inline as
 * the values they have there).
 *
 * Nothing here knows frames: the codec (proto/codec.h) above it does. */
#ifndef VRAM_PLATFORM_ENDPOINT_H
#define VRAM_PLATFORM_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/handle.h"
#include "platform/peer.h"

struct uv_loop_s; /* libuv's uv_loop_t */

/* What a handle sent to the peer lets it do there, least first: a memory
 * object mapped for reading, or for reading and writing; or, for objects
 * that are no memory objects (a driver's), what the original may. Where
 * the peer gets a copy of its own (Windows) the copy has exactly that
 * access; a handle that travels as it is (an fd) carries its own, and this
 * is unused. */
enum {
    VP_PUSH_MAP_READ = 1,
    VP_PUSH_MAP_WRITE = 2, /* with VP_PUSH_MAP_READ: a read-write view */
    VP_PUSH_SAME = 4,      /* the original's access (alone) */
};

/* Who may open the endpoint, as far as the endpoint itself enforces it
 * (the daemon judges every peer again). POSIX: the socket file's group
 * and mode, set when it is made. Windows: the pipe's security descriptor
 * grants the users and groups of these numbers (peer.h's vp_user_id,
 * vp_group_id), besides SYSTEM, Administrators and the daemon's user. */
#define VP_ENDPOINT_ALLOW_MAX 64
struct vp_endpoint_access {
    const char *group; /* NULL or "": the socket keeps its group */
    unsigned mode;     /* e.g. 0660 */
    uint32_t uids[VP_ENDPOINT_ALLOW_MAX], gids[VP_ENDPOINT_ALLOW_MAX];
    int nuids, ngids;
};

struct vp_endpoint;
struct vp_link;

/* A new connection, on the loop's thread: the callee owns it (vp_link_start
 * it, or vp_link_close it). */
typedef void (*vp_accept_fn)(void *data, struct vp_link *link);
/* A failed accept, on the loop's thread: the endpoint goes on by itself.
 * paused_ms > 0: out of handles or memory, accepting pauses that long. */
typedef void (*vp_accept_err_fn)(void *data, int err, int paused_ms);

enum {
    VP_ENDPOINT_PASSED = 1,  /* the service manager passed the listener */
    VP_ENDPOINT_DIR_MADE = 2 /* the socket's directory was created */
};

/* Takes the endpoint the service manager passed, if any (its path replaces
 * path: vp_endpoint_path), or checks where path is to be made (POSIX: a
 * directory only its owner may write into, created when missing). Nothing
 * listens yet. 0 with *out and *how (VP_ENDPOINT_*), or a negative errno
 * with why. */
int vp_endpoint_prepare(struct uv_loop_s *loop, const char *path,
                        struct vp_endpoint **out, unsigned *how, char *why,
                        size_t whylen);
/* Listens (unless passed), then accepts from now on, calling fn with each
 * connection. The caller holds the daemon's lock: an endpoint left at path
 * by an earlier daemon is stale. -EADDRINUSE when someone else serves
 * path (Windows), or another negative errno; why says what. */
int vp_endpoint_listen(struct vp_endpoint *ep, const struct vp_endpoint_access *acc,
                       vp_accept_fn fn, vp_accept_err_fn err_fn, void *data,
                       char *why, size_t whylen);
/* Brings what the endpoint enforces in line with acc: 1 when it changed, 0
 * when it had it already or cannot change it (POSIX: group and mode take a
 * restart), or a negative errno with why, the old one staying. */
int vp_endpoint_set_access(struct vp_endpoint *ep,
                           const struct vp_endpoint_access *acc, char *why,
                           size_t whylen);
/* What the endpoint enforces now, in words for the log ("security
 * descriptor D:..."), or NULL when there is nothing to say. */
const char *vp_endpoint_access_text(const struct vp_endpoint *ep);
/* Where it listens (the passed endpoint's path, once prepared). */
const char *vp_endpoint_path(const struct vp_endpoint *ep);
/* Stops accepting; connections accepted stay their owners'. */
void vp_endpoint_stop(struct vp_endpoint *ep);
/* Closes the endpoint (its path goes, unless it was passed) and frees it
 * once the loop has run the closes; the loop must run again after this.
 * NULL-tolerant; sets *ep to NULL. */
void vp_endpoint_close(struct vp_endpoint **ep);

/* ---- links ---- */

struct vp_link_cbs {
    /* Room for at least want bytes to receive into: the buffer and its
     * size in *room, or NULL when out of memory. */
    uint8_t *(*alloc)(void *ud, size_t want, size_t *room);
    /* n > 0: n bytes arrived into the last alloc'd buffer, with nh handles
     * that came beside them (the callee owns them). n == 0: the peer
     * closed its end. n < 0: the connection failed (a negative errno); why
     * says why when the peer broke a rule of the transport (cut control
     * data, too many handles), else it is empty. */
    void (*read)(void *ud, long n, vp_handle *hs, int nh, const char *why);
    /* After vp_link_write took less than it was given, or wrote in the
     * background: there is room again, or what it held was written
     * (status 0), or writing failed (a negative errno). */
    void (*written)(void *ud, int status);
};

/* Gives the link its callbacks (nothing is read yet). */
void vp_link_start(struct vp_link *l, const struct vp_link_cbs *cbs, void *ud);
/* Starts or stops delivering what arrives. 0 or a negative errno. */
int vp_link_read(struct vp_link *l, bool on);
/* Sends up to len bytes, with nh handles attached to the first byte
 * (beside the bytes; the caller keeps them). Returns the bytes taken (the
 * handles went with them when > 0), -EAGAIN when none could be (written
 * follows once there is room), or another negative errno (-EPIPE: the peer
 * is gone). Bytes taken may still be on their way: vp_link_pending. */
long vp_link_write(struct vp_link *l, const void *buf, size_t len,
                   const vp_handle *hs, int nh);
/* Bytes taken by vp_link_write and not written yet. */
size_t vp_link_pending(const struct vp_link *l);
/* Who connected, by the system's word, never by what the peer says
 * (POSIX: SO_PEERCRED and the peer's groups; Windows: the pipe client's
 * token, its groups numbered as peer.h's): 0 and *out, or a negative errno
 * with why. */
int vp_link_peer(struct vp_link *l, struct vp_peer *out, char *why,
                 size_t whylen);
/* Pins the process that connected (p: vp_link_peer's): as peer.h's
 * vp_peer_pin. */
int vp_link_pin(struct vp_link *l, const struct vp_peer *p, vp_handle *pin,
                uint64_t *start_time);
/* Sending handles, the first half: the n handles hs (taken: closed here,
 * or the codec's to close once sent) become what the frame carries to the
 * peer, in vals. Where handles travel beside the bytes (POSIX) vals are hs
 * themselves; where the peer gets a copy in its own process (Windows) each
 * is pushed there with access (VP_PUSH_*) and vals are the copies' values,
 * which go inside the frame (vp_handles_inline). On a failure nothing was
 * given and every handle is closed. */
int vp_link_give(struct vp_link *l, vp_handle *hs, int n, unsigned access,
                 vp_handle *vals);
/* Values vp_link_give made that the codec refused to queue: taken back
 * from the peer (Windows); beside the bytes the codec closed them already
 * and this does nothing. */
void vp_link_take_back(struct vp_link *l, vp_handle *vals, int n);
/* Closes the connection (writes not done are dropped, and no callback
 * runs any more); closed(ud) runs once the loop has let go of it, and the
 * link is freed then. */
void vp_link_close(struct vp_link *l, void (*closed)(void *ud));

#endif
