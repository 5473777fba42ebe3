/* SPDX-License-Identifier: Apache-2.0 */
/* The state layer's mapping of new chunks on a library thread
 * (background.c). */
#ifndef VRAM_CLIENT_BACKGROUND_H
#define VRAM_CLIENT_BACKGROUND_H

#include <stdbool.h>
#include <stdint.h>

#include "client/lib/client_state.h"
#include "platform/handle.h"
#include "client/include/vram.h"

/* Whether the new chunks of the reply being applied go to the background:
 * it is on, and this is an engine's own call (not one nested in a
 * callback, nor the background's own finishing). */
bool vc_bg_wanted(const vram_client *c);
/* Takes a new chunk, already in the tables as mapped at addr, to import
 * and map later; the handle is the item's from now on (closed on failure). */
int vc_bg_add(vram_client *c, const struct vc_chunk *ch, vp_handle h,
              uint64_t addr, uint64_t bytes);
/* What the caller does with a background request's reply once it came and
 * its new chunks are in the tables (the API's: the stage's figures, the
 * map entries left in c->pend applied). err: the daemon's refusal, or 0.
 * Returns err, or the applying's own failure. rep is NULL when no reply
 * came (err says why: a lost connection, a timeout): nothing to apply,
 * only the failure to note. */
typedef int (*vc_bg_done_fn)(vram_client *c, int type, void *rep, int err);
/* Sends request type and returns VRAM_PENDING at once: the thread (started
 * when the call returns) reads the reply, imports and maps its new chunks,
 * and the next entry into the library puts them in the tables and calls
 * done. call names the public call, for the failure's message. */
int vc_bg_request(vram_client *c, int type, const void *req,
                  vc_bg_done_fn done, const char *call);
/* A failure of background work not yet returned by a call: returned once
 * (its message in last_error) by the next call that sends a request; 0
 * when there is none. vram_client_wait returns it again. */
int vc_bg_failure(vram_client *c);
/* Starts the thread on what was added or sent (or does it here if it
 * cannot). */
void vc_bg_start(vram_client *c);
/* Waits for the thread (or does its work here when it was not started),
 * then makes the tables say what is mapped: a chunk that failed is
 * forgotten, and the first failure kept for vram_client_wait. A reply read
 * on the thread is applied: the events that came before it first. */
void vc_bg_finish(vram_client *c);
/* Finishes, and frees the list (at close). */
void vc_bg_free(vram_client *c);

#endif
