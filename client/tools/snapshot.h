/* SPDX-License-Identifier: Apache-2.0 */
/* One status reply of vramd: its JSON text, and the typed view decoded from
 * it (checked field by field against proto/messages.json), which every
 * view of vramctl reads. */
#ifndef VRAM_TOOLS_SNAPSHOT_H
#define VRAM_TOOLS_SNAPSHOT_H

#include <stddef.h>

#include "proto/msg.h"
#include "client/include/vram.h"
#include "gen/vram_msg.h"

struct tool_snapshot {
    char *text;
    struct vw_arena arena;
    struct vw_rep_status st;
};

/* Asks c for the status and decodes it into *out (zeroed first by the
 * caller or not: it is overwritten on success only). On failure a negative
 * errno, and why (when not NULL) says what failed, in words:
 *   -ECONNRESET, -EPIPE, ... the connection broke (vram_status_json's)
 *   -EBADMSG  the reply is not JSON, or not what this catalogue expects */
int tool_snapshot_fetch(vram_client *c, struct tool_snapshot *out, char *why,
                        size_t why_len);
/* NULL-tolerant; the snapshot is empty afterwards. */
void tool_snapshot_free(struct tool_snapshot *s);

#endif
