/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/clients/clients.h"

#include <stdlib.h>
#include <string.h>

#define TOMB ((struct vd_client *)1)

static size_t slot(uint32_t id, size_t cap)
{
    uint64_t h = (uint64_t)id * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

static int grow(struct vd_clients *cs)
{
    size_t cap = cs->cap ? cs->cap * 2 : 64;
    struct vd_client **v = calloc(cap, sizeof(*v));
    if (!v)
        return -1;
    for (size_t i = 0; i < cs->cap; i++) {
        struct vd_client *c = cs->v[i];
        if (!c || c == TOMB)
            continue;
        size_t k = slot(c->id, cap);
        while (v[k])
            k = (k + 1) & (cap - 1);
        v[k] = c;
    }
    free(cs->v);
    cs->v = v;
    cs->cap = cap;
    cs->used = cs->n;
    return 0;
}

struct vd_client *vd_clients_add(struct vd_clients *cs)
{
    /* Removed entries count as used, so the table is rebuilt before it
     * fills with them. */
    if ((cs->used + 1) * 4 > cs->cap * 3 && grow(cs) < 0)
        return NULL;
    struct vd_client *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->id = ++cs->next_id;
    c->pin = VP_NONE;
    size_t k = slot(c->id, cs->cap);
    while (cs->v[k] && cs->v[k] != TOMB)
        k = (k + 1) & (cs->cap - 1);
    if (!cs->v[k])
        cs->used++;
    cs->v[k] = c;
    cs->n++;
    return c;
}

struct vd_client *vd_clients_find(const struct vd_clients *cs, uint32_t id)
{
    if (!cs->cap)
        return NULL;
    for (size_t k = slot(id, cs->cap);; k = (k + 1) & (cs->cap - 1)) {
        struct vd_client *c = cs->v[k];
        if (!c)
            return NULL;
        if (c != TOMB && c->id == id)
            return c;
    }
}

void vd_clients_remove(struct vd_clients *cs, struct vd_client *c)
{
    for (size_t k = slot(c->id, cs->cap);; k = (k + 1) & (cs->cap - 1)) {
        if (!cs->v[k])
            return;
        if (cs->v[k] == c) {
            cs->v[k] = TOMB;
            cs->n--;
            free(c);
            return;
        }
    }
}

void vd_clients_each(const struct vd_clients *cs,
                     void (*fn)(void *ud, struct vd_client *c), void *ud)
{
    for (size_t i = 0; i < cs->cap; i++)
        if (cs->v[i] && cs->v[i] != TOMB)
            fn(ud, cs->v[i]);
}

void vd_clients_fini(struct vd_clients *cs)
{
    for (size_t i = 0; i < cs->cap; i++)
        if (cs->v[i] && cs->v[i] != TOMB)
            free(cs->v[i]);
    free(cs->v);
    memset(cs, 0, sizeof(*cs));
}
