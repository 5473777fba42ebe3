/* SPDX-License-Identifier: Apache-2.0 */
/* How the daemon's process runs: in the foreground, under the system's
 * service manager, or installing and removing itself as a service.
 *
 * vramd's main parses its options, then hands its real main to
 * vp_entry_exec with the mode vp_entry_mode found on the command line.
 *
 * On POSIX there is only the foreground: systemd runs vramd as an ordinary
 * process and hears from it through vp_service_notify (service.h), so the
 * calls below are inline and do nothing but call main. That keeps the Linux
 * daemon exactly what it was, and keeps the Linux build's source lists as
 * they are.
 *
 * On Windows they are the Service Control Manager's, implemented in
 * windows-service/cli.c on service.h and install.h there (the SCM's side
 * is the process's edge, outside platform/ as systemd/ is on Linux):
 *   --service            what the SCM runs: START_PENDING with the wait
 *                        hints main gives (vp_entry_starting), RUNNING
 *                        (vp_entry_running), STOP calling ops->stop and
 *                        PARAMCHANGE ops->reload, the log in
 *                        cfg->data_dir\vramd.log;
 *   --console, or none   main in the foreground: Ctrl-C stops, Ctrl-Break
 *                        reloads;
 *   --install-service / --uninstall-service.
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
};

/* The run main is in: the service's, or NULL in the foreground on POSIX. */
struct vp_entry;

struct vp_entry_ops {
    /* The daemon: returns 0 after a clean stop, else its exit status. */
    int (*main)(struct vp_entry *e, void *data);
    void (*stop)(void *data);   /* from another thread: signal main */
    void (*reload)(void *data); /* likewise; NULL: no reload */
    void *data;
};

struct vp_entry_cfg {
    const char *name;     /* the service's name; NULL: "vramd" */
    const char *data_dir; /* where the service's log goes; NULL: default */
    uint32_t start_wait_hint_ms, stop_wait_hint_ms; /* 0: 30 s */
};

#ifdef _WIN32
/* Finds the mode option in argv[1..] and takes it out (argv shifted, *argc
 * lowered), so the program's own option parser never sees it. */
enum vp_entry_mode vp_entry_mode(int *argc, char **argv);
/* Runs, installs or removes, as mode says. Running: main's status, or a
 * negative errno with why (-ESRCH: --service outside the SCM). Install and
 * uninstall: 0, 1 (done, why warns) or a negative errno with why; install
 * gives the service "--service" and argv[1..argc-1] as its command line. */
int vp_entry_exec(enum vp_entry_mode mode, int argc, char **argv,
                  const struct vp_entry_cfg *cfg, const struct vp_entry_ops *ops,
                  char *why, size_t whylen);
/* From main: start-up goes on; the next step may take wait_hint_ms. */
void vp_entry_starting(struct vp_entry *e, uint32_t wait_hint_ms);
/* From main: serving. */
void vp_entry_running(struct vp_entry *e);
/* From main: stopping on its own (not asked by the service manager). */
void vp_entry_stopping(struct vp_entry *e, uint32_t wait_hint_ms);
/* Whether main runs under the service manager. */
bool vp_entry_under_manager(const struct vp_entry *e);
#else
static inline enum vp_entry_mode vp_entry_mode(int *argc, char **argv)
{
    (void)argc;
    (void)argv;
    return VP_ENTRY_FOREGROUND;
}

static inline int vp_entry_exec(enum vp_entry_mode mode, int argc, char **argv,
                                const struct vp_entry_cfg *cfg,
                                const struct vp_entry_ops *ops, char *why,
                                size_t whylen)
{
    (void)mode;
    (void)argc;
    (void)argv;
    (void)cfg;
    if (whylen)
        why[0] = 0;
    return ops->main(NULL, ops->data);
}

static inline void vp_entry_starting(struct vp_entry *e, uint32_t wait_hint_ms)
{
    (void)e;
    (void)wait_hint_ms;
}

static inline void vp_entry_running(struct vp_entry *e)
{
    (void)e;
}

static inline void vp_entry_stopping(struct vp_entry *e, uint32_t wait_hint_ms)
{
    (void)e;
    (void)wait_hint_ms;
}

static inline bool vp_entry_under_manager(const struct vp_entry *e)
{
    (void)e;
    return false;
}
#endif

#endif
