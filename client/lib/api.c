/* libvram's public calls on stages, regions, KV budgets, loans and the
 * daemon's administration; each is one request (client.c) whose map
 * entries are applied here (mapping.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "message.h"

/* ---- stages ------------------------------------------------------------- */

static int stage_adopt(vram_client *c, uint32_t id, const cJSON *stage_obj)
{
    if (!vc_stage_get(c, id)) {
        struct vc_stage *v = realloc(c->stages, (c->nstages + 1) * sizeof(*v));
        if (!v)
            return -ENOMEM;
        c->stages = v;
        memset(&v[c->nstages], 0, sizeof(v[0]));
        v[c->nstages++].id = id;
    }
    const cJSON *regions = cJSON_GetObjectItemCaseSensitive(stage_obj, "regions");
    const cJSON *r;
    cJSON_ArrayForEach(r, regions) {
        int e = vc_region_add(c, r);
        if (e < 0)
            return e;
    }
    vc_stage_update(c, stage_obj);
    return 0;
}

static int register_common(vram_client *c, cJSON *m, uint32_t *stage_out,
                           struct vram_stage_info *info)
{
    cJSON *reply;
    int e = vc_request(c, m, &reply);
    if (e < 0)
        return e;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(reply, "stage");
    uint64_t id = 0;
    if (vram_json_u64(st, "id", &id) < 0) {
        vc_clear_pending(c);
        cJSON_Delete(reply);
        return vc_set_error(c, -EPROTO, "stage reply without an id");
    }
    e = stage_adopt(c, (uint32_t)id, st);
    if (e == 0)
        e = vc_apply_pending(c);
    else
        vc_clear_pending(c);
    cJSON_Delete(reply);
    if (e < 0)
        return e;
    if (stage_out)
        *stage_out = (uint32_t)id;
    if (info)
        *info = vc_stage_get(c, (uint32_t)id)->info;
    return 0;
}

int vram_stage_register(vram_client *c, uint32_t stage, unsigned flags,
                        struct vram_stage_info *out)
{
    cJSON *m = vc_msg_new("stage_register");
    vram_json_add_u64(m, "stage", stage);
    if (flags & VRAM_STAGE_KEEP_WINDOW)
        cJSON_AddBoolToObject(m, "keep_window", true);
    int e = register_common(c, m, NULL, out);
    if (e == 0 && vc_stage_get(c, stage)) {
        vc_stage_get(c, stage)->keep_window = flags & VRAM_STAGE_KEEP_WINDOW;
        vc_stage_get(c, stage)->configured = true;
    }
    return e;
}

int vram_stage_register_adhoc(vram_client *c, uint32_t device, uint32_t first,
                              uint32_t last, uint32_t *stage_out)
{
    cJSON *m = vc_msg_new("stage_register");
    vram_json_add_u64(m, "device", device);
    vram_json_add_u64(m, "first_layer", first);
    vram_json_add_u64(m, "last_layer", last);
    return register_common(c, m, stage_out, NULL);
}

int vram_stage_release(vram_client *c, uint32_t stage)
{
    struct vc_stage *st = vc_stage_get(c, stage);
    if (!st)
        return vc_set_error(c, -ENOENT, "stage %u is not registered by this "
                         "client", stage);
    /* Unmap first: the daemon frees the memory when it hears of it. */
    for (size_t i = 0; i < c->nregions;) {
        if (c->regions[i]->stage == stage)
            vc_region_forget(c, c->regions[i]);
        else
            i++;
    }
    free(st->slot_layer);
    *st = c->stages[--c->nstages];
    cJSON *m = vc_msg_new("stage_release");
    vram_json_add_u64(m, "stage", stage);
    return vc_call(c, m);
}

int vram_stage_info(vram_client *c, uint32_t stage, struct vram_stage_info *out)
{
    struct vc_stage *st = vc_stage_get(c, stage);
    if (!st)
        return vc_set_error(c, -ENOENT, "stage %u is not registered by this "
                         "client", stage);
    *out = st->info;
    return 0;
}

/* ---- regions ------------------------------------------------------------ */

int vram_region_create(vram_client *c, uint32_t stage, enum vram_region_kind kind,
                       uint64_t lane_bytes, uint32_t lanes, uint32_t *region_out)
{
    static const char *kinds[] = {"kv", "expert", "fixed", "draft_kv"};
    if ((unsigned)kind > 3)
        return vc_set_error(c, -EINVAL, "unknown region kind %d", (int)kind);
    cJSON *m = vc_msg_new("region_create");
    vram_json_add_u64(m, "stage", stage);
    cJSON_AddStringToObject(m, "kind", kinds[kind]);
    vram_json_add_u64(m, "bytes", lane_bytes);
    vram_json_add_u64(m, "lanes", lanes ? lanes : 1);
    cJSON *reply;
    int e = vc_request(c, m, &reply);
    if (e < 0)
        return e;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(reply, "region");
    uint64_t id = 0;
    vram_json_u64(r, "id", &id);
    e = vc_region_add(c, r);
    cJSON_Delete(reply);
    if (e < 0) {
        /* We cannot use it: give it back. */
        char keep[512];
        snprintf(keep, sizeof(keep), "%s", c->last_error);
        cJSON *rel = vc_msg_new("region_release");
        vram_json_add_u64(rel, "region", id);
        vc_call(c, rel);
        snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
        return e;
    }
    *region_out = (uint32_t)id;
    return 0;
}

int vram_region_info(const vram_client *c, uint32_t region,
                     struct vram_region_info *out)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r)
        return -ENOENT;
    *out = (struct vram_region_info){
        .id = r->id, .stage = r->stage, .device = r->device,
        .kind = (enum vram_region_kind)r->kind,
        .base = (void *)(uintptr_t)r->base, .lane_stride = r->lane_stride,
        .lanes = r->lanes, .lane_slots = r->lane_slots,
        .chunk_bytes = r->chunk_bytes, .mapped = r->mapped};
    return 0;
}

int vram_region_chunk(const vram_client *c, uint32_t region, uint32_t lane,
                      uint32_t slot, uint64_t *chunk_out)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r || lane >= r->lanes || slot >= r->stride_slots)
        return -ENOENT;
    uint64_t id = r->slot_chunk[lane * r->stride_slots + slot];
    if (id == UINT64_MAX)
        return -ENOENT;
    if (chunk_out)
        *chunk_out = id;
    return 0;
}

void *vram_region_slot(const vram_client *c, uint32_t region, uint32_t lane,
                       uint32_t slot)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r || lane >= r->lanes || slot >= r->stride_slots)
        return NULL;
    return (void *)(uintptr_t)vc_slot_addr(r, lane * r->stride_slots + slot);
}

static int simple_map_request(vram_client *c, cJSON *m, cJSON **reply_out)
{
    cJSON *reply;
    int e = vc_request(c, m, &reply);
    if (e < 0)
        return e;
    e = vc_apply_pending(c);
    /* Chunks the daemon wants back (a trim's surplus): unmap, then release. */
    const cJSON *unmap = cJSON_GetObjectItemCaseSensitive(reply, "unmap");
    if (cJSON_GetArraySize(unmap) > 0) {
        cJSON *ids = cJSON_CreateArray();
        const cJSON *it;
        cJSON_ArrayForEach(it, unmap) {
            uint64_t id = (uint64_t)it->valuedouble;
            if (vc_table_get(&c->chunks, id)) {
                vc_drop_chunk(c, id);
                cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)id));
            }
        }
        cJSON *rel = vc_msg_new("chunk_release");
        cJSON_AddItemToObject(rel, "chunks", ids);
        int e2 = vc_call(c, rel);
        if (e2 < 0 && !e)
            e = e2;
    }
    if (reply_out && e == 0)
        *reply_out = reply;
    else
        cJSON_Delete(reply);
    return e;
}

int vram_region_grow(vram_client *c, uint32_t region, uint32_t chunks)
{
    if (!vc_region_get(c, region))
        return vc_set_error(c, -ENOENT, "region %u is not this client's", region);
    cJSON *m = vc_msg_new("region_grow");
    vram_json_add_u64(m, "region", region);
    vram_json_add_u64(m, "chunks", chunks);
    return simple_map_request(c, m, NULL);
}

int vram_region_shrink(vram_client *c, uint32_t region, uint32_t chunks)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r)
        return vc_set_error(c, -ENOENT, "region %u is not this client's", region);
    cJSON *ids = cJSON_CreateArray();
    for (uint32_t l = 0; l < r->lanes; l++) {
        uint32_t n = 0;
        for (uint32_t i = r->stride_slots; i-- > 0 && n < chunks;) {
            uint64_t id = r->slot_chunk[l * r->stride_slots + i];
            if (id == UINT64_MAX)
                continue;
            vc_drop_chunk(c, id);
            cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)id));
            n++;
        }
    }
    cJSON *m = vc_msg_new("chunk_release");
    cJSON_AddItemToObject(m, "chunks", ids);
    return vc_call(c, m);
}

int vram_region_move_chunk(vram_client *c, uint32_t src_region, uint32_t src_lane,
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
    cJSON *m = vc_msg_new("chunk_move");
    vram_json_add_u64(m, "chunk", id);
    vram_json_add_u64(m, "region", dst_region);
    vram_json_add_u64(m, "slot", (uint64_t)dst_lane * b->stride_slots + dst_slot);
    return simple_map_request(c, m, NULL);
}

int vram_region_release(vram_client *c, uint32_t region)
{
    struct vc_region *r = vc_region_get(c, region);
    if (!r)
        return vc_set_error(c, -ENOENT, "region %u is not this client's", region);
    vc_region_forget(c, r);
    cJSON *m = vc_msg_new("region_release");
    vram_json_add_u64(m, "region", region);
    return vc_call(c, m);
}

/* ---- KV and loans ------------------------------------------------------- */

static void fill_kv_result(vram_client *c, uint32_t stage, const cJSON *reply,
                           struct vram_kv_result *out)
{
    vc_stage_update(c, cJSON_GetObjectItemCaseSensitive(reply, "stage"));
    if (!out)
        return;
    struct vram_kv_result r = {0};
    uint64_t v = 0;
    vram_json_u64(reply, "kv_needed_bytes", &r.kv_needed_bytes);
    vram_json_u64(reply, "kv_mapped_bytes", &r.kv_mapped_bytes);
    vram_json_u64(reply, "expert_loaned_bytes", &r.expert_loaned_bytes);
    if (vram_json_u64(reply, "expert_slots_backed", &v) == 0)
        r.expert_slots_backed = (uint32_t)v;
    if (vram_json_u64(reply, "recalled_chunks", &v) == 0)
        r.recalled_chunks = (uint32_t)v;
    (void)stage;
    *out = r;
}

/* A KV or loan request: its map is applied, the stage's figures updated. */
static int stage_request(vram_client *c, uint32_t stage, cJSON *m,
                         struct vram_kv_result *out)
{
    cJSON *reply;
    int e = simple_map_request(c, m, &reply);
    if (e < 0)
        return e;
    fill_kv_result(c, stage, reply, out);
    cJSON_Delete(reply);
    return 0;
}

int vram_kv_reserve(vram_client *c, uint32_t stage, uint64_t prompt,
                    uint64_t output, unsigned flags, struct vram_kv_result *out)
{
    cJSON *m = vc_msg_new("kv_reserve");
    vram_json_add_u64(m, "stage", stage);
    vram_json_add_u64(m, "prompt_tokens", prompt);
    vram_json_add_u64(m, "output_tokens", output);
    if (flags & VRAM_KV_HOLD)
        cJSON_AddBoolToObject(m, "hold", true);
    return stage_request(c, stage, m, out);
}

int vram_kv_trim(vram_client *c, uint32_t stage, uint64_t tokens)
{
    cJSON *m = vc_msg_new("kv_trim");
    vram_json_add_u64(m, "stage", stage);
    if (tokens)
        vram_json_add_u64(m, "tokens", tokens);
    return stage_request(c, stage, m, NULL);
}

int vram_expert_request(vram_client *c, uint32_t stage, uint64_t max_bytes)
{
    cJSON *m = vc_msg_new("expert_request");
    vram_json_add_u64(m, "stage", stage);
    if (max_bytes)
        vram_json_add_u64(m, "bytes", max_bytes);
    return stage_request(c, stage, m, NULL);
}

int vram_expert_claim(vram_client *c, uint32_t stage, uint32_t layer,
                      const uint32_t *slots, size_t n)
{
    cJSON *m = vc_msg_new("expert_claim");
    vram_json_add_u64(m, "stage", stage);
    vram_json_add_u64(m, "layer", layer);
    cJSON *arr = cJSON_AddArrayToObject(m, "slots");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(slots[i]));
    int e = vc_call(c, m);
    if (e == 0) /* remembered for a resume */
        vc_stage_claims(c, stage, layer, slots, n);
    return e;
}

int vram_expert_residency(const vram_client *c, uint32_t stage,
                          struct vram_residency *out)
{
    struct vc_stage *st = vc_stage_get(c, stage);
    if (!st)
        return -ENOENT;
    *out = st->res;
    return 0;
}

int vram_admin_set_capacity(vram_client *c, uint32_t device, uint64_t bytes)
{
    cJSON *m = vc_msg_new("device_set_capacity");
    vram_json_add_u64(m, "device", device);
    vram_json_add_u64(m, "bytes", bytes);
    return vc_call(c, m);
}

int vram_admin_evict(vram_client *c, uint32_t client)
{
    cJSON *m = vc_msg_new("client_evict");
    vram_json_add_u64(m, "client", client);
    return vc_call(c, m);
}

int vram_client_ping(vram_client *c)
{
    return vc_call(c, vc_msg_new("ping"));
}

int vram_status_json(vram_client *c, char **json_out)
{
    cJSON *reply;
    int e = vc_request(c, vc_msg_new("status"), &reply);
    if (e < 0)
        return e;
    cJSON_DeleteItemFromObject(reply, "type");
    cJSON_DeleteItemFromObject(reply, "id");
    cJSON_DeleteItemFromObject(reply, "ok");
    cJSON_DeleteItemFromObject(reply, "map");
    char *s = cJSON_Print(reply);
    cJSON_Delete(reply);
    if (!s)
        return -ENOMEM;
    /* cJSON allocates with malloc by default; hand out a plain copy. */
    char *copy = strdup(s);
    cJSON_free(s);
    if (!copy)
        return -ENOMEM;
    *json_out = copy;
    return 0;
}
