/* SPDX-License-Identifier: Apache-2.0 */
/* The names a keeper keeps, each with a value (the holder's fd or
 * HANDLE; nothing for the fd store): a hash table, so a put or a remove
 * costs the same with thousands kept. The rules on names and on how many
 * (keeper.h) are enforced here, the same for every keeper and both ports:
 * pure C, compiled into platform/posix's and platform/win32's builds
 * alike, and not part of the platform's API (platform.h). */
#ifndef VRAM_PLATFORM_KEEPER_NAMES_H
#define VRAM_PLATFORM_KEEPER_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/keeper.h"

struct vpx_name_slot {
    char name[VP_KEEPER_NAME_MAX + 1]; /* "" when free */
    int64_t v;
};

struct vpx_names {
    struct vpx_name_slot *slot;
    size_t cap;   /* slots: 0 or a power of two, never more than half full */
    size_t n;     /* names kept */
    size_t bytes; /* their bytes, each with one separator */
    unsigned max; /* most names */
};

void vpx_names_init(struct vpx_names *t, unsigned max);
void vpx_names_fini(struct vpx_names *t);
/* 0, -EINVAL (not a name the keeper takes), -EEXIST, -ENOSPC (max names
 * or VP_KEEPER_NAMES_BYTES), -ENOMEM. */
int vpx_names_add(struct vpx_names *t, const char *name, int64_t v);
/* Whether name is kept, and its value. */
bool vpx_names_find(const struct vpx_names *t, const char *name, int64_t *v);
/* 0 with its value, or -ENOENT. */
int vpx_names_del(struct vpx_names *t, const char *name, int64_t *v);
/* Empties the table, giving each value to fn (NULL: dropped). */
void vpx_names_clear(struct vpx_names *t, void (*fn)(int64_t v));
/* Why add would refuse: "" when it would not (for the message). */
const char *vpx_names_refusal(int e);

#endif
