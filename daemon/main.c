/* vramd: the GPU memory broker daemon. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "log.h"
#include "message.h"
#include "platform.h"
#include "server.h"
#include "units.h"

#define DEFAULT_SOCKET "/run/vramd/vramd.sock"
#define DEFAULT_CONFIG "/etc/vramd/vramd.json"

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
            "  -c, --config FILE      configuration (JSON; default " DEFAULT_CONFIG "\n"
            "                         when it exists); without one: two host\n"
            "                         devices of 16 GiB with 2 MiB chunks\n"
            "      --check-config FILE  validate FILE, print each error, exit\n"
            "  -l, --log-level LEVEL  error, warning, notice, info (default), "
            "debug\n"
            "  -V, --version          print the version\n"
            "  -h, --help             this text\n");
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
    struct vl_ledger L;
    int rc = 0;
    if (vl_init(&L, devs, cfg.ndev, 1ull << 45, 1ull << 44) < 0) {
        fprintf(stderr, "%s: devices: %s\n", path, vl_why(&L));
        rc = 1;
    } else {
        for (uint32_t i = 0; i < cfg.nstages; i++)
            if (vl_stage_configure(&L, &cfg.stages[i]) < 0) {
                fprintf(stderr, "%s: stages[%u]: %s\n", path, i, vl_why(&L));
                rc = 1;
            }
        vl_fini(&L);
    }
    if (!rc)
        printf("%s: valid (%u devices, %u stages)\n", path, cfg.ndev,
               cfg.nstages);
    vd_config_free(&cfg);
    return rc;
}

static int make_backend(const char *want, struct vd_config *cfg,
                        struct vd_backend **out)
{
    char why[256] = "";
    if (strcmp(want, "cuda") == 0 || strcmp(want, "auto") == 0) {
        int r = vd_backend_cuda_create(cfg, out, why, sizeof(why));
        if (r == 0)
            return 0;
        if (strcmp(want, "cuda") == 0) {
            vlog(VLOG_ERR, "cuda backend unavailable: %s", why);
            return r;
        }
        vlog(VLOG_NOTICE, "cuda backend unavailable: %s; --backend auto uses "
             "host", why);
    }
    uint32_t ids[VL_MAX_DEVICES], nchunks[VL_MAX_DEVICES];
    uint64_t cb[VL_MAX_DEVICES];
    for (uint32_t i = 0; i < cfg->ndev; i++) {
        ids[i] = cfg->dev[i].l.id;
        cb[i] = cfg->dev[i].l.chunk_bytes;
        uint64_t cap = cfg->dev[i].has_capacity ? cfg->dev[i].l.capacity_bytes
                                                : 16ull << 30;
        nchunks[i] = (uint32_t)(cap / cb[i]);
        if (!nchunks[i]) {
            vlog(VLOG_ERR, "devices[%u].capacity: below one chunk", i);
            return -EINVAL;
        }
    }
    return vd_backend_host_create(cfg->ndev, ids, cb, nchunks, cfg->pool_prefill,
                                  out);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, 0, 's'},
        {"backend", required_argument, 0, 'b'},
        {"config", required_argument, 0, 'c'},
        {"check-config", required_argument, 0, 'C'},
        {"log-level", required_argument, 0, 'l'},
        {"version", no_argument, 0, 'V'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *socket_path = getenv("VRAM_SOCKET");
    const char *backend_name = NULL, *config_path = NULL;
    int level = VLOG_INFO, c;
    while ((c = getopt_long(argc, argv, "s:b:c:l:Vh", opts, NULL)) != -1) {
        switch (c) {
        case 's': socket_path = optarg; break;
        case 'b':
            if (strcmp(optarg, "host") && strcmp(optarg, "cuda") &&
                strcmp(optarg, "auto")) {
                fprintf(stderr, "vramd: --backend must be host, cuda or auto, "
                        "not '%s'\n", optarg);
                return 2;
            }
            backend_name = optarg;
            break;
        case 'c': config_path = optarg; break;
        case 'C': return check_config(optarg);
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
    if (!config_path && vp_path_exists(DEFAULT_CONFIG))
        config_path = DEFAULT_CONFIG;
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
    if (make_backend(backend_name, &cfg, &backend) < 0) {
        vd_config_free(&cfg);
        return 1;
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct vd_server srv;
    int rc = 1;
    if (vd_server_init(&srv, &loop, &cfg, backend, socket_path) < 0)
        goto out_backend;
    if (config_path)
        snprintf(srv.config_path, sizeof(srv.config_path), "%s", config_path);
    if (vd_server_listen(&srv) < 0)
        goto out_server;
    for (uint32_t i = 0; i < srv.ledger.ndev; i++) {
        char cap[32], ch[32];
        struct vl_device *d = &srv.ledger.dev[i];
        vlog(VLOG_INFO, "device %u: %s, %s in chunks of %s", d->cfg.id,
             backend->info[i].name,
             vram_size_format((uint64_t)d->nchunks * d->cfg.chunk_bytes, cap,
                              sizeof(cap)),
             vram_size_format(d->cfg.chunk_bytes, ch, sizeof(ch)));
    }
    vlog(VLOG_NOTICE, "vramd %s ready on %s (backend %s, %u devices, %u "
         "stages configured)", VRAM_VERSION, srv.socket_path, backend->ops->name,
         srv.ledger.ndev, cfg.nstages);
    char state[256];
    snprintf(state, sizeof(state), "READY=1\nSTATUS=serving %u devices on %s "
             "(%s backend)", srv.ledger.ndev, srv.socket_path, backend->ops->name);
    vp_service_notify(state);
    uv_run(&loop, UV_RUN_DEFAULT);
    rc = 0;
out_server:
    vd_server_fini(&srv);
out_backend:
    uv_loop_close(&loop);
    vd_backend_destroy(backend);
    vd_config_free(&cfg);
    if (rc == 0)
        vlog(VLOG_NOTICE, "stopped");
    return rc;
}
