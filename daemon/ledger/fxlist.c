/* SPDX-License-Identifier: Apache-2.0 */
/* Effect lists: what the daemon must do because the ledger changed (send a
 * handle, ask for a move or an unmap, drop physical memory, announce a
 * budget). Operations reserve room before they change anything, so that a
 * change is never left without its effect.
 *
 * No rule of its own: it is how every rule's consequences leave the
 * ledger. */
#include "daemon/ledger/internal.h"

#include <errno.h>
#include <stdlib.h>

int vli_fx_push(struct vl_fxlist *fx, struct vl_fx e)
{
    if (!fx)
        return 0;
    if (fx->n == fx->cap) {
        size_t cap = fx->cap ? fx->cap * 2 : 64;
        struct vl_fx *v = realloc(fx->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        fx->v = v;
        fx->cap = cap;
    }
    fx->v[fx->n++] = e;
    return 0;
}

void vl_fx_clear(struct vl_fxlist *fx)
{
    if (fx)
        fx->n = 0;
}

void vl_fx_free(struct vl_fxlist *fx)
{
    if (!fx)
        return;
    free(fx->v);
    fx->v = NULL;
    fx->n = fx->cap = 0;
}

/* Effects are appended while state changes; a failed push (out of memory)
 * would leave the daemon unaware of a change, so reserve room up front. */
int vli_fx_reserve(struct vl_fxlist *fx, size_t more)
{
    if (!fx || fx->n + more <= fx->cap)
        return 0;
    size_t cap = fx->cap ? fx->cap : 64;
    while (cap < fx->n + more)
        cap *= 2;
    struct vl_fx *v = realloc(fx->v, cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    fx->v = v;
    fx->cap = cap;
    return 0;
}
