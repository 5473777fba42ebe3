/* SPDX-License-Identifier: Apache-2.0 */
/* What a state file means to the reader: everything vd_state_open reads of
 * it, serialised, so that two files can be compared by what they say
 * rather than by their bytes. Shared by tests/unit/test_state_fuzz.c and
 * tests/fuzz/fuzz_state.c (static: each includes it once). */
#ifndef VRAM_TEST_STATE_MEANING_H
#define VRAM_TEST_STATE_MEANING_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/state/format.h"

struct meaning {
    uint8_t *b;
    size_t n, cap;
};

static void put(struct meaning *m, const void *p, size_t n)
{
    if (m->n + n > m->cap) {
        m->cap = (m->n + n) * 2 + 4096;
        m->b = realloc(m->b, m->cap);
        if (!m->b)
            abort();
    }
    memcpy(m->b + m->n, p, n);
    m->n += n;
}

static void put32(struct meaning *m, uint32_t v) { put(m, &v, 4); }

/* Everything vd_state_open reads of a file, in order, or -EBADMSG (or
 * -EPROTONOSUPPORT) when the reader refuses it. The check may change the
 * copy (a journal put back): that is why it is a copy. */
static int meaning_of(const uint8_t *file, size_t len, struct meaning *m)
{
    uint64_t *copy = malloc(len + 8);
    if (!copy)
        abort();
    memcpy(copy, file, len);
    struct vd_state_view v;
    char why[512];
    m->n = 0;
    int e = vd_state_check(copy, len, &v, why, sizeof(why));
    if (e < 0) {
        free(copy);
        return e;
    }
    const struct vd_state_hdr *h = v.h;
    put32(m, h->version);
    put(m, h->boot_id, sizeof(h->boot_id));
    put32(m, v.next_client);
    put32(m, h->ndev);
    for (uint32_t d = 0; d < h->ndev; d++)
        put(m, &h->dev[d], sizeof(h->dev[d]));
    for (uint32_t i = 0; i < h->nholders; i++) {
        struct vd_state_holder hd;
        vd_state_holder_at(&v, i, &hd);
        if (hd.client) {
            put32(m, i);
            put(m, &hd, sizeof(hd));
        }
    }
    for (uint32_t i = 0; i < v.nstages; i++)
        if (v.stages[i]) {
            put32(m, i);
            put32(m, v.stages[i]);
        }
    for (uint32_t i = 0; i < h->nranges; i++)
        if (v.ranges[i].client) {
            put32(m, i);
            put(m, &v.ranges[i], sizeof(v.ranges[i]));
        }
    for (uint32_t d = 0; d < h->ndev; d++)
        for (uint32_t k = 0; k < h->dev[d].nchunks; k++)
            if (v.chunks[d][k]) {
                put32(m, d);
                put32(m, k);
                put(m, &v.chunks[d][k], 8);
            }
    for (uint32_t i = 0; i < v.nwsets; i++)
        if (v.wsets[i].id) {
            put32(m, i);
            put(m, &v.wsets[i], sizeof(v.wsets[i]));
        }
    for (uint32_t i = 0; i < v.nwusers; i++)
        if (v.wusers[i].set) {
            put32(m, i);
            put(m, &v.wusers[i], sizeof(v.wusers[i]));
        }
    free(copy);
    return 0;
}

#endif
