/* SPDX-License-Identifier: Apache-2.0 */
/* The service program's installer that vramd's --install-service and
 * --uninstall-service reach through its platform entry (platform/entry.h):
 * the one a system has, chosen by the build from the service program's
 * folder beside the daemon: windows-service/installer_winsvc.c installs
 * with the Service Control Manager; systemd/installer_systemd.c has none
 * (systemd's units are installed with the package). */
#ifndef VRAMD_INSTALLER_H
#define VRAMD_INSTALLER_H

#include "platform/entry.h"

/* NULL: this system's service program installs no service itself. */
const struct vp_entry_installer *vd_service_installer(void);

#endif
