/* SPDX-License-Identifier: Apache-2.0 */
/* The stages this client registered: their figures from what this process
 * maps, the daemon's word on them, the expert slots a claim holds, what a
 * sleeping stage keeps, and the engine told before expert slots lose
 * memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/chunk_table.h"
#include "client/lib/client_record.h"
#include "proto/hexkey.h"
#include "client/lib/mappers.h"
#include "client/lib/region_table.h"
#include "client/lib/stage_table.h"

struct vc_stage *vc_stage_get(const vram_client *c, uint32_t id)
{
    for (size_t i = 0; i < c->nstages; i++)
        if (c->stages[i].id == id)
            return &c->stages[i];
    return NULL;
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

/* R17: a reservation a weight set backs, as the daemon describes it; what
 * registration opened for it is kept. */
static void stage_set_update(struct vc_stage *st, const struct vw_t_stage_weights *w)
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
    s->has_key = vw_hex_decode(w->key, s->key, VRAM_WEIGHTS_KEY_BYTES) == 0;
}

void vc_stage_update(vram_client *c, const struct vw_t_stage *o)
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
        const struct vw_t_region *r = &o->regions.v[i];
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

int vc_stage_adopt(vram_client *c, const struct vw_t_stage *o)
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

void vc_stage_claims(vram_client *c, uint32_t stage, uint32_t layer,
                     const uint32_t *slots, size_t n)
{
    struct vc_stage *st = vc_stage_get(c, stage);
    if (!st)
        return;
    for (size_t i = 0; i < n; i++) {
        if (slots[i] >= st->nslots) {
            uint32_t want = slots[i] + 1 > 2 * st->nslots ? slots[i] + 1
                                                           : 2 * st->nslots;
            uint16_t *v = realloc(st->slot_layer, want * sizeof(*v));
            if (!v)
                return; /* a claim lost on resume, re-made by the engine */
            for (uint32_t k = st->nslots; k < want; k++)
                v[k] = 0xffff;
            st->slot_layer = v;
            st->nslots = want;
        }
        st->slot_layer[slots[i]] = (uint16_t)layer;
    }
}

/* A sleep record and its host buffer (sleep.c makes them). */
void vc_sleep_free(vram_client *c, struct vc_sleep *s)
{
    if (!s)
        return;
    vc_host_free(c, s->host, s->pinned);
    free(s->saved);
    free(s->regrow);
    free(s);
}

void vc_host_free(vram_client *c, void *p, bool pinned)
{
    if (pinned && c->mapper->host_free)
        c->mapper->host_free(c, p);
    else
        free(p);
}

void vc_sleep_forget(vram_client *c, struct vc_stage *st)
{
    vc_sleep_free(c, st->sleep);
    st->sleep = NULL;
    vc_host_free(c, st->spare, st->spare_pinned);
    st->spare = NULL;
    st->spare_bytes = 0;
}
