/* SPDX-License-Identifier: Apache-2.0 */
/* Messages leaving the core: every frame goes through here, encoded from
 * its typed struct, and (when the core checks itself, as in tests) decoded
 * again against the catalogue before it leaves, so that no reply or event
 * can drift from proto/messages.json.
 *
 * Frames leave in the order they are sent. A part (a reply of thousands of
 * chunks, reply.c) may have to wait for room on the connection, because
 * its handles are made only as the connection takes them: whatever is sent
 * to that client meanwhile waits behind it in the client's outbox, and io/
 * says when the connection drained (vd_core_client_writable). */
#ifndef VRAMD_SEND_H
#define VRAMD_SEND_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/core/core.h"
#include "proto/msg.h"

/* Sends event evt (enum vw_evt_id) with its fields to client c. */
int vd_send_event(struct vd_core *core, struct vd_client *c, int evt,
                  const void *fields);
/* Sends one reply frame of request type (enum vw_req_id). The handle
 * fields the encoder meets, in order, go with the frame (the connection
 * takes them, or they are closed when it cannot); *taken says how many.
 * -EMSGSIZE, sending nothing, when it would exceed a frame's payload. */
int vd_send_reply(struct vd_core *core, struct vd_client *c, int type,
                  uint64_t id, int err, const char *message, bool more,
                  const void *fields, const char *only, int *taken);
/* The same, with the port's flags (VD_SEND_READ_ONLY). */
int vd_send_reply_flags(struct vd_core *core, struct vd_client *c, int type,
                        uint64_t id, int err, const char *message, bool more,
                        const void *fields, const char *only, int *taken,
                        unsigned flags);

/* ---- parts that wait for room ------------------------------------------- */

/* Sends what it can of part: 1 when all of it went, 0 when it waits for
 * room (vd_send_room), or a negative errno when the connection is gone. It
 * sends with vd_send_reply_now and vd_send_text_now. */
typedef int (*vd_part_fn)(struct vd_core *core, struct vd_client *c,
                          void *part);
typedef void (*vd_part_free_fn)(void *part);

/* Queues part behind what waits for c and sends what can go now. The
 * outbox owns part from here (free_fn frees it, sent or not). */
int vd_send_part(struct vd_core *core, struct vd_client *c, void *part,
                 vd_part_fn fn, vd_part_free_fn free_fn);
/* Handles c's connection takes now. */
int vd_send_room(struct vd_core *core, struct vd_client *c);
/* Something waits in c's outbox. */
bool vd_send_pending(const struct vd_client *c);
/* The connection is gone: what waits is dropped. NULL-tolerant. */
void vd_send_drop(struct vd_client *c);
/* A part's own frames, which go at once (the part is first in line). */
int vd_send_reply_now(struct vd_core *core, struct vd_client *c, int type,
                      uint64_t id, int err, const char *message, bool more,
                      const void *fields, const char *only, int *taken);
/* A frame encoded before (vd_send_encode_reply), with its n handles
 * (taken: sent or closed). */
int vd_send_text_now(struct vd_core *core, struct vd_client *c, int type,
                     char *text, size_t len, vp_handle *hs, int n);
/* Encodes a reply frame without sending it, for a connection of protocol
 * version: its text (the caller frees it), and how many handles it names
 * (their values are not kept). */
int vd_send_encode_reply(unsigned version, int type, uint64_t id, int err,
                         const char *message,
                         bool more, const void *fields, const char *only,
                         char **text, size_t *len, int *nh);

/* io/: the connection of client id has drained; what waits goes on. */
void vd_core_client_writable(struct vd_core *core, uint32_t id);

#endif
