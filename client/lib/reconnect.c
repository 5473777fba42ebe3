/* When the connection to vramd breaks (the daemon restarted, or the socket
 * failed), the memory this process maps stays mapped: the library connects
 * again with backoff, says hello, and declares what it holds (resume); the
 * daemon gives it back under the same ids, at the same addresses. The
 * engine hears VRAM_EVENT_RECONNECTED, and the call that was in flight is
 * sent again (client.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "message.h"
#include "platform.h"

/* Chunks one resume frame carries: [id, region, slot] is at most ~40 bytes
 * of JSON, so a part stays well inside a frame. */
#define CHUNKS_PER_PART 16384

bool vc_can_reconnect(const vram_client *c)
{
    return c->reconnect_ms >= 0 && !c->reconnecting && c->path[0];
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

/* A new connection in place of the broken one, under the same handle
 * number (an engine's event loop keeps waiting on it). */
static int connect_again(vram_client *c)
{
    vp_handle h;
    int e = vp_dial(c->path, &h);
    if (e < 0)
        return e;
    if (!c->blocking)
        vp_conn_set_blocking(h, false);
    e = vp_replace(c->h, &h);
    if (e < 0) {
        vp_close(&h);
        return e;
    }
    vram_wire_fini(&c->wire);
    vc_conn_setup(c);
    c->broken = false;
    c->nasync = 0;
    c->async_error = 0;
    return 0;
}

static void forget_stage(vram_client *c, uint32_t stage)
{
    for (size_t i = 0; i < c->nregions;) {
        if (c->regions[i]->stage == stage)
            vc_region_forget(c, c->regions[i]);
        else
            i++;
    }
    struct vc_stage *st = vc_stage_get(c, stage);
    if (st) {
        free(st->slot_layer);
        *st = c->stages[--c->nstages];
    }
    vc_emit(c, VRAM_EVENT_STAGE_LOST, stage, 0, 0);
}

/* Everything is gone for the daemon: unmap it all here too. */
static void forget_all(vram_client *c)
{
    while (c->nstages)
        forget_stage(c, c->stages[0].id);
    while (c->nregions)
        vc_region_forget(c, c->regions[0]);
    for (size_t i = 0; i < c->chunks.cap; i++)
        if (c->chunks.v[i].id < UINT64_MAX - 1)
            vc_drop_chunk(c, c->chunks.v[i].id);
}

static cJSON *declare_head(vram_client *c, uint32_t old)
{
    static const char *kinds[] = {"kv", "expert", "fixed", "draft_kv"};
    cJSON *m = vc_msg_new("resume");
    vram_json_add_u64(m, "client", old);
    cJSON *sts = cJSON_AddArrayToObject(m, "stages");
    cJSON *claims = cJSON_AddArrayToObject(m, "claims");
    for (size_t i = 0; i < c->nstages; i++) {
        struct vc_stage *st = &c->stages[i];
        cJSON *o = cJSON_CreateObject();
        vram_json_add_u64(o, "id", st->id);
        cJSON_AddBoolToObject(o, "configured", st->configured);
        cJSON_AddBoolToObject(o, "keep_window", st->keep_window);
        vram_json_add_u64(o, "device", st->info.device);
        vram_json_add_u64(o, "first_layer", st->info.first_layer);
        vram_json_add_u64(o, "last_layer", st->info.last_layer);
        cJSON_AddItemToArray(sts, o);
        for (uint32_t k = 0; k < st->nslots && k < st->res.expert_slots_backed;
             k++) {
            if (st->slot_layer[k] == 0xffff)
                continue;
            cJSON *t = cJSON_CreateArray();
            cJSON_AddItemToArray(t, cJSON_CreateNumber(st->id));
            cJSON_AddItemToArray(t, cJSON_CreateNumber(k));
            cJSON_AddItemToArray(t, cJSON_CreateNumber(st->slot_layer[k]));
            cJSON_AddItemToArray(claims, t);
        }
    }
    cJSON *rgs = cJSON_AddArrayToObject(m, "regions");
    for (size_t i = 0; i < c->nregions; i++) {
        struct vc_region *r = c->regions[i];
        cJSON *o = cJSON_CreateObject();
        vram_json_add_u64(o, "id", r->id);
        vram_json_add_u64(o, "stage", r->stage);
        cJSON_AddStringToObject(o, "kind", kinds[r->kind & 3]);
        vram_json_add_u64(o, "base", r->base);
        vram_json_add_u64(o, "lane_stride", r->lane_stride);
        vram_json_add_u64(o, "va_bytes", r->va_bytes);
        cJSON *ls = cJSON_AddArrayToObject(o, "lane_slots");
        for (uint32_t l = 0; l < r->lanes; l++)
            cJSON_AddItemToArray(ls, cJSON_CreateNumber(r->lane_counts[l]));
        cJSON_AddItemToArray(rgs, o);
    }
    return m;
}

/* Sends the declaration (in parts when large) and returns the last reply. */
static int declare(vram_client *c, uint32_t old, cJSON **reply_out)
{
    cJSON *m = declare_head(c, old);
    cJSON *chunks = cJSON_AddArrayToObject(m, "chunks");
    size_t in_part = 0;
    for (size_t i = 0; i < c->chunks.cap; i++) {
        struct vc_chunk *ch = &c->chunks.v[i];
        if (ch->id >= UINT64_MAX - 1 || !ch->region)
            continue;
        cJSON *t = cJSON_CreateArray();
        cJSON_AddItemToArray(t, cJSON_CreateNumber((double)ch->id));
        cJSON_AddItemToArray(t, cJSON_CreateNumber(ch->region));
        cJSON_AddItemToArray(t, cJSON_CreateNumber(ch->slot));
        cJSON_AddItemToArray(chunks, t);
        if (++in_part == CHUNKS_PER_PART) {
            cJSON_AddBoolToObject(m, "more", true);
            cJSON *reply = NULL;
            int e = vc_request(c, m, &reply);
            cJSON_Delete(reply);
            if (e < 0)
                return e;
            m = vc_msg_new("resume");
            vram_json_add_u64(m, "client", old);
            chunks = cJSON_AddArrayToObject(m, "chunks");
            in_part = 0;
        }
    }
    return vc_request(c, m, reply_out);
}

/* What the daemon could not give back is unmapped here; the stages' figures
 * come from the daemon again. Returns the chunks lost. */
static uint32_t apply_resume(vram_client *c, const cJSON *reply)
{
    const cJSON *lost = cJSON_GetObjectItemCaseSensitive(reply, "lost");
    const cJSON *it;
    uint32_t nlost = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(lost, "chunks")) {
        if (!cJSON_IsNumber(it))
            continue;
        uint64_t id = (uint64_t)it->valuedouble;
        if (vc_table_get(&c->chunks, id)) {
            vc_drop_chunk(c, id);
            nlost++;
        }
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(lost, "regions")) {
        uint64_t id;
        if (vram_json_u64(it, "id", &id) == 0 && vc_region_get(c, (uint32_t)id))
            vc_region_forget(c, vc_region_get(c, (uint32_t)id));
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(lost, "stages")) {
        uint64_t id;
        if (vram_json_u64(it, "id", &id) == 0 && vc_stage_get(c, (uint32_t)id))
            forget_stage(c, (uint32_t)id);
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(reply, "stages")) {
        uint64_t id;
        if (vram_json_u64(it, "id", &id) < 0)
            continue;
        struct vc_stage *st = vc_stage_get(c, (uint32_t)id);
        if (st)
            st->res.version = 0; /* the daemon's versions start again */
        vc_stage_update(c, it);
    }
    return nlost;
}

int vc_reconnect(vram_client *c)
{
    char lost_why[512];
    snprintf(lost_why, sizeof(lost_why), "%s", c->last_error);
    c->reconnecting = true;
    uint32_t old = c->id;
    int64_t deadline = vp_now_ms() + c->reconnect_ms;
    int delay = 10, e;
    for (;;) {
        e = connect_again(c);
        if (e == 0) {
            e = vc_hello(c, NULL, 0);
            /* Turned away for good: no point in trying again. */
            if (e == -EACCES || e == -EPERM || e == -EPROTONOSUPPORT ||
                e == -ESTALE || e == -ENOTSUP)
                break;
        }
        if (e == 0 || vp_now_ms() + delay > deadline)
            break;
        vp_sleep_ms(delay);
        delay = delay * 2 > 1000 ? 1000 : delay * 2;
    }
    if (e < 0) {
        c->broken = true;
        c->reconnecting = false;
        return vc_set_error(c, e, "%s; connecting again for %d ms failed: %s",
                            lost_why, c->reconnect_ms, c->last_error);
    }
    uint32_t kept = 0, nlost = 0;
    size_t held = c->chunks.n;
    /* An engine resumes even when it knows of nothing it holds: a call whose
     * reply died with vramd may have given it a stage, a region or chunks,
     * which vramd keeps for it until it says what it has. */
    if (!c->ctl || c->nstages || c->nregions || held) {
        /* The id our memory is under: the one we had, until a resume is
         * answered (a resume that broke half-way may have moved some of it
         * to the id that sent it; the daemon takes both). */
        if (!c->resume_from)
            c->resume_from = old;
        uint32_t sent_as = c->id;
        cJSON *reply = NULL;
        e = declare(c, c->resume_from, &reply);
        if (e == -ENOENT && c->resume_sent_as && !c->broken) {
            e = declare(c, c->resume_sent_as, &reply);
        }
        if (e == 0) {
            nlost = apply_resume(c, reply);
            cJSON_Delete(reply);
            c->resume_from = c->resume_sent_as = 0;
        } else if (c->broken || e == -ETIMEDOUT) {
            /* Not answered: nothing is lost yet; the next call tries
             * again. */
            c->broken = true;
            c->resume_sent_as = sent_as;
        } else {
            /* Refused (vramd lost its state, or we were evicted): nothing
             * is ours any more. */
            nlost = (uint32_t)held;
            forget_all(c);
            c->resume_from = c->resume_sent_as = 0;
            e = 0;
        }
        kept = (uint32_t)c->chunks.n;
    }
    c->reconnecting = false;
    if (e < 0)
        return e;
    if (c->cb) {
        struct vram_event ev = {.type = VRAM_EVENT_RECONNECTED,
                                .nchunks = kept, .lost_chunks = nlost};
        c->cb(c->cb_user, &ev);
    }
    return 0;
}
