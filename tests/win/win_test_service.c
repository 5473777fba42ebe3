/* SPDX-License-Identifier: Apache-2.0 */
/* A small service built on windows-service/, for test_win_service: what
 * vramd's main will do, with a named pipe (platform/pipe_listener.h) to
 * ask it how it is.
 *
 *   win_test_service.exe MODE --name NAME --data-dir DIR --pipe PIPE
 *   MODE: --service | --console | --install-service | --uninstall-service
 *
 * On the pipe, one line a connection:
 *   status  -> "reloads=N scm=0|1 pid=P log=PATH"
 *   fail N  -> "ok", and main returns N (the service stops with it)
 *   quit    -> "ok", and main returns 0
 * It logs "starting", "running", "reload N" and "stopping" on stderr (the
 * log file, as a service). */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "conn.h"
#include "pipe_listener.h"
#include "service.h"
#include "wintest.h"

static const char *pipe_name;
static struct vp_pipe_listener *listener;
static atomic_int reloads, stop_asked;

static void on_stop(void *data)
{
    atomic_store(&stop_asked, 1);
    if (listener)
        vp_pipe_listen_wake(listener);
}

static void on_reload(void *data)
{
    atomic_fetch_add(&reloads, 1);
    if (listener)
        vp_pipe_listen_wake(listener);
}

static int svc_main(struct vram_service *svc, void *data)
{
    fprintf(stderr, "win_test_service: starting (scm %d)\n", vram_service_under_scm(svc));
    /* A start-up in steps, each reported with the time the next takes. */
    for (int i = 0; i < 3; i++) {
        vram_service_starting(svc, 3000);
        Sleep(150);
    }
    struct vp_pipe_listen_cfg cfg = {.name = pipe_name};
    char why[256];
    int e = vp_pipe_listen(&cfg, &listener, why, sizeof(why));
    if (e < 0) {
        fprintf(stderr, "win_test_service: %s\n", why);
        return 3;
    }
    vram_service_running(svc);
    fprintf(stderr, "win_test_service: running\n");
    int rc = 0, seen = 0;
    while (!atomic_load(&stop_asked)) {
        int r = atomic_load(&reloads);
        if (r != seen) {
            fprintf(stderr, "win_test_service: reload %d\n", r);
            seen = r;
        }
        struct vp_pipe_conn c;
        e = vp_pipe_accept(listener, 200, &c);
        if (e < 0)
            continue;
        char line[128], out[512];
        if (recv_line(c.h, line, sizeof(line), 2000) >= 0) {
            int n;
            if (strcmp(line, "status") == 0) {
                snprintf(out, sizeof(out), "reloads=%d scm=%d pid=%lu log=%s\n",
                         atomic_load(&reloads), vram_service_under_scm(svc),
                         GetCurrentProcessId(), vram_service_log_path(svc));
                send_all(c.h, out);
            } else if (sscanf(line, "fail %d", &n) == 1 || strcmp(line, "quit") == 0) {
                rc = strcmp(line, "quit") == 0 ? 0 : n;
                send_all(c.h, "ok\n");
                vram_service_stopping(svc, 3000);
                atomic_store(&stop_asked, 1);
            }
        }
        /* Until the client read the reply and left. */
        char x;
        int nh;
        vp_conn_set_recv_timeout(c.h, 2000);
        vp_recv(c.h, &x, 1, NULL, 0, &nh, VP_RECV_WAIT, why, sizeof(why));
        vp_close(&c.h);
    }
    fprintf(stderr, "win_test_service: stopping\n");
    vp_pipe_listen_close(&listener);
    return rc;
}

int main(int argc, char **argv)
{
    enum vram_service_mode mode = vram_service_mode(&argc, argv);
    const char *name = "vramd-test", *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--name") == 0)
            name = argv[i + 1];
        else if (strcmp(argv[i], "--data-dir") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--pipe") == 0)
            pipe_name = argv[i + 1];
    }
    if (!pipe_name && (mode == VRAM_SERVICE_SCM || mode == VRAM_SERVICE_CONSOLE)) {
        fprintf(stderr, "win_test_service: --pipe is needed\n");
        return 2;
    }
    struct vram_service_cli cli = {
        .cfg = {.name = name, .data_dir = dir, .log_to_file = true,
                .start_wait_hint_ms = 5000, .stop_wait_hint_ms = 5000},
        .ops = {.main = svc_main, .stop = on_stop, .reload = on_reload},
        .install = {.restart_delay_ms = 1000},
    };
    char why[512];
    int rc = vram_service_exec(mode, argc, argv, &cli, why, sizeof(why));
    if (why[0])
        fprintf(stderr, "win_test_service: %s\n", why);
    return rc < 0 ? 1 : rc;
}
