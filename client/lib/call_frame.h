/* SPDX-License-Identifier: Apache-2.0 */
/* What frames every public call (call_frame.c). */
#ifndef VRAM_CLIENT_CALL_FRAME_H
#define VRAM_CLIENT_CALL_FRAME_H

#include "client/include/vram.h"

/* Takes the client's lock (with an event thread) and counts the call. */
void vc_enter(const vram_client *c);
/* Counts the call out; the outermost brings every stage's figures up to
 * date with what is mapped and tells BUDGET_CHANGED for the residency
 * changes not told yet, then lets the lock go. Returns ret. */
int vc_leave(const vram_client *c, int ret);

#endif
