/* SPDX-License-Identifier: Apache-2.0 */
/* A device's capacity changed at run time.
 *
 * Enforces R12 (capacity at run time). */
#include "daemon/ledger/internal.h"

#include <errno.h>
#include <stdio.h>

/* R12: withheld chunks stay free and out of reach, so no chunk has to
 * move. Lowering must leave room for what is in use, what the stages
 * reserve, and every promise; raising stops at the size the device had when
 * vramd started. */
int vl_device_set_capacity(struct vl_ledger *L, uint32_t device, uint64_t bytes,
                           bool dry_run)
{
    struct vl_device *d = vli_dev_get(L, device);
    if (!d)
        return vli_fail(L, -ENODEV, "no device %u", device);
    uint64_t cb = d->cfg.chunk_bytes;
    uint64_t want = bytes / cb;
    if (want > d->nchunks)
        return vli_fail(L, -E2BIG, "device %u: at most %llu MiB (its size when "
                        "vramd started)", device,
                        (unsigned long long)(d->nchunks * cb >> 20));
    uint32_t in_use = d->nchunks - d->nfree + d->weights; /* R17: sets too */
    if (want < in_use)
        return vli_fail(L, -EBUSY, "device %u: %llu MiB are in use", device,
                        (unsigned long long)((uint64_t)in_use * cb >> 20));
    if (want < d->reserved)
        return vli_fail(L, -EBUSY, "device %u: its stages reserve %llu MiB",
                        device,
                        (unsigned long long)((uint64_t)d->reserved * cb >> 20));
    uint32_t withheld = d->nchunks - (uint32_t)want;
    struct vli_promises p = vli_dev_promises(L, d);
    uint32_t free_after = d->nfree - withheld - d->weights;
    if (free_after < p.hard) /* R12: every hard promise (R2) stays free */
        return vli_fail(L, -EBUSY, "device %u: %llu MiB are promised to "
                        "stages' fixed and registered KV memory", device,
                        (unsigned long long)((uint64_t)p.hard * cb >> 20));
    if (dry_run)
        return 0;
    uint32_t old = d->withheld;
    d->withheld = withheld;
    if (vl_check(L) < 0) { /* a promise would go uncovered */
        char why[256];
        snprintf(why, sizeof(why), "%s", L->why);
        d->withheld = old;
        return vli_fail(L, -EBUSY, "device %u: %s", device, why);
    }
    return 0;
}
