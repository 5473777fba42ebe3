/* SPDX-License-Identifier: Apache-2.0 */
/* The service control manager's calls that windows-service/ (the service
 * program: install, uninstall, ask) makes, in UTF-8 and errno terms: the
 * program decides what to install and what to say, and makes no Win32
 * call of its own. Free of <windows.h>: the states and controls below
 * have the SCM's values (SERVICE_RUNNING, SERVICE_CONTROL_STOP, ...). */
#ifndef VRAM_WIN32_SCM_INSTALL_H
#define VRAM_WIN32_SCM_INSTALL_H

#include <stdbool.h>
#include <stdint.h>

enum {
    VPW_SERVICE_STOPPED = 1,
    VPW_SERVICE_START_PENDING = 2,
    VPW_SERVICE_STOP_PENDING = 3,
    VPW_SERVICE_RUNNING = 4,
    VPW_SERVICE_CONTINUE_PENDING = 5,
    VPW_SERVICE_PAUSE_PENDING = 6,
    VPW_SERVICE_PAUSED = 7,
};
enum {
    VPW_SERVICE_CONTROL_STOP = 1,
    VPW_SERVICE_CONTROL_INTERROGATE = 4,
    VPW_SERVICE_CONTROL_PARAMCHANGE = 6,
};

/* A service in its own process (SERVICE_WIN32_OWN_PROCESS) as LocalSystem,
 * started at boot, restarted on failure. Strings are UTF-8. */
struct vpw_scm_service {
    const char *name;
    const char *display;
    const char *description;
    const char *command_line; /* the program quoted, then its arguments */
    uint32_t restarts;        /* restart actions, at most 8 */
    uint32_t restart_delay_ms;
    uint32_t reset_after_s; /* the failure count's reset period */
};

enum vpw_scm_step {
    VPW_SCM_TEXT,     /* a string too long or not UTF-8 */
    VPW_SCM_MANAGER,  /* opening the service manager */
    VPW_SCM_CREATE,   /* creating the service */
    VPW_SCM_RESTARTS, /* its failure actions (the service deleted again) */
};
/* What an install met: where it failed and the system's error there, and
 * the settings refused that are not essential. Written always, as a
 * message buffer is. */
struct vpw_scm_outcome {
    enum vpw_scm_step step;          /* where it failed (a negative return) */
    unsigned long error;             /* the system's error code there */
    bool display_taken;              /* another service has the display name */
    unsigned long description_error; /* non-zero: the description refused */
    unsigned long flag_error; /* non-zero: SERVICE_CONFIG_FAILURE_ACTIONS_FLAG
                               * (a stop with an error counts as a failure)
                               * refused; wine refuses it */
};
/* 0 installed (with outcome's warnings, if any); -EEXIST, -EACCES, -EINVAL
 * (outcome's step VPW_SCM_TEXT), or another negative errno. */
int vpw_scm_install(const struct vpw_scm_service *svc, struct vpw_scm_outcome *out);

struct vpw_scm_status {
    uint32_t state; /* VPW_SERVICE_* */
    int64_t pid;    /* of the service's process; 0 when not running */
    uint32_t checkpoint, wait_hint_ms;
    uint32_t win32_exit, service_exit;
    uint32_t controls; /* SERVICE_ACCEPT_* */
};
/* 0, -ENOENT when there is no such service, or a negative errno. */
int vpw_scm_query(const char *name, struct vpw_scm_status *out);
/* Returns once the SCM started the service's process. */
int vpw_scm_start(const char *name);
/* Sends a control (VPW_SERVICE_CONTROL_*, or a user-defined 128-255). */
int vpw_scm_control(const char *name, uint32_t control);
/* Marks the service for deletion (the SCM drops it once its process is
 * gone and no handle to it is open): 0, also when marked already;
 * -ENOENT; another negative errno, with the system's code in *error. */
int vpw_scm_delete(const char *name, unsigned long *error);

#endif
