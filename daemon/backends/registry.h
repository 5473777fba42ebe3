/* SPDX-License-Identifier: Apache-2.0 */
/* The backends vramd has, by name: the one place that lists them. A new
 * backend is a file of this folder with a create function, and a line in
 * registry.c. */
#ifndef VRAMD_REGISTRY_H
#define VRAMD_REGISTRY_H

#include <stddef.h>

#include "backend.h"

struct vd_config;

/* Makes backend name ("auto": the first of the GPU backends that works,
 * else host). -ENOENT for a name no backend has, or the backend's error,
 * with why. Logs what auto chose against. */
int vd_backend_open(const char *name, struct vd_config *cfg,
                    struct vd_backend **out, char *why, size_t whylen);
/* Whether name is a backend, or "auto". */
int vd_backend_known(const char *name);
/* "host, cuda or auto", for messages. */
const char *vd_backend_names(void);

#endif
