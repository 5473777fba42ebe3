/* SPDX-License-Identifier: Apache-2.0 */
/* vramd: the GPU memory broker daemon. */
#include <errno.h>
#include <getopt.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "daemon/backends/backend.h"
#include "daemon/config.h"
#include "platform/entry.h"
#include "daemon/installer.h"
#include "daemon/io/connections.h"
#include "daemon/log.h"
#include "platform/platform.h"
#include "daemon/backends/registry.h"
#include "daemon/core/daemon/startup.h"
#include "proto/units.h"
#include "gen/vram_msg.h"

/* Linux: /run/vramd/vramd.sock; Windows: \\.\pipe\vramd (conn.h). */
#define DEFAULT_SOCKET VP_DEFAULT_ENDPOINT
/* The state file beside the socket cannot be trusted: restarting would
 * fail the same way (the systemd unit does not restart on it). */
#define EXIT_STATE 65

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: vramd [OPTIONS]\n"
            "The GPU memory broker: owns every device's memory and every\n"
            "pipeline stage's budget, and hands chunks to engines.\n\n"
            "  -s, --socket PATH      listen on PATH (default $VRAM_SOCKET, else "
            DEFAULT_SOCKET ")\n"
            "  -b, --backend NAME     host, cuda or auto (default: the config's, "
            "else auto)\n"
            "  -c, --config FILE      configuration (JSON; default %s\n"
            "                         when it exists); without one: two host\n"
            "                         devices of 16 GiB with 2 MiB chunks\n"
            "      --check-config FILE  validate FILE, print each error, exit\n"
            "      --discard-state    start without the state file a previous\n"
            "                         vramd left (kept as PATH.discarded): only\n"
            "                         once no engine of that vramd runs, since\n"
            "                         memory they map may be granted again\n"
            "  -l, --log-level LEVEL  error, warning, notice, info (default), "
            "debug\n"
            "  -V, --version          print the version\n"
            "  -h, --help             this text\n"
            "%s"
            "\nExit status: 0 stopped by a signal, 1 failed, 2 usage, 65 the state\n"
            "file cannot be trusted (see --discard-state).\n",
            vp_entry_default_config(), vp_entry_usage());
}

static int check_config(const char *path)
{
    struct vd_config cfg;
    char errs[VD_MAX_CONFIG_ERRORS][256];
    int n = 0;
    if (vd_config_load(path, &cfg, errs, &n) < 0) {
        for (int i = 0; i < n; i++)
            fprintf(stderr, "%s: %s\n", path, errs[i]);
        return 1;
    }
    /* Admission needs sizes: check stages against the configured caps. */
    struct vl_device_cfg devs[VL_MAX_DEVICES];
    for (uint32_t i = 0; i < cfg.ndev; i++) {
        devs[i] = cfg.dev[i].l;
        if (!cfg.dev[i].has_capacity) /* known only at run time (GPU size) */
            devs[i].capacity_bytes = 1ull << 50;
        devs[i].capacity_bytes -= cfg.dev[i].reserve_bytes < devs[i].capacity_bytes
                                      ? cfg.dev[i].reserve_bytes : 0;
    }
    struct vl_ledger *L = NULL;
    char why[256];
    int rc = 0;
    if (vl_new(devs, cfg.ndev, 1ull << 45, 1ull << 44, 0, &L, why,
               sizeof(why)) < 0) {
        fprintf(stderr, "%s: devices: %s\n", path, why);
        rc = 1;
    } else {
        for (uint32_t i = 0; i < cfg.nstages; i++)
            if (vl_stage_configure(L, &cfg.stages[i]) < 0) {
                fprintf(stderr, "%s: stages[%u]: %s\n", path, i, vl_why(L));
                rc = 1;
            }
        vl_free(L);
    }
    if (!rc)
        printf("%s: valid (%u devices, %u stages)\n", path, cfg.ndev,
               cfg.nstages);
    vd_config_free(&cfg);
    return rc;
}

/* What the command line asked for. */
struct opts {
    const char *socket_path, *backend_name, *config_path;
    int level;
    bool discard_state;
};

struct daemon {
    const struct opts *o;
    struct vp_entry *entry; /* the run main is in (platform/entry.h) */
    const struct vp_entry_cfg *ecfg; /* its options */
    struct vp_entry_signals sigs;
    uv_loop_t loop;
    struct vd_core core;
    struct vd_io io;
    uv_signal_t sig[3];
    /* Stop and reload asked from another thread (the service manager's
     * handler, platform/entry.h): flags, and wake to bring them to the
     * loop's thread. wake_ready (under wake_lock) says wake may be sent:
     * from its init until the loop closes it. */
    uv_async_t wake;
    uv_mutex_t wake_lock;
    bool wake_ready;
    atomic_bool stop_asked, reload_asked;
};

/* One daemon a process; the service's callbacks reach it here. */
static struct daemon the_daemon;

static void shut_down(struct daemon *d, const char *reason)
{
    vlog(VLOG_NOTICE, "%s: shutting down", reason);
    vp_entry_stopping(d->entry, "shutting down");
    vd_core_stopping(&d->core);
    vd_io_stop(&d->io);
}

/* SIGHUP's work, also the service manager's PARAMCHANGE and the console's
 * Ctrl-Break: the core takes the new configuration (or refuses it and keeps
 * its own), then io brings the endpoint in line with what the core has (on
 * Windows the pipe's descriptor, from access.allow). */
static void reload(struct daemon *d)
{
    vd_core_reload(&d->core);
    vd_io_reload(&d->io);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct daemon *d = h->data;
    if (signum == d->sigs.reload) {
        reload(d);
        return;
    }
    shut_down(d, signum == d->sigs.stop ? d->sigs.stop_name : "SIGINT");
}

/* On the loop's thread: what the service manager asked for meanwhile. */
static void on_wake(uv_async_t *h)
{
    struct daemon *d = h->data;
    if (atomic_exchange(&d->reload_asked, false)) {
        vlog(VLOG_NOTICE, "reload asked by %s",
             vp_entry_under_manager(d->entry)
                 ? "the service manager (PARAMCHANGE)"
                 : "the console (Ctrl-Break)");
        reload(d); /* SIGHUP's path */
    }
    if (atomic_exchange(&d->stop_asked, false))
        shut_down(d, "stop asked by the service manager");
}

static void wake(struct daemon *d)
{
    uv_mutex_lock(&d->wake_lock);
    if (d->wake_ready)
        uv_async_send(&d->wake);
    uv_mutex_unlock(&d->wake_lock);
}

/* From the service manager's thread (platform/entry.h). A request made
 * before the loop could take it stays in its flag: the loop looks once it
 * is ready. */
static void ask_stop(void *data)
{
    struct daemon *d = data;
    atomic_store(&d->stop_asked, true);
    wake(d);
}

static void ask_reload(void *data)
{
    struct daemon *d = data;
    atomic_store(&d->reload_asked, true);
    wake(d);
}

static void close_quietly(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static int run(struct vp_entry *e, void *data);

int main(int argc, char **argv)
{
    /* The entry's own options (the service's modes, its name and run
     * directory where the system has them: platform/entry.h) are taken out
     * before getopt. */
    struct vp_entry_cfg ecfg = {.start_wait_hint_ms = 30000,
                                .stop_wait_hint_ms = 30000};
    char why[512];
    enum vp_entry_mode mode = vp_entry_mode(&argc, argv, &ecfg, why, sizeof(why));
    if (mode == VP_ENTRY_BAD || mode == VP_ENTRY_CONFLICT) {
        fprintf(stderr, "vramd: %s\n", why);
        return 2;
    }
    static const struct option opts[] = {
        {"socket", required_argument, 0, 's'},
        {"backend", required_argument, 0, 'b'},
        {"config", required_argument, 0, 'c'},
        {"check-config", required_argument, 0, 'C'},
        {"discard-state", no_argument, 0, 'D'},
        {"log-level", required_argument, 0, 'l'},
        {"version", no_argument, 0, 'V'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *socket_path = getenv("VRAM_SOCKET");
    const char *backend_name = NULL, *config_path = NULL;
    int level = VLOG_INFO, c;
    bool discard_state = false;
    while ((c = getopt_long(argc, argv, "s:b:c:l:Vh", opts, NULL)) != -1) {
        switch (c) {
        case 's': socket_path = optarg; break;
        case 'b':
            if (!vd_backend_known(optarg)) {
                fprintf(stderr, "vramd: --backend must be %s, not '%s'\n",
                        vd_backend_names(), optarg);
                return 2;
            }
            backend_name = optarg;
            break;
        case 'c': config_path = optarg; break;
        case 'C': return check_config(optarg);
        case 'D': discard_state = true; break;
        case 'l':
            level = vlog_level_parse(optarg);
            if (level < 0) {
                fprintf(stderr, "vramd: unknown log level '%s' (error, "
                        "warning, notice, info, debug)\n", optarg);
                return 2;
            }
            break;
        case 'V': printf("vramd %s (protocol versions %d to %d)\n", VRAM_VERSION,
                         VW_PROTOCOL_OLDEST, VW_PROTOCOL_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "vramd: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    static struct opts o;
    o = (struct opts){.socket_path = socket_path, .backend_name = backend_name,
                      .config_path = config_path, .level = level,
                      .discard_state = discard_state};
    the_daemon.o = &o;
    struct vp_entry_ops ops = {.main = run, .stop = ask_stop,
                               .reload = ask_reload, .data = &the_daemon,
                               .installer = vd_service_installer()};
    the_daemon.ecfg = &ecfg;
    int rc = vp_entry_exec(mode, argc, argv, &ecfg, &ops, why, sizeof(why));
    if (why[0])
        fprintf(stderr, "vramd: %s\n", why);
    if (mode == VP_ENTRY_INSTALL || mode == VP_ENTRY_UNINSTALL)
        return rc < 0 ? 1 : 0;
    return rc < 0 ? 1 : rc;
}

/* The daemon, in the foreground or as the service (e). */
static int run(struct vp_entry *e, void *data)
{
    struct daemon *d = data;
    const struct opts *o = d->o;
    d->entry = e;
    const char *socket_path = o->socket_path;
    const char *backend_name = o->backend_name, *config_path = o->config_path;
    int level = o->level;
    bool discard_state = o->discard_state;
    if (!socket_path || !*socket_path)
        socket_path = DEFAULT_SOCKET;
    vlog_init(level);
    vp_process_init();
    /* Handles in flight to clients and the backends' pools are fds. */
    vp_raise_handle_limit();
    /* Reading the configuration and opening the backend. */
    vp_entry_starting(e, 30000);

    /* Where the configuration and the state file are, as the system has
     * them (Windows: the run directory, made sure of here). */
    struct vp_entry_files files;
    char files_why[512];
    int fe = vp_entry_files(d->ecfg, socket_path, &files, files_why,
                            sizeof(files_why));
    if (fe < 0) {
        vlog(VLOG_ERR, "%s", files_why);
        return fe == -EINVAL ? 2 : 1;
    }
    if (!config_path && files.config[0])
        config_path = files.config;
    struct vd_config cfg;
    if (config_path) {
        char errs[VD_MAX_CONFIG_ERRORS][256];
        int n = 0;
        if (vd_config_load(config_path, &cfg, errs, &n) < 0) {
            for (int i = 0; i < n; i++)
                vlog(VLOG_ERR, "%s: %s", config_path, errs[i]);
            return 1;
        }
    } else {
        vd_config_default(&cfg);
    }
    if (!backend_name)
        backend_name = cfg.backend[0] ? cfg.backend : "auto";

    struct vd_backend *backend = NULL;
    char why[256] = "";
    if (vd_backend_open(backend_name, &cfg, cfg.backend_conf, &backend, why,
                        sizeof(why)) < 0) {
        vlog(VLOG_ERR, "%s backend unavailable: %s", backend_name, why);
        vd_config_free(&cfg);
        return 1;
    }
    uv_loop_init(&d->loop);
    uv_mutex_init(&d->wake_lock);
    uv_async_init(&d->loop, &d->wake, on_wake);
    d->wake.data = d;
    uv_mutex_lock(&d->wake_lock);
    d->wake_ready = true;
    uv_mutex_unlock(&d->wake_lock);
    /* What was asked before wake could be sent. */
    if (atomic_load(&d->stop_asked) || atomic_load(&d->reload_asked))
        uv_async_send(&d->wake);
    /* The state file: reading it back and resuming what it names. */
    vp_entry_starting(e, 30000);
    struct vd_port port = vd_io_port(&d->io);
    int rc = 1, err;
    if (vd_core_init(&d->core, &d->loop, &cfg, config_path, backend, &port) < 0 ||
        vd_io_prepare(&d->io, &d->loop, &d->core, socket_path) < 0)
        goto out;
    d->core.discard_state = discard_state;
    err = vd_core_start(&d->core,
                        files.state_base[0] ? files.state_base : d->io.path,
                        d->io.path);
    if (err < 0) {
        rc = err == -EBADMSG ? EXIT_STATE : 1;
        goto out;
    }
    vp_entry_starting(e, 10000);
    if (vd_io_listen(&d->io) < 0)
        goto out;
    vp_entry_signals(&d->sigs);
    int sigs[3] = {d->sigs.stop, d->sigs.interrupt, d->sigs.reload};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(&d->loop, &d->sig[i]);
        d->sig[i].data = d;
        uv_signal_start(&d->sig[i], on_signal, sigs[i]);
    }
    for (uint32_t i = 0; i < vl_device_count(d->core.ledger); i++) {
        char cap[32], ch[32];
        struct vl_device_view dv;
        vl_device_view(d->core.ledger, i, &dv);
        vlog(VLOG_INFO, "device %u: %s, %s in chunks of %s", dv.id,
             backend->info[i].name,
             vw_size_format((uint64_t)dv.chunks * dv.chunk_bytes, cap,
                              sizeof(cap)),
             vw_size_format(dv.chunk_bytes, ch, sizeof(ch)));
    }
    vlog(VLOG_NOTICE, "vramd %s ready on %s (backend %s, %u devices, %u "
         "stages configured)", VRAM_VERSION, d->io.path, backend->ops->name,
         vl_device_count(d->core.ledger), cfg.nstages);
    char state[256];
    snprintf(state, sizeof(state), "serving %u devices on %s (%s backend)",
             vl_device_count(d->core.ledger), d->io.path, backend->ops->name);
    vp_entry_running(e, state);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    rc = 0;
out:
    /* wake is closed below: from here a stop or reload only sets its flag. */
    uv_mutex_lock(&d->wake_lock);
    d->wake_ready = false;
    uv_mutex_unlock(&d->wake_lock);
    vd_io_fini(&d->io);
    uv_walk(&d->loop, close_quietly, NULL);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    vd_core_fini(&d->core);
    uv_loop_close(&d->loop);
    uv_mutex_destroy(&d->wake_lock);
    vd_backend_destroy(backend);
    vd_config_free(&cfg);
    if (rc == 0)
        vlog(VLOG_NOTICE, "stopped");
    return rc;
}
