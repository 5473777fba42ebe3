/* SPDX-License-Identifier: Apache-2.0 */
/* Stages that sleep and wake (R18 in the daemon's ledger). A sleep copies
 * what the engine keeps into one host buffer of this process, unmaps every
 * chunk of the stage (the address ranges stay reserved), and only then
 * tells vramd, which frees them: nobody else may get memory this process
 * still maps. A wake asks vramd to make the stage usable, takes the memory
 * back with the ordinary grants (they map at the same slots, hence the same
 * addresses), and copies the bytes back.
 *
 * Why the bytes stay in the engine's process and not in vramd's: the copy
 * is the engine's own GPU work (its context, its streams, pinned memory it
 * can reach), vramd holds no CUDA context, and host memory charged to the
 * engine is bounded by the engine's own limits. What a successor would
 * want from a dead engine is its weights, and weights that outlive an
 * engine are weight sets, which stay in GPU memory and are untouched by a
 * sleep; the KV of a dead engine belongs to sequences that died with it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/background.h"
#include "client/lib/call.h"
#include "client/lib/call_frame.h"
#include "client/lib/chunk_table.h"
#include "client/lib/client_record.h"
#include "platform/clock.h"
#include "client/lib/error.h"
#include "client/lib/mappers.h"
#include "client/lib/mapping.h"
#include "client/lib/protocol.h"
#include "client/lib/region_table.h"
#include "client/lib/stage_table.h"

static bool kept(const struct vc_region *r, unsigned flags)
{
    if (r->kind == VRAM_REGION_KV || r->kind == VRAM_REGION_DRAFT_KV)
        return !(flags & VRAM_SLEEP_DISCARD_KV);
    if (r->kind == VRAM_REGION_EXPERT)
        return !(flags & VRAM_SLEEP_DISCARD_EXPERTS);
    return true; /* fixed */
}

/* Runs of slots that are neighbours in the region and in the host buffer
 * are copied as one (VMM ranges are contiguous across chunks): a 16 GiB
 * stage in 2 MiB chunks is a few copies, not 8,192. */
static int copy_runs(vram_client *c, struct vc_sleep *s, bool out)
{
    size_t i = 0;
    uint64_t off = 0;
    while (i < s->nsaved) {
        struct vc_region *r = vc_region_get(c, s->saved[i].region);
        size_t j = i + 1;
        while (j < s->nsaved && s->saved[j].region == s->saved[i].region &&
               s->saved[j].slot == s->saved[j - 1].slot + 1)
            j++;
        uint64_t bytes = (uint64_t)(j - i) * (r ? r->chunk_bytes : 0);
        if (r) {
            uint64_t addr = vc_slot_addr(r, s->saved[i].slot);
            int e = out ? c->mapper->copy_out(c, s->host + off, addr, bytes)
                        : c->mapper->copy_in(c, addr, s->host + off, bytes);
            if (e < 0)
                return e;
        }
        off += bytes;
        i = j;
    }
    return 0;
}

/* Out of every slot of the stage's regions, handles kept: the chunks' ids
 * in ids, their slots in at (for putting them back). */
struct unmapped {
    uint64_t *ids;
    struct vc_saved_slot *at;
    size_t n;
};

static void remap(vram_client *c, struct unmapped *u)
{
    for (size_t i = 0; i < u->n; i++) {
        struct vc_chunk *ch = vc_table_get(&c->chunks, u->ids[i]);
        struct vc_region *r = vc_region_get(c, u->at[i].region);
        if (ch && r)
            vc_map_chunk(c, ch, r, u->at[i].slot);
    }
}

static int unmap_stage(vram_client *c, uint32_t stage, size_t held,
                       struct unmapped *u)
{
    u->n = 0;
    u->ids = malloc((held ? held : 1) * sizeof(*u->ids));
    u->at = malloc((held ? held : 1) * sizeof(*u->at));
    if (!u->ids || !u->at)
        return vc_set_error(c, -ENOMEM, "out of memory");
    for (size_t i = 0; i < c->nregions; i++) {
        struct vc_region *r = c->regions[i];
        if (r->stage != stage)
            continue;
        for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++) {
            uint64_t id = r->slot_chunk[k];
            struct vc_chunk *ch = id != UINT64_MAX ? vc_table_get(&c->chunks, id)
                                                   : NULL;
            if (!ch)
                continue;
            int e = vc_unmap_chunk(c, ch, false);
            if (e < 0) {
                remap(c, u);
                return e;
            }
            u->ids[u->n] = id;
            u->at[u->n++] = (struct vc_saved_slot){r->id, k};
        }
    }
    return 0;
}

static void unmapped_free(struct unmapped *u)
{
    free(u->ids);
    free(u->at);
}

/* The stage's memory out of this process and back to vramd; s is what it
 * keeps (already copied), told to vramd as host_bytes. */
static int give_back(vram_client *c, struct vc_stage *st, struct vc_sleep *s,
                     uint64_t t0, bool again)
{
    size_t held = 0;
    for (size_t i = 0; i < c->nregions; i++)
        if (c->regions[i]->stage == st->id)
            held += c->regions[i]->mapped;
    struct unmapped u = {0};
    int e = unmap_stage(c, st->id, held, &u);
    if (e < 0) {
        unmapped_free(&u);
        return e;
    }
    /* vramd frees the chunks only once this process neither maps them nor
     * holds their handles (it checks, where it can): closed here first.
     * From here on the stage's memory is gone from this process, and the
     * record of what it kept is the stage's. */
    for (size_t i = 0; i < u.n; i++)
        vc_drop_chunk(c, u.ids[i]);
    st->sleep = s;
    st->info.kv_mapped_bytes = 0;
    st->info.expert_loaned_bytes = 0;
    st->info.expert_slots_backed = 0;
    st->res.expert_slots_backed = 0;
    st->res.expert_loaned_bytes = 0;
    for (uint32_t j = 0; st->slot_layer && j < st->nslots; j++)
        st->slot_layer[j] = 0xffff;
    c->tables_changed = true;
    /* Chunks a recall already took go first, so that vramd hears of them
     * before the sleep frees the rest. */
    vc_send_releases(c);
    struct vw_req_stage_sleep m = {
        .stage = st->id, .has_host_bytes = true, .host_bytes = s->host_bytes,
        .has_took_us = true, .took_us = (vp_now_ns() - t0) / 1000};
    struct vw_rep_stage_sleep rep;
    uint32_t id = st->id;
    st->falling_asleep = true;
    e = vc_call(c, VW_REQ_STAGE_SLEEP, &m, &rep, NULL);
    st = vc_stage_get(c, id); /* the table may have moved meanwhile */
    if (st)
        st->falling_asleep = false;
    if (e < 0) {
        /* vramd did not take the sleep (a defect, or a connection lost for
         * good): the chunks are given back as after a shrink, and the stage
         * stays asleep here; a wake takes its memory again. */
        struct vw_req_chunk_release rel = {.chunks = {.v = u.ids, .n = u.n}};
        if (u.n && !c->broken)
            vc_call(c, VW_REQ_CHUNK_RELEASE, &rel, NULL, NULL);
        unmapped_free(&u);
        return e;
    }
    unmapped_free(&u);
    if (st && !again) /* a failed wake's: what it got, not what it had */
        st->sleep->wake_tokens = rep.wake_tokens;
    return 0;
}

static int do_stage_sleep(vram_client *c, uint32_t stage, unsigned flags)
{
    uint64_t t0 = vp_now_ns();
    struct vc_stage *st = vc_stage_get(c, stage);
    if (!st)
        return vc_set_error(c, -ENOENT, "stage %u is not registered by this "
                            "client", stage);
    if (st->sleep)
        return vc_set_error(c, -EALREADY, "stage %u is asleep already", stage);
    if (flags & ~(VRAM_SLEEP_DISCARD_KV | VRAM_SLEEP_DISCARD_EXPERTS))
        return vc_set_error(c, -EINVAL, "unknown sleep flags 0x%x", flags);
    if (!c->mapper->copy_out || !c->mapper->copy_in)
        return vc_set_error(c, -EOPNOTSUPP, "the %s mapper cannot copy",
                            c->mapper->name);
    struct vc_sleep *s = calloc(1, sizeof(*s));
    size_t nregions = 0, nsaved = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < c->nregions; i++) {
        const struct vc_region *r = c->regions[i];
        if (r->stage != stage)
            continue;
        nregions++;
        if (kept(r, flags)) {
            nsaved += r->mapped;
            bytes += (uint64_t)r->mapped * r->chunk_bytes;
        }
    }
    if (s) {
        s->saved = malloc((nsaved ? nsaved : 1) * sizeof(*s->saved));
        s->regrow = malloc((nregions ? nregions : 1) * sizeof(*s->regrow));
    }
    if (bytes && s && st->spare && st->spare_bytes >= bytes) {
        s->host = st->spare; /* what the last wake kept */
        s->host_cap = st->spare_bytes;
        s->pinned = st->spare_pinned;
        st->spare = NULL;
        st->spare_bytes = 0;
    } else if (bytes && s && st->spare) {
        vc_host_free(c, st->spare, st->spare_pinned); /* too small */
        st->spare = NULL;
        st->spare_bytes = 0;
    }
    if (bytes && s && !s->host && c->mapper->host_alloc) {
        s->host = c->mapper->host_alloc(c, bytes);
        s->pinned = s->host != NULL;
    }
    if (bytes && s && !s->host)
        s->host = malloc((size_t)bytes);
    if (!s || !s->saved || !s->regrow || (bytes && !s->host)) {
        vc_sleep_free(c, s);
        return vc_set_error(c, -ENOMEM, "no host memory for stage %u's %llu "
                            "bytes", stage, (unsigned long long)bytes);
    }
    s->host_bytes = bytes;
    if (!s->host_cap)
        s->host_cap = bytes;
    s->expert_bytes = st->configured ? st->info.expert_loaned_bytes : 0;
    for (size_t i = 0; i < c->nregions; i++) {
        const struct vc_region *r = c->regions[i];
        if (r->stage != stage)
            continue;
        /* What a wake grows again: ad-hoc regions and a configured stage's
         * fixed ones, as many slots per lane as the highest mapped one
         * (its kv and expert regions come back through kv_reserve and
         * expert_request). */
        uint32_t per_lane = 0;
        for (uint32_t l = 0; l < r->lanes; l++)
            for (uint32_t k = r->stride_slots; k-- > 0;)
                if (r->slot_chunk[(size_t)l * r->stride_slots + k] != UINT64_MAX) {
                    if (k + 1 > per_lane)
                        per_lane = k + 1;
                    break;
                }
        bool special = st->configured && (r->kind == VRAM_REGION_KV ||
                                          r->kind == VRAM_REGION_EXPERT);
        if (per_lane && !special)
            s->regrow[s->nregrow++] = (struct vc_regrow){r->id, per_lane};
        if (!kept(r, flags))
            continue;
        for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++)
            if (r->slot_chunk[k] != UINT64_MAX)
                s->saved[s->nsaved++] = (struct vc_saved_slot){r->id, k};
    }
    int e = copy_runs(c, s, true);
    if (e < 0) {
        vc_sleep_free(c, s);
        return e;
    }
    /* Once its chunks are dropped, s is the stage's (freed with it). */
    e = give_back(c, st, s, t0, false);
    if (e < 0) {
        st = vc_stage_get(c, stage);
        if (st && st->sleep != s)
            vc_sleep_free(c, s);
    }
    return e;
}

/* The stage's memory again, as it was; nothing copied yet. */
static int take_back(vram_client *c, struct vc_stage *st)
{
    struct vc_sleep *s = st->sleep;
    int e = 0;
    if (st->configured)
        e = vram_kv_reserve(c, st->id, s->wake_tokens, 0, VRAM_KV_HOLD, NULL);
    for (size_t i = 0; e == 0 && i < s->nregrow; i++) {
        struct vc_region *r = vc_region_get(c, s->regrow[i].region);
        uint32_t have = 0;
        for (uint32_t k = 0; r && k < r->lane_slots; k++)
            if (r->slot_chunk[k] != UINT64_MAX)
                have = k + 1;
        if (r && s->regrow[i].per_lane > have)
            e = vram_region_grow(c, r->id, s->regrow[i].per_lane - have);
    }
    /* Loans are what is left over: fewer, or none, is no failure. */
    if (e == 0 && s->expert_bytes) {
        int le = vram_expert_request(c, st->id, s->expert_bytes);
        if (le == -ECONNRESET || le == -ENOTCONN || le == -ETIMEDOUT)
            e = le;
    }
    if (e == 0 && c->bg.n)
        vc_bg_finish(c);
    if (e == 0 && c->bg.err)
        e = vc_set_error(c, c->bg.err, "mapping the woken stage failed");
    return e;
}

static int do_stage_wake(vram_client *c, uint32_t stage, unsigned flags)
{
    uint64_t t0 = vp_now_ns();
    struct vc_stage *st = vc_stage_get(c, stage);
    if (!st)
        return vc_set_error(c, -ENOENT, "stage %u is not registered by this "
                            "client", stage);
    if (!st->sleep)
        return vc_set_error(c, -EALREADY, "stage %u is awake", stage);
    if (flags & ~VRAM_WAKE_KEEP_HOST)
        return vc_set_error(c, -EINVAL, "unknown wake flags 0x%x", flags);
    struct vw_req_stage_wake m = {.stage = stage};
    struct vw_rep_stage_wake rep; /* its wake_tokens: ours, kept */
    int e = vc_call(c, VW_REQ_STAGE_WAKE, &m, &rep, NULL);
    if (e == -EALREADY) /* a sleep vramd did not take (give_back) */
        e = 0;
    if (e < 0)
        return e;
    st = vc_stage_get(c, stage);
    e = take_back(c, st);
    st = vc_stage_get(c, stage);
    if (e < 0) {
        /* Asleep again, bytes kept: what it got goes back. */
        char why[512];
        snprintf(why, sizeof(why), "%s", c->last_error);
        if (st)
            give_back(c, st, st->sleep, t0, true);
        return vc_set_error(c, e, "stage %u sleeps on: %s", stage, why);
    }
    /* Every kept slot is mapped again but expert slots that got no loan. */
    struct vc_sleep *s = st->sleep;
    size_t w = 0;
    uint64_t off = 0, woff = 0;
    for (size_t i = 0; i < s->nsaved; i++) {
        struct vc_region *r = vc_region_get(c, s->saved[i].region);
        uint64_t cb = r ? r->chunk_bytes : 0;
        if (r && r->slot_chunk[s->saved[i].slot] != UINT64_MAX) {
            if (woff != off)
                memmove(s->host + woff, s->host + off, (size_t)cb);
            s->saved[w++] = s->saved[i];
            woff += cb;
        }
        off += cb;
    }
    s->nsaved = w;
    e = copy_runs(c, s, false);
    if (e < 0)
        return e; /* mapped, awake; the bytes are the backend's error's */
    if ((flags & VRAM_WAKE_KEEP_HOST) && s->host && !st->spare) {
        st->spare = s->host;
        st->spare_bytes = s->host_cap;
        st->spare_pinned = s->pinned;
        s->host = NULL;
    }
    vc_sleep_free(c, s);
    st->sleep = NULL;
    struct vw_req_stage_wake done = {
        .stage = stage, .has_took_us = true,
        .took_us = (vp_now_ns() - t0) / 1000};
    vc_call(c, VW_REQ_STAGE_WAKE, &done, NULL, NULL);
    return 0;
}

int vram_stage_sleep(vram_client *c, uint32_t stage, unsigned flags)
{
    vc_enter(c);
    return vc_leave(c, do_stage_sleep(c, stage, flags));
}

int vram_stage_wake(vram_client *c, uint32_t stage, unsigned flags)
{
    vc_enter(c);
    return vc_leave(c, do_stage_wake(c, stage, flags));
}

int vram_stage_asleep(const vram_client *c, uint32_t stage)
{
    const struct vc_stage *st = vc_stage_get(c, stage);
    return st ? st->sleep != NULL : -ENOENT;
}
