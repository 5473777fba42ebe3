/* SPDX-License-Identifier: Apache-2.0 */
/* The state layer's regions (region_table.c). */
#ifndef VRAM_CLIENT_REGION_TABLE_H
#define VRAM_CLIENT_REGION_TABLE_H

#include <stdint.h>

#include "client/lib/client_state.h"
#include "client/include/vram.h"
#include "gen/vram_msg.h"

/* Region kinds by name (enum vram_region_kind), -1 for none. */
const char *vc_kind_name(int kind);
int vc_kind_of(const char *name);
struct vc_region *vc_region_get(const vram_client *c, uint32_t id);
uint64_t vc_slot_addr(const struct vc_region *r, uint32_t slot);
/* A region the daemon describes, reserved here (nothing when known). */
int vc_region_add(vram_client *c, const struct vw_t_region *o);

#endif
