/* The service options of a program's command line. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
