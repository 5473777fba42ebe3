/* SPDX-License-Identifier: Apache-2.0 */
/* The kept names: open addressing, linear probing, deletion by shifting
 * back (no tombstones), grown by doubling. */
#include "platform/keeper_names.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool vp_keeper_name_ok(const char *name)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > VP_KEEPER_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '/' ||
              c == '-'))
            return false;
    }
    return !(len >= 7 && strcmp(name + len - 7, ".socket") == 0);
}

static size_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

void vpx_names_init(struct vpx_names *t, unsigned max)
{
    memset(t, 0, sizeof(*t));
    t->max = max;
}

void vpx_names_fini(struct vpx_names *t)
{
    free(t->slot);
    memset(t, 0, sizeof(*t));
}

/* The slot of name, or of the free one where it would go. */
static size_t probe(const struct vpx_names *t, const char *name)
{
    size_t mask = t->cap - 1, i = hash(name) & mask;
    while (t->slot[i].name[0] && strcmp(t->slot[i].name, name) != 0)
        i = (i + 1) & mask;
    return i;
}

static int grow(struct vpx_names *t)
{
    size_t cap = t->cap ? t->cap * 2 : 64;
    struct vpx_name_slot *old = t->slot, *s = calloc(cap, sizeof(*s));
    if (!s)
        return -ENOMEM;
    size_t oldcap = t->cap;
    t->slot = s;
    t->cap = cap;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].name[0])
            t->slot[probe(t, old[i].name)] = old[i];
    free(old);
    return 0;
}

int vpx_names_add(struct vpx_names *t, const char *name, int64_t v)
{
    if (!vp_keeper_name_ok(name))
        return -EINVAL;
    if (vpx_names_find(t, name, NULL))
        return -EEXIST;
    size_t len = strlen(name);
    if (t->n >= t->max || t->bytes + len + 1 > VP_KEEPER_NAMES_BYTES)
        return -ENOSPC;
    if ((t->n + 1) * 2 > t->cap) {
        int e = grow(t);
        if (e < 0)
            return e;
    }
    struct vpx_name_slot *s = &t->slot[probe(t, name)];
    memcpy(s->name, name, len + 1);
    s->v = v;
    t->n++;
    t->bytes += len + 1;
    return 0;
}

bool vpx_names_find(const struct vpx_names *t, const char *name, int64_t *v)
{
    if (!t->cap || !name)
        return false;
    const struct vpx_name_slot *s = &t->slot[probe(t, name)];
    if (!s->name[0])
        return false;
    if (v)
        *v = s->v;
    return true;
}

int vpx_names_del(struct vpx_names *t, const char *name, int64_t *v)
{
    if (!vpx_names_find(t, name, NULL))
        return -ENOENT;
    size_t mask = t->cap - 1, i = probe(t, name);
    if (v)
        *v = t->slot[i].v;
    t->bytes -= strlen(name) + 1;
    t->n--;
    /* Shift back every later name of the run that may move into the hole. */
    size_t j = i;
    for (;;) {
        t->slot[i].name[0] = '\0';
        for (;;) {
            j = (j + 1) & mask;
            if (!t->slot[j].name[0])
                return 0;
            size_t home = hash(t->slot[j].name) & mask;
            /* j's name stays when its home lies cyclically in (i, j]. */
            if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
                continue;
            break;
        }
        t->slot[i] = t->slot[j];
        i = j;
    }
}

void vpx_names_clear(struct vpx_names *t, void (*fn)(int64_t v))
{
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slot[i].name[0] && fn)
            fn(t->slot[i].v);
        t->slot[i].name[0] = '\0';
    }
    t->n = 0;
    t->bytes = 0;
}

const char *vpx_names_refusal(int e)
{
    switch (e) {
    case -EINVAL:
        return "not a name the keeper takes (1 to 64 bytes of A-Z a-z 0-9 "
               ". _ / -, not ending in .socket)";
    case -EEXIST:
        return "the name is kept already";
    case -ENOSPC:
        return "the keeper is full (its most handles, or 120 KiB of names)";
    case -ENOMEM:
        return "out of memory";
    default:
        return "";
    }
}
