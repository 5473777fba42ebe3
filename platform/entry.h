/* SPDX-License-Identifier: Apache-2.0 */
/* How the daemon's process runs: in a console, under systemd, or under
 * Windows' Service Control Manager; the one entry vramd's main calls, the
 * same on every system (one implementation a system: platform/posix/
 * entry_posix.c, platform/win32/entry_win32.c).
 *
 * vramd's main lets vp_entry_mode take the entry's own options out of its
 * command line, parses the rest, then hands its real main to vp_entry_exec.
 * main tells the entry how start-up goes (vp_entry_starting), that it
 * serves (vp_entry_running) and that it stops (vp_entry_stopping); stop
 * and reload come back through ops, from another thread.
 *
 * POSIX: no options of its own; the foreground is the only mode, and
 * systemd hears from the daemon through sd_notify ($NOTIFY_SOCKET:
 * READY=1, STATUS=, STOPPING=1; platform/linux/notify_linux.c). SIGTERM
 * and SIGINT stop, SIGHUP reloads (vp_entry_signals).
 *
 * Windows: the SCM's (platform/win32/entry_win32.c):
 *   --service            what the SCM runs: START_PENDING with the wait
 *                        hints main gives, RUNNING, STOP calling ops->stop
 *                        and PARAMCHANGE ops->reload, the log in the run
 *                        directory's vramd.log;
 *   --console, or none   main in the foreground: Ctrl-C stops, Ctrl-Break
 *                        reloads;
 *   --install-service / --uninstall-service: handed to the service
 *                        program's installer (ops->installer,
 *                        windows-service/), the service's command line
 *                        being --service and this one's other options;
 *   -r, --run-dir DIR    where the state file, the lock and the log go;
 *   --service-name NAME  the service's name.
 * stop and reload are called from another thread there: they may only
 * signal main's loop. */
#ifndef VRAM_PLATFORM_ENTRY_H
#define VRAM_PLATFORM_ENTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum vp_entry_mode {
    VP_ENTRY_FOREGROUND, /* no mode option: the program's own main */
    VP_ENTRY_SERVICE,    /* --service */
    VP_ENTRY_CONSOLE,    /* --console */
    VP_ENTRY_INSTALL,    /* --install-service */
    VP_ENTRY_UNINSTALL,  /* --uninstall-service */
    VP_ENTRY_CONFLICT,   /* more than one of them */
    VP_ENTRY_BAD,        /* an option of the entry's without its value */
};

/* The run main is in. */
struct vp_entry;

/* The service program's side of installing (windows-service/ on Windows;
 * on Linux systemd's units are installed with the package, so there is
 * none). Each returns 0, 1 (done, why warns) or a negative errno with
 * why. */
struct vp_entry_installer {
    /* Installs service name, started with argv (NULL-terminated). */
    int (*install)(const char *name, char *const *argv, char *why,
                   size_t whylen);
    /* Stops it, waiting up to timeout_ms, and removes it. */
    int (*uninstall)(const char *name, uint32_t timeout_ms, char *why,
                     size_t whylen);
};

struct vp_entry_ops {
    /* The daemon: returns 0 after a clean stop, else its exit status. */
    int (*main)(struct vp_entry *e, void *data);
    void (*stop)(void *data);   /* from another thread: signal main */
    void (*reload)(void *data); /* likewise; NULL: no reload */
    void *data;
    const struct vp_entry_installer *installer; /* NULL: none */
};

struct vp_entry_cfg {
    const char *name;     /* the service's name; NULL: "vramd" */
    const char *data_dir; /* the run directory; NULL: the system's default */
    uint32_t start_wait_hint_ms, stop_wait_hint_ms; /* 0: 30 s */
};

/* Finds the entry's options in argv[1..] and takes them out (argv shifted,
 * *argc lowered), so the program's own option parser never sees them;
 * their values go into cfg (which points into argv). VP_ENTRY_BAD (an
 * option without its value) and VP_ENTRY_CONFLICT come with why: a usage
 * error. */
enum vp_entry_mode vp_entry_mode(int *argc, char **argv,
                                 struct vp_entry_cfg *cfg, char *why,
                                 size_t whylen);
/* The entry's options for the program's --help ("" when it has none),
 * and the default configuration's name there. */
const char *vp_entry_usage(void);
const char *vp_entry_default_config(void);
/* Runs, installs or removes, as mode says. Running: main's status, or a
 * negative errno with why (-ESRCH: --service outside the SCM). Install and
 * uninstall: 0, 1 (done, why warns) or a negative errno with why; install
 * gives the service "--service" and the other options of the command line
 * vp_entry_mode saw. */
int vp_entry_exec(enum vp_entry_mode mode, int argc, char **argv,
                  const struct vp_entry_cfg *cfg, const struct vp_entry_ops *ops,
                  char *why, size_t whylen);

/* From main: start-up goes on; the next step may take wait_hint_ms. */
void vp_entry_starting(struct vp_entry *e, uint32_t wait_hint_ms);
/* From main: serving; status says what ("serving 2 devices on ..."). */
void vp_entry_running(struct vp_entry *e, const char *status);
/* From main: stopping (asked, or on its own); status says why. */
void vp_entry_stopping(struct vp_entry *e, const char *status);
/* Whether main runs under the service manager's control (the SCM; false
 * in a console and on POSIX, where systemd sends signals). */
bool vp_entry_under_manager(const struct vp_entry *e);
/* Where the log goes when the entry moved it ("" when it did not). */
const char *vp_entry_log_path(const struct vp_entry *e);

/* The signals main's loop watches: stop and interrupt stop it, reload
 * reloads. stop_name names stop in the log. */
struct vp_entry_signals {
    int stop, interrupt, reload;
    const char *stop_name;
};
void vp_entry_signals(struct vp_entry_signals *out);

/* Where the daemon's files go: the configuration used when the command
 * line names none ("" when there is none), and the run directory's base
 * for the state file and the lock. */
struct vp_entry_files {
    char config[1024];
    char state_base[1200]; /* "": beside the endpoint (its own path) */
};
/* Fills out for a daemon listening on endpoint, making sure the run
 * directory is fit (Windows: real, and vramd's). 0, or a negative errno
 * with why: -EINVAL when the command line must say more. */
int vp_entry_files(const struct vp_entry_cfg *cfg, const char *endpoint,
                   struct vp_entry_files *out, char *why, size_t whylen);

#endif
