/* SPDX-License-Identifier: Apache-2.0 */
/* What the daemon's replies do to this process: regions reserved at the
 * daemon's addresses, chunks imported, mapped, moved and dropped, the
 * stages' figures, and the engine told before expert slots lose memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hexkey.h"
#include "internal.h"

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

struct vc_stage *vc_stage_get(const vram_client *c, uint32_t id)
{
    for (size_t i = 0; i < c->nstages; i++)
        if (c->stages[i].id == id)
            return &c->stages[i];
    return NULL;
}

uint64_t vc_slot_addr(const struct vc_region *r, uint32_t slot)
{
    return r->base + (uint64_t)slot * r->chunk_bytes;
}

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
    e = vc_bg_add(c, ch->id, *h, vc_slot_addr(r, slot), r->chunk_bytes);
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

void vc_emit(vram_client *c, const struct vram_event *ev)
{
    if (c->cb)
        c->cb(c->cb_user, ev);
}

/* Chunks mapped from slot 0 of a one-lane region, up to (not at) limit. */
static uint32_t prefix(const struct vc_region *r, uint32_t limit)
{
    uint32_t k = 0;
    while (k < r->lane_slots && k < limit && r->slot_chunk[k] != UINT64_MAX)
        k++;
    return k;
}

/* Expert slots wholly inside the first k chunks (as the daemon counts). */
static uint32_t slots_in(const struct vc_stage *st, const struct vc_region *r,
                         uint32_t k)
{
    if (!st->info.expert_slot_bytes)
        return 0;
    uint64_t n = (uint64_t)k * r->chunk_bytes / st->info.expert_slot_bytes;
    return n < st->expert_slots ? (uint32_t)n : st->expert_slots;
}

void vc_stage_refresh(vram_client *c, struct vc_stage *st)
{
    struct vc_region *kv = st->info.kv_region
                               ? vc_region_get(c, st->info.kv_region) : NULL;
    struct vc_region *ex = st->info.expert_region
                               ? vc_region_get(c, st->info.expert_region) : NULL;
    if (kv)
        st->info.kv_mapped_bytes = (uint64_t)kv->mapped * kv->chunk_bytes;
    if (ex) {
        st->info.expert_loaned_bytes = (uint64_t)ex->mapped * ex->chunk_bytes;
        st->info.expert_slots_backed = slots_in(st, ex, prefix(ex, UINT32_MAX));
        st->res.expert_loaned_bytes = st->info.expert_loaned_bytes;
        st->res.expert_slots_backed = st->info.expert_slots_backed;
    }
}

void vc_expert_leaving(vram_client *c, enum vram_event_type type,
                       uint32_t stage, const uint64_t *ids, size_t n,
                       uint32_t deadline_ms)
{
    struct vc_stage *st = vc_stage_get(c, stage);
    struct vc_region *ex = st && st->info.expert_region
                               ? vc_region_get(c, st->info.expert_region) : NULL;
    struct vram_event ev = {.type = type, .stage = stage, .nchunks = (uint32_t)n,
                            .deadline_ms = deadline_ms, .chunks = ids};
    if (st && ex) {
        /* The backed prefix ends at the first chunk leaving it. */
        uint32_t first = UINT32_MAX, leaving = 0;
        for (size_t i = 0; i < n; i++) {
            struct vc_chunk *ch = vc_table_get(&c->chunks, ids[i]);
            if (!ch || ch->region != ex->id)
                continue;
            leaving++;
            if (ch->slot < first)
                first = ch->slot;
        }
        uint32_t before = prefix(ex, UINT32_MAX);
        ev.slot_end = slots_in(st, ex, before);
        ev.slot_first = slots_in(st, ex, first < before ? first : before);
        st->res.expert_slots_backed = st->info.expert_slots_backed = ev.slot_first;
        st->res.expert_loaned_bytes = st->info.expert_loaned_bytes =
            (uint64_t)(ex->mapped - leaving) * ex->chunk_bytes;
        /* R9's rule, here too: claims above the backed prefix are gone. */
        for (uint32_t j = ev.slot_first; st->slot_layer && j < st->nslots; j++)
            st->slot_layer[j] = 0xffff;
    }
    if (st) {
        ev.residency_version = st->res.version;
        ev.expert_slots_backed = st->res.expert_slots_backed;
        ev.expert_loaned_bytes = st->res.expert_loaned_bytes;
    }
    vc_emit(c, &ev);
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

void vc_clear_pending(vram_client *c)
{
    for (size_t i = 0; i < c->npend; i++)
        vp_close(&c->pend[i].h);
    c->npend = 0;
}

int vc_gather_map(vram_client *c, struct vram_t_map_entry *map, size_t n)
{
    if (c->npend + n > c->cappend) {
        size_t cap = c->cappend ? c->cappend : 64;
        while (cap < c->npend + n)
            cap *= 2;
        struct pending_map *v = realloc(c->pend, cap * sizeof(*v));
        if (!v) {
            for (size_t i = 0; i < n; i++)
                if (map[i].has_fd)
                    vp_close(&map[i].fd);
            return -ENOMEM;
        }
        c->pend = v;
        c->cappend = cap;
    }
    for (size_t i = 0; i < n; i++) {
        c->pend[c->npend++] = (struct pending_map){
            .chunk = map[i].chunk, .region = map[i].region, .slot = map[i].slot,
            .h = map[i].has_fd ? map[i].fd : VP_NONE};
        map[i].has_fd = false; /* the handle is the pending entry's now */
        map[i].fd = VP_NONE;
    }
    return 0;
}

int vc_region_add(vram_client *c, const struct vram_t_region *o)
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

/* R17: a reservation a weight set backs, as the daemon describes it; what
 * registration opened for it is kept. */
static void stage_set_update(struct vc_stage *st, const struct vram_t_stage_weights *w)
{
    struct vc_stage_set *s = NULL;
    for (uint32_t k = 0; k < st->nsets && !s; k++)
        if (strcmp(st->sets[k].name, w->name) == 0)
            s = &st->sets[k];
    if (!s) {
        if (st->nsets >= VC_STAGE_SETS)
            return;
        s = &st->sets[st->nsets++];
        memset(s, 0, sizeof(*s));
        snprintf(s->name, sizeof(s->name), "%s", w->name);
    }
    snprintf(s->set, sizeof(s->set), "%s", w->set);
    s->bytes = w->bytes;
    s->has_key = vram_hex_decode(w->key, s->key, VRAM_WEIGHTS_KEY_BYTES) == 0;
}

void vc_stage_update(vram_client *c, const struct vram_t_stage *o)
{
    struct vc_stage *st = vc_stage_get(c, o->id);
    if (!st)
        return;
    struct vram_stage_info *in = &st->info;
    in->stage = o->id;
    in->device = o->device;
    in->first_layer = o->first_layer;
    in->last_layer = o->last_layer;
    in->kv_max_bytes = o->kv_max_bytes;
    in->expert_slot_bytes = o->expert_slot_bytes;
    /* The daemon's residency, unless this is older news than what the
     * library has; the figures are what this process maps once the reply
     * is applied (vc_stage_refresh). */
    if (o->residency_version >= st->res.version) {
        st->res.version = o->residency_version;
        in->kv_mapped_bytes = o->kv_mapped_bytes;
        in->expert_loaned_bytes = o->expert_loaned_bytes;
        in->expert_slots_backed = o->expert_slots_backed;
        st->res.expert_slots_backed = in->expert_slots_backed;
        st->res.expert_loaned_bytes = in->expert_loaned_bytes;
    }
    for (size_t i = 0; i < o->regions.n; i++) {
        const struct vram_t_region *r = &o->regions.v[i];
        if (strcmp(r->kind, "kv") == 0)
            in->kv_region = r->id;
        else if (strcmp(r->kind, "expert") == 0)
            in->expert_region = r->id;
        if (strcmp(r->kind, "expert") == 0 && !o->has_expert_slots &&
            o->expert_slot_bytes) /* a daemon that does not say */
            st->expert_slots = (uint32_t)((uint64_t)r->lane_slots *
                                          r->chunk_bytes / o->expert_slot_bytes);
    }
    if (o->has_expert_slots)
        st->expert_slots = o->expert_slots;
    for (size_t i = 0; i < o->weights.n; i++)
        stage_set_update(st, &o->weights.v[i]);
    c->tables_changed = true;
}

int vc_stage_adopt(vram_client *c, const struct vram_t_stage *o)
{
    if (!vc_stage_get(c, o->id)) {
        struct vc_stage *v = realloc(c->stages, (c->nstages + 1) * sizeof(*v));
        if (!v)
            return -ENOMEM;
        c->stages = v;
        memset(&v[c->nstages], 0, sizeof(v[0]));
        v[c->nstages].id = o->id;
        /* What it is at registration is no news. */
        v[c->nstages++].told_version = o->residency_version;
    }
    for (size_t i = 0; i < o->regions.n; i++) {
        int e = vc_region_add(c, &o->regions.v[i]);
        if (e < 0)
            return e;
    }
    vc_stage_update(c, o);
    return 0;
}
