/* vramd: the GPU memory broker daemon. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <signal.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "io.h"
#include "log.h"
#include "platform.h"
#include "registry.h"
#include "startup.h"
#include "units.h"
#include "vram_msg.h"
#ifdef _WIN32
#include "paths.h"
#endif

/* Linux: /run/vramd/vramd.sock; Windows: \\.\pipe\vramd (conn.h). */
#define DEFAULT_SOCKET VP_DEFAULT_ENDPOINT
#ifdef _WIN32
/* %ProgramData%\vramd\vramd.json, looked up at start (windows-service/);
 * this is its name in usage()'s format. */
#define DEFAULT_CONFIG "%%ProgramData%%\\vramd\\vramd.json"
#else
#define DEFAULT_CONFIG "/etc/vramd/vramd.json"
#endif
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
#ifdef _WIN32
            "  -r, --run-dir DIR      where the state file and the lock go\n"
            "                         (default %%ProgramData%%\\vramd)\n"
#endif
            "  -b, --backend NAME     host, cuda or auto (default: the config's, "
            "else auto)\n"
            "  -c, --config FILE      configuration (JSON; default " DEFAULT_CONFIG "\n"
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
            "  -h, --help             this text\n\n"
            "Exit status: 0 stopped by a signal, 1 failed, 2 usage, 65 the state\n"
            "file cannot be trusted (see --discard-state).\n");
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

struct daemon {
    uv_loop_t loop;
    struct vd_core core;
    struct vd_io io;
    uv_signal_t sig[3];
};

#ifdef _WIN32
/* A console has no SIGHUP to reload with: Ctrl-Break reloads (as
 * windows-service's --console does), and libuv's SIGHUP is the console
 * closing, which stops. */
#define SIG_RELOAD SIGBREAK
#define SIG_STOP2 SIGHUP
#else
#define SIG_RELOAD SIGHUP
#define SIG_STOP2 SIGTERM
#endif

static void on_signal(uv_signal_t *h, int signum)
{
    struct daemon *d = h->data;
    if (signum == SIG_RELOAD) {
        vd_core_reload(&d->core);
        return;
    }
    vlog(VLOG_NOTICE, "%s: shutting down", signum == SIG_STOP2 ?
#ifdef _WIN32
         "console closed"
#else
         "SIGTERM"
#endif
         : "SIGINT");
    vp_service_notify("STOPPING=1\nSTATUS=shutting down");
    vd_core_stopping(&d->core);
    vd_io_stop(&d->io);
}

static void close_quietly(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, 0, 's'},
#ifdef _WIN32
        {"run-dir", required_argument, 0, 'r'},
#endif
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
#ifdef _WIN32
    const char *run_dir = NULL;
#define OPTSTRING "s:r:b:c:l:Vh"
#else
#define OPTSTRING "s:b:c:l:Vh"
#endif
    while ((c = getopt_long(argc, argv, OPTSTRING, opts, NULL)) != -1) {
        switch (c) {
        case 's': socket_path = optarg; break;
#ifdef _WIN32
        case 'r': run_dir = optarg; break;
#endif
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
        case 'V': printf("vramd %s (protocol %d)\n", VRAM_VERSION,
                         VRAM_PROTOCOL_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "vramd: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!socket_path || !*socket_path)
        socket_path = DEFAULT_SOCKET;
    vlog_init(level);
    vp_process_init();
    /* Handles in flight to clients and the backends' pools are fds. */
    vp_raise_handle_limit();

    struct vd_config cfg;
#ifdef _WIN32
    char default_config[1024];
    if (!config_path && vram_service_config_path(NULL, default_config,
                                                 sizeof(default_config)) == 0 &&
        vp_path_exists(default_config))
        config_path = default_config;
    /* The state file and the lock: in the run directory, named after the
     * pipe (\\.\pipe\NAME: DIR\NAME.state, DIR\NAME.lock). */
    char data_dir[1024], run_base[1200];
    if (!run_dir) {
        if (vram_service_data_dir(data_dir, sizeof(data_dir)) < 0) {
            fprintf(stderr, "vramd: no %%ProgramData%%: give --run-dir\n");
            return 2;
        }
        run_dir = data_dir;
    }
    const char *leaf = strrchr(socket_path, '\\');
    snprintf(run_base, sizeof(run_base), "%s\\%s", run_dir,
             leaf && leaf[1] ? leaf + 1 : "vramd");
#else
    if (!config_path && vp_path_exists(DEFAULT_CONFIG))
        config_path = DEFAULT_CONFIG;
#endif
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
    if (vd_backend_open(backend_name, &cfg, &backend, why, sizeof(why)) < 0) {
        vlog(VLOG_ERR, "%s backend unavailable: %s", backend_name, why);
        vd_config_free(&cfg);
        return 1;
    }
    static struct daemon d;
    uv_loop_init(&d.loop);
    struct vd_port port = vd_io_port(&d.io);
    int rc = 1, e;
    if (vd_core_init(&d.core, &d.loop, &cfg, config_path, backend, &port) < 0 ||
        vd_io_prepare(&d.io, &d.loop, &d.core, socket_path) < 0)
        goto out;
    d.core.discard_state = discard_state;
#ifdef _WIN32
    e = vd_core_start(&d.core, run_base);
#else
    e = vd_core_start(&d.core, d.io.path);
#endif
    if (e < 0) {
        rc = e == -EBADMSG ? EXIT_STATE : 1;
        goto out;
    }
    if (vd_io_listen(&d.io) < 0)
        goto out;
    int sigs[3] = {SIG_STOP2, SIGINT, SIG_RELOAD};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(&d.loop, &d.sig[i]);
        d.sig[i].data = &d;
        uv_signal_start(&d.sig[i], on_signal, sigs[i]);
    }
    for (uint32_t i = 0; i < vl_device_count(d.core.ledger); i++) {
        char cap[32], ch[32];
        struct vl_device_view dv;
        vl_device_view(d.core.ledger, i, &dv);
        vlog(VLOG_INFO, "device %u: %s, %s in chunks of %s", dv.id,
             backend->info[i].name,
             vram_size_format((uint64_t)dv.chunks * dv.chunk_bytes, cap,
                              sizeof(cap)),
             vram_size_format(dv.chunk_bytes, ch, sizeof(ch)));
    }
    vlog(VLOG_NOTICE, "vramd %s ready on %s (backend %s, %u devices, %u "
         "stages configured)", VRAM_VERSION, d.io.path, backend->ops->name,
         vl_device_count(d.core.ledger), cfg.nstages);
    char state[256];
    snprintf(state, sizeof(state), "READY=1\nSTATUS=serving %u devices on %s "
             "(%s backend)", vl_device_count(d.core.ledger), d.io.path,
             backend->ops->name);
    vp_service_notify(state);
    uv_run(&d.loop, UV_RUN_DEFAULT);
    rc = 0;
out:
    vd_io_fini(&d.io);
    uv_walk(&d.loop, close_quietly, NULL);
    uv_run(&d.loop, UV_RUN_DEFAULT);
    vd_core_fini(&d.core);
    uv_loop_close(&d.loop);
    vd_backend_destroy(backend);
    vd_config_free(&cfg);
    if (rc == 0)
        vlog(VLOG_NOTICE, "stopped");
    return rc;
}
