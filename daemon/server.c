/* The listening socket and the daemon's life: lock, listen, accept, signals,
 * background pool refill, orderly shutdown. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "message.h"
#include "platform.h"
#include "server.h"
#include "session.h"
#include "state.h"

/* A device's capacity: its cap, at most what it has less the reserve, in
 * whole chunks. */
static uint64_t capacity_of(const struct vd_device_conf *dc, uint64_t total)
{
    uint64_t cap = dc->has_capacity ? dc->l.capacity_bytes : total;
    if (cap > total)
        cap = total;
    if (dc->reserve_bytes && dc->reserve_bytes < total &&
        total - dc->reserve_bytes < cap)
        cap = total - dc->reserve_bytes;
    return cap / dc->l.chunk_bytes * dc->l.chunk_bytes;
}

int vd_server_init(struct vd_server *srv, uv_loop_t *loop,
                   const struct vd_config *cfg, struct vd_backend *backend,
                   const char *socket_path)
{
    memset(srv, 0, sizeof(*srv));
    srv->loop = loop;
    srv->cfg = *cfg;
    srv->backend = backend;
    srv->listen_h = srv->lock_h = VP_NONE;
    srv->started_ns = vp_now_ns();
    if (strlen(socket_path) >= sizeof(srv->socket_path)) {
        vlog(VLOG_ERR, "socket path %s is longer than %zu bytes", socket_path,
             sizeof(srv->socket_path) - 1);
        return -ENAMETOOLONG;
    }
    snprintf(srv->socket_path, sizeof(srv->socket_path), "%s", socket_path);
    snprintf(srv->lock_path, sizeof(srv->lock_path), "%s.lock", socket_path);
    snprintf(srv->state_path, sizeof(srv->state_path), "%s.state", socket_path);
    const char *crash = getenv("VRAMD_TEST_CRASH_BEFORE_REPLY");
    if (crash && *crash) {
        if (!vd_request_known(crash)) {
            vlog(VLOG_ERR, "VRAMD_TEST_CRASH_BEFORE_REPLY: '%s' is not a "
                 "request type (see proto/messages.json)", crash);
            return -EINVAL;
        }
        srv->crash_before_reply = crash;
        vlog(VLOG_WARNING, "fault injection: vramd will kill itself before "
             "replying to the first '%s' (VRAMD_TEST_CRASH_BEFORE_REPLY)",
             crash);
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
        devs[i].capacity_bytes = capacity_of(&cfg->dev[i],
                                             backend->info[i].total_bytes);
    }
    uint64_t va_base = cfg->va_base ? cfg->va_base : 0x200000000000ull;
    uint64_t va_size = cfg->va_size ? cfg->va_size : 0x100000000000ull;
    int e = vl_init(&srv->ledger, devs, cfg->ndev, va_base, va_size);
    if (e < 0) {
        vlog(VLOG_ERR, "devices: %s", vl_why(&srv->ledger));
        return e;
    }
    /* Region bases are 1 GiB aligned: the CUDA driver rounds a reservation's
     * address hint up to its own alignment (a 2 MiB-aligned hint came back
     * 24 MiB higher on an H200), and a rounded hint is an address the
     * client cannot use. The window is large; alignment costs nothing. */
    srv->ledger.region_align = 1ull << 30;
    for (uint32_t i = 0; i < cfg->nstages; i++) {
        e = vl_stage_configure(&srv->ledger, &cfg->stages[i]);
        if (e < 0) {
            vlog(VLOG_ERR, "stages[%u]: %s", i, vl_why(&srv->ledger));
            vl_fini(&srv->ledger);
            return e;
        }
    }
    const char *chk = getenv("VRAMD_CHECK_INVARIANTS");
#ifndef NDEBUG
    srv->check_invariants = !chk || strcmp(chk, "0") != 0;
#else
    srv->check_invariants = chk && strcmp(chk, "0") != 0;
#endif
    return 0;
}

static void on_accept(struct vp_watch *w, int status, int events)
{
    (void)events;
    struct vd_server *srv = w->data;
    if (status < 0)
        return;
    for (;;) {
        vp_handle h;
        int e = vp_accept(srv->listen_h, &h);
        if (e < 0) {
            if (e == -EMFILE || e == -ENFILE)
                vlog(VLOG_ERR, "cannot accept: %s", strerror(-e));
            return;
        }
        vd_session_accept(srv, h);
    }
}

/* SIGHUP: reread the configuration. Capacities, limits and the access lists
 * change at once; any other change to devices, stages, the backend or the
 * address window needs a restart, and the reload is refused as a whole, each
 * difference named. */
void vd_server_reload(struct vd_server *srv)
{
    if (!srv->config_path[0]) {
        vlog(VLOG_NOTICE, "SIGHUP: no configuration file to reload");
        return;
    }
    struct vd_config next;
    char errs[VD_MAX_CONFIG_ERRORS][256];
    int n = 0;
    if (vd_config_load(srv->config_path, &next, errs, &n) < 0) {
        for (int i = 0; i < n; i++)
            vlog(VLOG_ERR, "SIGHUP: %s: %s", srv->config_path, errs[i]);
        vlog(VLOG_ERR, "SIGHUP: %s has errors; nothing changed",
             srv->config_path);
        return;
    }
    const struct vd_config *cur = &srv->cfg;
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
        /* Capacity (and reserve) change at run time, as set-capacity. */
        /* Not clamped to the device: asking for more than it had at start
         * is refused, not quietly cut. */
        uint64_t total = srv->backend->info[i].total_bytes;
        caps[i] = capacity_of(a, a->has_capacity && a->l.capacity_bytes > total
                                     ? a->l.capacity_bytes : total);
        if (vl_device_set_capacity(&srv->ledger, a->l.id, caps[i], true) < 0) {
            vlog(VLOG_ERR, "SIGHUP: devices[%u].capacity: %s", i,
                 vl_why(&srv->ledger));
            refused++;
        }
    }
    if (next.nstages != cur->nstages ||
        (next.nstages && memcmp(next.stages, cur->stages,
                                next.nstages * sizeof(*next.stages)) != 0)) {
        vlog(VLOG_ERR, "SIGHUP: stages changed: needs a restart");
        refused++;
    }
    if (next.va_base != cur->va_base || next.va_size != cur->va_size ||
        next.pool_prefill != cur->pool_prefill ||
        strcmp(next.cuda_scrub, cur->cuda_scrub) != 0) {
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
        uint64_t was = (uint64_t)vl_capacity(&srv->ledger.dev[i]) *
                       srv->ledger.dev[i].cfg.chunk_bytes;
        vl_device_set_capacity(&srv->ledger, next.dev[i].l.id, caps[i], false);
        if (caps[i] / srv->ledger.dev[i].cfg.chunk_bytes !=
            was / srv->ledger.dev[i].cfg.chunk_bytes)
            vlog(VLOG_NOTICE, "SIGHUP: device %u: capacity %llu MiB (was %llu)",
                 next.dev[i].l.id, (unsigned long long)(caps[i] >> 20),
                 (unsigned long long)(was >> 20));
        srv->cfg.dev[i] = next.dev[i];
    }
    srv->cfg.max_clients = next.max_clients;
    srv->cfg.max_chunks_per_client = next.max_chunks_per_client;
    srv->cfg.max_regions_per_client = next.max_regions_per_client;
    srv->cfg.max_stages_per_client = next.max_stages_per_client;
    /* New connections are judged by the new lists; connected clients keep
     * what they were granted at connect. */
    srv->cfg.allow = next.allow;
    srv->cfg.admin = next.admin;
    srv->cfg.allow_given = next.allow_given;
    vd_config_free(&next);
    vlog(VLOG_NOTICE, "SIGHUP: reloaded %s (limits: %u clients, %u chunks and "
         "%u regions per client; access lists: %u+%u allowed, %u+%u admin ids)",
         srv->config_path, srv->cfg.max_clients, srv->cfg.max_chunks_per_client,
         srv->cfg.max_regions_per_client, srv->cfg.allow.nuids,
         srv->cfg.allow.ngids, srv->cfg.admin.nuids, srv->cfg.admin.ngids);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct vd_server *srv = s->data;
    if (signum == SIGHUP) {
        vd_server_reload(srv);
        return;
    }
    vlog(VLOG_NOTICE, "%s: shutting down",
         signum == SIGTERM ? "SIGTERM" : signum == SIGINT ? "SIGINT" : "signal");
    vp_service_notify("STOPPING=1\nSTATUS=shutting down");
    vd_server_stop(srv);
}

static void on_idle(uv_idle_t *h)
{
    struct vd_server *srv = h->data;
    /* Not while a client is importing what it was just granted (a GiB takes
     * a client about 45 ms on an H200): the driver calls of both sides
     * contend. The timer restarts us. */
    if (vp_now_ns() - srv->last_grant_ns < 250000000ull) {
        uv_idle_stop(h);
        return;
    }
    /* A few chunks a turn keeps the loop responsive while the pool fills. */
    if (srv->backend->ops->prefill(srv->backend, 4) == 0)
        uv_idle_stop(h);
}

static void on_prefill_timer(uv_timer_t *t);
static uv_timer_t prefill_timer;

static void on_prefill_timer(uv_timer_t *t)
{
    struct vd_server *srv = t->data;
    if (!uv_is_active((uv_handle_t *)&srv->idle))
        uv_idle_start(&srv->idle, on_idle);
}

static void start_loop_handles(struct vd_server *srv);

static int take_lock(struct vd_server *srv)
{
    char why[256];
    int e = vp_lock_take(srv->lock_path, &srv->lock_h, why, sizeof(why));
    if (e == -EADDRINUSE)
        vlog(VLOG_ERR, "another vramd is serving %s (lock %s is held)",
             srv->socket_path, srv->lock_path);
    else if (e < 0)
        vlog(VLOG_ERR, "%s", why);
    return e;
}

/* What a previous vramd left: processes that still hold memory (rule 13).
 * Only under the lock, so two daemons never share a state file. */
static int open_state(struct vd_server *srv)
{
    struct vd_orphan *orph = NULL;
    size_t norph = 0;
    int e = vd_state_open(srv, srv->state_path, &orph, &norph, &srv->state);
    if (e < 0)
        return e;
    uint32_t first = vd_state_first_client(srv->state);
    if (first > srv->next_client_id)
        srv->next_client_id = first;
    for (size_t i = 0; i < norph; i++) {
        vlog(VLOG_INFO, "client %u (pid %d) held memory before the restart: "
             "kept until it comes back or exits", orph[i].client,
             (int)orph[i].pid);
        if (vd_reaper_watch(srv, orph[i].client, orph[i].pid, orph[i].pin,
                            orph[i].starttime, orph[i].resumable) < 0)
            vp_close(&orph[i].pin); /* then only a reap would free it */
    }
    free(orph);
    return 0;
}

int vd_server_listen(struct vd_server *srv)
{
    char why[256] = "";
    char path[sizeof(srv->socket_path)] = "";
    int act = vp_listen_activated(&srv->listen_h, path, sizeof(path), why,
                                  sizeof(why));
    if (act < 0) {
        vlog(VLOG_ERR, "%s", why);
        return act;
    }
    if (act > 0) {
        /* The service manager owns the path, its mode and its group. */
        srv->activated = true;
        if (path[0])
            snprintf(srv->socket_path, sizeof(srv->socket_path), "%s", path);
        vlog(VLOG_INFO, "using the socket passed by the service manager (%s)",
             srv->socket_path);
        snprintf(srv->lock_path, sizeof(srv->lock_path), "%s.lock",
                 srv->socket_path);
        snprintf(srv->state_path, sizeof(srv->state_path), "%s.state",
                 srv->socket_path);
        int e = take_lock(srv);
        if (e == 0)
            e = open_state(srv);
        if (e < 0)
            return e;
        start_loop_handles(srv);
        return 0;
    }
    int e = vp_listen_check_dir(srv->socket_path, why, sizeof(why));
    if (e < 0) {
        vlog(VLOG_ERR, "%s", why);
        return e;
    }
    if (e > 0)
        vlog(VLOG_INFO, "created the socket's directory for %s",
             srv->socket_path);
    if ((e = take_lock(srv)) < 0)
        return e;
    if ((e = open_state(srv)) < 0)
        return e;
    struct vp_listen_cfg lc = {.path = srv->socket_path,
                               .group = srv->cfg.socket_group,
                               .mode = srv->cfg.socket_mode};
    if ((e = vp_listen(&lc, &srv->listen_h, why, sizeof(why))) < 0) {
        vlog(VLOG_ERR, "%s", why);
        return e;
    }
    start_loop_handles(srv);
    return 0;
}

static void start_loop_handles(struct vd_server *srv)
{
    vp_watch_init(srv->loop, &srv->listen_watch, srv->listen_h);
    srv->listen_watch.data = srv;
    vp_watch_set(&srv->listen_watch, VP_READABLE, on_accept);
    int sigs[3] = {SIGTERM, SIGINT, SIGHUP};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(srv->loop, &srv->sig[i]);
        srv->sig[i].data = srv;
        uv_signal_start(&srv->sig[i], on_signal, sigs[i]);
    }
    uv_idle_init(srv->loop, &srv->idle);
    srv->idle.data = srv;
    uv_idle_start(&srv->idle, on_idle);
    /* Refill the pool after grants drained it. */
    uv_timer_init(srv->loop, &prefill_timer);
    prefill_timer.data = srv;
    uv_timer_start(&prefill_timer, on_prefill_timer, 50, 50);
    uv_unref((uv_handle_t *)&prefill_timer);
}

void vd_server_stop(struct vd_server *srv)
{
    if (srv->stopping)
        return;
    srv->stopping = true;
    /* Closing a session also ends its held requests. */
    while (srv->sessions)
        vd_session_close(srv->sessions, "daemon shutting down");
    uv_stop(srv->loop);
}

static void close_cb_free(uv_handle_t *h)
{
    (void)h;
}

static void close_all(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, close_cb_free);
}

void vd_server_fini(struct vd_server *srv)
{
    if (!srv)
        return;
    uv_walk(srv->loop, close_all, NULL);
    uv_run(srv->loop, UV_RUN_DEFAULT);
    for (struct vd_reaper *r = srv->reapers, *n; r; r = n) {
        n = r->next;
        vp_close(&r->pin);
        free(r);
    }
    for (struct vd_recall *r = srv->recalls, *n; r; r = n) {
        n = r->next;
        free(r->chunks);
        free(r);
    }
    /* An activated socket's path is the service manager's. */
    vp_listen_close(&srv->listen_h, srv->socket_path, !srv->activated);
    /* The lock file stays: unlinking it while held would let a daemon
     * starting now lock a new file while another still holds the old one,
     * and both use one state file. */
    vp_close(&srv->lock_h);
    vl_fx_free(&srv->fx);
    srv->ledger.obs = (struct vl_observer){0};
    vd_state_close(srv->state);
    srv->state = NULL;
    vl_fini(&srv->ledger);
}
