/* SPDX-License-Identifier: Apache-2.0 */
/* Admission: a stage of the configuration is checked and its whole
 * reservation counted against its device, once, before clients connect.
 *
 * Enforces R2 (admission) and R7 (no-loan safety is decided here). */
#include "daemon/ledger/internal.h"

#include <errno.h>
#include <stdlib.h>

int vl_stage_configure(struct vl_ledger *L, const struct vl_stage_cfg *cfg)
{
    if (cfg->id >= VL_CONFIG_STAGES)
        return vli_fail(L, -EINVAL, "stage id %u: at most %d", cfg->id,
                        VL_CONFIG_STAGES - 1);
    if (L->stage[cfg->id].used)
        return vli_fail(L, -EEXIST, "stage %u defined twice", cfg->id);
    struct vl_device *d = vli_dev_get(L, cfg->device);
    if (!d)
        return vli_fail(L, -ENODEV, "stage %u: no device %u", cfg->id,
                        cfg->device);
    if (cfg->lanes == 0 || cfg->lanes > VL_MAX_LANES)
        return vli_fail(L, -EINVAL, "stage %u: between 1 and %d KV lanes",
                        cfg->id, VL_MAX_LANES);
    if (cfg->last_layer < cfg->first_layer ||
        cfg->last_layer >= VLI_SLOT_LAYER_NONE)
        return vli_fail(L, -EINVAL, "stage %u: bad layer range %u-%u", cfg->id,
                        cfg->first_layer, cfg->last_layer);
    if (!cfg->native_context || !cfg->expert_slot_bytes)
        return vli_fail(L, -EINVAL, "stage %u: native context and expert slot "
                        "size must be positive", cfg->id);
    if (cfg->nfixed > VL_MAX_FIXED)
        return vli_fail(L, -EINVAL, "stage %u: at most %d fixed reservations",
                        cfg->id, VL_MAX_FIXED);

    struct vl_stage s = {.used = true, .configured = true, .cfg = *cfg};
    uint64_t cb = d->cfg.chunk_bytes;
    /* R2: the whole KV window, at the native context, every lane rounded up
     * to whole chunks. */
    uint64_t window = 0;
    for (uint32_t l = 0; l < cfg->lanes; l++) {
        uint64_t bpt = cfg->lane_bytes_per_token[l];
        if (!bpt || bpt > UINT64_MAX / cfg->native_context)
            return vli_fail(L, -EINVAL, "stage %u: lane %u: %llu bytes per "
                            "token (must be positive, and the native context's "
                            "bytes must fit 64 bits)", cfg->id, l,
                            (unsigned long long)bpt);
        uint64_t lc = vli_div_up(cfg->native_context * bpt, cb);
        if (lc > d->nchunks)
            return vli_fail(L, -ENOSPC, "stage %u: KV lane %u alone (%llu MiB) "
                            "does not fit device %u", cfg->id, l,
                            (unsigned long long)(lc * cb >> 20), d->cfg.id);
        s.lane_window[l] = (uint32_t)lc;
        window += lc;
    }
    uint64_t fixed = 0;
    for (uint32_t f = 0; f < cfg->nfixed; f++) {
        const struct vl_fixed_cfg *fc = &cfg->fixed[f];
        if (fc->kind != VL_FIXED && fc->kind != VL_DRAFT_KV)
            return vli_fail(L, -EINVAL, "stage %u: fixed reservation %u must "
                            "be of kind fixed or draft_kv", cfg->id, f);
        if (!fc->bytes)
            return vli_fail(L, -EINVAL, "stage %u: fixed reservation %u is "
                            "empty", cfg->id, f);
        if (fc->set > cfg->nsets || cfg->nsets > VL_MAX_STAGE_SETS)
            return vli_fail(L, -EINVAL, "stage %u: fixed reservation %u names "
                            "weight set %u of %u", cfg->id, f, fc->set,
                            cfg->nsets);
        fixed += vli_fixed_entry_chunks(cfg, f, cb);
    }
    /* R2: the stages of a device reserve at most its capacity. */
    if (window + fixed + d->reserved > vl_capacity(d))
        return vli_fail(L, -ENOSPC, "stage %u: KV window %llu MiB + fixed %llu "
                        "MiB does not fit device %u (%llu MiB left to reserve)",
                        cfg->id, (unsigned long long)(window * cb >> 20),
                        (unsigned long long)(fixed * cb >> 20), d->cfg.id,
                        (unsigned long long)((uint64_t)(vl_capacity(d) -
                                                        d->reserved) *
                                             cb >> 20));
    uint64_t ebytes = cfg->expert_region_bytes ? cfg->expert_region_bytes
                                               : d->cfg.capacity_bytes;
    if (ebytes / cb >= UINT32_MAX)
        return vli_fail(L, -EINVAL, "stage %u: expert region of %llu bytes is "
                        "too large", cfg->id, (unsigned long long)ebytes);
    s.window_chunks = (uint32_t)window;
    s.fixed_reserved = (uint32_t)fixed;
    s.headroom_chunks = (uint32_t)vli_div_up(cfg->headroom_bytes, cb);
    /* R7: no-loan safety, decided once: the window beyond the initial KV
     * must back the headroom and at least one expert slot. */
    uint32_t initial = 0;
    for (uint32_t l = 0; l < cfg->lanes; l++)
        initial += vl_lane_chunks(cfg, l, vl_kv_target_tokens(cfg, 0), cb);
    uint64_t lendable = (uint64_t)(s.window_chunks - initial) * cb;
    uint64_t keep = (uint64_t)s.headroom_chunks * cb;
    s.no_loan = !cfg->lend || lendable < keep + cfg->expert_slot_bytes ||
                keep + cfg->expert_slot_bytes < keep;
    s.register_chunks = s.no_loan ? s.window_chunks : initial;
    s.nslots = (uint32_t)(ebytes / cfg->expert_slot_bytes);
    s.slot_layer = malloc((s.nslots ? s.nslots : 1) * sizeof(uint16_t));
    if (!s.slot_layer)
        return vli_fail(L, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < s.nslots; i++)
        s.slot_layer[i] = VLI_SLOT_LAYER_NONE;
    d->reserved += s.window_chunks + s.fixed_reserved;
    L->stage[cfg->id] = s;
    return 0;
}
