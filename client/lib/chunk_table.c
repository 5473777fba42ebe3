/* SPDX-License-Identifier: Apache-2.0 */
/* Open-addressing table of held chunks, keyed by chunk id. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/chunk_table.h"

#define EMPTY UINT64_MAX
#define TOMB (UINT64_MAX - 1)

static size_t slot_of(uint64_t id, size_t cap)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (size_t)id & (cap - 1);
}

static int grow(struct vc_chunk_table *t)
{
    size_t cap = t->cap ? t->cap * 2 : 256;
    struct vc_chunk *v = malloc(cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < cap; i++)
        v[i].id = EMPTY;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->v[i].id >= TOMB)
            continue;
        size_t k = slot_of(t->v[i].id, cap);
        while (v[k].id != EMPTY)
            k = (k + 1) & (cap - 1);
        v[k] = t->v[i];
    }
    free(t->v);
    t->v = v;
    t->cap = cap;
    t->used = t->n;
    return 0;
}

int vc_table_put(struct vc_chunk_table *t, const struct vc_chunk *c)
{
    if ((t->used + 1) * 4 > t->cap * 3 && grow(t) < 0)
        return -ENOMEM;
    size_t k = slot_of(c->id, t->cap);
    while (t->v[k].id != EMPTY && t->v[k].id != TOMB) {
        if (t->v[k].id == c->id)
            return -EEXIST;
        k = (k + 1) & (t->cap - 1);
    }
    if (t->v[k].id == EMPTY)
        t->used++;
    t->v[k] = *c;
    t->n++;
    return 0;
}

struct vc_chunk *vc_table_get(struct vc_chunk_table *t, uint64_t id)
{
    if (!t->cap || id >= TOMB)
        return NULL;
    size_t k = slot_of(id, t->cap);
    while (t->v[k].id != EMPTY) {
        if (t->v[k].id == id)
            return &t->v[k];
        k = (k + 1) & (t->cap - 1);
    }
    return NULL;
}

void vc_table_del(struct vc_chunk_table *t, uint64_t id)
{
    struct vc_chunk *c = vc_table_get(t, id);
    if (c) {
        c->id = TOMB;
        t->n--;
    }
}

void vc_table_free(struct vc_chunk_table *t)
{
    if (!t)
        return;
    free(t->v);
    memset(t, 0, sizeof(*t));
}
