/* SPDX-License-Identifier: Apache-2.0 */
/* The state layer's mapping of new chunks on a library thread
 * (background.c). */
#ifndef VRAM_CLIENT_BACKGROUND_H
#define VRAM_CLIENT_BACKGROUND_H

#include <stdbool.h>
#include <stdint.h>

#include "platform/handle.h"
#include "client/include/vram.h"

/* Whether the new chunks of the reply being applied go to the background:
 * it is on, and this is an engine's own call (not one nested in a
 * callback). */
bool vc_bg_wanted(const vram_client *c);
/* Takes a new chunk, already in the tables as mapped at addr, to import
 * and map later; the handle is the item's from now on (closed on failure). */
int vc_bg_add(vram_client *c, uint64_t chunk, vp_handle h, uint64_t addr,
              uint64_t bytes);
/* Starts the thread on what was added (or maps it here if it cannot). */
void vc_bg_start(vram_client *c);
/* Waits for the thread (or does its work here when it was not started),
 * then makes the tables say what is mapped: a chunk that failed is
 * forgotten, and the first failure kept for vram_client_wait. */
void vc_bg_finish(vram_client *c);
/* Finishes, and frees the list (at close). */
void vc_bg_free(vram_client *c);

#endif
