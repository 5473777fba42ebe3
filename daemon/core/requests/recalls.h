/* SPDX-License-Identifier: Apache-2.0 */
/* Recalls: the event that asks a client for chunks back, and its deadline.
 * When the deadline passes with chunks still out, the ledger's policy (R15)
 * says what happens: the client gets no new loans, or its process is
 * killed. Nothing is granted again before the holder gave it back or was
 * reaped (R11): the chunks stay recalling meanwhile. */
#ifndef VRAMD_RECALLS_H
#define VRAMD_RECALLS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/core/core.h"

/* Asks client for chunks of stage back, by the stage's deadline. */
void vd_recall_start(struct vd_core *core, uint32_t client, uint32_t stage,
                     const uint64_t *chunks, size_t n);
void vd_recalls_fini(struct vd_core *core);

#endif
