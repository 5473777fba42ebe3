/* SPDX-License-Identifier: Apache-2.0 */
/* vramd's installer under systemd: none. The units of this folder
 * (vramd.service, vramd.socket, sysusers and tmpfiles) are installed with
 * the package and enabled with systemctl, so the daemon never installs
 * itself, and its platform entry has no --install-service. */
#include "daemon/installer.h"

#include <stddef.h>

const struct vp_entry_installer *vd_service_installer(void)
{
    return NULL;
}
