/* libvram: the connection, requests and replies, and events. The public
 * calls on stages and regions are in api.c; what replies map, in mapping.c. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "message.h"
#include "platform.h"

#define DEFAULT_SOCKET "/run/vramd/vramd.sock"

int vc_set_error(vram_client *c, int err, const char *fmt, ...)
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

vram_handle vram_client_fd(const vram_client *c)
{
    return c->h.v;
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

/* ---- sending ------------------------------------------------------------ */

static int flush_blocking(vram_client *c)
{
    int64_t deadline = vp_now_ms() + c->timeout_ms;
    for (;;) {
        int r = vram_wire_flush(&c->wire);
        if (r == 0)
            return 0;
        if (r != -EAGAIN) {
            c->broken = true;
            return vc_set_error(c, r, "lost the connection to vramd: %s",
                             strerror(-r));
        }
        int64_t left = deadline - vp_now_ms();
        if (left <= 0)
            return vc_set_error(c, -ETIMEDOUT, "timed out sending to vramd");
        vp_conn_wait(c->h, VP_WRITABLE, (int)left);
    }
}

static int send_msg(vram_client *c, cJSON *msg, uint64_t *id_out)
{
    if (c->broken)
        return vc_set_error(c, -ENOTCONN, "the connection to vramd is closed");
    uint64_t id = ++c->next_id;
    cJSON_DeleteItemFromObjectCaseSensitive(msg, "id"); /* sent again */
    vram_json_add_u64(msg, "id", id);
    int r = vram_msg_queue(&c->wire, msg, NULL, 0);
    if (r < 0)
        return vc_set_error(c, r, "cannot queue a request: %s", strerror(-r));
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
        struct vc_stage *st = vc_stage_get(c, (uint32_t)stage);
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
        vc_emit(c, VRAM_EVENT_BUDGET_CHANGED, (uint32_t)stage, 0, 0);
    } else if (strcmp(ev, "recall") == 0) {
        const cJSON *chunks = cJSON_GetObjectItemCaseSensitive(msg, "chunks");
        uint64_t deadline = 0;
        vram_json_u64(msg, "deadline_ms", &deadline);
        vc_emit(c, VRAM_EVENT_RECALL, (uint32_t)stage,
             (uint32_t)cJSON_GetArraySize(chunks), (uint32_t)deadline);
        cJSON *ids = cJSON_CreateArray();
        const cJSON *it;
        cJSON_ArrayForEach(it, chunks) {
            if (!cJSON_IsNumber(it))
                continue;
            uint64_t id = (uint64_t)it->valuedouble;
            if (vc_table_get(&c->chunks, id)) {
                vc_drop_chunk(c, id);
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

static int on_frame(void *ud, struct vram_codec_frame *f)
{
    struct frame_ctx *x = ud;
    vram_client *c = x->c;
    if (f->version != VRAM_PROTOCOL_VERSION) {
        c->broken = true;
        x->err = vc_set_error(c, -EPROTONOSUPPORT, "protocol version mismatch: "
                           "client %d, server %u", VRAM_PROTOCOL_VERSION,
                           f->version);
        return -EPROTONOSUPPORT;
    }
    cJSON *msg = cJSON_ParseWithLength(f->payload, f->len);
    if (!msg) {
        x->err = vc_set_error(c, -EPROTO, "the daemon sent a frame that is not JSON");
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
            int e = vc_gather_map(c, msg, f);
            if (e < 0)
                x->err = e;
            if (!more) {
                c->reply = msg;
                msg = NULL;
                /* Frames behind the reply (a budget event often follows it
                 * in the same receive) are handled too: no stop. */
                ret = 0;
            }
        } else if (id == 0 && !cJSON_IsTrue(cJSON_GetObjectItem(msg, "ok"))) {
            /* A connection-level error (version, limits): the daemon closes. */
            x->err = vc_set_error(c, vram_errno_from_name(vram_json_str(msg, "error")),
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
    int64_t deadline = vp_now_ms() + c->timeout_ms;
    c->await_id = id;
    /* Waiting for a reply on a blocking socket, receives simply wait (up
     * to SO_RCVTIMEO): no poll, and no receive that only says EAGAIN. */
    c->wire.rx_block = id && c->blocking;
    if (id && !c->blocking)
        vp_conn_wait(c->h, VP_READABLE, c->timeout_ms);
    for (;;) {
        char why[256];
        int r = vram_wire_read(&c->wire, on_frame, &x, why, sizeof(why));
        if (r < 0 && !x.err) {
            c->broken = true;
            x.err = vc_set_error(c, r == -ENOTCONN ? -ECONNRESET : r,
                              "lost the connection to vramd: %s", why);
        }
        if (x.err && (c->broken || r < 0))
            break;
        if (r > 0 || !id || c->reply)
            break;
        if (c->wire.rx_block) { /* the receive timed out: check the deadline */
            if (vp_now_ms() >= deadline) {
                x.err = vc_set_error(c, -ETIMEDOUT, "no reply from vramd within "
                                  "%d ms", c->timeout_ms);
                break;
            }
            continue;
        }
        int64_t left = deadline - vp_now_ms();
        if (left <= 0) {
            x.err = vc_set_error(c, -ETIMEDOUT, "no reply from vramd within %d ms",
                              c->timeout_ms);
            break;
        }
        vp_conn_wait(c->h, VP_READABLE, (int)left);
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

/* Requests whose effect the library made before sending (it unmapped and
 * forgot the memory): after a reconnect the resume already left them out,
 * so they are done, not sent again. */
static bool done_by_resume(const cJSON *msg)
{
    const char *t = vram_json_str(msg, "type");
    return t && (!strcmp(t, "chunk_release") || !strcmp(t, "region_release") ||
                 !strcmp(t, "stage_release"));
}

/* Sends msg (consumed) and waits for its reply. On success *reply_out holds
 * the final reply (caller deletes) and its map entries are applied. When
 * the connection breaks, the library connects again, takes back what it
 * holds and sends the request once more (nothing of the failed attempt was
 * applied: its map entries are dropped with their fds). */
int vc_request(vram_client *c, cJSON *msg, cJSON **reply_out)
{
    int e;
    for (int attempt = 0;; attempt++) {
        uint64_t id;
        e = send_msg(c, msg, &id);
        if (e == 0)
            e = pump(c, id, NULL);
        if (e < 0 && c->broken && attempt == 0 && vc_can_reconnect(c)) {
            vc_clear_pending(c);
            cJSON_Delete(c->reply);
            c->reply = NULL;
            char keep[512];
            snprintf(keep, sizeof(keep), "%s", c->last_error);
            int r = vc_reconnect(c);
            if (r < 0) {
                e = r;
                break;
            }
            if (done_by_resume(msg)) {
                cJSON_Delete(msg);
                cJSON *ok = cJSON_CreateObject();
                cJSON_AddBoolToObject(ok, "ok", true);
                *reply_out = ok;
                return 0;
            }
            continue;
        }
        break;
    }
    cJSON_Delete(msg);
    cJSON *reply = c->reply;
    c->reply = NULL;
    if (e < 0) {
        vc_clear_pending(c);
        cJSON_Delete(reply);
        return e;
    }
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok"))) {
        const char *m = vram_json_str(reply, "message");
        e = vc_set_error(c, vram_errno_from_name(vram_json_str(reply, "error")),
                      "%s", m ? m : "request refused");
        /* Even a refused reply may carry chunks that were mapped. */
        if (c->npend) {
            char keep[512];
            snprintf(keep, sizeof(keep), "%s", c->last_error);
            vc_apply_pending(c);
            snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
        }
        cJSON_Delete(reply);
        return e;
    }
    *reply_out = reply;
    return 0;
}

cJSON *vc_msg_new(const char *type)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", type);
    return m;
}

/* A request whose reply carries nothing the caller needs. */
int vc_call(vram_client *c, cJSON *msg)
{
    cJSON *reply;
    int e = vc_request(c, msg, &reply);
    if (e == 0)
        cJSON_Delete(reply);
    return e;
}

/* ---- connection --------------------------------------------------------- */

/* The connection's settings, on a new one and on one made again. */
void vc_conn_setup(vram_client *c)
{
    vram_wire_init(&c->wire, c->h);
    c->blocking = vp_conn_blocking(c->h);
    if (c->blocking) /* bounds each blocking receive; deadlines are ours */
        vp_conn_set_recv_timeout(c->h, 200);
}

int vram_client_connect_fd(vram_handle fd, const struct vram_client_options *opt,
                           vram_client **out)
{
    /* Every chunk a client holds keeps a handle open (a memory object, or
     * the exported handle of a CUDA chunk): a GPU's worth of 2 MiB chunks
     * is tens of thousands. */
    vp_raise_handle_limit();
    vp_handle h = {fd};
    vram_client *c = calloc(1, sizeof(*c));
    if (!c) {
        vp_close(&h);
        return -ENOMEM;
    }
    vp_set_noinherit(h);
    c->h = h;
    c->timeout_ms = opt && opt->timeout_ms > 0 ? opt->timeout_ms : 30000;
    c->mapper = &vc_host_mapper;
    vc_conn_setup(c);

    snprintf(c->name, sizeof(c->name), "%s", opt && opt->name ? opt->name : "");
    if (!c->name[0])
        snprintf(c->name, sizeof(c->name), "pid-%lld", (long long)vp_self_pid());
    c->ctl = opt && opt->ctl;
    c->peer_access = opt && opt->peer_access;
    c->reconnect_ms = opt && opt->reconnect_ms ? opt->reconnect_ms
                      : c->ctl                 ? -1
                                               : 30000;
    /* Where to connect again: the peer's address. */
    if (vp_conn_peer_path(h, c->path, sizeof(c->path)) < 0)
        c->path[0] = '\0';
    int e = vc_hello(c, opt ? opt->error : NULL, opt ? opt->error_len : 0);
    if (e < 0) {
        vram_wire_fini(&c->wire);
        vp_close(&c->h);
        free(c);
        return e;
    }
    *out = c;
    return 0;
}

/* Says hello on the connection: the client id and the backend; loads the mapper for
 * a GPU backend the first time. */
int vc_hello(vram_client *c, char *error, size_t error_len)
{
    cJSON *m = vc_msg_new("hello");
    vram_json_add_u64(m, "version", VRAM_PROTOCOL_VERSION);
    cJSON *caps = cJSON_AddArrayToObject(m, "capabilities");
    cJSON_AddItemToArray(caps, cJSON_CreateString("fd-passing"));
    cJSON_AddItemToArray(caps, cJSON_CreateString("host-map"));
    cJSON_AddStringToObject(m, "role", c->ctl ? "ctl" : "engine");
    cJSON_AddStringToObject(m, "name", c->name);
    cJSON *reply = NULL;
    bool was = c->reconnecting;
    c->reconnecting = true; /* a hello is never sent again by itself */
    int e = vc_request(c, m, &reply);
    c->reconnecting = was;
    if (e == -EPIPE || e == -ECONNRESET || e == -ENOTCONN) {
        /* A daemon that turns us away says why in one frame, then closes;
         * the hello may have hit the closed socket: read what it said. */
        struct frame_ctx x = {.c = c};
        char why[256];
        c->broken = false;
        vram_wire_read(&c->wire, on_frame, &x, why, sizeof(why));
        if (x.err)
            e = x.err;
        c->broken = true;
    }
    if (e < 0) {
        if (error && error_len)
            snprintf(error, error_len, "%s", c->last_error);
        return e;
    }
    uint64_t id = 0;
    vram_json_u64(reply, "client", &id);
    c->id = (uint32_t)id;
    const char *be = vram_json_str(reply, "backend");
    char backend[16];
    snprintf(backend, sizeof(backend), "%s", be ? be : "host");
    cJSON_Delete(reply);
    if (c->backend[0] && strcmp(backend, c->backend) != 0) {
        c->broken = true;
        return vc_set_error(c, -ESTALE, "vramd came back with the %s backend, "
                            "not %s: what this client holds is not its memory",
                            backend, c->backend);
    }
    snprintf(c->backend, sizeof(c->backend), "%s", backend);
    /* Control clients map nothing: they never load a GPU driver (a process
     * that starts CUDA can no longer fork CUDA-using children). */
    if (strcmp(c->backend, "host") != 0 && !c->ctl &&
        c->mapper == &vc_host_mapper) {
        char why[256];
        const struct vc_mapper *mp = vc_cuda_mapper(c, why, sizeof(why));
        if (!mp) {
            if (error && error_len)
                snprintf(error, error_len, "%s", why);
            return -ENOTSUP;
        }
        c->mapper = mp;
    }
    return 0;
}

int vram_client_connect(const char *path, const struct vram_client_options *opt,
                        vram_client **out)
{
    if (!path || !*path)
        path = getenv("VRAM_SOCKET");
    if (!path || !*path)
        path = DEFAULT_SOCKET;
    vp_handle h;
    int e = vp_dial(path, &h);
    return e < 0 ? e : vram_client_connect_fd(h.v, opt, out);
}

void vram_client_close(vram_client *c)
{
    if (!c)
        return;
    c->reconnect_ms = -1; /* closing: a broken connection stays broken */
    /* Give stages back properly so their chunks return to the pool at once
     * rather than after this process exits. */
    while (c->nstages > 0 && !c->broken)
        if (vram_stage_release(c, c->stages[0].id) < 0)
            break;
    while (c->nregions)
        vc_region_forget(c, c->regions[0]);
    /* Anything still held (e.g. after a broken connection). */
    for (size_t i = 0; i < c->chunks.cap; i++)
        if (c->chunks.v[i].id < UINT64_MAX - 1)
            c->mapper->release(c, &c->chunks.v[i]);
    vc_table_free(&c->chunks);
    if (c->mapper->destroy)
        c->mapper->destroy(c);
    vc_clear_pending(c);
    free(c->pend);
    free(c->regions);
    for (size_t i = 0; i < c->nstages; i++)
        free(c->stages[i].slot_layer);
    free(c->stages);
    cJSON_Delete(c->reply);
    vram_wire_fini(&c->wire);
    vp_close(&c->h);
    free(c);
}

int vram_client_dispatch(vram_client *c)
{
    int events = 0;
    int e = c->broken ? -ENOTCONN : pump(c, 0, &events);
    if (e < 0 && c->broken && vc_can_reconnect(c)) {
        e = vc_reconnect(c);
        events++; /* RECONNECTED */
    } else if (c->broken && e == 0) {
        e = vc_set_error(c, -ENOTCONN, "the connection to vramd is closed");
    }
    return e < 0 ? e : events;
}
