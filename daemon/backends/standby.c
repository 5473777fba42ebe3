/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/backends/standby.h"

uint64_t vd_standby_default(uint64_t total, bool wddm)
{
    /* A typical first grant (a 4 GiB KV window in 2 MiB chunks takes an
     * engine 100-200 ms to import and map) overlaps the creation of the
     * rest when background mapping is on: the standby only needs to cover
     * what a grant waits for before its first import. */
    uint64_t cap = wddm ? 512ull << 20 : 2ull << 30;
    uint64_t share = wddm ? total / 100 : total / 50;
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
