/* SPDX-License-Identifier: Apache-2.0 */
/* Connecting to vramd, hello, and connecting again after the connection
 * broke (the daemon restarted, or the socket failed): the memory this
 * process maps stays mapped; the library connects again with backoff, says
 * hello, and declares what it holds (resume); the daemon gives it back
 * under the same ids, at the same addresses. The engine hears
 * VRAM_EVENT_RECONNECTED, and the call in flight is sent again (call.c).
 * The API layer: it calls the protocol, state and transport layers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/chunk_table.h"
#include "client/lib/client_record.h"
#include "client/lib/connect.h"
#include "client/lib/error.h"
#include "client/lib/events.h"
#include "client/lib/mappers.h"
#include "client/lib/mapping.h"
#include "platform/platform.h"
#include "client/lib/protocol.h"
#include "client/lib/region_table.h"
#include "client/lib/stage_table.h"
#include "client/lib/transport.h"

#define DEFAULT_SOCKET VP_DEFAULT_ENDPOINT

/* Chunks one resume frame carries: [id, region, slot] is at most ~40 bytes
 * of JSON, so a part stays well inside a frame. */
#define CHUNKS_PER_PART 16384

/* ---- hello and the first connection ------------------------------------- */

static int connect_again(vram_client *c);

/* One hello, m's versions offered; the refusal of a daemon that turns us
 * away is read even when it closed first. */
static int say_hello(vram_client *c, const struct vw_req_hello *m,
                     struct vw_rep_hello *rep, struct vw_arena *a)
{
    bool was = c->reconnecting;
    c->reconnecting = true; /* a hello is never sent again by itself */
    c->version = 0;         /* until the reply: frames of any version */
    int e = vc_rpc(c, VW_REQ_HELLO, m, rep, a);
    c->reconnecting = was;
    if (e == -EPIPE || e == -ECONNRESET || e == -ENOTCONN) {
        /* A daemon that turns us away says why in one frame, then closes;
         * the hello may have hit the closed socket: read what it said. */
        c->broken = false;
        int r = vc_rpc_poll(c, NULL);
        if (r < 0)
            e = r;
        c->broken = true;
    }
    return e;
}

int vc_hello(vram_client *c, char *error, size_t error_len)
{
    static const char *caps[] = {"fd-passing", "host-map"};
    struct vw_req_hello m = {
        .version = VW_PROTOCOL_VERSION,
        .has_min_version = true,
        .min_version = VW_PROTOCOL_OLDEST,
        .capabilities = {.v = (const char **)caps, .n = 2},
        .role = c->ctl ? "ctl" : "engine",
        .name = c->name,
    };
    struct vw_rep_hello rep;
    struct vw_arena a = {0};
    int e = say_hello(c, &m, &rep, &a);
    if (e == -EPROTONOSUPPORT && VW_PROTOCOL_OLDEST == 1 &&
        VW_PROTOCOL_VERSION > 1 && c->path[0]) {
        /* A vramd of version 1 (release 0.1.0) knows no range: it refuses
         * any version but its own, and closes. Said again at version 1 on
         * a new connection, the hello is one it knows. When that fails
         * too, the first refusal says more. */
        char first[sizeof(c->last_error)];
        snprintf(first, sizeof(first), "%s", c->last_error);
        vw_arena_free(&a);
        m.version = 1;
        m.has_min_version = false;
        int r = connect_again(c);
        if (r < 0)
            e = vc_set_error(c, r, "%s; connecting again to say hello at "
                             "version 1 failed: %s", first, strerror(-r));
        else if ((r = say_hello(c, &m, &rep, &a)) == -EPROTONOSUPPORT)
            vc_set_error(c, e, "%s", first);
        else
            e = r;
    }
    if (e == 0 && (rep.version < VW_PROTOCOL_OLDEST || rep.version > m.version ||
                   (m.has_min_version && rep.version < m.min_version))) {
        c->broken = true;
        e = vc_set_error(c, -EPROTONOSUPPORT, "vramd answered protocol version "
                         "%u, not one of the %u to %u this libvram offered",
                         rep.version, m.has_min_version ? m.min_version : m.version,
                         m.version);
    }
    if (e < 0) {
        if (error && error_len)
            snprintf(error, error_len, "%s", c->last_error);
        vw_arena_free(&a);
        return e;
    }
    c->version = (uint16_t)rep.version;
    c->wire.codec.version = c->version;
    c->id = rep.client;
    char backend[16];
    snprintf(backend, sizeof(backend), "%s", rep.backend);
    vw_arena_free(&a);
    if (c->backend[0] && strcmp(backend, c->backend) != 0) {
        c->broken = true;
        return vc_set_error(c, -ESTALE, "vramd came back with the %s backend, "
                            "not %s: what this client holds is not its memory",
                            backend, c->backend);
    }
    snprintf(c->backend, sizeof(c->backend), "%s", backend);
    /* Control clients map nothing: they never load a GPU driver (a process
     * that starts CUDA can no longer fork CUDA-using children). */
    if (c->ctl && !c->mapper)
        c->mapper = &vc_host_mapper; /* maps nothing it is not given */
    if (!c->ctl && !c->mapper) {
        char why[256];
        const struct vc_mapper *mp = vc_mapper_open(c, c->backend, why, sizeof(why));
        if (!mp) {
            if (error && error_len)
                snprintf(error, error_len, "%s", why);
            return vc_set_error(c, -ENOTSUP, "%s", why);
        }
        c->mapper = mp;
    }
    return 0;
}

#define VC_HANDLE_TABLE 16384

int vram_client_connect_fd(vram_handle fd, const struct vram_client_options *opt,
                           vram_client **out)
{
    /* Every chunk a client holds keeps a handle open (a memory object, or
     * the exported handle of a CUDA chunk): a GPU's worth of 2 MiB chunks
     * is tens of thousands. */
    vp_raise_handle_limit();
    /* Room for 32 GiB of 2 MiB chunks' handles (128 KiB of the kernel's),
     * grown now, once a process, rather than doubling under a grant: a
     * kernel grace period here (platform/handle.h), none in the grants.
     * A control client (vramctl, a metrics exporter) holds no chunks. */
    if (!opt || !opt->ctl)
        vp_reserve_handle_table(VC_HANDLE_TABLE);
    vp_handle h = {fd};
    vram_client *c = calloc(1, sizeof(*c));
    if (!c) {
        vp_close(&h);
        return -ENOMEM;
    }
    vp_set_noinherit(h);
    c->port = &vc_state_port; /* how the protocol layer reaches the state */
    c->h = h;
    c->thread_h = c->retired = VP_NONE;
    c->timeout_ms = opt && opt->timeout_ms > 0 ? opt->timeout_ms : 30000;
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
        vw_wire_fini(&c->wire);
        if (c->mapper && c->mapper->destroy)
            c->mapper->destroy(c);
        vp_close(&c->h);
        free(c);
        return e;
    }
    *out = c;
    return 0;
}

/* Dials path; where vramd runs as a system service (Windows), only that
 * service's process is talked to: the one $VRAM_SERVICE names (empty: no
 * check), else for the default endpoint the default service. */
static int dial(const char *path, vp_handle *h, char *why, size_t whylen)
{
    const char *svc = getenv("VRAM_SERVICE");
    if (!svc)
        svc = strcmp(path, DEFAULT_SOCKET) == 0 ? VP_DEFAULT_SERVICE : NULL;
    return vp_dial_daemon(path, svc, h, why, whylen);
}

int vram_client_connect(const char *path, const struct vram_client_options *opt,
                        vram_client **out)
{
    if (!path || !*path)
        path = getenv("VRAM_SOCKET");
    if (!path || !*path)
        path = DEFAULT_SOCKET;
    vp_handle h;
    char why[256];
    int e = dial(path, &h, why, sizeof(why));
    if (e < 0) {
        /* The caller's error text says what failed, and where. */
        if (opt && opt->error && opt->error_len && why[0])
            snprintf(opt->error, opt->error_len, "cannot connect to vramd at "
                     "%s: %s (set VRAM_SERVICE to the service that serves it, "
                     "or to nothing to skip the check)", path, why);
        else if (opt && opt->error && opt->error_len)
            snprintf(opt->error, opt->error_len, "cannot connect to vramd at "
                     "%s: %s%s", path, vram_strerror(e),
                     e == -ENOENT || e == -ECONNREFUSED
                         ? " (is vramd running? $VRAM_SOCKET names another "
                           "socket)"
                         : e == -EACCES ? " (not in the socket's group?)" : "");
        return e;
    }
    e = vram_client_connect_fd(h.v, opt, out);
    if (e < 0 && opt && opt->error && opt->error_len) {
        snprintf(why, sizeof(why), "%s", opt->error);
        snprintf(opt->error, opt->error_len, "vramd at %s: %s", path,
                 why[0] ? why : vram_strerror(e));
    }
    return e;
}

/* ---- again, after the connection broke ---------------------------------- */

bool vc_can_reconnect(const vram_client *c)
{
    return c->reconnect_ms >= 0 && !c->reconnecting && c->path[0];
}

/* A new connection in place of the broken one, under the same handle
 * number where the platform can keep it (POSIX: an engine's event loop
 * keeps waiting on it). */
static int connect_again(vram_client *c)
{
    vp_handle h;
    char why[256];
    int e = dial(c->path, &h, why, sizeof(why));
    if (e < 0)
        return e;
    if (!c->blocking)
        vp_conn_set_blocking(h, false);
    e = vp_replace(c->h, &h);
    if (e == -ENOSYS) {
        /* Windows: no handle value can be made to name another pipe, so the
         * connection takes the new one's (vram_client_fd changes; vram.h).
         * The event thread may be waiting on the old one at this moment:
         * then it is closed when the thread comes back (event_thread.c), not
         * under its wait. */
        if (c->thread && vp_same(c->thread_h, c->h)) {
            vp_close(&c->retired);
            c->retired = c->h;
        } else {
            vp_close(&c->h);
        }
        c->h = h;
        e = 0;
    }
    if (e < 0) {
        vp_close(&h);
        return e;
    }
    vw_wire_fini(&c->wire);
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
        vc_sleep_forget(c, st);
        *st = c->stages[--c->nstages];
    }
    struct vram_event ev = {.type = VRAM_EVENT_STAGE_LOST, .stage = stage};
    vc_emit(c, &ev);
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

/* What this process holds, as resume's arrays (in a): its stages, claims
 * and regions; chunks are added by part. */
static int declare_head(vram_client *c, struct vw_req_resume *m,
                        struct vw_arena *a)
{
    m->stages.v = vw_arena_alloc(a, (c->nstages + 1) * sizeof(*m->stages.v));
    m->regions.v = vw_arena_alloc(a, (c->nregions + 1) * sizeof(*m->regions.v));
    size_t nclaims = 0;
    for (size_t i = 0; i < c->nstages; i++)
        nclaims += c->stages[i].nslots;
    m->claims.v = vw_arena_alloc(a, (nclaims + 1) * sizeof(*m->claims.v));
    if (!m->stages.v || !m->regions.v || !m->claims.v)
        return -ENOMEM;
    for (size_t i = 0; i < c->nstages; i++) {
        struct vc_stage *st = &c->stages[i];
        m->stages.v[m->stages.n++] = (struct vw_t_resume_stage){
            .id = st->id, .has_configured = true, .configured = st->configured,
            .has_keep_window = true, .keep_window = st->keep_window,
            .has_device = true, .device = st->info.device,
            .has_first_layer = true, .first_layer = st->info.first_layer,
            .has_last_layer = true, .last_layer = st->info.last_layer,
            .has_asleep = st->sleep != NULL, .asleep = st->sleep != NULL,
            .has_wake_tokens = st->sleep != NULL,
            .wake_tokens = st->sleep ? st->sleep->wake_tokens : 0,
            .has_host_bytes = st->sleep != NULL,
            .host_bytes = st->sleep ? st->sleep->host_bytes : 0};
        for (uint32_t k = 0; k < st->nslots && k < st->res.expert_slots_backed;
             k++)
            if (st->slot_layer[k] != 0xffff)
                m->claims.v[m->claims.n++] =
                    (struct vw_t_resume_claim){st->id, k, st->slot_layer[k]};
    }
    for (size_t i = 0; i < c->nregions; i++) {
        struct vc_region *r = c->regions[i];
        m->regions.v[m->regions.n++] = (struct vw_t_resume_region){
            .id = r->id, .stage = r->stage, .kind = vc_kind_name(r->kind),
            .base = r->base, .lane_stride = r->lane_stride,
            .va_bytes = r->va_bytes,
            .lane_slots = {.v = r->lane_counts, .n = r->lanes}};
    }
    return 0;
}

/* Sends the declaration (in parts when large); the last part's reply goes
 * to rep. */
static int declare(vram_client *c, uint32_t old, struct vw_rep_resume *rep,
                   struct vw_arena *ra)
{
    struct vw_arena a = {0};
    struct vw_req_resume m = {.client = old};
    int e = declare_head(c, &m, &a);
    struct vw_t_resume_chunk *part =
        vw_arena_alloc(&a, CHUNKS_PER_PART * sizeof(*part));
    if (e == 0 && !part)
        e = -ENOMEM;
    for (size_t i = 0; e == 0 && i <= c->chunks.cap; i++) {
        struct vc_chunk *ch = i < c->chunks.cap ? &c->chunks.v[i] : NULL;
        if (ch && (ch->id >= UINT64_MAX - 1 || !ch->region))
            continue;
        if (ch)
            part[m.chunks.n++] = (struct vw_t_resume_chunk){
                ch->id, ch->region, ch->slot};
        bool full = m.chunks.n == CHUNKS_PER_PART;
        if (!full && ch)
            continue;
        m.chunks.v = part;
        m.has_more = m.more = ch != NULL; /* the last part is sent after the
                                             table ends */
        if (m.more) {
            e = vc_rpc(c, VW_REQ_RESUME, &m, NULL, NULL);
            m.chunks.n = 0;
            m.stages.n = m.regions.n = m.claims.n = 0; /* sent with part one */
        } else {
            e = vc_rpc(c, VW_REQ_RESUME, &m, rep, ra);
        }
    }
    vw_arena_free(&a);
    return e;
}

/* What the daemon could not give back is unmapped here; the stages' figures
 * come from the daemon again. Returns the chunks lost. */
static uint32_t apply_resume(vram_client *c, const struct vw_rep_resume *rep)
{
    uint32_t nlost = 0;
    const struct vw_t_lost *lost = &rep->lost;
    for (size_t i = 0; rep->has_lost && i < lost->chunks.n; i++)
        if (vc_table_get(&c->chunks, lost->chunks.v[i])) {
            vc_drop_chunk(c, lost->chunks.v[i]);
            nlost++;
        }
    for (size_t i = 0; rep->has_lost && i < lost->regions.n; i++) {
        struct vc_region *r = vc_region_get(c, lost->regions.v[i].id);
        if (r)
            vc_region_forget(c, r);
    }
    for (size_t i = 0; rep->has_lost && i < lost->stages.n; i++)
        if (vc_stage_get(c, lost->stages.v[i].id))
            forget_stage(c, lost->stages.v[i].id);
    for (size_t i = 0; i < rep->stages.n; i++) {
        struct vc_stage *st = vc_stage_get(c, rep->stages.v[i].id);
        if (st)
            st->res.version = 0; /* the daemon's versions start again */
        vc_stage_update(c, &rep->stages.v[i]);
    }
    return nlost;
}

int vc_reconnect(vram_client *c)
{
    char lost_why[512];
    snprintf(lost_why, sizeof(lost_why), "%s", c->last_error);
    c->reconnecting = true;
    c->peers_known = false; /* a vramd started again may say otherwise */
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
        struct vw_rep_resume rep;
        struct vw_arena ra = {0};
        e = declare(c, c->resume_from, &rep, &ra);
        if (e == -ENOENT && c->resume_sent_as && !c->broken)
            e = declare(c, c->resume_sent_as, &rep, &ra);
        if (e == 0) {
            nlost = apply_resume(c, &rep);
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
        vw_arena_free(&ra);
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
