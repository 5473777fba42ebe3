/* SPDX-License-Identifier: Apache-2.0 */
/* The state layer's stages (stage_table.c). */
#ifndef VRAM_CLIENT_STAGE_TABLE_H
#define VRAM_CLIENT_STAGE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/lib/client_state.h"
#include "client/include/vram.h"
#include "gen/vram_msg.h"

struct vc_stage *vc_stage_get(const vram_client *c, uint32_t id);
/* Tells the engine (its callback, when it set one). */
void vc_emit(vram_client *c, const struct vram_event *ev);
/* The stage's figures from what this process maps (kv and expert regions
 * of a configured stage). */
void vc_stage_refresh(vram_client *c, struct vc_stage *st);
/* Expert chunks ids[0..n) of stage are about to go (a recall, or moves
 * into KV): the residency after is set, the engine told (type RECALL or
 * EXPERT_SHRINK), before anything is unmapped. */
void vc_expert_leaving(vram_client *c, enum vram_event_type type,
                       uint32_t stage, const uint64_t *ids, size_t n,
                       uint32_t deadline_ms);
/* The daemon's description of a stage this client has; and of one it
 * registered now (its regions reserved). */
void vc_stage_update(vram_client *c, const struct vw_t_stage *o);
int vc_stage_adopt(vram_client *c, const struct vw_t_stage *o);
/* Expert slots a layer claimed, remembered for a resume. */
void vc_stage_claims(vram_client *c, uint32_t stage, uint32_t layer,
                     const uint32_t *slots, size_t n);
/* A sleep record freed with its host buffer; a host buffer alone (pinned:
 * from the mapper's host_alloc); and a stage's sleep record and kept
 * buffer freed (its release, a loss, close). */
void vc_sleep_free(vram_client *c, struct vc_sleep *s);
void vc_host_free(vram_client *c, void *p, bool pinned);
void vc_sleep_forget(vram_client *c, struct vc_stage *st);

#endif
