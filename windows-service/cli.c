/* SPDX-License-Identifier: Apache-2.0 */
/* The service options of a program's command line. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* platform/entry.h, implemented here on the SCM (inline no-ops on POSIX):
 * vramd's main reaches the service through that platform-neutral seam.
 * vram_winsvc's include path does not name platform/: hence the relative
 * path. */
#include "../platform/entry.h"

static const struct {
    const char *opt;
    enum vram_service_mode mode;
} modes[] = {
    {"--service", VRAM_SERVICE_SCM},
    {"--console", VRAM_SERVICE_CONSOLE},
    {"--install-service", VRAM_SERVICE_INSTALL},
    {"--uninstall-service", VRAM_SERVICE_UNINSTALL},
};

enum vram_service_mode vram_service_mode(int *argc, char **argv)
{
    enum vram_service_mode found = VRAM_SERVICE_NONE;
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        enum vram_service_mode m = VRAM_SERVICE_NONE;
        for (size_t k = 0; k < sizeof(modes) / sizeof(modes[0]); k++)
            if (strcmp(argv[i], modes[k].opt) == 0)
                m = modes[k].mode;
        if (m == VRAM_SERVICE_NONE) {
            argv[out++] = argv[i];
            continue;
        }
        found = found == VRAM_SERVICE_NONE ? m : VRAM_SERVICE_CONFLICT;
    }
    argv[out] = NULL;
    *argc = out;
    return found;
}

int vram_service_exec(enum vram_service_mode mode, int argc, char **argv,
                      const struct vram_service_cli *cli, char *why,
                      size_t whylen)
{
    why[0] = 0;
    switch (mode) {
    case VRAM_SERVICE_SCM: {
        int rc = vram_service_run(&cli->cfg, &cli->ops);
        if (rc == -ESRCH)
            snprintf(why, whylen, "--service: this process was not started by "
                     "the service manager (run it with --console in a terminal)");
        else if (rc < 0)
            snprintf(why, whylen, "--service: cannot reach the service manager: %s",
                     strerror(-rc));
        return rc;
    }
    case VRAM_SERVICE_CONSOLE:
        return vram_service_console(&cli->cfg, &cli->ops);
    case VRAM_SERVICE_INSTALL: {
        struct vram_service_install_cfg ic = cli->install;
        char **args = NULL;
        if (!ic.name)
            ic.name = cli->cfg.name;
        if (!ic.argv) {
            /* --service, and the options this command line had. */
            args = calloc((size_t)argc + 1, sizeof(*args));
            if (!args)
                return -ENOMEM;
            args[0] = "--service";
            for (int i = 1; i < argc; i++)
                args[i] = argv[i];
            ic.argv = args;
        }
        int rc = vram_service_install(&ic, why, whylen);
        free(args);
        return rc;
    }
    case VRAM_SERVICE_UNINSTALL:
        return vram_service_uninstall(cli->install.name ? cli->install.name
                                                        : cli->cfg.name,
                                      cli->cfg.stop_wait_hint_ms
                                          ? cli->cfg.stop_wait_hint_ms
                                          : 30000,
                                      why, whylen);
    case VRAM_SERVICE_CONFLICT:
        snprintf(why, whylen, "--service, --console, --install-service and "
                 "--uninstall-service exclude each other");
        return -EINVAL;
    default:
        snprintf(why, whylen, "no service option given");
        return -EINVAL;
    }
}


enum vp_entry_mode vp_entry_mode(int *argc, char **argv)
{
    switch (vram_service_mode(argc, argv)) {
    case VRAM_SERVICE_SCM: return VP_ENTRY_SERVICE;
    case VRAM_SERVICE_CONSOLE: return VP_ENTRY_CONSOLE;
    case VRAM_SERVICE_INSTALL: return VP_ENTRY_INSTALL;
    case VRAM_SERVICE_UNINSTALL: return VP_ENTRY_UNINSTALL;
    case VRAM_SERVICE_CONFLICT: return VP_ENTRY_CONFLICT;
    default: return VP_ENTRY_FOREGROUND;
    }
}

/* The service's callbacks take vram_service's shape; these hand them on to
 * the program's (the ops travel as the data pointer). struct vp_entry is
 * struct vram_service: the seam only names it. */
static int entry_main(struct vram_service *svc, void *data)
{
    const struct vp_entry_ops *o = data;
    return o->main((struct vp_entry *)svc, o->data);
}

static void entry_stop(void *data)
{
    const struct vp_entry_ops *o = data;
    o->stop(o->data);
}

static void entry_reload(void *data)
{
    const struct vp_entry_ops *o = data;
    o->reload(o->data);
}

int vp_entry_exec(enum vp_entry_mode mode, int argc, char **argv,
                  const struct vp_entry_cfg *cfg, const struct vp_entry_ops *ops,
                  char *why, size_t whylen)
{
    static const enum vram_service_mode as_service[] = {
        [VP_ENTRY_FOREGROUND] = VRAM_SERVICE_CONSOLE,
        [VP_ENTRY_SERVICE] = VRAM_SERVICE_SCM,
        [VP_ENTRY_CONSOLE] = VRAM_SERVICE_CONSOLE,
        [VP_ENTRY_INSTALL] = VRAM_SERVICE_INSTALL,
        [VP_ENTRY_UNINSTALL] = VRAM_SERVICE_UNINSTALL,
        [VP_ENTRY_CONFLICT] = VRAM_SERVICE_CONFLICT,
    };
    if ((unsigned)mode >= sizeof(as_service) / sizeof(as_service[0])) {
        snprintf(why, whylen, "unknown mode %d", (int)mode);
        return -EINVAL;
    }
    /* Without a mode option the program runs as with --console: the same
     * main, with Ctrl-C and Ctrl-Break handled the same way. */
    struct vram_service_cli cli = {
        .cfg = {.name = cfg->name, .data_dir = cfg->data_dir,
                .start_wait_hint_ms = cfg->start_wait_hint_ms,
                .stop_wait_hint_ms = cfg->stop_wait_hint_ms,
                /* As a service, stderr (the daemon's log) goes to
                 * data_dir\vramd.log; in the foreground it stays where it
                 * is. */
                .log_to_file = true},
        .ops = {.main = entry_main, .stop = entry_stop,
                .reload = ops->reload ? entry_reload : NULL, .data = (void *)ops},
    };
    return vram_service_exec(as_service[mode], argc, argv, &cli, why, whylen);
}

void vp_entry_starting(struct vp_entry *e, uint32_t wait_hint_ms)
{
    vram_service_starting((struct vram_service *)e, wait_hint_ms);
}

void vp_entry_running(struct vp_entry *e)
{
    vram_service_running((struct vram_service *)e);
}

void vp_entry_stopping(struct vp_entry *e, uint32_t wait_hint_ms)
{
    vram_service_stopping((struct vram_service *)e, wait_hint_ms);
}

bool vp_entry_under_manager(const struct vp_entry *e)
{
    return vram_service_under_scm((const struct vram_service *)e);
}
