/* SPDX-License-Identifier: Apache-2.0 */
/* An arena: the memory of one decoded message (its arrays and strings),
 * freed at once. */
#ifndef VW_PROTO_ARENA_H
#define VW_PROTO_ARENA_H

#include <stddef.h>

struct vw_arena_block;

struct vw_arena {
    struct vw_arena_block *head;
    size_t bytes; /* allocated so far, for limits */
};

/* n zeroed bytes, aligned for any type; NULL when out of memory. */
void *vw_arena_alloc(struct vw_arena *a, size_t n);
char *vw_arena_strdup(struct vw_arena *a, const char *s);
/* Room for one more item of an array of n items of size bytes at *v with
 * room for *cap: when full, a copy twice as large (first items at the
 * start) is made in the arena and *v and *cap updated. -ENOMEM, changing
 * nothing, when out of memory. */
int vw_arena_grow(struct vw_arena *a, void **v, size_t n, size_t *cap,
                    size_t size, size_t first);
/* Frees everything; the arena can be used again. NULL-tolerant. */
void vw_arena_free(struct vw_arena *a);

#endif
