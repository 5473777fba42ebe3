/* SPDX-License-Identifier: Apache-2.0 */
#include "registry.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

static const struct {
    const char *name;
    vd_backend_create_fn create;
    int gpu; /* tried by auto, in this order, before host */
} backends[] = {
    {"host", vd_backend_host_create, 0},
    {"cuda", vd_backend_cuda_create, 1},
};
#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))

int vd_backend_known(const char *name)
{
    if (strcmp(name, "auto") == 0)
        return 1;
    for (size_t i = 0; i < NBACKENDS; i++)
        if (strcmp(backends[i].name, name) == 0)
            return 1;
    return 0;
}

const char *vd_backend_names(void)
{
    static char list[128];
    if (!list[0]) {
        for (size_t i = 0; i < NBACKENDS; i++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s, ",
                     backends[i].name);
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "or auto");
    }
    return list;
}

int vd_backend_open(const char *name, struct vd_config *cfg,
                    struct vd_backend **out, char *why, size_t whylen)
{
    if (strcmp(name, "auto") == 0) {
        for (size_t i = 0; i < NBACKENDS; i++) {
            if (!backends[i].gpu)
                continue;
            char w[256] = "";
            if (backends[i].create(cfg, out, w, sizeof(w)) == 0)
                return 0;
            vlog(VLOG_NOTICE, "%s backend unavailable: %s; --backend auto "
                 "goes on", backends[i].name, w);
        }
        return vd_backend_host_create(cfg, out, why, whylen);
    }
    for (size_t i = 0; i < NBACKENDS; i++)
        if (strcmp(backends[i].name, name) == 0)
            return backends[i].create(cfg, out, why, whylen);
    snprintf(why, whylen, "no backend named '%s' (%s)", name, vd_backend_names());
    return -ENOENT;
}
