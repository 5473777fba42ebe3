/* libvram: connection, requests and replies, events, and the public calls. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "message.h"

#define DEFAULT_SOCKET "/run/vramd/vramd.sock"

static int set_error(vram_client *c, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
    va_end(ap);
    return err;
}

const char *vram_strerror(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
    case EPROTONOSUPPORT: return "protocol version mismatch";
    case EXDEV: return "foreign chunk (belongs to another device)";
    case EDQUOT: return "over the client's quota";
    case EADDRINUSE: return "the region's address is in use in this process";
    case ETIMEDOUT: return "timed out (a hold bound or the request timeout)";
    case ECONNREFUSED: return "no daemon is listening on the socket";
    default: return strerror(err);
    }
}

const char *vram_client_last_error(const vram_client *c)
{
    return c ? c->last_error : "";
}

uint32_t vram_client_id(const vram_client *c)
{
    return c->id;
}

const char *vram_client_backend(const vram_client *c)
{
    return c->backend;
}

int vram_client_fd(const vram_client *c)
{
    return c->fd;
}

void vram_client_set_event_callback(vram_client *c, vram_event_fn fn, void *user)
{
    c->cb = fn;
    c->cb_user = user;
}

size_t vram_client_chunks_held(const vram_client *c)
{
    return c->chunks.n;
}

/* ---- lookups ------------------------------------------------------------ */

static struct vc_region *region_get(const vram_client *c, uint32_t id)
{
    for (size_t i = 0; i < c->nregions; i++)
        if (c->regions[i]->id == id)
            return c->regions[i];
    return NULL;
}

static struct vc_stage *stage_get(const vram_client *c, uint32_t id)
{
    for (size_t i = 0; i < c->nstages; i++)
        if (c->stages[i].id == id)
            return &c->stages[i];
    return NULL;
}

static uint64_t slot_addr(const struct vc_region *r, uint32_t slot)
{
    return r->base + (uint64_t)slot * r->chunk_bytes;
}

/* ---- mapping ------------------------------------------------------------ */

static int unmap_chunk(vram_client *c, struct vc_chunk *ch)
{
    if (!ch->region)
        return 0;
    struct vc_region *r = region_get(c, ch->region);
    int e = 0;
    if (r) {
        e = c->mapper->unmap(c, ch, slot_addr(r, ch->slot), r->chunk_bytes);
        r->slot_chunk[ch->slot] = UINT64_MAX;
        r->mapped--;
    }
    ch->region = 0;
    ch->slot = 0;
    return e;
}

static int map_chunk(vram_client *c, struct vc_chunk *ch, struct vc_region *r,
                     uint32_t slot)
{
    if (slot >= r->lanes * r->stride_slots || r->slot_chunk[slot] != UINT64_MAX)
        return set_error(c, -EPROTO, "daemon mapped chunk %llu over slot %u "
                         "of region %u, which is taken or out of range",
                         (unsigned long long)ch->id, slot, r->id);
    if (ch->device != r->device)
        return set_error(c, -EXDEV, "foreign chunk: chunk %llu of device %u "
                         "offered to region %u of device %u",
                         (unsigned long long)ch->id, ch->device, r->id,
                         r->device);
    int e = c->mapper->map(c, ch, slot_addr(r, slot), r->chunk_bytes);
    if (e < 0)
        return e;
    ch->region = r->id;
    ch->slot = slot;
    r->slot_chunk[slot] = ch->id;
    r->mapped++;
    return 0;
}

/* Drops a held chunk: unmapped, handle closed, forgotten. */
static void drop_chunk(vram_client *c, uint64_t id)
{
    struct vc_chunk *ch = vc_table_get(&c->chunks, id);
    if (!ch)
        return;
    unmap_chunk(c, ch);
    c->mapper->release(c, ch);
    vc_table_del(&c->chunks, id);
}

static void emit(vram_client *c, enum vram_event_type type, uint32_t stage,
                 uint32_t n, uint32_t deadline)
{
    if (!c->cb)
        return;
    struct vc_stage *st = stage_get(c, stage);
    struct vram_event ev = {.type = type, .stage = stage, .nchunks = n,
                            .deadline_ms = deadline};
    if (st) {
        ev.residency_version = st->res.version;
        ev.expert_slots_backed = st->res.expert_slots_backed;
        ev.expert_loaned_bytes = st->res.expert_loaned_bytes;
    }
    c->cb(c->cb_user, &ev);
}

/* Applies the map entries gathered from a reply: new chunks are imported and
 * mapped, known chunks are moved. Engines hear of expert slots leaving before
 * they are unmapped. */
static int apply_pending(vram_client *c)
{
    int err = 0;
    uint32_t shrink_stage = 0, shrinking = 0;
    for (size_t i = 0; i < c->npend; i++) {
        struct pending_map *p = &c->pend[i];
        struct vc_chunk *ch = p->fd < 0 ? vc_table_get(&c->chunks, p->chunk) : NULL;
        struct vc_region *from = ch && ch->region ? region_get(c, ch->region) : NULL;
        if (from && from->kind == VRAM_REGION_EXPERT) {
            shrink_stage = from->stage;
            shrinking++;
        }
    }
    if (shrinking)
        emit(c, VRAM_EVENT_EXPERT_SHRINK, shrink_stage, shrinking, 0);

    for (size_t i = 0; i < c->npend; i++) {
        struct pending_map *p = &c->pend[i];
        struct vc_region *r = region_get(c, p->region);
        int e = 0;
        if (!r) {
            e = set_error(c, -EPROTO, "daemon mapped chunk %llu into unknown "
                          "region %u", (unsigned long long)p->chunk, p->region);
        } else if (p->fd >= 0) {
            struct vc_chunk ch = {.id = p->chunk, .fd = -1, .device = r->device};
            if (vc_table_get(&c->chunks, p->chunk)) {
                e = set_error(c, -EPROTO, "daemon sent chunk %llu twice",
                              (unsigned long long)p->chunk);
            } else if ((e = c->mapper->import(c, &ch, p->fd, r->chunk_bytes)) == 0) {
                p->fd = -1; /* the import owns it now */
                if ((e = vc_table_put(&c->chunks, &ch)) == 0)
                    e = map_chunk(c, vc_table_get(&c->chunks, ch.id), r, p->slot);
                else
                    c->mapper->release(c, &ch);
            }
        } else {
            struct vc_chunk *ch = vc_table_get(&c->chunks, p->chunk);
            if (!ch) {
                e = set_error(c, -EPROTO, "daemon moved chunk %llu, which this "
                              "client does not hold", (unsigned long long)p->chunk);
            } else if (ch->device != r->device) {
                e = set_error(c, -EXDEV, "foreign chunk: chunk %llu of device "
                              "%u moved to region %u of device %u",
                              (unsigned long long)p->chunk, ch->device, r->id,
                              r->device);
            } else {
                unmap_chunk(c, ch);
                e = map_chunk(c, ch, r, p->slot);
            }
        }
        if (p->fd >= 0)
            close(p->fd);
        p->fd = -1;
        if (e < 0 && !err)
            err = e;
    }
    c->npend = 0;
    return err;
}

static void clear_pending(vram_client *c)
{
    for (size_t i = 0; i < c->npend; i++)
        if (c->pend[i].fd >= 0)
            close(c->pend[i].fd);
    c->npend = 0;
}

/* Takes the map entries of one reply frame, with their fds. */
static int gather_map(vram_client *c, const cJSON *msg,
                      struct vram_wire_frame *f)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(msg, "map");
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        uint64_t chunk, region, slot, fdi;
        if (vram_json_u64(e, "chunk", &chunk) < 0 ||
            vram_json_u64(e, "region", &region) < 0 ||
            vram_json_u64(e, "slot", &slot) < 0)
            return set_error(c, -EPROTO, "malformed map entry from the daemon");
        int fd = -1;
        int r = vram_json_u64(e, "fd", &fdi);
        if (r == 0) {
            if (fdi >= (uint64_t)f->nfds || f->fds[fdi] < 0)
                return set_error(c, -EPROTO, "map entry names fd %llu; the "
                                 "frame carried %d", (unsigned long long)fdi,
                                 f->nfds);
            fd = f->fds[fdi];
            f->fds[fdi] = -1;
        }
        if (c->npend == c->cappend) {
            size_t cap = c->cappend ? c->cappend * 2 : 64;
            struct pending_map *v = realloc(c->pend, cap * sizeof(*v));
            if (!v) {
                if (fd >= 0)
                    close(fd);
                return -ENOMEM;
            }
            c->pend = v;
            c->cappend = cap;
        }
        c->pend[c->npend++] = (struct pending_map){
            .chunk = chunk, .region = (uint32_t)region, .slot = (uint32_t)slot,
            .fd = fd};
    }
    return 0;
}

/* ---- sending ------------------------------------------------------------ */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int flush_blocking(vram_client *c)
{
    int64_t deadline = now_ms() + c->timeout_ms;
    for (;;) {
        int r = vram_wire_flush(&c->wire);
        if (r == 0)
            return 0;
        if (r != -EAGAIN) {
            c->broken = true;
            return set_error(c, r, "lost the connection to vramd: %s",
                             strerror(-r));
        }
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return set_error(c, -ETIMEDOUT, "timed out sending to vramd");
        struct pollfd p = {.fd = c->fd, .events = POLLOUT};
        poll(&p, 1, (int)left);
    }
}

static int send_msg(vram_client *c, cJSON *msg, uint64_t *id_out)
{
    if (c->broken)
        return set_error(c, -ENOTCONN, "the connection to vramd is closed");
    uint64_t id = ++c->next_id;
    vram_json_add_u64(msg, "id", id);
    int r = vram_msg_queue(&c->wire, msg, NULL, 0);
    if (r < 0)
        return set_error(c, r, "cannot queue a request: %s", strerror(-r));
    r = flush_blocking(c);
    if (r < 0)
        return r;
    *id_out = id;
    return 0;
}

/* ---- receiving ---------------------------------------------------------- */

static void send_async_release(vram_client *c, cJSON *ids);

static void handle_event(vram_client *c, const cJSON *msg)
{
    char why[256];
    if (vram_msg_validate_event(msg, why, sizeof(why)) < 0)
        return; /* unknown events are tolerated */
    const char *ev = vram_json_str(msg, "event");
    uint64_t stage = 0;
    vram_json_u64(msg, "stage", &stage);
    if (strcmp(ev, "budget_changed") == 0) {
        struct vc_stage *st = stage_get(c, (uint32_t)stage);
        uint64_t v = 0, backed = 0, loaned = 0;
        vram_json_u64(msg, "residency_version", &v);
        vram_json_u64(msg, "expert_slots_backed", &backed);
        vram_json_u64(msg, "expert_loaned_bytes", &loaned);
        if (st && v >= st->res.version) {
            st->res.version = v;
            st->res.expert_slots_backed = (uint32_t)backed;
            st->res.expert_loaned_bytes = loaned;
            st->info.expert_slots_backed = (uint32_t)backed;
            st->info.expert_loaned_bytes = loaned;
        }
        emit(c, VRAM_EVENT_BUDGET_CHANGED, (uint32_t)stage, 0, 0);
    } else if (strcmp(ev, "recall") == 0) {
        const cJSON *chunks = cJSON_GetObjectItemCaseSensitive(msg, "chunks");
        uint64_t deadline = 0;
        vram_json_u64(msg, "deadline_ms", &deadline);
        emit(c, VRAM_EVENT_RECALL, (uint32_t)stage,
             (uint32_t)cJSON_GetArraySize(chunks), (uint32_t)deadline);
        cJSON *ids = cJSON_CreateArray();
        const cJSON *it;
        cJSON_ArrayForEach(it, chunks) {
            if (!cJSON_IsNumber(it))
                continue;
            uint64_t id = (uint64_t)it->valuedouble;
            if (vc_table_get(&c->chunks, id)) {
                drop_chunk(c, id);
                cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)id));
            }
        }
        send_async_release(c, ids);
        cJSON_Delete(ids);
    }
}

struct frame_ctx {
    vram_client *c;
    int events;
    int err;
};

static int on_frame(void *ud, struct vram_wire_frame *f)
{
    struct frame_ctx *x = ud;
    vram_client *c = x->c;
    if (f->version != VRAM_PROTOCOL_VERSION) {
        c->broken = true;
        x->err = set_error(c, -EPROTONOSUPPORT, "protocol version mismatch: "
                           "client %d, server %u", VRAM_PROTOCOL_VERSION,
                           f->version);
        return -EPROTONOSUPPORT;
    }
    cJSON *msg = cJSON_ParseWithLength(f->payload, f->len);
    if (!msg) {
        x->err = set_error(c, -EPROTO, "the daemon sent a frame that is not JSON");
        return -EPROTO;
    }
    const char *type = vram_json_str(msg, "type");
    int ret = 0;
    if (type && strcmp(type, "event") == 0) {
        handle_event(c, msg);
        x->events++;
    } else if (type && strcmp(type, "reply") == 0) {
        uint64_t id = 0;
        bool more = false;
        vram_json_u64(msg, "id", &id);
        vram_json_bool(msg, "more", &more);
        if (c->await_id && id == c->await_id) {
            int e = gather_map(c, msg, f);
            if (e < 0)
                x->err = e;
            if (!more) {
                c->reply = msg;
                msg = NULL;
                /* Greedy receives deliver the whole buffer (a budget event
                 * often follows its reply in the same receive): no stop. */
                ret = c->wire.rx_greedy ? 0 : 1;
            }
        } else if (id == 0 && !cJSON_IsTrue(cJSON_GetObjectItem(msg, "ok"))) {
            /* A connection-level error (version, limits): the daemon closes. */
            x->err = set_error(c, vram_errno_from_name(vram_json_str(msg, "error")),
                               "%s", vram_json_str(msg, "message")
                                         ? vram_json_str(msg, "message") : "refused");
            c->broken = true;
            ret = 1;
        } else {
            for (size_t i = 0; i < c->nasync; i++)
                if (c->async_ids[i] == id) {
                    if (!cJSON_IsTrue(cJSON_GetObjectItem(msg, "ok")))
                        c->async_error = vram_errno_from_name(
                            vram_json_str(msg, "error"));
                    if (!more)
                        c->async_ids[i] = c->async_ids[--c->nasync];
                    break;
                }
        }
    }
    cJSON_Delete(msg);
    return ret;
}

/* Reads until the reply to id is complete (or, with id 0, until the socket
 * is drained). */
static int pump(vram_client *c, uint64_t id, int *events)
{
    struct frame_ctx x = {.c = c};
    int64_t deadline = now_ms() + c->timeout_ms;
    c->await_id = id;
    /* Waiting for a reply on a blocking socket, receives simply wait (up
     * to SO_RCVTIMEO): no poll, and no receive that only says EAGAIN. */
    c->wire.rx_block = id && c->blocking;
    if (id && !c->blocking) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        poll(&p, 1, c->timeout_ms);
    }
    for (;;) {
        char why[256];
        int r = vram_wire_read(&c->wire, on_frame, &x, why, sizeof(why));
        if (r < 0 && !x.err) {
            c->broken = true;
            x.err = set_error(c, r == -ENOTCONN ? -ECONNRESET : r,
                              "lost the connection to vramd: %s", why);
        }
        if (x.err && (c->broken || r < 0))
            break;
        if (r > 0 || !id || c->reply)
            break;
        if (c->wire.rx_block) { /* the receive timed out: check the deadline */
            if (now_ms() >= deadline) {
                x.err = set_error(c, -ETIMEDOUT, "no reply from vramd within "
                                  "%d ms", c->timeout_ms);
                break;
            }
            continue;
        }
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            x.err = set_error(c, -ETIMEDOUT, "no reply from vramd within %d ms",
                              c->timeout_ms);
            break;
        }
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        poll(&p, 1, (int)left);
    }
    c->await_id = 0;
    c->wire.rx_block = false;
    if (events)
        *events = x.events;
    return x.err;
}

static void send_async_release(vram_client *c, cJSON *ids)
{
    if (cJSON_GetArraySize(ids) == 0 || c->broken)
        return;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "chunk_release");
    cJSON_AddItemReferenceToObject(m, "chunks", ids);
    uint64_t id;
    if (send_msg(c, m, &id) == 0 && c->nasync < 64)
        c->async_ids[c->nasync++] = id;
    cJSON_Delete(m);
}

/* Sends msg (consumed) and waits for its reply. On success *reply_out holds
 * the final reply (caller deletes) and its map entries are applied. */
static int request(vram_client *c, cJSON *msg, cJSON **reply_out)
{
    uint64_t id;
    int e = send_msg(c, msg, &id);
    cJSON_Delete(msg);
    if (e < 0)
        return e;
    e = pump(c, id, NULL);
    cJSON *reply = c->reply;
    c->reply = NULL;
    if (e < 0) {
        clear_pending(c);
        cJSON_Delete(reply);
        return e;
    }
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok"))) {
        const char *m = vram_json_str(reply, "message");
        e = set_error(c, vram_errno_from_name(vram_json_str(reply, "error")),
                      "%s", m ? m : "request refused");
        /* Even a refused reply may carry chunks that were mapped. */
        if (c->npend) {
            char keep[512];
            snprintf(keep, sizeof(keep), "%s", c->last_error);
            apply_pending(c);
            snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
        }
        cJSON_Delete(reply);
        return e;
    }
    *reply_out = reply;
    return 0;
}

static cJSON *msg_new(const char *type)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", type);
    return m;
}

/* A request whose reply carries nothing the caller needs. */
static int call(vram_client *c, cJSON *msg)
{
    cJSON *reply;
    int e = request(c, msg, &reply);
    if (e == 0)
        cJSON_Delete(reply);
    return e;
}


/* ---- regions and stages from replies ------------------------------------ */

static int region_add(vram_client *c, const cJSON *o)
{
    uint64_t id, stage, device, base, stride, lanes, slots, stride_slots, cb;
    if (vram_json_u64(o, "id", &id) < 0 || vram_json_u64(o, "stage", &stage) < 0 ||
        vram_json_u64(o, "device", &device) < 0 ||
        vram_json_u64(o, "base", &base) < 0 ||
        vram_json_u64(o, "lane_stride", &stride) < 0 ||
        vram_json_u64(o, "lanes", &lanes) < 0 ||
        vram_json_u64(o, "lane_slots", &slots) < 0 ||
        vram_json_u64(o, "stride_slots", &stride_slots) < 0 ||
        vram_json_u64(o, "chunk_bytes", &cb) < 0 || !cb || !lanes)
        return set_error(c, -EPROTO, "malformed region from the daemon");
    if (region_get(c, (uint32_t)id))
        return 0;
    struct vc_region *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->id = (uint32_t)id;
    r->stage = (uint32_t)stage;
    r->device = (uint32_t)device;
    const char *kind = vram_json_str(o, "kind");
    static const char *kinds[] = {"kv", "expert", "fixed", "draft_kv"};
    for (int k = 0; kind && k < 4; k++)
        if (strcmp(kind, kinds[k]) == 0)
            r->kind = k;
    r->base = base;
    r->lane_stride = stride;
    r->lanes = (uint32_t)lanes;
    r->lane_slots = (uint32_t)slots;
    r->stride_slots = (uint32_t)stride_slots;
    r->chunk_bytes = cb;
    size_t n = (size_t)lanes * stride_slots;
    r->slot_chunk = malloc(n * sizeof(uint64_t));
    r->lane_counts = malloc(lanes * sizeof(uint32_t));
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
    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(o, "lane_slot_counts");
    for (uint32_t l = 0; l < lanes; l++) {
        const cJSON *x = cJSON_GetArrayItem(counts, (int)l);
        r->lane_counts[l] = x && cJSON_IsNumber(x) ? (uint32_t)x->valuedouble
                                                    : (uint32_t)slots;
    }
    /* The daemon says how much address space the region holds (whole
     * alignment units); older daemons did not: then exactly its lanes. */
    r->va_bytes = lanes * stride;
    uint64_t vb;
    if (vram_json_u64(o, "va_bytes", &vb) == 0 && vb >= r->va_bytes)
        r->va_bytes = vb;
    int e = c->mapper->reserve(c, base, r->va_bytes);
    if (e < 0) {
        free(r->slot_chunk);
        free(r->lane_counts);
        free(r);
        return e;
    }
    c->regions[c->nregions++] = r;
    return 0;
}

static void region_forget(vram_client *c, struct vc_region *r)
{
    for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++)
        if (r->slot_chunk[k] != UINT64_MAX)
            drop_chunk(c, r->slot_chunk[k]);
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

static void stage_update(vram_client *c, const cJSON *o)
{
    uint64_t id, v;
    if (!o || vram_json_u64(o, "id", &id) < 0)
        return;
    struct vc_stage *st = stage_get(c, (uint32_t)id);
    if (!st)
        return;
    struct vram_stage_info *in = &st->info;
    in->stage = (uint32_t)id;
    if (vram_json_u64(o, "device", &v) == 0) in->device = (uint32_t)v;
    if (vram_json_u64(o, "first_layer", &v) == 0) in->first_layer = (uint32_t)v;
    if (vram_json_u64(o, "last_layer", &v) == 0) in->last_layer = (uint32_t)v;
    vram_json_u64(o, "kv_mapped_bytes", &in->kv_mapped_bytes);
    vram_json_u64(o, "kv_max_bytes", &in->kv_max_bytes);
    vram_json_u64(o, "expert_loaned_bytes", &in->expert_loaned_bytes);
    vram_json_u64(o, "expert_slot_bytes", &in->expert_slot_bytes);
    if (vram_json_u64(o, "expert_slots_backed", &v) == 0)
        in->expert_slots_backed = (uint32_t)v;
    uint64_t ver = 0;
    vram_json_u64(o, "residency_version", &ver);
    if (ver >= st->res.version) {
        st->res.version = ver;
        st->res.expert_slots_backed = in->expert_slots_backed;
        st->res.expert_loaned_bytes = in->expert_loaned_bytes;
    }
    const cJSON *regions = cJSON_GetObjectItemCaseSensitive(o, "regions");
    const cJSON *r;
    cJSON_ArrayForEach(r, regions) {
        const char *kind = vram_json_str(r, "kind");
        uint64_t rid;
        if (!kind || vram_json_u64(r, "id", &rid) < 0)
            continue;
        if (strcmp(kind, "kv") == 0)
            in->kv_region = (uint32_t)rid;
        else if (strcmp(kind, "expert") == 0)
            in->expert_region = (uint32_t)rid;
    }
}

/* ---- connection --------------------------------------------------------- */

int vram_client_connect_fd(int fd, const struct vram_client_options *opt,
                           vram_client **out)
{
    vram_client *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return -ENOMEM;
    }
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl >= 0)
        fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC);
    c->fd = fd;
    c->timeout_ms = opt && opt->timeout_ms > 0 ? opt->timeout_ms : 30000;
    c->mapper = &vc_host_mapper;
    vram_wire_init(&c->wire, fd);
    /* One receive takes a whole reply, and the events behind it. The daemon
     * sends each frame with one sendmsg and fds only with a frame's first
     * byte, which is what greedy receives need to place fds. */
    c->wire.rx_greedy = true;
    int fl = fcntl(fd, F_GETFL);
    c->blocking = fl >= 0 && !(fl & O_NONBLOCK);
    if (c->blocking) { /* bounds each blocking receive; deadlines are ours */
        struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    }

    cJSON *m = msg_new("hello");
    vram_json_add_u64(m, "version", VRAM_PROTOCOL_VERSION);
    cJSON *caps = cJSON_AddArrayToObject(m, "capabilities");
    cJSON_AddItemToArray(caps, cJSON_CreateString("fd-passing"));
    cJSON_AddItemToArray(caps, cJSON_CreateString("host-map"));
    cJSON_AddStringToObject(m, "role", opt && opt->ctl ? "ctl" : "engine");
    char name[64];
    snprintf(name, sizeof(name), "%s",
             opt && opt->name ? opt->name : "");
    if (!name[0])
        snprintf(name, sizeof(name), "pid-%d", (int)getpid());
    cJSON_AddStringToObject(m, "name", name);
    cJSON *reply = NULL;
    int e = request(c, m, &reply);
    if (e == -EPIPE || e == -ECONNRESET || e == -ENOTCONN) {
        /* A daemon that turns us away says why in one frame, then closes;
         * the hello may have hit the closed socket: read what it said. */
        struct frame_ctx x = {.c = c};
        char why[256];
        c->broken = false;
        vram_wire_read(&c->wire, on_frame, &x, why, sizeof(why));
        if (x.err)
            e = x.err;
    }
    if (e < 0) {
        if (opt && opt->error && opt->error_len)
            snprintf(opt->error, opt->error_len, "%s", c->last_error);
        vram_wire_fini(&c->wire);
        close(fd);
        free(c);
        return e;
    }
    uint64_t id = 0;
    vram_json_u64(reply, "client", &id);
    c->id = (uint32_t)id;
    const char *be = vram_json_str(reply, "backend");
    snprintf(c->backend, sizeof(c->backend), "%s", be ? be : "host");
    cJSON_Delete(reply);
    /* Control clients map nothing: they never load a GPU driver (a process
     * that starts CUDA can no longer fork CUDA-using children). */
    if (strcmp(c->backend, "host") != 0 && !(opt && opt->ctl)) {
        char why[256];
        c->peer_access = opt && opt->peer_access;
        const struct vc_mapper *mp = vc_cuda_mapper(c, why, sizeof(why));
        if (!mp && !(opt && opt->ctl)) {
            if (opt && opt->error && opt->error_len)
                snprintf(opt->error, opt->error_len, "%s", why);
            vram_wire_fini(&c->wire);
            close(fd);
            free(c);
            return -ENOTSUP;
        }
        if (mp)
            c->mapper = mp;
    }
    *out = c;
    return 0;
}

int vram_client_connect(const char *path, const struct vram_client_options *opt,
                        vram_client **out)
{
    if (!path || !*path)
        path = getenv("VRAM_SOCKET");
    if (!path || !*path)
        path = DEFAULT_SOCKET;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return vram_client_connect_fd(fd, opt, out);
}

void vram_client_close(vram_client *c)
{
    if (!c)
        return;
    /* Give stages back properly so their chunks return to the pool at once
     * rather than after this process exits. */
    while (c->nstages > 0 && !c->broken)
        if (vram_stage_release(c, c->stages[0].id) < 0)
            break;
    while (c->nregions)
        region_forget(c, c->regions[0]);
    /* Anything still held (e.g. after a broken connection). */
    for (size_t i = 0; i < c->chunks.cap; i++)
        if (c->chunks.v[i].id < UINT64_MAX - 1)
            c->mapper->release(c, &c->chunks.v[i]);
    vc_table_free(&c->chunks);
    if (c->mapper->destroy)
        c->mapper->destroy(c);
    clear_pending(c);
    free(c->pend);
    free(c->regions);
    free(c->stages);
    cJSON_Delete(c->reply);
    vram_wire_fini(&c->wire);
    close(c->fd);
    free(c);
}

int vram_client_dispatch(vram_client *c)
{
    if (c->broken)
        return set_error(c, -ENOTCONN, "the connection to vramd is closed");
    int events = 0;
    int e = pump(c, 0, &events);
    return e < 0 ? e : events;
}

/* ---- stages ------------------------------------------------------------- */

static int stage_adopt(vram_client *c, uint32_t id, const cJSON *stage_obj)
{
    if (!stage_get(c, id)) {
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
        int e = region_add(c, r);
        if (e < 0)
            return e;
    }
    stage_update(c, stage_obj);
    return 0;
}

static int register_common(vram_client *c, cJSON *m, uint32_t *stage_out,
                           struct vram_stage_info *info)
{
    cJSON *reply;
    int e = request(c, m, &reply);
    if (e < 0)
        return e;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(reply, "stage");
    uint64_t id = 0;
    if (vram_json_u64(st, "id", &id) < 0) {
        clear_pending(c);
        cJSON_Delete(reply);
        return set_error(c, -EPROTO, "stage reply without an id");
    }
    e = stage_adopt(c, (uint32_t)id, st);
    if (e == 0)
        e = apply_pending(c);
    else
        clear_pending(c);
    cJSON_Delete(reply);
    if (e < 0)
        return e;
    if (stage_out)
        *stage_out = (uint32_t)id;
    if (info)
        *info = stage_get(c, (uint32_t)id)->info;
    return 0;
}

int vram_stage_register(vram_client *c, uint32_t stage, unsigned flags,
                        struct vram_stage_info *out)
{
    cJSON *m = msg_new("stage_register");
    vram_json_add_u64(m, "stage", stage);
    if (flags & VRAM_STAGE_KEEP_WINDOW)
        cJSON_AddBoolToObject(m, "keep_window", true);
    return register_common(c, m, NULL, out);
}

int vram_stage_register_adhoc(vram_client *c, uint32_t device, uint32_t first,
                              uint32_t last, uint32_t *stage_out)
{
    cJSON *m = msg_new("stage_register");
    vram_json_add_u64(m, "device", device);
    vram_json_add_u64(m, "first_layer", first);
    vram_json_add_u64(m, "last_layer", last);
    return register_common(c, m, stage_out, NULL);
}

int vram_stage_release(vram_client *c, uint32_t stage)
{
    struct vc_stage *st = stage_get(c, stage);
    if (!st)
        return set_error(c, -ENOENT, "stage %u is not registered by this "
                         "client", stage);
    /* Unmap first: the daemon frees the memory when it hears of it. */
    for (size_t i = 0; i < c->nregions;) {
        if (c->regions[i]->stage == stage)
            region_forget(c, c->regions[i]);
        else
            i++;
    }
    *st = c->stages[--c->nstages];
    cJSON *m = msg_new("stage_release");
    vram_json_add_u64(m, "stage", stage);
    return call(c, m);
}

int vram_stage_info(vram_client *c, uint32_t stage, struct vram_stage_info *out)
{
    struct vc_stage *st = stage_get(c, stage);
    if (!st)
        return set_error(c, -ENOENT, "stage %u is not registered by this "
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
        return set_error(c, -EINVAL, "unknown region kind %d", (int)kind);
    cJSON *m = msg_new("region_create");
    vram_json_add_u64(m, "stage", stage);
    cJSON_AddStringToObject(m, "kind", kinds[kind]);
    vram_json_add_u64(m, "bytes", lane_bytes);
    vram_json_add_u64(m, "lanes", lanes ? lanes : 1);
    cJSON *reply;
    int e = request(c, m, &reply);
    if (e < 0)
        return e;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(reply, "region");
    uint64_t id = 0;
    vram_json_u64(r, "id", &id);
    e = region_add(c, r);
    cJSON_Delete(reply);
    if (e < 0) {
        /* We cannot use it: give it back. */
        char keep[512];
        snprintf(keep, sizeof(keep), "%s", c->last_error);
        cJSON *rel = msg_new("region_release");
        vram_json_add_u64(rel, "region", id);
        call(c, rel);
        snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
        return e;
    }
    *region_out = (uint32_t)id;
    return 0;
}

int vram_region_info(const vram_client *c, uint32_t region,
                     struct vram_region_info *out)
{
    struct vc_region *r = region_get(c, region);
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

void *vram_region_slot(const vram_client *c, uint32_t region, uint32_t lane,
                       uint32_t slot)
{
    struct vc_region *r = region_get(c, region);
    if (!r || lane >= r->lanes || slot >= r->stride_slots)
        return NULL;
    return (void *)(uintptr_t)slot_addr(r, lane * r->stride_slots + slot);
}

static int simple_map_request(vram_client *c, cJSON *m, cJSON **reply_out)
{
    cJSON *reply;
    int e = request(c, m, &reply);
    if (e < 0)
        return e;
    e = apply_pending(c);
    /* Chunks the daemon wants back (a trim's surplus): unmap, then release. */
    const cJSON *unmap = cJSON_GetObjectItemCaseSensitive(reply, "unmap");
    if (cJSON_GetArraySize(unmap) > 0) {
        cJSON *ids = cJSON_CreateArray();
        const cJSON *it;
        cJSON_ArrayForEach(it, unmap) {
            uint64_t id = (uint64_t)it->valuedouble;
            if (vc_table_get(&c->chunks, id)) {
                drop_chunk(c, id);
                cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)id));
            }
        }
        cJSON *rel = msg_new("chunk_release");
        cJSON_AddItemToObject(rel, "chunks", ids);
        int e2 = call(c, rel);
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
    if (!region_get(c, region))
        return set_error(c, -ENOENT, "region %u is not this client's", region);
    cJSON *m = msg_new("region_grow");
    vram_json_add_u64(m, "region", region);
    vram_json_add_u64(m, "chunks", chunks);
    return simple_map_request(c, m, NULL);
}

int vram_region_shrink(vram_client *c, uint32_t region, uint32_t chunks)
{
    struct vc_region *r = region_get(c, region);
    if (!r)
        return set_error(c, -ENOENT, "region %u is not this client's", region);
    cJSON *ids = cJSON_CreateArray();
    for (uint32_t l = 0; l < r->lanes; l++) {
        uint32_t n = 0;
        for (uint32_t i = r->stride_slots; i-- > 0 && n < chunks;) {
            uint64_t id = r->slot_chunk[l * r->stride_slots + i];
            if (id == UINT64_MAX)
                continue;
            drop_chunk(c, id);
            cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)id));
            n++;
        }
    }
    cJSON *m = msg_new("chunk_release");
    cJSON_AddItemToObject(m, "chunks", ids);
    return call(c, m);
}

int vram_region_move_chunk(vram_client *c, uint32_t src_region, uint32_t src_lane,
                           uint32_t src_slot, uint32_t dst_region,
                           uint32_t dst_lane, uint32_t dst_slot)
{
    struct vc_region *a = region_get(c, src_region), *b = region_get(c, dst_region);
    if (!a || !b)
        return set_error(c, -ENOENT, "region %u is not this client's",
                         a ? dst_region : src_region);
    if (src_lane >= a->lanes || src_slot >= a->stride_slots ||
        dst_lane >= b->lanes || dst_slot >= b->stride_slots)
        return set_error(c, -EINVAL, "lane or slot out of range");
    uint64_t id = a->slot_chunk[src_lane * a->stride_slots + src_slot];
    if (id == UINT64_MAX)
        return set_error(c, -ENOENT, "no chunk at lane %u slot %u of region %u",
                         src_lane, src_slot, src_region);
    cJSON *m = msg_new("chunk_move");
    vram_json_add_u64(m, "chunk", id);
    vram_json_add_u64(m, "region", dst_region);
    vram_json_add_u64(m, "slot", (uint64_t)dst_lane * b->stride_slots + dst_slot);
    return simple_map_request(c, m, NULL);
}

int vram_region_release(vram_client *c, uint32_t region)
{
    struct vc_region *r = region_get(c, region);
    if (!r)
        return set_error(c, -ENOENT, "region %u is not this client's", region);
    region_forget(c, r);
    cJSON *m = msg_new("region_release");
    vram_json_add_u64(m, "region", region);
    return call(c, m);
}

/* ---- KV and loans ------------------------------------------------------- */

static void fill_kv_result(vram_client *c, uint32_t stage, const cJSON *reply,
                           struct vram_kv_result *out)
{
    stage_update(c, cJSON_GetObjectItemCaseSensitive(reply, "stage"));
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
    cJSON *m = msg_new("kv_reserve");
    vram_json_add_u64(m, "stage", stage);
    vram_json_add_u64(m, "prompt_tokens", prompt);
    vram_json_add_u64(m, "output_tokens", output);
    if (flags & VRAM_KV_HOLD)
        cJSON_AddBoolToObject(m, "hold", true);
    return stage_request(c, stage, m, out);
}

int vram_kv_trim(vram_client *c, uint32_t stage, uint64_t tokens)
{
    cJSON *m = msg_new("kv_trim");
    vram_json_add_u64(m, "stage", stage);
    if (tokens)
        vram_json_add_u64(m, "tokens", tokens);
    return stage_request(c, stage, m, NULL);
}

int vram_expert_request(vram_client *c, uint32_t stage, uint64_t max_bytes)
{
    cJSON *m = msg_new("expert_request");
    vram_json_add_u64(m, "stage", stage);
    if (max_bytes)
        vram_json_add_u64(m, "bytes", max_bytes);
    return stage_request(c, stage, m, NULL);
}

int vram_expert_claim(vram_client *c, uint32_t stage, uint32_t layer,
                      const uint32_t *slots, size_t n)
{
    cJSON *m = msg_new("expert_claim");
    vram_json_add_u64(m, "stage", stage);
    vram_json_add_u64(m, "layer", layer);
    cJSON *arr = cJSON_AddArrayToObject(m, "slots");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(slots[i]));
    return call(c, m);
}

int vram_expert_residency(const vram_client *c, uint32_t stage,
                          struct vram_residency *out)
{
    struct vc_stage *st = stage_get(c, stage);
    if (!st)
        return -ENOENT;
    *out = st->res;
    return 0;
}

int vram_admin_set_capacity(vram_client *c, uint32_t device, uint64_t bytes)
{
    cJSON *m = msg_new("device_set_capacity");
    vram_json_add_u64(m, "device", device);
    vram_json_add_u64(m, "bytes", bytes);
    return call(c, m);
}

int vram_admin_evict(vram_client *c, uint32_t client)
{
    cJSON *m = msg_new("client_evict");
    vram_json_add_u64(m, "client", client);
    return call(c, m);
}

int vram_client_ping(vram_client *c)
{
    return call(c, msg_new("ping"));
}

int vram_status_json(vram_client *c, char **json_out)
{
    cJSON *reply;
    int e = request(c, msg_new("status"), &reply);
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
