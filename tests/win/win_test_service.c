/* SPDX-License-Identifier: Apache-2.0 */
/* A small service built on the platform entry (platform/entry.h), for
 * test_win_service: what vramd's main does, with a named pipe
 * (platform/win32/pipe_listener.h) to ask it how it is.
 *
 *   win_test_service.exe MODE --service-name NAME --run-dir DIR --pipe PIPE
 *   MODE: --service | --console
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

#include "platform/conn.h"
#include "platform/entry.h"
#include "platform/win32/pipe_listener.h"
#include "tests/win/wintest.h"

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

static int svc_main(struct vp_entry *svc, void *data)
{
    fprintf(stderr, "win_test_service: starting (scm %d)\n", vp_entry_under_manager(svc));
    /* A start-up in steps, each reported with the time the next takes. */
    for (int i = 0; i < 3; i++) {
        vp_entry_starting(svc, 3000);
        Sleep(150);
    }
    struct vp_pipe_listen_cfg cfg = {.name = pipe_name};
    char why[256];
    int e = vp_pipe_listen(&cfg, &listener, why, sizeof(why));
    if (e < 0) {
        fprintf(stderr, "win_test_service: %s\n", why);
        return 3;
    }
    vp_entry_running(svc, "running");
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
                         atomic_load(&reloads), vp_entry_under_manager(svc),
                         GetCurrentProcessId(), vp_entry_log_path(svc));
                send_all(c.h, out);
            } else if (sscanf(line, "fail %d", &n) == 1 || strcmp(line, "quit") == 0) {
                rc = strcmp(line, "quit") == 0 ? 0 : n;
                send_all(c.h, "ok\n");
                vp_entry_stopping(svc, "asked to");
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
    struct vp_entry_cfg cfg = {.name = "vramd-test", .start_wait_hint_ms = 5000,
                               .stop_wait_hint_ms = 5000};
    char why[512];
    enum vp_entry_mode mode = vp_entry_mode(&argc, argv, &cfg, why, sizeof(why));
    for (int i = 1; i + 1 < argc; i += 2)
        if (strcmp(argv[i], "--pipe") == 0)
            pipe_name = argv[i + 1];
    if (!pipe_name && (mode == VP_ENTRY_SERVICE || mode == VP_ENTRY_CONSOLE)) {
        fprintf(stderr, "win_test_service: --pipe is needed\n");
        return 2;
    }
    struct vp_entry_ops ops = {.main = svc_main, .stop = on_stop,
                               .reload = on_reload};
    int rc = vp_entry_exec(mode, argc, argv, &cfg, &ops, why, sizeof(why));
    if (why[0])
        fprintf(stderr, "win_test_service: %s\n", why);
    return rc < 0 ? 1 : rc;
}
