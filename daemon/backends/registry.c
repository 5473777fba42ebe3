/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/backends/registry.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/log.h"

static const struct {
    const char *name;
    vd_backend_create_fn create;
    int gpu; /* tried by auto, in this order, before host */
    const struct vd_backend_section *section; /* NULL: none */
} backends[] = {
    {"host", vd_backend_host_create, 0, NULL},
    {"cuda", vd_backend_cuda_create, 1, &vd_backend_cuda_section},
};
#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))
_Static_assert(NBACKENDS <= VD_MAX_BACKENDS, "raise VD_MAX_BACKENDS");

int vd_backend_known(const char *name)
{
    return strcmp(name, "auto") == 0 || vd_backend_exists(name);
}

bool vd_backend_exists(const char *name)
{
    for (size_t i = 0; i < NBACKENDS; i++)
        if (strcmp(backends[i].name, name) == 0)
            return true;
    return false;
}

/* "\"a\", \"b\" or \"c\"" of the names, auto last. */
static void list_names(char *buf, size_t len, bool with_auto)
{
    const char *q = "\"";
    size_t n = NBACKENDS + (with_auto ? 1 : 0);
    buf[0] = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = i < NBACKENDS ? backends[i].name : "auto";
        const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
        size_t at = strlen(buf);
        snprintf(buf + at, len - at, "%s%s%s%s", sep, q, name, q);
    }
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

const char *vd_backend_names_quoted(bool with_auto)
{
    static char lists[2][128];
    char *l = lists[with_auto];
    if (!l[0])
        list_names(l, sizeof(lists[0]), with_auto);
    return l;
}

int vd_backend_open(const char *name, struct vd_config *cfg,
                    const struct vd_backend_conf confs[VD_MAX_BACKENDS],
                    struct vd_backend **out, char *why, size_t whylen)
{
    size_t host = 0;
    if (strcmp(name, "auto") == 0) {
        for (size_t i = 0; i < NBACKENDS; i++) {
            if (!backends[i].gpu) {
                host = i;
                continue;
            }
            char w[256] = "";
            if (backends[i].create(cfg, &confs[i], out, w, sizeof(w)) == 0)
                return 0;
            vlog(VLOG_NOTICE, "%s backend unavailable: %s; --backend auto "
                 "goes on", backends[i].name, w);
        }
        return backends[host].create(cfg, &confs[host], out, why, whylen);
    }
    for (size_t i = 0; i < NBACKENDS; i++)
        if (strcmp(backends[i].name, name) == 0)
            return backends[i].create(cfg, &confs[i], out, why, whylen);
    snprintf(why, whylen, "no backend named '%s' (%s)", name, vd_backend_names());
    return -ENOENT;
}

void vd_backend_conf_defaults(struct vd_backend_conf confs[VD_MAX_BACKENDS])
{
    memset(confs, 0, VD_MAX_BACKENDS * sizeof(confs[0]));
    for (size_t i = 0; i < NBACKENDS; i++)
        if (backends[i].section && backends[i].section->defaults)
            backends[i].section->defaults(confs[i].bytes);
}

bool vd_backend_conf_key(const char *key)
{
    for (size_t i = 0; i < NBACKENDS; i++)
        if (backends[i].section && strcmp(backends[i].section->key, key) == 0)
            return true;
    return false;
}

void vd_backend_conf_parse(const cJSON *root,
                           struct vd_backend_conf confs[VD_MAX_BACKENDS],
                           const struct vd_section_errs *e)
{
    for (size_t i = 0; i < NBACKENDS; i++) {
        const struct vd_backend_section *s = backends[i].section;
        const cJSON *v = s ? cJSON_GetObjectItemCaseSensitive(root, s->key) : NULL;
        if (v)
            s->parse(v, confs[i].bytes, e);
    }
}
