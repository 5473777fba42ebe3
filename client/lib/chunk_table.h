/* SPDX-License-Identifier: Apache-2.0 */
/* The state layer's table of held chunks, keyed by chunk id
 * (chunk_table.c). */
#ifndef VRAM_CLIENT_CHUNK_TABLE_H
#define VRAM_CLIENT_CHUNK_TABLE_H

#include <stdint.h>

#include "client/lib/client_state.h"

int vc_table_put(struct vc_chunk_table *t, const struct vc_chunk *c);
struct vc_chunk *vc_table_get(struct vc_chunk_table *t, uint64_t id);
void vc_table_del(struct vc_chunk_table *t, uint64_t id);
void vc_table_free(struct vc_chunk_table *t);

#endif
