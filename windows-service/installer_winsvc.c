/* SPDX-License-Identifier: Apache-2.0 */
/* vramd's installer on Windows: what --install-service and
 * --uninstall-service do (the platform entry, platform/win32/entry_win32.c,
 * hands them here), on install.h. */
#include "daemon/installer.h"

#include "windows-service/install.h"

static int install(const char *name, char *const *argv, char *why,
                   size_t whylen)
{
    struct vram_service_install_cfg ic = {.name = name, .argv = argv};
    return vram_service_install(&ic, why, whylen);
}

static int uninstall(const char *name, uint32_t timeout_ms, char *why,
                     size_t whylen)
{
    return vram_service_uninstall(name, timeout_ms, why, whylen);
}

const struct vp_entry_installer *vd_service_installer(void)
{
    static const struct vp_entry_installer installer = {
        .install = install,
        .uninstall = uninstall,
    };
    return &installer;
}
