/* SPDX-License-Identifier: Apache-2.0 */
/* The backends vramd has, by name: the one place that lists them. A new
 * backend is a file of this folder with a create function (and, when it
 * has settings of its own, a section: section.h), and a line in
 * registry.c. The configuration finds the backends' names and sections
 * here, so config.c names none. */
#ifndef VRAMD_REGISTRY_H
#define VRAMD_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/backends/backend.h"
#include "daemon/backends/section.h"

struct vd_config;

/* Makes backend name ("auto": the first of the GPU backends that works,
 * else host) from cfg, handing it its slot of confs (cfg's backend_conf).
 * -ENOENT for a name no backend has, or the backend's error, with why.
 * Logs what auto chose against. */
int vd_backend_open(const char *name, struct vd_config *cfg,
                    const struct vd_backend_conf confs[VD_MAX_BACKENDS],
                    struct vd_backend **out, char *why, size_t whylen);
/* Whether name is a backend, or "auto". */
int vd_backend_known(const char *name);
/* Whether name is a backend ("auto" is not). */
bool vd_backend_exists(const char *name);
/* "host, cuda or auto", for messages. */
const char *vd_backend_names(void);
/* "\"host\" or \"cuda\"" (with_auto: "\"host\", \"cuda\" or \"auto\""),
 * for the configuration's messages. */
const char *vd_backend_names_quoted(bool with_auto);

/* The configuration's side: each backend's defaults into its slot, whether
 * key is a backend's section, and every section root has parsed into its
 * backend's slot (errors to e). */
void vd_backend_conf_defaults(struct vd_backend_conf confs[VD_MAX_BACKENDS]);
bool vd_backend_conf_key(const char *key);
void vd_backend_conf_parse(const cJSON *root,
                           struct vd_backend_conf confs[VD_MAX_BACKENDS],
                           const struct vd_section_errs *e);

#endif
