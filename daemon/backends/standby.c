/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/backends/standby.h"

uint64_t vd_standby_basis(uint64_t total, bool has_capacity, uint64_t capacity)
{
    /* vramd may use no more than its capacity: a standby sized on the
     * whole GPU could be all of a small capacity, held while idle. */
    return has_capacity && capacity < total ? capacity : total;
}

uint64_t vd_standby_default(uint64_t total, bool wddm)
{
    /* The driver runs vramd's making of chunks and an engine's importing
     * of them one after the other, not at once (vram-bench-driver: the
     * two halves overlapped cost more than in turn; importing on more
     * threads is no faster), so a grant the standby does not cover costs
     * the making of the rest on top of the imports. An engine's start with
     * a 4 GiB KV window, background mapping and an 8 GiB upload measured on
     * a loaded H200 1.18x the best start in process with a 2 GiB standby,
     * 1.02x with 4 GiB and 1.01x with 8 GiB (1.00x with each on a quiet
     * one): the standby covers such a first window, 8 GiB or 1/16 of the
     * GPU (or of a smaller capacity), the smaller. Under WDDM a desktop
     * and its applications share the card: 512 MiB or 1%. */
    uint64_t cap = wddm ? 512ull << 20 : 8ull << 30;
    uint64_t share = wddm ? total / 100 : total / 16;
    return share < cap ? share : cap;
}

uint32_t vd_standby_chunks(uint32_t prefill, uint64_t standby_bytes,
                           uint64_t total, bool wddm, uint64_t chunk_bytes,
                           uint32_t nchunks)
{
    uint64_t n;
    if (prefill != UINT32_MAX)
        n = prefill;
    else
        n = (standby_bytes ? standby_bytes : vd_standby_default(total, wddm)) /
            (chunk_bytes ? chunk_bytes : 1);
    return n < nchunks ? (uint32_t)n : nchunks;
}

uint32_t vd_standby_hold(uint32_t standby, uint32_t held, uint64_t last_return_ns,
                         uint64_t now_ns, uint32_t idle_ms)
{
    bool recent = last_return_ns && now_ns >= last_return_ns &&
                  now_ns - last_return_ns < (uint64_t)idle_ms * 1000000u;
    return recent && held > standby ? held : standby;
}
