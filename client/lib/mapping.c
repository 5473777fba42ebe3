/* SPDX-License-Identifier: Apache-2.0 */
/* What the daemon's replies do to this process: chunks imported, mapped,
 * moved and dropped (new ones handed to the background thread when it is
 * on), and a region's chunks dropped with it; the engine is told before
 * expert slots lose memory (stage_table.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/background.h"
#include "client/lib/chunk_table.h"
#include "client/lib/client_record.h"
#include "client/lib/error.h"
#include "client/lib/mappers.h"
#include "client/lib/mapping.h"
#include "client/lib/region_table.h"
#include "client/lib/stage_table.h"

/* Unmaps a chunk from its slot. On failure it stays where it is (and is
 * declared after a reconnect), unless forced: a chunk being dropped is
 * forgotten either way. */
int vc_unmap_chunk(vram_client *c, struct vc_chunk *ch, bool force)
{
    if (!ch->region)
        return 0;
    struct vc_region *r = vc_region_get(c, ch->region);
    int e = 0;
    if (r) {
        e = c->mapper->unmap(c, ch, vc_slot_addr(r, ch->slot), r->chunk_bytes);
        if (e < 0 && !force)
            return e;
        r->slot_chunk[ch->slot] = UINT64_MAX;
        r->mapped--;
        c->tables_changed = true;
    }
    ch->region = 0;
    ch->slot = 0;
    return e;
}

int vc_map_chunk(vram_client *c, struct vc_chunk *ch, struct vc_region *r,
                 uint32_t slot)
{
    if (slot >= r->lanes * r->stride_slots || r->slot_chunk[slot] != UINT64_MAX)
        return vc_set_error(c, -EPROTO, "daemon mapped chunk %llu over slot %u "
                         "of region %u, which is taken or out of range",
                         (unsigned long long)ch->id, slot, r->id);
    if (ch->device != r->device)
        return vc_set_error(c, -EXDEV, "foreign chunk: chunk %llu of device %u "
                         "offered to region %u of device %u",
                         (unsigned long long)ch->id, ch->device, r->id,
                         r->device);
    int e = c->mapper->map(c, ch, vc_slot_addr(r, slot), r->chunk_bytes);
    if (e < 0)
        return e;
    ch->region = r->id;
    ch->slot = slot;
    r->slot_chunk[slot] = ch->id;
    r->mapped++;
    c->tables_changed = true;
    return 0;
}

/* A chunk whose import waits for the background thread (background.c):
 * in the tables, with no handle yet. */
static bool in_background(const vram_client *c, const struct vc_chunk *ch)
{
    return c->bg.n && !vp_ok(ch->h) && !ch->handle;
}

/* A new chunk of a reply, put in the tables as mapped at its slot and
 * handed to the background thread with its handle. */
static int map_later(vram_client *c, struct vc_chunk *ch, struct vc_region *r,
                     uint32_t slot, vp_handle *h)
{
    if (slot >= r->lanes * r->stride_slots || r->slot_chunk[slot] != UINT64_MAX)
        return vc_set_error(c, -EPROTO, "daemon mapped chunk %llu over slot %u "
                         "of region %u, which is taken or out of range",
                         (unsigned long long)ch->id, slot, r->id);
    ch->region = r->id;
    ch->slot = slot;
    int e = vc_table_put(&c->chunks, ch);
    if (e < 0)
        return e;
    e = vc_bg_add(c, ch, *h, vc_slot_addr(r, slot), r->chunk_bytes);
    if (e < 0) {
        vc_table_del(&c->chunks, ch->id);
        return e;
    }
    *h = VP_NONE; /* the background's now */
    r->slot_chunk[slot] = ch->id;
    r->mapped++;
    c->tables_changed = true;
    return 0;
}

/* Drops a held chunk: unmapped, handle closed, forgotten. */
void vc_drop_chunk(vram_client *c, uint64_t id)
{
    struct vc_chunk *ch = vc_table_get(&c->chunks, id);
    if (ch && in_background(c, ch)) {
        vc_bg_finish(c);
        ch = vc_table_get(&c->chunks, id);
    }
    if (!ch)
        return;
    vc_unmap_chunk(c, ch, true);
    c->mapper->release(c, ch);
    vc_table_del(&c->chunks, id);
}

/* Applies the map entries gathered from a reply: new chunks are imported and
 * mapped, known chunks are moved. Engines hear of expert slots leaving before
 * they are unmapped (one EXPERT_SHRINK per stage). */
int vc_apply_pending(vram_client *c)
{
    int err = 0;
    for (size_t s = 0; s < c->nstages; s++) {
        struct vc_stage *st = &c->stages[s];
        if (!st->info.expert_region)
            continue;
        uint64_t *ids = NULL;
        size_t n = 0;
        for (size_t i = 0; i < c->npend; i++) {
            struct pending_map *p = &c->pend[i];
            struct vc_chunk *ch = !vp_ok(p->h) ? vc_table_get(&c->chunks, p->chunk)
                                               : NULL;
            if (!ch || ch->region != st->info.expert_region ||
                p->region == st->info.expert_region)
                continue;
            if (!ids && !(ids = malloc(c->npend * sizeof(*ids))))
                break; /* told without the list */
            ids[n++] = p->chunk;
        }
        if (n)
            vc_expert_leaving(c, VRAM_EVENT_EXPERT_SHRINK, st->id, ids, n, 0);
        free(ids);
    }

    for (size_t i = 0; i < c->npend; i++) {
        struct pending_map *p = &c->pend[i];
        struct vc_region *r = vc_region_get(c, p->region);
        int e = 0;
        if (!r) {
            e = vc_set_error(c, -EPROTO, "daemon mapped chunk %llu into unknown "
                          "region %u", (unsigned long long)p->chunk, p->region);
        } else if (vp_ok(p->h)) {
            struct vc_chunk ch = {.id = p->chunk, .h = VP_NONE, .device = r->device};
            if (vc_table_get(&c->chunks, p->chunk)) {
                e = vc_set_error(c, -EPROTO, "daemon sent chunk %llu twice",
                              (unsigned long long)p->chunk);
            } else if (vc_bg_wanted(c) &&
                       map_later(c, &ch, r, p->slot, &p->h) == 0) {
                /* mapped by the background thread */
            } else if (vp_ok(p->h) &&
                       (e = c->mapper->import(c, &ch, p->h, r->chunk_bytes)) == 0) {
                p->h = VP_NONE; /* the import owns it now */
                if ((e = vc_table_put(&c->chunks, &ch)) == 0)
                    e = vc_map_chunk(c, vc_table_get(&c->chunks, ch.id), r, p->slot);
                else
                    c->mapper->release(c, &ch);
            }
        } else {
            struct vc_chunk *ch = vc_table_get(&c->chunks, p->chunk);
            if (ch && in_background(c, ch)) { /* moved before it was mapped */
                vc_bg_finish(c);
                ch = vc_table_get(&c->chunks, p->chunk);
            }
            if (!ch) {
                e = vc_set_error(c, -EPROTO, "daemon moved chunk %llu, which this "
                              "client does not hold", (unsigned long long)p->chunk);
            } else if (ch->device != r->device) {
                e = vc_set_error(c, -EXDEV, "foreign chunk: chunk %llu of device "
                              "%u moved to region %u of device %u",
                              (unsigned long long)p->chunk, ch->device, r->id,
                              r->device);
            } else {
                e = vc_unmap_chunk(c, ch, false);
                if (e == 0)
                    e = vc_map_chunk(c, ch, r, p->slot);
            }
        }
        vp_close(&p->h);
        if (e < 0 && !err)
            err = e;
    }
    c->npend = 0;
    return err;
}

void vc_region_forget(vram_client *c, struct vc_region *r)
{
    for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++)
        if (r->slot_chunk[k] != UINT64_MAX)
            vc_drop_chunk(c, r->slot_chunk[k]);
    c->mapper->unreserve(c, r->base, r->va_bytes);
    for (size_t i = 0; i < c->nregions; i++)
        if (c->regions[i] == r) {
            c->regions[i] = c->regions[--c->nregions];
            break;
        }
    free(r->slot_chunk);
    free(r->lane_counts);
    free(r);
}
