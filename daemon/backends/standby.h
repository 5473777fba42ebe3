/* SPDX-License-Identifier: Apache-2.0 */
/* The standby: how much memory a device keeps made ahead of grants, off
 * the grant path (issue 30). What vramd holds beyond what it granted is
 * taken from every other process on the GPU, so it is bounded: by default
 * the smaller of 8 GiB and 1/16 of the GPU (WDDM: of 512 MiB and 1%, a
 * desktop shares the card; standby.c says why), refilled in the background as grants drain
 * it. Chunks that come back and can serve again (cuda.scrub "zero") may
 * swell it for pool.idle_release_ms after the last return, then go back
 * to the driver. Pure: no I/O, so the policy is tested on its own. */
#ifndef VRAMD_STANDBY_H
#define VRAMD_STANDBY_H

#include <stdbool.h>
#include <stdint.h>

/* What the default standby is a share of: the device's memory (total),
 * or its configured capacity where that is smaller. */
uint64_t vd_standby_basis(uint64_t total, bool has_capacity, uint64_t capacity);
/* The default standby of a device of total bytes (vd_standby_basis's), in
 * bytes. */
uint64_t vd_standby_default(uint64_t total, bool wddm);
/* The standby in chunks: pool.prefill_chunks when given (prefill, not
 * UINT32_MAX), else pool.standby (bytes; 0: the default), never more than
 * the device's chunks. */
uint32_t vd_standby_chunks(uint32_t prefill, uint64_t standby_bytes,
                           uint64_t total, bool wddm, uint64_t chunk_bytes,
                           uint32_t nchunks);
/* How many chunks the pool may hold now: the standby, or while returned
 * chunks are younger than idle_ms (last_return_ns, 0: none yet) what it
 * holds beyond it. New chunks are made only up to the standby. */
uint32_t vd_standby_hold(uint32_t standby, uint32_t held, uint64_t last_return_ns,
                         uint64_t now_ns, uint32_t idle_ms);

#endif
