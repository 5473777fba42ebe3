/* SPDX-License-Identifier: Apache-2.0 */
/* A backend's own section of the configuration ("cuda": {...}): the
 * backend parses it into a struct of its own, kept in the configuration's
 * slot for that backend (struct vd_config's backend_conf, one a backend of
 * the registry, in its order) without config.c knowing its shape. The
 * registry (registry.h) finds the sections and hands each backend its
 * slot; config.c names no backend. */
#ifndef VRAMD_SECTION_H
#define VRAMD_SECTION_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

/* Backends the registry may hold, and the bytes each may keep. Plain data
 * only: configurations are copied and compared bytewise (a reload compares
 * the old slots with the new to refuse a change that needs a restart). */
#define VD_MAX_BACKENDS 4
#define VD_BACKEND_CONF_BYTES 64

struct vd_backend_conf {
    _Alignas(max_align_t) unsigned char bytes[VD_BACKEND_CONF_BYTES];
};

/* Where a section's errors go: one line each, naming the key path
 * ("cuda.scrub: ..."), as config.c's own. */
struct vd_section_errs {
    void (*report)(void *ctx, const char *line);
    void *ctx;
};

struct vd_backend_section {
    const char *key; /* its top-level key */
    size_t size;     /* of the backend's struct, <= VD_BACKEND_CONF_BYTES */
    /* The values without a section; conf is zeroed first. */
    void (*defaults)(void *conf);
    /* The section (present in the file) over the defaults. */
    void (*parse)(const cJSON *section, void *conf,
                  const struct vd_section_errs *e);
};

__attribute__((format(printf, 2, 3))) static inline void
vd_section_error(const struct vd_section_errs *e, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    e->report(e->ctx, line);
}

/* Checks that obj has only the listed keys (NULL-terminated): a typo must
 * not pass silently. */
static inline void vd_section_known_keys(const struct vd_section_errs *e,
                                         const cJSON *obj, const char *path,
                                         const char *const *keys)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        bool ok = false;
        for (const char *const *k = keys; *k; k++)
            ok |= strcmp(*k, it->string) == 0;
        if (!ok)
            vd_section_error(e, "%s.%s: unknown key", path, it->string);
    }
}

#endif
