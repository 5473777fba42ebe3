/* SPDX-License-Identifier: Apache-2.0 */
/* The id of stage's region called "weights" in client c, 0 when it has
 * none (vram_stage_regions and vram_region_name). Shared by
 * tests/integration/test_background_map.c and test_background_reply.c
 * (static: each includes it once). */
#ifndef VRAM_TEST_REGIONS_NAMED_H
#define VRAM_TEST_REGIONS_NAMED_H

#include <stdint.h>
#include <string.h>

#include "client/include/vram.h"

static uint32_t weights_of(vram_client *c, uint32_t stage)
{
    uint32_t ids[8];
    int n = vram_stage_regions(c, stage, ids, 8);
    for (int i = 0; i < n && i < 8; i++) {
        const char *name = vram_region_name(c, ids[i]);
        if (name && strcmp(name, "weights") == 0)
            return ids[i];
    }
    return 0;
}

#endif
