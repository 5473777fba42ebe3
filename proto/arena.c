/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/arena.h"

#include <errno.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK (16u << 10)

struct vw_arena_block {
    struct vw_arena_block *next;
    size_t used, cap;
    alignas(max_align_t) unsigned char data[];
};

void *vw_arena_alloc(struct vw_arena *a, size_t n)
{
    const size_t al = alignof(max_align_t);
    n = (n + al - 1) / al * al;
    if (n == 0)
        n = al;
    struct vw_arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > BLOCK ? n : BLOCK;
        b = malloc(sizeof(*b) + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        /* A block made for one large array goes behind the current one, so
         * the current one keeps serving small allocations. */
        if (a->head && cap > BLOCK) {
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    a->bytes += n;
    return p;
}

char *vw_arena_strdup(struct vw_arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = vw_arena_alloc(a, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

int vw_arena_grow(struct vw_arena *a, void **v, size_t n, size_t *cap,
                    size_t size, size_t first)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : first;
    void *nv = vw_arena_alloc(a, c * size);
    if (!nv)
        return -ENOMEM;
    if (n)
        memcpy(nv, *v, n * size);
    *v = nv;
    *cap = c;
    return 0;
}

void vw_arena_free(struct vw_arena *a)
{
    if (!a)
        return;
    for (struct vw_arena_block *b = a->head, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    a->head = NULL;
    a->bytes = 0;
}
