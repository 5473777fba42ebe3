/* SPDX-License-Identifier: Apache-2.0 */
/* The state layer's mappings: what replies do to this process
 * (mapping.c). */
#ifndef VRAM_CLIENT_MAPPING_H
#define VRAM_CLIENT_MAPPING_H

#include <stdbool.h>
#include <stdint.h>

#include "client/lib/client_state.h"
#include "client/include/vram.h"

/* A held chunk out of its slot, its handle kept (0); on failure it stays
 * mapped unless forced. And back into a slot of r. */
int vc_unmap_chunk(vram_client *c, struct vc_chunk *ch, bool force);
int vc_map_chunk(vram_client *c, struct vc_chunk *ch, struct vc_region *r,
                 uint32_t slot);
/* Drops a held chunk: unmapped, handle closed, forgotten. */
void vc_drop_chunk(vram_client *c, uint64_t id);
/* Applies the map entries the protocol layer gathered from a reply. */
int vc_apply_pending(vram_client *c);
/* A region's chunks dropped, its range given back, the region forgotten. */
void vc_region_forget(vram_client *c, struct vc_region *r);

#endif
