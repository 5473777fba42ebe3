/* SPDX-License-Identifier: Apache-2.0 */
/* libvram's public calls on stages, regions, KV budgets, loans and the
 * daemon's administration: each is one typed request (call.c) whose map
 * entries are applied here (mapping.c), framed by the client's lock
 * (call_frame.c). The calls that are a request and nothing more are
 * generated from the catalogue instead (its "client": gen/vc_stubs.c). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/background.h"
#include "client/lib/call.h"
#include "client/lib/call_frame.h"
#include "client/lib/chunk_table.h"
#include "client/lib/client_record.h"
#include "client/lib/error.h"
#include "client/lib/event_thread.h"
#include "client/lib/mappers.h"
#include "client/lib/mapping.h"
#include "proto/msg.h"
#include "client/lib/protocol.h"
#include "client/lib/region_table.h"
#include "client/lib/stage_table.h"
#include "client/lib/weight_sets.h"

/* ---- the client itself -------------------------------------------------- */

uint32_t vram_client_id(const vram_client *c)
{
    return c->id;
}

const char *vram_client_backend(const vram_client *c)
{
    return c->backend;
}

vram_handle vram_client_fd(const vram_client *c)
{
    return c->h.v;
}

static void do_client_set_event_callback(vram_client *c, vram_event_fn fn, void *user)
{
    c->cb = fn;
    c->cb_user = user;
}

size_t vram_client_chunks_held(const vram_client *c)
{
    return c->chunks.n;
}

void vram_client_close(vram_client *c)
{
    if (!c)
        return;
    c->reconnect_ms = -1; /* closing: a broken connection stays broken */
    /* Weight sets first: a sealed one stays cached for the next engine. */
    vc_weights_close_all(c, !c->broken);
    /* Give stages back properly so their chunks return to the pool at once
     * rather than after this process exits. */
    while (c->nstages > 0 && !c->broken)
        if (vram_stage_release(c, c->stages[0].id) < 0)
            break;
    vc_thread_stop(c); /* nothing is received after */
    vc_bg_free(c);
    while (c->nregions)
        vc_region_forget(c, c->regions[0]);
    /* Anything still held (e.g. after a broken connection). */
    for (size_t i = 0; i < c->chunks.cap; i++)
        if (c->chunks.v[i].id < UINT64_MAX - 1)
            c->mapper->release(c, &c->chunks.v[i]);
    vc_table_free(&c->chunks);
    for (size_t i = 0; i < c->nstages; i++) /* pinned: before the driver goes */
        vc_sleep_forget(c, &c->stages[i]);
    if (c->mapper && c->mapper->destroy)
        c->mapper->destroy(c);
    vc_clear_pending(c);
    free(c->pend);
    for (size_t i = 0; i < c->nheld; i++)
        free(c->held[i].text);
    free(c->held);
    free(c->release_q);
    free(c->regions);
    for (size_t i = 0; i < c->nstages; i++)
        free(c->stages[i].slot_layer);
    free(c->stages);
    vw_wire_fini(&c->wire);
    vp_close(&c->h);
    vp_close(&c->retired);
    vp_mutex_free(c->lock);
    free(c);
}

/* ---- mapping in the background (background.c) ---------------------------- */

int vram_client_set_background_map(vram_client *c, int on)
{
    vc_enter(c); /* waits for what is under way */
    c->bg.enabled = on != 0;
    return vc_leave(c, 0);
}

int vram_client_wait(vram_client *c)
{
    vc_enter(c); /* waits, and makes the tables true */
    int e = c->bg.err;
    if (e < 0)
        snprintf(c->last_error, sizeof(c->last_error), "%s", c->bg.msg);
    else
        e = c->bg.done > INT_MAX ? INT_MAX : (int)c->bg.done;
    c->bg.err = 0;
    c->bg.msg[0] = 0;
    c->bg.done = 0;
    c->bg.report = false; /* said now */
    return vc_leave(c, e);
}

/* ---- stages ------------------------------------------------------------- */

/* Which GPUs may map which others' chunks, as vramd says (its
 * cuda.peer_access can forbid what the hardware allows): asked once, before
 * the first chunk is mapped for peers. Unknown means owner-only. */
static void learn_peers(vram_client *c)
{
    struct vw_req_status m = {0};
    struct vw_rep_status rep;
    struct vw_arena a = {0};
    char keep[sizeof(c->last_error)];
    snprintf(keep, sizeof(keep), "%s", c->last_error);
    bool report = c->bg.report; /* a background failure is the caller's */
    c->bg.report = false;
    if (vc_call(c, VW_REQ_STATUS, &m, &rep, &a) == 0) {
        memset(c->dev_peers, 0, sizeof(c->dev_peers));
        for (size_t i = 0; i < rep.devices.n; i++) {
            const struct vw_t_device *d = &rep.devices.v[i];
            for (size_t k = 0; d->id < 64 && k < d->peer_access.n; k++)
                if (d->peer_access.v[k] < 64)
                    c->dev_peers[d->id] |= 1ull << d->peer_access.v[k];
        }
        c->peers_known = true;
    }
    c->bg.report = report;
    snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
    vw_arena_free(&a);
}

static int register_common(vram_client *c, const struct vw_req_stage_register *m,
                           uint32_t *stage_out, struct vram_stage_info *info)
{
    struct vw_rep_stage_register rep;
    struct vw_arena a = {0};
    if (c->peer_access && !c->peers_known)
        learn_peers(c);
    int e = vc_call(c, VW_REQ_STAGE_REGISTER, m, &rep, &a);
    if (e == 0) {
        e = vc_stage_adopt(c, &rep.stage);
        if (e == 0)
            e = vc_apply_pending(c);
        else
            vc_clear_pending(c);
    }
    uint32_t id = rep.stage.id;
    vw_arena_free(&a);
    if (e < 0)
        return e;
    if (stage_out)
        *stage_out = id;
    if (info)
        *info = vc_stage_get(c, id)->info;
    return 0;
}

/* R17: the sets the stage's configuration names with a key, opened for
 * the engine (read-only when sealed; else this client writes them). A
 * failure is the set's, not the registration's: vram_stage_weights says
 * it. Never waits for another writer's seal. */
static void open_stage_sets(vram_client *c, struct vc_stage *st)
{
    for (uint32_t k = 0; k < st->nsets; k++) {
        struct vc_stage_set *s = &st->sets[k];
        if (!s->has_key || s->id)
            continue;
        struct vram_weights_info w;
        s->err = vc_weights_open(c, s->set, st->info.device, s->bytes, s->key,
                                 VRAM_WEIGHTS_NOWAIT, &w);
        if (s->err == 0)
            s->id = w.id;
        snprintf(s->why, sizeof(s->why), "%s", s->err ? c->last_error : "");
    }
}

static int do_stage_register(vram_client *c, uint32_t stage, unsigned flags,
                        struct vram_stage_info *out)
{
    struct vw_req_stage_register m = {
        .has_stage = true, .stage = stage,
        .has_keep_window = (flags & VRAM_STAGE_KEEP_WINDOW) != 0,
        .keep_window = (flags & VRAM_STAGE_KEEP_WINDOW) != 0};
    int e = register_common(c, &m, NULL, out);
    struct vc_stage *st = e == 0 ? vc_stage_get(c, stage) : NULL;
    if (st) {
        st->keep_window = flags & VRAM_STAGE_KEEP_WINDOW;
        st->configured = true;
        open_stage_sets(c, st);
    }
    return e;
}

static int do_stage_register_adhoc(vram_client *c, uint32_t device, uint32_t first,
                              uint32_t last, uint32_t *stage_out)
{
    struct vw_req_stage_register m = {
        .has_device = true, .device = device, .has_first_layer = true,
        .first_layer = first, .has_last_layer = true, .last_layer = last};
    return register_common(c, &m, stage_out, NULL);
}

static int do_stage_release(vram_client *c, uint32_t stage)
{
    struct vc_stage *st = vc_stage_get(c, stage);
    if (!st)
        return vc_set_error(c, -ENOENT, "stage %u is not registered by this "
                            "client", stage);
    /* The sets registration opened, then the regions: unmapped first, the
     * daemon frees the memory when it hears of it. */
    for (uint32_t k = 0; k < st->nsets; k++)
        if (st->sets[k].id && vc_weights_is_open(c, st->sets[k].id))
            vc_weights_close(c, st->sets[k].id);
    for (size_t i = 0; i < c->nregions;) {
        if (c->regions[i]->stage == stage)
            vc_region_forget(c, c->regions[i]);
        else
            i++;
    }
    free(st->slot_layer);
    vc_sleep_forget(c, st);
    *st = c->stages[--c->nstages];
    struct vw_req_stage_release m = {.stage = stage};
    return vc_call(c, VW_REQ_STAGE_RELEASE, &m, NULL, NULL);
}

static int do_stage_weights(vram_client *c, uint32_t stage, const char *name,
                            struct vram_weights_info *out)
{
    struct vc_stage *st = vc_stage_get(c, stage);
    if (!st)
        return vc_set_error(c, -ENOENT, "stage %u is not registered by this "
                            "client", stage);
    for (uint32_t k = 0; name && k < st->nsets; k++) {
        const struct vc_stage_set *s = &st->sets[k];
        if (strcmp(s->name, name) != 0)
            continue;
        if (!s->has_key)
            return vc_set_error(c, -ENODATA, "stage %u's reservation '%s' "
                                "names weight set '%s' without a key: open it "
                                "with vram_weights_open", stage, name, s->set);
        if (s->err)
            return vc_set_error(c, s->err, "%s", s->why);
        if (!s->id || !vc_weights_is_open(c, s->id))
            return vc_set_error(c, -ENOENT, "stage %u's weight set '%s' is not "
                                "open here (closed since)", stage, s->set);
        return vram_weights_info(c, s->id, out);
    }
    return vc_set_error(c, -ENOENT, "stage %u has no reservation '%s' that a "
                        "weight set backs", stage, name ? name : "(null)");
}

static int do_stage_info(vram_client *c, uint32_t stage, struct vram_stage_info *out)
{
    struct vc_stage *st = vc_stage_get(c, stage);
    if (!st)
        return vc_set_error(c, -ENOENT, "stage %u is not registered by this "
                            "client", stage);
    *out = st->info;
    return 0;
}

/* ---- regions ------------------------------------------------------------ */

static int do_region_create(vram_client *c, uint32_t stage, enum vram_region_kind kind,
                       uint64_t lane_bytes, uint32_t lanes, uint32_t *region_out)
{
    if ((unsigned)kind > 3)
        return vc_set_error(c, -EINVAL, "unknown region kind %d", (int)kind);
    struct vw_req_region_create m = {
        .stage = stage, .kind = vc_kind_name(kind), .bytes = lane_bytes,
        .has_lanes = true, .lanes = lanes ? lanes : 1};
    struct vw_rep_region_create rep;
    struct vw_arena a = {0};
    int e = vc_call(c, VW_REQ_REGION_CREATE, &m, &rep, &a);
    if (e < 0) {
        vw_arena_free(&a);
        return e;
    }
    uint32_t id = rep.region.id;
    e = vc_region_add(c, &rep.region);
    vw_arena_free(&a);
    if (e < 0) {
        /* We cannot use it: give it back. */
        char keep[512];
        snprintf(keep, sizeof(keep), "%s", c->last_error);
        struct vw_req_region_release rel = {.region = id};
        vc_call(c, VW_REQ_REGION_RELEASE, &rel, NULL, NULL);
        snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
        return e;
    }
    *region_out = id;
    return 0;
}

static int do_region_info(const vram_client *c, uint32_t region,
                     struct vram_region_info *out)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r)
        return vc_set_error((vram_client *)c, -ENOENT, "region %u is not "
                            "this client's", region);
    *out = (struct vram_region_info){
        .id = r->id, .stage = r->stage, .device = r->device,
        .kind = (enum vram_region_kind)r->kind,
        .base = (void *)(uintptr_t)r->base, .lane_stride = r->lane_stride,
        .lanes = r->lanes, .lane_slots = r->lane_slots,
        .chunk_bytes = r->chunk_bytes, .mapped = r->mapped};
    return 0;
}

static int do_region_chunk(const vram_client *c, uint32_t region, uint32_t lane,
                      uint32_t slot, uint64_t *chunk_out)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r || lane >= r->lanes || slot >= r->stride_slots)
        return vc_set_error((vram_client *)c, -ENOENT, "region %u lane %u slot "
                            "%u: no such region of this client, lane or slot",
                            region, lane, slot);
    uint64_t id = r->slot_chunk[lane * r->stride_slots + slot];
    if (id == UINT64_MAX)
        return vc_set_error((vram_client *)c, -ENOENT, "region %u lane %u slot "
                            "%u holds no memory now", region, lane, slot);
    if (chunk_out)
        *chunk_out = id;
    return 0;
}

static void *do_region_slot(const vram_client *c, uint32_t region, uint32_t lane,
                       uint32_t slot)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r || lane >= r->lanes || slot >= r->stride_slots)
        return NULL;
    return (void *)(uintptr_t)vc_slot_addr(r, lane * r->stride_slots + slot);
}

/* Releases chunks after unmapping them (all or nothing, daemon-side). */
static int release(vram_client *c, uint64_t *ids, size_t n)
{
    struct vw_req_chunk_release m = {.chunks = {.v = ids, .n = n}};
    return vc_call(c, VW_REQ_CHUNK_RELEASE, &m, NULL, NULL);
}

/* A request whose reply maps chunks: its map applied, and the chunks the
 * daemon wants back (a trim's surplus, unmap) unmapped, then released. */
static int map_request(vram_client *c, int type, const void *m, void *rep,
                       struct vw_arena *a, const struct vw_u64s *unmap,
                       const struct vw_t_stage *stage)
{
    int e = vc_call(c, type, m, rep, a);
    if (e < 0)
        return e;
    /* The stage's figures first: an EXPERT_SHRINK callback below sees the
     * state after. */
    if (stage)
        vc_stage_update(c, stage);
    e = vc_apply_pending(c);
    if (unmap && unmap->n) {
        uint64_t *ids = malloc(unmap->n * sizeof(*ids));
        size_t n = 0;
        for (size_t i = 0; ids && i < unmap->n; i++)
            if (vc_table_get(&c->chunks, unmap->v[i])) {
                vc_drop_chunk(c, unmap->v[i]);
                ids[n++] = unmap->v[i];
            }
        int e2 = ids ? release(c, ids, n) : -ENOMEM;
        free(ids);
        if (e2 < 0 && !e)
            e = e2;
    }
    return e;
}

/* The replies of kv_reserve, kv_trim and expert_request share these
 * fields; the stage's figures follow the daemon's. */
#define KV_RESULT(c, rep, out)                                                 \
    do {                                                                       \
        vc_stage_update((c), &(rep).stage);                                    \
        if (out)                                                               \
            *(out) = (struct vram_kv_result){                                  \
                .kv_needed_bytes = (rep).kv_needed_bytes,                      \
                .kv_mapped_bytes = (rep).kv_mapped_bytes,                      \
                .expert_loaned_bytes = (rep).expert_loaned_bytes,              \
                .expert_slots_backed = (rep).expert_slots_backed,              \
                .recalled_chunks = (rep).recalled_chunks};                     \
    } while (0)

/* A background request's reply (background.c), applied as map_request
 * applies a reply after vc_call: the stage's figures, then its map; after a
 * refusal, only the map it carries. A kv_reserve's outcome is kept for
 * vram_kv_reserve_result. */
static int applied_later(vram_client *c, int type, void *rep, int err)
{
    struct vc_stage *kv =
        type == VW_REQ_KV_RESERVE ? vc_stage_get(c, c->bg.kv_stage) : NULL;
    if (!rep) {
        if (kv)
            kv->bg_kv_state = err;
        return err;
    }
    if (err == 0 && type == VW_REQ_KV_RESERVE)
        KV_RESULT(c, *(struct vw_rep_kv_reserve *)rep, kv ? &kv->bg_kv : NULL);
    else if (err == 0 && type == VW_REQ_EXPERT_REQUEST)
        vc_stage_update(c, &((struct vw_rep_expert_request *)rep)->stage);
    int e = vc_apply_pending(c);
    int r = err < 0 ? err : e;
    /* Looked up again: an engine's callback (EXPERT_SHRINK) may have
     * registered a stage meanwhile, and the table moved. */
    if (type == VW_REQ_KV_RESERVE && (kv = vc_stage_get(c, c->bg.kv_stage)))
        kv->bg_kv_state = r < 0 ? r : VC_KV_DONE;
    return r;
}

/* With background mapping, a grow returns once its request is sent
 * (VRAM_PENDING); a broken connection is the blocking path's, which
 * connects again. */
static bool later(const vram_client *c)
{
    return vc_bg_wanted(c) && !c->broken;
}

static int do_region_grow(vram_client *c, uint32_t region, uint32_t chunks)
{
    if (!vc_region_get(c, region))
        return vc_set_error(c, -ENOENT, "region %u is not this client's", region);
    struct vw_req_region_grow m = {.region = region, .chunks = chunks};
    if (later(c))
        return vc_bg_request(c, VW_REQ_REGION_GROW, &m, applied_later,
                             "vram_region_grow");
    struct vw_arena a = {0};
    struct vw_rep_region_grow rep;
    int e = map_request(c, VW_REQ_REGION_GROW, &m, &rep, &a, NULL, NULL);
    vw_arena_free(&a);
    return e;
}

static int do_region_shrink(vram_client *c, uint32_t region, uint32_t chunks)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r)
        return vc_set_error(c, -ENOENT, "region %u is not this client's", region);
    uint64_t *ids = malloc(((size_t)r->lanes * chunks + 1) * sizeof(*ids));
    if (!ids)
        return vc_set_error(c, -ENOMEM, "out of memory");
    size_t n = 0;
    for (uint32_t l = 0; l < r->lanes; l++) {
        uint32_t k = 0;
        for (uint32_t i = r->stride_slots; i-- > 0 && k < chunks;) {
            uint64_t id = r->slot_chunk[l * r->stride_slots + i];
            if (id == UINT64_MAX)
                continue;
            vc_drop_chunk(c, id);
            ids[n++] = id;
            k++;
        }
    }
    int e = release(c, ids, n);
    free(ids);
    return e;
}

static int do_region_move_chunk(vram_client *c, uint32_t src_region, uint32_t src_lane,
                           uint32_t src_slot, uint32_t dst_region,
                           uint32_t dst_lane, uint32_t dst_slot)
{
    struct vc_region *a = vc_region_get(c, src_region), *b = vc_region_get(c, dst_region);
    if (!a || !b)
        return vc_set_error(c, -ENOENT, "region %u is not this client's",
                            a ? dst_region : src_region);
    if (src_lane >= a->lanes || src_slot >= a->stride_slots ||
        dst_lane >= b->lanes || dst_slot >= b->stride_slots)
        return vc_set_error(c, -EINVAL, "lane or slot out of range");
    uint64_t id = a->slot_chunk[src_lane * a->stride_slots + src_slot];
    if (id == UINT64_MAX)
        return vc_set_error(c, -ENOENT, "no chunk at lane %u slot %u of region %u",
                            src_lane, src_slot, src_region);
    struct vw_req_chunk_move m = {
        .chunk = id, .region = dst_region,
        .slot = dst_lane * b->stride_slots + dst_slot};
    struct vw_arena ar = {0};
    struct vw_rep_chunk_move rep;
    int e = map_request(c, VW_REQ_CHUNK_MOVE, &m, &rep, &ar, NULL, NULL);
    vw_arena_free(&ar);
    return e;
}

static int do_region_release(vram_client *c, uint32_t region)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r)
        return vc_set_error(c, -ENOENT, "region %u is not this client's", region);
    vc_region_forget(c, r);
    struct vw_req_region_release m = {.region = region};
    return vc_call(c, VW_REQ_REGION_RELEASE, &m, NULL, NULL);
}

/* ---- KV and loans ------------------------------------------------------- */

static int do_kv_reserve(vram_client *c, uint32_t stage, uint64_t prompt,
                    uint64_t output, unsigned flags, struct vram_kv_result *out)
{
    struct vw_req_kv_reserve m = {
        .stage = stage, .prompt_tokens = prompt, .output_tokens = output,
        .has_hold = (flags & VRAM_KV_HOLD) != 0,
        .hold = (flags & VRAM_KV_HOLD) != 0};
    if (later(c)) { /* out: not written, the reply is not here yet */
        int e = vc_bg_request(c, VW_REQ_KV_RESERVE, &m, applied_later,
                              "vram_kv_reserve");
        struct vc_stage *st = vc_stage_get(c, stage);
        if (e == VRAM_PENDING && st) {
            st->bg_kv_state = VC_KV_SENT;
            c->bg.kv_stage = stage;
        }
        return e;
    }
    struct vw_rep_kv_reserve rep = {0};
    struct vw_arena a = {0};
    int e = map_request(c, VW_REQ_KV_RESERVE, &m, &rep, &a, NULL,
                        &rep.stage);
    if (e == 0)
        KV_RESULT(c, rep, out);
    vw_arena_free(&a);
    return e;
}

/* Called with the background finished (every entry finishes it). */
static int do_kv_reserve_result(vram_client *c, uint32_t stage,
                                struct vram_kv_result *out)
{
    if (!out)
        return vc_set_error(c, -EINVAL, "out is NULL");
    struct vc_stage *st = vc_stage_get(c, stage);
    if (!st)
        return vc_set_error(c, -ENOENT, "stage %u is not this client's", stage);
    if (st->bg_kv_state == VC_KV_DONE) {
        *out = st->bg_kv;
        return 0;
    }
    if (st->bg_kv_state < 0)
        return vc_set_error(c, st->bg_kv_state,
                            "stage %u's last background vram_kv_reserve failed "
                            "(%s); vram_client_wait said why, and mapped none "
                            "of it", stage, vram_strerror(st->bg_kv_state));
    return vc_set_error(c, -ENOENT, "stage %u has had no vram_kv_reserve "
                        "answered in the background", stage);
}

static int do_kv_trim(vram_client *c, uint32_t stage, uint64_t tokens)
{
    struct vw_req_kv_trim m = {.stage = stage, .has_tokens = tokens != 0,
                                 .tokens = tokens};
    struct vw_rep_kv_trim rep;
    struct vw_arena a = {0};
    memset(&rep, 0, sizeof(rep));
    int e = vc_call(c, VW_REQ_KV_TRIM, &m, &rep, &a);
    if (e == 0) {
        vc_stage_update(c, &rep.stage);
        e = vc_apply_pending(c);
        struct vw_u64s unmap = rep.unmap;
        /* Unmapping and releasing happens on its own request below. */
        if (unmap.n) {
            uint64_t *ids = malloc(unmap.n * sizeof(*ids));
            size_t n = 0;
            for (size_t i = 0; ids && i < unmap.n; i++)
                if (vc_table_get(&c->chunks, unmap.v[i])) {
                    vc_drop_chunk(c, unmap.v[i]);
                    ids[n++] = unmap.v[i];
                }
            int e2 = ids ? release(c, ids, n) : -ENOMEM;
            free(ids);
            if (e2 < 0 && !e)
                e = e2;
        }
    }
    vw_arena_free(&a);
    return e;
}

static int do_expert_request(vram_client *c, uint32_t stage, uint64_t max_bytes)
{
    struct vw_req_expert_request m = {.stage = stage,
                                        .has_bytes = max_bytes != 0,
                                        .bytes = max_bytes};
    if (later(c))
        return vc_bg_request(c, VW_REQ_EXPERT_REQUEST, &m, applied_later,
                             "vram_expert_request");
    struct vw_rep_expert_request rep = {0};
    struct vw_arena a = {0};
    int e = map_request(c, VW_REQ_EXPERT_REQUEST, &m, &rep, &a, NULL,
                        &rep.stage);
    if (e == 0)
        KV_RESULT(c, rep, (struct vram_kv_result *)NULL);
    vw_arena_free(&a);
    return e;
}

static int do_expert_claim(vram_client *c, uint32_t stage, uint32_t layer,
                      const uint32_t *slots, size_t n)
{
    struct vw_req_expert_claim m = {
        .stage = stage, .layer = layer,
        .slots = {.v = (uint32_t *)slots, .n = n}};
    int e = vc_call(c, VW_REQ_EXPERT_CLAIM, &m, NULL, NULL);
    if (e == 0) /* remembered for a resume */
        vc_stage_claims(c, stage, layer, slots, n);
    return e;
}

static int do_expert_residency(const vram_client *c, uint32_t stage,
                          struct vram_residency *out)
{
    struct vc_stage *st = vc_stage_get(c, stage);
    if (!st)
        return vc_set_error((vram_client *)c, -ENOENT, "stage %u is not "
                            "registered by this client", stage);
    *out = st->res;
    return 0;
}

/* ---- administration and health ------------------------------------------ */

/* vram_admin_set_capacity, vram_admin_evict and vram_client_ping are one
 * request each, generated from the catalogue (gen/vc_stubs.c). */

static int do_status_json(vram_client *c, char **json_out)
{
    struct vw_req_status m = {0};
    struct vw_rep_status rep;
    struct vw_arena a = {0};
    int e = vc_call(c, VW_REQ_STATUS, &m, &rep, &a);
    if (e < 0) {
        vw_arena_free(&a);
        return e;
    }
    /* Written again from what was decoded (what the catalogue says a status
     * is), laid out for people. */
    struct vw_jw w = {0};
    struct vw_enc enc = {.w = &w};
    e = vw_encode_object(&enc, vw_requests[VW_REQ_STATUS].rep, &rep);
    vw_arena_free(&a);
    cJSON *o = e == 0 ? cJSON_Parse(w.p) : NULL;
    vw_jw_free(&w);
    char *s = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    char *copy = s ? strdup(s) : NULL;
    cJSON_free(s);
    if (!copy)
        return -ENOMEM;
    *json_out = copy;
    return 0;
}

/* ---- discovery ---------------------------------------------------------- */

static int do_devices(vram_client *c, struct vram_device_info *out, size_t max)
{
    struct vw_req_status m = {0};
    struct vw_rep_status rep;
    struct vw_arena a = {0};
    int e = vc_call(c, VW_REQ_STATUS, &m, &rep, &a);
    if (e < 0) {
        vw_arena_free(&a);
        return e;
    }
    for (size_t i = 0; out && i < rep.devices.n && i < max; i++) {
        const struct vw_t_device *d = &rep.devices.v[i];
        struct vram_device_info *o = &out[i];
        memset(o, 0, sizeof(*o));
        o->id = d->id;
        snprintf(o->backend, sizeof(o->backend), "%s", d->backend);
        snprintf(o->name, sizeof(o->name), "%s", d->name);
        snprintf(o->uuid, sizeof(o->uuid), "%s", d->uuid ? d->uuid : "");
        o->chunk_bytes = d->chunk_bytes;
        o->capacity_bytes = d->capacity_bytes;
        o->free_bytes = d->free_bytes;
        o->granted_bytes = d->granted_bytes;
        o->loaned_bytes = d->loaned_bytes;
        o->total_bytes = d->total_bytes;
    }
    int n = (int)rep.devices.n;
    vw_arena_free(&a);
    return n;
}

static int do_stage_regions(const vram_client *c, uint32_t stage, uint32_t *ids,
                            size_t max)
{
    if (!vc_stage_get(c, stage))
        return vc_set_error((vram_client *)c, -ENOENT, "stage %u is not "
                            "registered by this client", stage);
    int n = 0;
    for (size_t i = 0; i < c->nregions; i++)
        if (c->regions[i]->stage == stage) {
            if ((size_t)n < max && ids)
                ids[n] = c->regions[i]->id;
            n++;
        }
    return n;
}

static const char *do_region_name(const vram_client *c, uint32_t region)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r)
        return NULL;
    return r->name[0] ? r->name : vc_kind_name(r->kind);
}

static int do_region_lane_slots(const vram_client *c, uint32_t region,
                                uint32_t lane)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r || lane >= r->lanes)
        return vc_set_error((vram_client *)c, -ENOENT, "region %u lane %u: no "
                            "such region of this client, or lane", region, lane);
    return (int)r->lane_counts[lane];
}

static int do_expert_slots(const vram_client *c, uint32_t stage)
{
    struct vc_stage *st = vc_stage_get(c, stage);
    return st ? (int)st->expert_slots
              : vc_set_error((vram_client *)c, -ENOENT, "stage %u is not "
                             "registered by this client", stage);
}

static void *do_expert_slot(const vram_client *c, uint32_t stage, uint32_t slot)
{
    struct vc_stage *st = vc_stage_get(c, stage);
    struct vc_region *r = st && st->info.expert_region
                              ? vc_region_get(c, st->info.expert_region) : NULL;
    if (!r || slot >= st->expert_slots)
        return NULL;
    return (void *)(uintptr_t)(r->base + (uint64_t)slot *
                               st->info.expert_slot_bytes);
}

/* ---- the public calls: each framed by the lock (call_frame.c) ---------- */

void vram_client_set_event_callback(vram_client *c, vram_event_fn fn, void *user)
{
    vc_enter(c);
    do_client_set_event_callback(c, fn, user);
    vc_leave(c, 0);
}

int vram_stage_register(vram_client *c, uint32_t stage, unsigned flags,
                        struct vram_stage_info *out)
{
    vc_enter(c);
    return vc_leave(c, do_stage_register(c, stage, flags, out));
}

int vram_stage_weights(vram_client *c, uint32_t stage, const char *name,
                       struct vram_weights_info *out)
{
    vc_enter(c);
    return vc_leave(c, out ? do_stage_weights(c, stage, name, out)
                           : vc_set_error(c, -EINVAL, "out is NULL"));
}

int vram_stage_register_adhoc(vram_client *c, uint32_t device, uint32_t first,
                              uint32_t last, uint32_t *stage_out)
{
    vc_enter(c);
    return vc_leave(c, do_stage_register_adhoc(c, device, first, last, stage_out));
}

int vram_stage_release(vram_client *c, uint32_t stage)
{
    vc_enter(c);
    return vc_leave(c, do_stage_release(c, stage));
}

int vram_stage_info(vram_client *c, uint32_t stage, struct vram_stage_info *out)
{
    vc_enter(c);
    return vc_leave(c, do_stage_info(c, stage, out));
}

int vram_region_create(vram_client *c, uint32_t stage, enum vram_region_kind kind,
                       uint64_t lane_bytes, uint32_t lanes, uint32_t *region_out)
{
    vc_enter(c);
    return vc_leave(c, do_region_create(c, stage, kind, lane_bytes, lanes, region_out));
}

int vram_region_info(const vram_client *c, uint32_t region,
                     struct vram_region_info *out)
{
    vc_enter(c);
    return vc_leave(c, do_region_info(c, region, out));
}

int vram_region_chunk(const vram_client *c, uint32_t region, uint32_t lane,
                      uint32_t slot, uint64_t *chunk_out)
{
    vc_enter(c);
    return vc_leave(c, do_region_chunk(c, region, lane, slot, chunk_out));
}

void *vram_region_slot(const vram_client *c, uint32_t region, uint32_t lane,
                       uint32_t slot)
{
    vc_enter(c);
    void * r = do_region_slot(c, region, lane, slot);
    vc_leave(c, 0);
    return r;
}

int vram_region_grow(vram_client *c, uint32_t region, uint32_t chunks)
{
    vc_enter(c);
    return vc_leave(c, do_region_grow(c, region, chunks));
}

int vram_region_shrink(vram_client *c, uint32_t region, uint32_t chunks)
{
    vc_enter(c);
    return vc_leave(c, do_region_shrink(c, region, chunks));
}

int vram_region_move_chunk(vram_client *c, uint32_t src_region, uint32_t src_lane,
                           uint32_t src_slot, uint32_t dst_region,
                           uint32_t dst_lane, uint32_t dst_slot)
{
    vc_enter(c);
    return vc_leave(c, do_region_move_chunk(c, src_region, src_lane, src_slot, dst_region, dst_lane, dst_slot));
}

int vram_region_release(vram_client *c, uint32_t region)
{
    vc_enter(c);
    return vc_leave(c, do_region_release(c, region));
}

int vram_kv_reserve(vram_client *c, uint32_t stage, uint64_t prompt,
                    uint64_t output, unsigned flags, struct vram_kv_result *out)
{
    vc_enter(c);
    return vc_leave(c, do_kv_reserve(c, stage, prompt, output, flags, out));
}

int vram_kv_reserve_result(vram_client *c, uint32_t stage,
                           struct vram_kv_result *out)
{
    vc_enter(c);
    return vc_leave(c, do_kv_reserve_result(c, stage, out));
}

int vram_kv_trim(vram_client *c, uint32_t stage, uint64_t tokens)
{
    vc_enter(c);
    return vc_leave(c, do_kv_trim(c, stage, tokens));
}

int vram_expert_request(vram_client *c, uint32_t stage, uint64_t max_bytes)
{
    vc_enter(c);
    return vc_leave(c, do_expert_request(c, stage, max_bytes));
}

int vram_expert_claim(vram_client *c, uint32_t stage, uint32_t layer,
                      const uint32_t *slots, size_t n)
{
    vc_enter(c);
    return vc_leave(c, do_expert_claim(c, stage, layer, slots, n));
}

int vram_expert_residency(const vram_client *c, uint32_t stage,
                          struct vram_residency *out)
{
    vc_enter(c);
    return vc_leave(c, do_expert_residency(c, stage, out));
}

void vram_free(void *p)
{
    free(p);
}

int vram_status_json(vram_client *c, char **json_out)
{
    vc_enter(c);
    return vc_leave(c, do_status_json(c, json_out));
}

int vram_devices(vram_client *c, struct vram_device_info *out, size_t max)
{
    vc_enter(c);
    return vc_leave(c, do_devices(c, out, max));
}

int vram_stage_regions(const vram_client *c, uint32_t stage, uint32_t *ids,
                       size_t max)
{
    vc_enter(c);
    return vc_leave(c, do_stage_regions(c, stage, ids, max));
}

const char *vram_region_name(const vram_client *c, uint32_t region)
{
    vc_enter(c);
    const char *r = do_region_name(c, region);
    vc_leave(c, 0);
    return r;
}

int vram_region_lane_slots(const vram_client *c, uint32_t region, uint32_t lane)
{
    vc_enter(c);
    return vc_leave(c, do_region_lane_slots(c, region, lane));
}

int vram_expert_slots(const vram_client *c, uint32_t stage)
{
    vc_enter(c);
    return vc_leave(c, do_expert_slots(c, stage));
}

void *vram_expert_slot(const vram_client *c, uint32_t stage, uint32_t slot)
{
    vc_enter(c);
    void *r = do_expert_slot(c, stage, slot);
    vc_leave(c, 0);
    return r;
}
