/* SPDX-License-Identifier: Apache-2.0 */
/* The command line of a service program: vramd's main asks which mode its
 * arguments name, and hands the rest of them to its own option parser.
 *
 *   vramd --install-service [OPTIONS]   install (OPTIONS go into the
 *                                       service's command line)
 *   vramd --uninstall-service           stop and remove
 *   vramd --console [OPTIONS]           run in the foreground
 *   vramd --service [OPTIONS]           what the SCM runs
 */
#ifndef VRAM_WINSVC_CLI_H
#define VRAM_WINSVC_CLI_H

#include <stddef.h>

#include "install.h"
#include "service.h"

enum vram_service_mode {
    VRAM_SERVICE_NONE,      /* no service option: the program's own business */
    VRAM_SERVICE_SCM,       /* --service */
    VRAM_SERVICE_CONSOLE,   /* --console */
    VRAM_SERVICE_INSTALL,   /* --install-service */
    VRAM_SERVICE_UNINSTALL, /* --uninstall-service */
    VRAM_SERVICE_CONFLICT,  /* more than one of them */
};

/* Finds the service option in argv[1..] and takes it out (argv is shifted,
 * *argc lowered). */
enum vram_service_mode vram_service_mode(int *argc, char **argv);

struct vram_service_cli {
    struct vram_service_cfg cfg;
    struct vram_service_ops ops;
    struct vram_service_install_cfg install; /* its argv: see below */
};

/* Does what mode says. SCM and CONSOLE: runs, and returns main's status (or
 * a negative errno, why set). INSTALL: installs with "--service" and
 * argv[1..argc-1] (what remains after vram_service_mode) as the service's
 * arguments unless cli->install.argv is set; UNINSTALL: removes. Both
 * return 0 (why says what was done), 1 (done, why warns), or a negative
 * errno with why. NONE and CONFLICT: -EINVAL. Prints nothing. */
int vram_service_exec(enum vram_service_mode mode, int argc, char **argv,
                      const struct vram_service_cli *cli, char *why,
                      size_t whylen);

#endif
