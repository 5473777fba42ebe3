/* SPDX-License-Identifier: Apache-2.0 */
/* The regions this client holds: reserved once at the daemon's address
 * (the mapper's reserve), their geometry, and the chunk at each slot. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/client_record.h"
#include "client/lib/error.h"
#include "client/lib/mappers.h"
#include "client/lib/region_table.h"

static const char *const kinds[] = {"kv", "expert", "fixed", "draft_kv"};

const char *vc_kind_name(int kind)
{
    return kind >= 0 && kind < 4 ? kinds[kind] : "?";
}

int vc_kind_of(const char *name)
{
    for (int k = 0; name && k < 4; k++)
        if (strcmp(name, kinds[k]) == 0)
            return k;
    return -1;
}

struct vc_region *vc_region_get(const vram_client *c, uint32_t id)
{
    for (size_t i = 0; i < c->nregions; i++)
        if (c->regions[i]->id == id)
            return c->regions[i];
    return NULL;
}

uint64_t vc_slot_addr(const struct vc_region *r, uint32_t slot)
{
    return r->base + (uint64_t)slot * r->chunk_bytes;
}

int vc_region_add(vram_client *c, const struct vw_t_region *o)
{
    if (!o->chunk_bytes || !o->lanes || !o->stride_slots)
        return vc_set_error(c, -EPROTO, "malformed region from the daemon");
    if (vc_region_get(c, o->id))
        return 0;
    struct vc_region *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->id = o->id;
    r->stage = o->stage;
    r->device = o->device;
    int kind = vc_kind_of(o->kind);
    r->kind = kind < 0 ? 0 : kind;
    r->base = o->base;
    r->lane_stride = o->lane_stride;
    r->lanes = o->lanes;
    r->lane_slots = o->lane_slots;
    r->stride_slots = o->stride_slots;
    r->chunk_bytes = o->chunk_bytes;
    snprintf(r->name, sizeof(r->name), "%s", o->name ? o->name : "");
    size_t n = (size_t)o->lanes * o->stride_slots;
    r->slot_chunk = malloc(n * sizeof(uint64_t));
    r->lane_counts = malloc(o->lanes * sizeof(uint32_t));
    struct vc_region **v = realloc(c->regions, (c->nregions + 1) * sizeof(*v));
    if (!r->slot_chunk || !r->lane_counts || !v) {
        free(r->slot_chunk);
        free(r->lane_counts);
        free(r);
        if (v)
            c->regions = v;
        return -ENOMEM;
    }
    c->regions = v;
    for (size_t k = 0; k < n; k++)
        r->slot_chunk[k] = UINT64_MAX;
    for (uint32_t l = 0; l < o->lanes; l++)
        r->lane_counts[l] = l < o->lane_slot_counts.n ? o->lane_slot_counts.v[l]
                                                      : o->lane_slots;
    /* The daemon says how much address space the region holds (whole
     * alignment units). */
    r->va_bytes = (uint64_t)o->lanes * o->lane_stride;
    if (o->va_bytes >= r->va_bytes)
        r->va_bytes = o->va_bytes;
    int e = c->mapper->reserve(c, o->base, r->va_bytes);
    if (e < 0) {
        free(r->slot_chunk);
        free(r->lane_counts);
        free(r);
        return e;
    }
    c->regions[c->nregions++] = r;
    return 0;
}
