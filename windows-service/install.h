/* SPDX-License-Identifier: Apache-2.0 */
/* Installing and removing the service, and asking the SCM about it.
 *
 * vramd is installed as its own process (SERVICE_WIN32_OWN_PROCESS), as
 * LocalSystem (it pushes handles into every client's process, which takes
 * PROCESS_DUP_HANDLE on other users' processes), started automatically at
 * boot, and restarted by the SCM when it fails: 3 restarts (after
 * restart_delay_ms each), the count reset after a day without failure,
 * and (SERVICE_CONFIG_FAILURE_ACTIONS_FLAG) a stop with a non-zero status
 * counts as a failure too, not only a crash. */
#ifndef VRAM_WINSVC_INSTALL_H
#define VRAM_WINSVC_INSTALL_H

#include <stddef.h>
#include <stdint.h>

#include "platform/win32/scm_install.h" /* struct vpw_scm_status, VPW_SERVICE_* */

struct vram_service_install_cfg {
    const char *name;         /* NULL: "vramd" */
    const char *display_name; /* NULL: "vramd GPU memory broker" */
    const char *description;  /* NULL: a line saying what vramd does */
    const char *exe;          /* NULL: this program */
    /* The arguments the SCM starts it with, each quoted as the C runtime
     * reads them back; NULL: just "--service". */
    char *const *argv;
    uint32_t restart_delay_ms; /* 0: 5 s */
};

/* 0 installed; 1 installed, with a warning in why (a setting the system
 * refused that is not essential: wine refuses the failure-actions flag);
 * -EEXIST when a service of that name exists; -EACCES without the right to
 * create services (not elevated); another negative errno. */
int vram_service_install(const struct vram_service_install_cfg *cfg, char *why,
                         size_t whylen);
/* Stops the service (waiting up to timeout_ms for STOPPED) and deletes it:
 * 0, -ENOENT when there is none, -ETIMEDOUT when it would not stop (it is
 * deleted all the same once it stops), another negative errno. */
int vram_service_uninstall(const char *name, uint32_t timeout_ms, char *why,
                           size_t whylen);

/* 0, -ENOENT when no such service, or a negative errno. */
int vram_service_query(const char *name, struct vpw_scm_status *out);
/* Starts the service (returns once the SCM started its process). */
int vram_service_start(const char *name);
/* Sends a control (VPW_SERVICE_CONTROL_STOP, _PARAMCHANGE, ...). */
int vram_service_control(const char *name, uint32_t control);
/* A state's name ("RUNNING"). */
const char *vram_service_state_name(uint32_t state);

#endif
