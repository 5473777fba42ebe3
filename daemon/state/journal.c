/* SPDX-License-Identifier: Apache-2.0 */
/* The order of the stores is the whole of crash safety here. A kill -9
 * stops the process between two instructions and keeps every store made
 * before (the mapping is the page cache's), so what matters is that the
 * compiler keeps them in program order: the signal fences below forbid it
 * to move a store across them and cost no instruction. (A power loss is not
 * covered and needs not be: the file lives in /run, gone at every boot with
 * every process it describes.)
 *
 * Each change ends before the ledger's observer returns, so a record the
 * daemon acts on (a grant a client is then told of) is never one a kill
 * could roll back: only the change being made when vramd died can be. */
#include "daemon/state/journal.h"

#include <string.h>

#include "daemon/state/crc32c.h"

static void order(void)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

void vd_journal_init(struct vd_journal *jl, uint8_t *map)
{
    const struct vd_state_hdr *h = (const void *)map;
    struct vd_state_hdr_check *c = VD_STATE_CHECK_AT(map);
    memset(jl, 0, sizeof(*jl));
    jl->map = map;
    vd_state_blocks(h, &jl->b);
    jl->check = (uint32_t *)(void *)(map + c->off_check);
    jl->j = (struct vd_state_journal *)(void *)(map + c->off_journal);
    jl->block = UINT32_MAX;
    for (uint32_t n = 0; n < jl->b.nblocks; n++) {
        uint32_t table, len;
        uint64_t off;
        vd_state_block_at(&jl->b, n, &table, &off, &len);
        jl->check[n] = vd_state_block_crc(n, map + off, len);
    }
    jl->j->seal = ~vd_crc32c(0, &jl->j->block, 3 * sizeof(uint32_t));
    jl->j->state = VD_JOURNAL_IDLE;
    c->crc = vd_state_hdr_crc(map);
}

void vd_journal_begin(struct vd_journal *jl, uint32_t table, uint32_t record)
{
    const struct vd_state_table *t = &jl->b.t[table];
    uint32_t k = record / t->per_block;
    uint32_t r0 = k * t->per_block;
    uint32_t n = t->count - r0 < t->per_block ? t->count - r0 : t->per_block;
    struct vd_state_journal *j = jl->j;
    jl->block = t->first + k;
    jl->at = jl->map + t->off + (uint64_t)r0 * t->rec;
    jl->len = n * t->rec;
    /* The journal is idle: nothing of it is read until it is pending. */
    j->block = jl->block;
    j->old_crc = jl->check[jl->block];
    j->bytes = jl->len;
    memcpy(j + 1, jl->at, jl->len);
    j->seal = vd_crc32c(0, &j->block, 3 * sizeof(uint32_t));
    order();
    __atomic_store_n(&j->state, VD_JOURNAL_PENDING, __ATOMIC_RELAXED);
    order();
}

void vd_journal_end(struct vd_journal *jl)
{
    struct vd_state_journal *j = jl->j;
    uint32_t crc = vd_state_block_crc(jl->block, jl->at, jl->len);
    order();
    __atomic_store_n(&jl->check[jl->block], crc, __ATOMIC_RELAXED);
    order();
    __atomic_store_n(&j->state, VD_JOURNAL_IDLE, __ATOMIC_RELAXED);
    order();
    /* Pending again by damage alone, it would now fail its seal. */
    j->seal = ~j->seal;
    jl->block = UINT32_MAX;
}
