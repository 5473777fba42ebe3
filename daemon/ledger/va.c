/* SPDX-License-Identifier: Apache-2.0 */
/* The virtual address window regions are carved from: free ranges, exact
 * takes for restored and resumed regions, and ranges held for a gone
 * client's process.
 *
 * Enforces the address side of R13 (a range a live process may still have
 * reserved is given to nobody else). */
#include "daemon/ledger/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Removes [b, b + size) from free range i, which holds it. */
static int va_carve(struct vl_ledger *L, size_t i, uint64_t b, uint64_t size)
{
    struct vl_va_range *f = &L->va_free[i];
    uint64_t end = f->base + f->size, head = b - f->base;
    if (head == 0) {
        f->base += size;
        f->size -= size;
    } else if (b + size == end) {
        f->size = head;
    } else {
        struct vl_va_range *v = realloc(L->va_free, (L->nva_free + 1) *
                                                        sizeof(*v));
        if (!v)
            return -ENOMEM;
        L->va_free = v;
        f = &L->va_free[i];
        memmove(f + 2, f + 1, (L->nva_free - i - 1) * sizeof(*f));
        L->nva_free++;
        f[1].base = b + size;
        f[1].size = end - (b + size);
        f->size = head;
    }
    return 0;
}

int vli_va_alloc(struct vl_ledger *L, uint64_t size, uint64_t align,
                 uint64_t *out)
{
    for (size_t i = 0; i < L->nva_free; i++) {
        struct vl_va_range *f = &L->va_free[i];
        uint64_t b = (f->base + align - 1) / align * align;
        if (b < f->base || b - f->base > f->size || f->size - (b - f->base) < size)
            continue;
        int e = va_carve(L, i, b, size);
        if (e == 0)
            *out = b;
        return e;
    }
    return -ENOSPC;
}

/* The free range that holds all of [base, base + size), or -1. */
ptrdiff_t vli_va_find(const struct vl_ledger *L, uint64_t base, uint64_t size)
{
    for (size_t i = 0; i < L->nva_free; i++) {
        const struct vl_va_range *f = &L->va_free[i];
        if (size && base >= f->base && size <= f->size &&
            base - f->base <= f->size - size)
            return (ptrdiff_t)i;
    }
    return -1;
}

void vli_va_release(struct vl_ledger *L, uint64_t base, uint64_t size)
{
    size_t i = 0;
    while (i < L->nva_free && L->va_free[i].base < base)
        i++;
    struct vl_va_range *v = realloc(L->va_free, (L->nva_free + 1) * sizeof(*v));
    if (!v)
        return; /* leaks address space, never memory */
    L->va_free = v;
    memmove(v + i + 1, v + i, (L->nva_free - i) * sizeof(*v));
    v[i] = (struct vl_va_range){base, size};
    L->nva_free++;
    if (i + 1 < L->nva_free && v[i].base + v[i].size == v[i + 1].base) {
        v[i].size += v[i + 1].size;
        memmove(v + i + 1, v + i + 2, (L->nva_free - i - 2) * sizeof(*v));
        L->nva_free--;
    }
    if (i > 0 && v[i - 1].base + v[i - 1].size == v[i].base) {
        v[i - 1].size += v[i].size;
        memmove(v + i, v + i + 1, (L->nva_free - i - 1) * sizeof(*v));
        L->nva_free--;
    }
}

/* Takes exactly [base, base + size) out of the free ranges; -EBUSY when
 * any of it is taken. */
int vli_va_take_exact(struct vl_ledger *L, uint64_t base, uint64_t size)
{
    ptrdiff_t i = vli_va_find(L, base, size);
    return i < 0 ? -EBUSY : va_carve(L, (size_t)i, base, size);
}

/* R13: a range a gone client's process still has reserved stays out of the
 * free ranges until that process is reaped or resumes. */
int vli_hold_add(struct vl_ledger *L, const struct vl_va_hold *h)
{
    struct vl_va_hold *v = realloc(L->va_hold, (L->nva_hold + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    L->va_hold = v;
    v[L->nva_hold++] = *h;
    return 0;
}
