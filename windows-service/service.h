/* SPDX-License-Identifier: Apache-2.0 */
/* vramd as a Windows service: the Service Control Manager's side of it.
 *
 * The daemon gives three callbacks: main (runs until asked to stop and
 * returns its exit status), stop and reload (both called from another
 * thread: the SCM's dispatcher thread, or the console's control handler,
 * so they must only signal main's loop, as uv_async_send does).
 *
 * As a service (vram_service_run): START_PENDING with a wait hint as soon
 * as the service thread starts, more checkpoints as main reports progress
 * (vram_service_starting), RUNNING when main says it serves
 * (vram_service_running); STOP and SHUTDOWN report STOP_PENDING and call
 * stop; PARAMCHANGE calls reload (SIGHUP's work on Linux); INTERROGATE is
 * answered. When main returns, STOPPED with its status (non-zero as a
 * service-specific error, which the failure actions treat as a failure).
 *
 * In the foreground (vram_service_console, `vramd --console`): the same
 * main; Ctrl-C, closing the console, log-off and shutdown call stop, and
 * Ctrl-Break calls reload (a console has no SIGHUP; with no reload
 * callback, Ctrl-Break stops too).
 *
 * This is Windows-only code by nature (as systemd/ is Linux's), outside
 * platform/: it is the process's edge, which vramd's main calls. */
#ifndef VRAM_WINSVC_SERVICE_H
#define VRAM_WINSVC_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

struct vram_service;

struct vram_service_ops {
    /* Runs the daemon: returns 0 after a clean stop, else a status of its
     * own (reported to the SCM as a service-specific error). */
    int (*main)(struct vram_service *svc, void *data);
    /* Asks main to return; from another thread. */
    void (*stop)(void *data);
    /* Reloads the configuration; from another thread. NULL: PARAMCHANGE
     * is not accepted. */
    void (*reload)(void *data);
    void *data;
};

struct vram_service_cfg {
    const char *name; /* the service's name in the SCM; NULL: "vramd" */
    /* Where the log goes as a service (vramd.log there); NULL:
     * %ProgramData%\vramd (windows-service/paths.h). */
    const char *data_dir;
    uint32_t start_wait_hint_ms; /* 0: 30 s */
    uint32_t stop_wait_hint_ms;  /* 0: 30 s */
    /* Log to data_dir\vramd.log as a service (stderr is redirected there
     * before main runs); false: leave stderr alone. */
    bool log_to_file;
};

/* Connects to the SCM and runs ops->main on the service's thread; returns
 * once the service stopped: main's status, -ESRCH when this process was not
 * started by the SCM (ERROR_FAILED_SERVICE_CONTROLLER_CONNECT, 1063: run it
 * with --console instead), or another negative errno. */
int vram_service_run(const struct vram_service_cfg *cfg,
                     const struct vram_service_ops *ops);
/* Runs ops->main in the foreground: its status. */
int vram_service_console(const struct vram_service_cfg *cfg,
                         const struct vram_service_ops *ops);

/* From main: start-up goes on (another START_PENDING checkpoint, with the
 * time the next step may take). */
void vram_service_starting(struct vram_service *svc, uint32_t wait_hint_ms);
/* From main: serving (RUNNING; STOP, SHUTDOWN and PARAMCHANGE accepted). */
void vram_service_running(struct vram_service *svc);
/* From main: stopping (STOP_PENDING), when the daemon stops on its own. */
void vram_service_stopping(struct vram_service *svc, uint32_t wait_hint_ms);
/* Whether main runs under the SCM (false: --console). */
bool vram_service_under_scm(const struct vram_service *svc);
/* Where the log goes ("" when stderr was left alone). */
const char *vram_service_log_path(const struct vram_service *svc);

#endif
