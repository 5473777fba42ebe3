/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/daemon/startup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/clients/access.h"
#include "daemon/core/requests/resume_declaration.h"
#include "daemon/core/clients/orphans.h"
#include "daemon/core/requests/still_held.h"
#include "daemon/core/requests/lifecycle.h"
#include "daemon/core/clients/reapers.h"
#include "platform/lock.h"
#include "daemon/log.h"
#include "platform/platform.h"
#include "daemon/core/requests/recalls.h"
#include "daemon/core/daemon/refill.h"
#include "daemon/core/requests/send.h"
#include "gen/vram_msg.h"
#include "daemon/core/requests/waits.h"
#include "daemon/core/requests/weight_opens.h"
#include "daemon/core/requests/weight_records.h"
#include "platform/keeper.h"

uint64_t vd_core_capacity_of(const struct vd_device_conf *dc, uint64_t total)
{
    uint64_t cap = dc->has_capacity ? dc->l.capacity_bytes : total;
    if (cap > total)
        cap = total;
    if (dc->reserve_bytes && dc->reserve_bytes < total &&
        total - dc->reserve_bytes < cap)
        cap = total - dc->reserve_bytes;
    return cap / dc->l.chunk_bytes * dc->l.chunk_bytes;
}

static void set_limits(struct vd_core *core)
{
    struct vl_limits lim = {
        .chunks_per_client = core->cfg.max_chunks_per_client,
        .regions_per_client = core->cfg.max_regions_per_client,
        .stages_per_client = core->cfg.max_stages_per_client,
        .va_bytes_per_client = core->cfg.va_bytes_per_client,
        .va_bytes_per_tenant = core->cfg.va_bytes_per_user,
        .stages_per_tenant = core->cfg.stages_per_user,
        .gone_per_tenant = core->cfg.gone_per_user,
        .wsets_per_tenant = core->cfg.wsets_per_user,
    };
    vl_set_limits(core->ledger, &lim); /* R14 */
}

/* R17: a reservation's set in allocations of weights.alloc (or its own
 * alloc), no larger than the set, in the GPU's granularity. */
static void resolve_sets(struct vd_core *core, struct vl_stage_cfg *sc,
                         uint64_t weights_alloc)
{
    for (uint32_t f = 0; f < sc->nfixed; f++) {
        const struct vl_fixed_cfg *fc = &sc->fixed[f];
        if (!fc->set || fc->set > sc->nsets)
            continue;
        struct vl_set_cfg *set = &sc->sets[fc->set - 1];
        int di = vl_device_index(core->ledger, sc->device);
        uint64_t g = di >= 0 ? core->backend->info[di].granularity : 0;
        g = g ? g : 2u << 20;
        uint64_t a = set->alloc ? set->alloc : weights_alloc;
        if (fc->bytes < a)
            a = fc->bytes;
        set->alloc = (a + g - 1) / g * g;
    }
}

int vd_core_init(struct vd_core *core, uv_loop_t *loop,
                 const struct vd_config *cfg, const char *config_path,
                 struct vd_backend *backend, const struct vd_port *port)
{
    memset(core, 0, sizeof(*core));
    core->loop = loop;
    core->cfg = *cfg;
    core->backend = backend;
    core->port = *port;
    core->lock = VP_NONE;
    core->crash_before_reply = -1;
    core->crash_mid_reply = -1;
    core->started_ns = vp_now_ns();
    core->admission_limit.interval_ms = 10000;
    if (config_path)
        snprintf(core->config_path, sizeof(core->config_path), "%s", config_path);
    const char *crash = getenv("VRAMD_TEST_CRASH_BEFORE_REPLY");
    if (crash && *crash) {
        core->crash_before_reply = vw_req_lookup(crash);
        if (core->crash_before_reply < 0) {
            vlog(VLOG_ERR, "VRAMD_TEST_CRASH_BEFORE_REPLY: '%s' is not a "
                 "request type (see proto/messages.json)", crash);
            return -EINVAL;
        }
        vlog(VLOG_WARNING, "fault injection: vramd will kill itself before "
             "replying to the first '%s' (VRAMD_TEST_CRASH_BEFORE_REPLY)",
             crash);
    }
    crash = getenv("VRAMD_TEST_CRASH_MID_REPLY");
    if (crash && *crash) {
        core->crash_mid_reply = vw_req_lookup(crash);
        if (core->crash_mid_reply < 0) {
            vlog(VLOG_ERR, "VRAMD_TEST_CRASH_MID_REPLY: '%s' is not a request "
                 "type (see proto/messages.json)", crash);
            return -EINVAL;
        }
        vlog(VLOG_WARNING, "fault injection: vramd will kill itself in the "
             "middle of the first '%s' reply of several frames "
             "(VRAMD_TEST_CRASH_MID_REPLY)", crash);
    }
    struct vl_device_cfg devs[VL_MAX_DEVICES];
    for (uint32_t i = 0; i < cfg->ndev; i++) {
        devs[i] = cfg->dev[i].l;
        if (cfg->dev[i].reserve_bytes >= backend->info[i].total_bytes) {
            vlog(VLOG_ERR, "devices[%u].reserve: %llu bytes leaves nothing of "
                 "%llu", i, (unsigned long long)cfg->dev[i].reserve_bytes,
                 (unsigned long long)backend->info[i].total_bytes);
            return -EINVAL;
        }
        devs[i].capacity_bytes = vd_core_capacity_of(&cfg->dev[i],
                                                     backend->info[i].total_bytes);
    }
    uint64_t va_base = cfg->va_base ? cfg->va_base : 0x200000000000ull;
    uint64_t va_size = cfg->va_size ? cfg->va_size : 0x100000000000ull;
    /* Region bases are 1 GiB aligned: the CUDA driver rounds a reservation's
     * address hint up to its own alignment (a 2 MiB-aligned hint came back
     * 24 MiB higher on an H200), and a rounded hint is an address the
     * client cannot use. The window is large; alignment costs nothing. */
    char why[256];
    int e = vl_new(devs, cfg->ndev, va_base, va_size, 1ull << 30, &core->ledger,
                   why, sizeof(why));
    if (e < 0) {
        vlog(VLOG_ERR, "devices: %s", why);
        return e;
    }
    for (uint32_t i = 0; i < cfg->nstages; i++) {
        struct vl_stage_cfg *sc = &core->cfg.stages[i];
        resolve_sets(core, sc, cfg->weights_alloc);
        e = vl_stage_configure(core->ledger, sc);
        if (e < 0) {
            vlog(VLOG_ERR, "stages[%u]: %s", i, vl_why(core->ledger));
            vl_free(core->ledger);
            core->ledger = NULL;
            return e;
        }
    }
    set_limits(core);
    /* Test switches: on by default in debug builds, off in release ones;
     * VRAMD_CHECK_REPLIES follows VRAMD_CHECK_INVARIANTS unless set (the
     * tests' harness turns both on, the benchmark both off). */
    const char *chk = getenv("VRAMD_CHECK_INVARIANTS");
    const char *rep = getenv("VRAMD_CHECK_REPLIES");
#ifndef NDEBUG
    core->check_invariants = !chk || strcmp(chk, "0") != 0;
#else
    core->check_invariants = chk && strcmp(chk, "0") != 0;
#endif
    core->check_replies = rep ? strcmp(rep, "0") != 0 : core->check_invariants;
    return 0;
}

/* What a previous vramd left: processes that still hold memory (R13).
 * Only under the lock, so two daemons never share a state file. */
static int open_state(struct vd_core *core)
{
    struct vd_state_params *prm = &core->state_params;
    prm->ledger = core->ledger;
    prm->max_clients = core->cfg.max_clients + core->cfg.admin_connections;
    prm->discard = core->discard_state;
    prm->max_regions_per_client = core->cfg.max_regions_per_client;
    for (uint32_t i = 0; i < core->backend->ndev && i < 64; i++)
        prm->uuid[i] = core->backend->info[i].uuid;
    struct vd_orphan *orph = NULL;
    size_t norph = 0;
    int e = vd_state_open(prm, core->state_path, &orph, &norph, &core->state);
    if (e < 0)
        return e;
    uint32_t first = vd_state_first_client(core->state);
    if (first > core->clients.next_id)
        core->clients.next_id = first;
    for (size_t i = 0; i < norph; i++) {
        vlog(VLOG_INFO, "client %u (pid %lld) held memory before the restart: "
             "kept until it comes back or exits", orph[i].client,
             (long long)orph[i].pid);
        if (orph[i].client >= core->clients.next_id)
            core->clients.next_id = orph[i].client;
        struct vp_peer who = {.uid = orph[i].uid, .gid = (uint32_t)-1};
        vl_client_set_tenant(core->ledger, orph[i].client, orph[i].uid,
                             vd_access_admin(&core->cfg, &who)); /* R16 */
        if (vd_lifecycle_watch(core, orph[i].client, orph[i].pid, orph[i].pin,
                               orph[i].starttime, orph[i].resumable,
                               orph[i].name) < 0)
            vp_close(&orph[i].pin); /* then only a reap would free it */
    }
    free(orph);
    return 0;
}

/* R17: the sealed sets the previous vramd recorded whose handles the keeper
 * gave back, each whole; anything else it kept goes. */
static void restore_wsets(struct vd_core *core, struct vp_keeper_entry *left,
                          size_t nleft)
{
    const struct vd_state_found_wset *f;
    size_t nf;
    vd_state_found_wsets(core->state, &f, &nf);
    size_t kept = 0;
    for (size_t i = 0; i < nf; i++) {
        const struct vd_state_wset *w = &f[i].rec;
        vp_handle *h = w->nalloc && w->nalloc <= VL_WSET_ALLOCS_MAX
                           ? calloc(w->nalloc, sizeof(*h))
                           : NULL;
        uint32_t got = 0;
        for (uint32_t k = 0; h && k < w->nalloc; k++) {
            char name[32];
            vd_wsets_name(w->id, k, name, sizeof(name));
            h[k] = VP_NONE;
            for (size_t j = 0; j < nleft; j++)
                if (vp_ok(left[j].h) && strcmp(left[j].name, name) == 0) {
                    h[k] = left[j].h;
                    left[j].h = VP_NONE;
                    got++;
                    break;
                }
        }
        struct vl_wset_view v = {
            .id = w->id, .device = w->device, .name = w->name, .key = w->key,
            .bytes = w->bytes, .alloc_bytes = w->alloc_bytes,
            .nalloc = w->nalloc, .units = w->units, .base = w->base,
            .va_bytes = w->va_bytes, .sealed = true,
            .keep = (w->flags & VD_WSET_KEEP) != 0, .tenant = w->tenant,
            .users = f[i].nusers, .user = f[i].users,
            .sealed_at = w->sealed_ms, .stage = w->stage, .fixed = w->fixed};
        int e = got == w->nalloc && h ? vl_weights_restore(core->ledger, &v) : -1;
        if (e == 0 && vd_wsets_adopt(core, w->id, h, w->nalloc, w->created_ms,
                                     w->sealed_ms) == 0) {
            kept++;
            vlog(VLOG_INFO, "weight set %u '%s' (%llu MiB on device %u) came "
                 "back with its %u allocations", w->id, w->name,
                 (unsigned long long)(w->bytes >> 20), w->device, w->nalloc);
            continue;
        }
        if (got == w->nalloc && h)
            vlog(VLOG_WARNING, "weight set %u '%s' dropped: %s", w->id, w->name,
                 e < 0 ? vl_why(core->ledger) : "out of memory");
        else
            vlog(VLOG_WARNING, "weight set %u '%s' dropped: %u of its %u "
                 "allocations' handles came back", w->id, w->name, got,
                 w->nalloc);
        for (uint32_t k = 0; h && k < w->nalloc; k++) {
            char name[32], why[256];
            vd_wsets_name(w->id, k, name, sizeof(name));
            if (vp_ok(h[k]))
                vp_keeper_remove(core->keeper, name, why, sizeof(why));
            vp_close(&h[k]);
        }
        free(h);
    }
    /* What no set records (a crash between a put and the seal's record). */
    for (size_t j = 0; j < nleft; j++) {
        if (!vp_ok(left[j].h))
            continue;
        char why[256];
        vlog(VLOG_NOTICE, "the keeper held %s, which no weight set records: "
             "let go", left[j].name);
        vp_keeper_remove(core->keeper, left[j].name, why, sizeof(why));
    }
    if (nf || nleft)
        vlog(VLOG_NOTICE, "restart: %zu of %zu weight sets came back", kept, nf);
    vd_state_found_free(core->state);
}

static int open_keeper(struct vd_core *core, const char *keeper_path)
{
    struct vp_keeper_cfg kc = {.socket_path = keeper_path,
                               .kind = VP_KEEPER_AUTO};
    const char *kind = getenv("VRAMD_KEEPER"); /* tests: "holder" */
    if (kind && strcmp(kind, "holder") == 0)
        kc.kind = VP_KEEPER_HOLDER;
    struct vp_keeper_entry *left = NULL;
    size_t nleft = 0;
    char why[512];
    int e = vp_keeper_open(&kc, &core->keeper, &left, &nleft, why, sizeof(why));
    if (e < 0) {
        /* Sets still work; they only die with vramd. */
        vlog(VLOG_WARNING, "weight sets will not outlive vramd: no keeper (%s)",
             why);
        core->keeper = NULL;
        vd_state_found_free(core->state);
        return 0;
    }
    struct vp_keeper_info ki;
    vp_keeper_info(core->keeper, &ki);
    vlog(VLOG_INFO, "weight sets are kept by the %s (%u handles at most)%s%s",
         vp_keeper_kind_name(ki.kind), ki.max, ki.note[0] ? ": " : "", ki.note);
    restore_wsets(core, left, nleft);
    vp_keeper_entries_free(left, nleft);
    return 0;
}

int vd_core_start(struct vd_core *core, const char *socket_path,
                  const char *keeper_path)
{
    snprintf(core->state_path, sizeof(core->state_path), "%s.state", socket_path);
    char why[512];
    int e = vp_lock_take(socket_path, &core->lock, core->lock_path,
                         sizeof(core->lock_path), why, sizeof(why));
    if (e == -EADDRINUSE) {
        vlog(VLOG_ERR, "another vramd runs in %s (it holds the directory's "
             "lock): one vramd per socket directory", core->lock_path);
        return e;
    }
    if (e < 0) {
        vlog(VLOG_ERR, "%s", why);
        return e;
    }
    if ((e = open_state(core)) < 0)
        return e;
    if ((e = open_keeper(core, keeper_path)) < 0)
        return e;
    vd_refill_start(core);
    return 0;
}

void vd_core_stopping(struct vd_core *core)
{
    core->stopping = true;
}

void vd_core_reload(struct vd_core *core)
{
    if (!core->config_path[0]) {
        vlog(VLOG_NOTICE, "SIGHUP: no configuration file to reload");
        return;
    }
    struct vd_config next;
    char errs[VD_MAX_CONFIG_ERRORS][256];
    int n = 0;
    if (vd_config_load(core->config_path, &next, errs, &n) < 0) {
        for (int i = 0; i < n; i++)
            vlog(VLOG_ERR, "SIGHUP: %s: %s", core->config_path, errs[i]);
        vlog(VLOG_ERR, "SIGHUP: %s has errors; nothing changed",
             core->config_path);
        return;
    }
    const struct vd_config *cur = &core->cfg;
    int refused = 0;
    if (strcmp(next.backend, cur->backend) != 0) {
        vlog(VLOG_ERR, "SIGHUP: backend changed: needs a restart");
        refused++;
    }
    if (next.ndev != cur->ndev) {
        vlog(VLOG_ERR, "SIGHUP: devices: %u configured, %u running: needs a "
             "restart", next.ndev, cur->ndev);
        refused++;
    }
    uint64_t caps[VL_MAX_DEVICES];
    for (uint32_t i = 0; i < next.ndev && i < cur->ndev; i++) {
        const struct vd_device_conf *a = &next.dev[i], *b = &cur->dev[i];
        if (a->l.id != b->l.id || a->l.chunk_bytes != b->l.chunk_bytes ||
            a->l.lend_unreserved != b->l.lend_unreserved) {
            vlog(VLOG_ERR, "SIGHUP: devices[%u] changed its id, chunk or "
                 "lending: needs a restart", i);
            refused++;
            continue;
        }
        /* Capacity (and reserve) change at run time, as set-capacity. Not
         * clamped to the device: asking for more than it had at start is
         * refused, not quietly cut. */
        uint64_t total = core->backend->info[i].total_bytes;
        caps[i] = vd_core_capacity_of(a, a->has_capacity &&
                                                 a->l.capacity_bytes > total
                                             ? a->l.capacity_bytes
                                             : total);
        if (vl_device_set_capacity(core->ledger, a->l.id, caps[i], true) < 0) {
            vlog(VLOG_ERR, "SIGHUP: devices[%u].capacity: %s", i,
                 vl_why(core->ledger));
            refused++;
        }
    }
    for (uint32_t i = 0; i < next.nstages; i++)
        resolve_sets(core, &next.stages[i], next.weights_alloc);
    if (next.nstages != cur->nstages ||
        (next.nstages && memcmp(next.stages, cur->stages,
                                next.nstages * sizeof(*next.stages)) != 0)) {
        vlog(VLOG_ERR, "SIGHUP: stages changed: needs a restart");
        refused++;
    }
    if (next.va_base != cur->va_base || next.va_size != cur->va_size ||
        next.pool_prefill != cur->pool_prefill ||
        memcmp(next.backend_conf, cur->backend_conf,
               sizeof(next.backend_conf)) != 0) {
        vlog(VLOG_ERR, "SIGHUP: address_window, pool or cuda changed: needs a "
             "restart");
        refused++;
    }
    if (strcmp(next.socket_group, cur->socket_group) != 0 ||
        next.socket_mode != cur->socket_mode) {
        vlog(VLOG_ERR, "SIGHUP: access.socket_group or socket_mode changed: "
             "needs a restart");
        refused++;
    }
    if (refused) {
        vlog(VLOG_ERR, "SIGHUP: %d change(s) refused; nothing changed", refused);
        vd_config_free(&next);
        return;
    }
    for (uint32_t i = 0; i < next.ndev; i++) {
        struct vl_device_view d;
        vl_device_view(core->ledger, i, &d);
        uint64_t was = (uint64_t)d.capacity * d.chunk_bytes;
        vl_device_set_capacity(core->ledger, next.dev[i].l.id, caps[i], false);
        if (caps[i] / d.chunk_bytes != was / d.chunk_bytes)
            vlog(VLOG_NOTICE, "SIGHUP: device %u: capacity %llu MiB (was %llu)",
                 next.dev[i].l.id, (unsigned long long)(caps[i] >> 20),
                 (unsigned long long)(was >> 20));
        core->cfg.dev[i] = next.dev[i];
    }
    core->cfg.max_clients = next.max_clients;
    core->cfg.max_chunks_per_client = next.max_chunks_per_client;
    core->cfg.max_regions_per_client = next.max_regions_per_client;
    core->cfg.max_stages_per_client = next.max_stages_per_client;
    core->cfg.admin_connections = next.admin_connections;
    core->cfg.connections_per_user = next.connections_per_user;
    core->cfg.hello_timeout_ms = next.hello_timeout_ms;
    core->cfg.frame_timeout_ms = next.frame_timeout_ms;
    core->cfg.queued_bytes = next.queued_bytes;
    core->cfg.va_bytes_per_client = next.va_bytes_per_client;
    core->cfg.va_bytes_per_user = next.va_bytes_per_user;
    core->cfg.stages_per_user = next.stages_per_user;
    core->cfg.gone_per_user = next.gone_per_user;
    core->cfg.wsets_per_user = next.wsets_per_user;
    core->cfg.weights_alloc = next.weights_alloc; /* for sets made from now */
    set_limits(core);
    /* New connections are judged by the new lists; connected clients keep
     * what they were granted at connect. */
    core->cfg.allow = next.allow;
    core->cfg.admin = next.admin;
    core->cfg.weights = next.weights;
    core->cfg.allow_given = next.allow_given;
    vd_config_free(&next);
    vlog(VLOG_NOTICE, "SIGHUP: reloaded %s (limits: %u clients, %u chunks and "
         "%u regions per client; access lists: %u+%u allowed, %u+%u admin ids)",
         core->config_path, core->cfg.max_clients,
         core->cfg.max_chunks_per_client, core->cfg.max_regions_per_client,
         core->cfg.allow.nuids, core->cfg.allow.ngids, core->cfg.admin.nuids,
         core->cfg.admin.ngids);
    vd_waits_retry(core); /* more room may serve a held reserve */
}

static void client_fini(void *ud, struct vd_client *c)
{
    (void)ud;
    vp_close(&c->pin);
    vd_resume_acc_free(c->resume);
    c->resume = NULL;
    vd_send_drop(c);
}

void vd_core_fini(struct vd_core *core)
{
    if (!core)
        return;
    vd_reapers_fini(core);
    vd_handoff_fini(core);
    vd_recalls_fini(core);
    vd_waits_fini(core);
    vd_weights_fini(core);
    vd_kept_fini(core);
    vd_clients_each(&core->clients, client_fini, NULL);
    vd_clients_fini(&core->clients);
    vp_close(&core->lock);
    if (core->ledger)
        vl_set_observer(core->ledger, NULL);
    vd_state_close(core->state);
    core->state = NULL;
    vp_keeper_close(core->keeper); /* what it keeps stays kept */
    core->keeper = NULL;
    vl_free(core->ledger);
    core->ledger = NULL;
}
