/* SPDX-License-Identifier: Apache-2.0 */
/* The ledger as the protocol shows it: stages, regions, devices, clients
 * and the status object (vramctl status --json), built from the ledger's
 * read-only views into the catalogue's structs. Arrays and strings live in
 * the arena; nothing is copied twice (the status reply is encoded straight
 * from what this builds). */
#ifndef VRAMD_STATUS_H
#define VRAMD_STATUS_H

#include <stdint.h>

#include "proto/arena.h"
#include "daemon/core/core.h"
#include "gen/vram_msg.h"

int vd_status_build(struct vd_core *core, struct vw_rep_status *out,
                    struct vw_arena *a);
/* -ENOENT when there is no such stage or region. */
int vd_status_stage(struct vd_core *core, uint32_t stage,
                    struct vw_t_stage *out, struct vw_arena *a);
int vd_status_region(struct vd_core *core, uint32_t region,
                     struct vw_t_region *out, struct vw_arena *a);
/* What a held grow of stage waits for, for its timeout's message and the
 * log: "client 7 (engine-a, pid 123), which has not given back ..." with
 * the policy in force and what an operator can do. Writes "" and returns 0
 * when nothing is on its way back; else the client's id. */
uint32_t vd_status_blocker(struct vd_core *core, uint32_t stage, char *out,
                           size_t len);

/* The summary that kv_reserve, kv_trim and expert_request replies share. */
struct vd_kv_summary {
    uint64_t kv_needed_bytes, kv_mapped_bytes, expert_loaned_bytes;
    uint32_t expert_slots_backed;
    uint64_t residency_version;
    uint32_t recalled_chunks;
    struct vw_t_stage stage;
};
int vd_status_kv(struct vd_core *core, uint32_t stage, uint32_t recalled,
                 struct vd_kv_summary *out, struct vw_arena *a);
/* Into any of those three replies (their fields have the same names). */
#define VD_KV_COPY(rep, sum)                                                   \
    do {                                                                       \
        (rep)->kv_needed_bytes = (sum).kv_needed_bytes;                        \
        (rep)->kv_mapped_bytes = (sum).kv_mapped_bytes;                        \
        (rep)->expert_loaned_bytes = (sum).expert_loaned_bytes;                \
        (rep)->expert_slots_backed = (sum).expert_slots_backed;                \
        (rep)->residency_version = (sum).residency_version;                    \
        (rep)->recalled_chunks = (sum).recalled_chunks;                        \
        (rep)->stage = (sum).stage;                                            \
    } while (0)

#endif
