/* SPDX-License-Identifier: Apache-2.0 */
/* Weight sets this client has open (weight_sets.c). */
#ifndef VRAM_CLIENT_WEIGHT_SETS_H
#define VRAM_CLIENT_WEIGHT_SETS_H

#include <stdbool.h>
#include <stdint.h>

#include "client/lib/client_state.h"
#include "client/include/vram.h"

/* A weight set this client has open (weight_sets.c): its allocations are
 * imported and mapped at info.base + i x alloc_bytes, outside the chunk
 * table. */
struct vc_wset {
    struct vram_weights_info info;
    uint64_t va_bytes;
    char name[VRAM_WEIGHTS_NAME_MAX + 1];
    struct vc_chunk *alloc;  /* info.allocs of them */
    uint32_t nmapped;        /* mapped, from the first */
};


/* Unmaps and forgets every set (at close: told to vramd when tell). */
void vc_weights_close_all(vram_client *c, bool tell);
/* vram_weights_open and vram_weights_close, inside a call already. */
int vc_weights_open(vram_client *c, const char *name, uint32_t device,
                    uint64_t bytes, const uint8_t *key, uint32_t flags,
                    struct vram_weights_info *info);
int vc_weights_close(vram_client *c, uint32_t id);
/* Whether set id is open here. */
bool vc_weights_is_open(const vram_client *c, uint32_t id);

#endif
