/* Messages leaving the core: every frame goes through here, encoded from
 * its typed struct, and (when the core checks itself, as in tests) decoded
 * again against the catalogue before it leaves, so that no reply or event
 * can drift from proto/messages.json. */
#ifndef VRAMD_SEND_H
#define VRAMD_SEND_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "msg.h"

/* Sends event evt (enum vram_evt_id) with its fields to client c. */
int vd_send_event(struct vd_core *core, struct vd_client *c, int evt,
                  const void *fields);
/* Sends one reply frame of request type (enum vram_req_id). The handle
 * fields the encoder meets, in order, go with the frame (the connection
 * takes them, or they are closed when it cannot); *taken says how many.
 * -EMSGSIZE, sending nothing, when it would exceed a frame's payload. */
int vd_send_reply(struct vd_core *core, struct vd_client *c, int type,
                  uint64_t id, int err, const char *message, bool more,
                  const void *fields, const char *only, int *taken);

#endif
