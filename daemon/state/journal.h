/* SPDX-License-Identifier: Apache-2.0 */
/* Changes to a version 5 state file, one block at a time, each made
 * crash-safe by the file's one-entry journal (the protocol in format.h).
 * Every store into the file after it is laid out goes between a begin and
 * its end: a store outside would leave its block's checksum stale, and the
 * next vramd would refuse the file. */
#ifndef VRAMD_STATE_JOURNAL_H
#define VRAMD_STATE_JOURNAL_H

#include <stdint.h>

#include "daemon/state/format.h"

struct vd_journal {
    uint8_t *map;
    uint32_t *check;
    struct vd_state_journal *j;
    struct vd_state_blocks b;
    uint32_t block; /* the block begun; UINT32_MAX between changes */
    uint8_t *at;
    uint32_t len;
};

/* Over a file whose header and tables are laid out (and, today, zero):
 * sums the header and every block, and makes the journal idle. */
void vd_journal_init(struct vd_journal *jl, uint8_t *map);
/* Before changing record (of table): the block holding it is journaled. */
void vd_journal_begin(struct vd_journal *jl, uint32_t table, uint32_t record);
/* After: its new checksum, and the journal idle again. */
void vd_journal_end(struct vd_journal *jl);

#endif
