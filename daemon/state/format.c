/* SPDX-License-Identifier: Apache-2.0 */
#include "format.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* A version 2 holder is a version 3 one without its name. */
_Static_assert(offsetof(struct vd_state_holder, name) == VD_STATE_HOLDER_V2_BYTES,
               "version 2 holders must be a prefix of version 3's");
_Static_assert(sizeof(struct vd_state_holder) % 8 == 0, "holders stay aligned");
_Static_assert(sizeof(struct vd_state_wset) % 8 == 0, "sets stay aligned");

/* Whether count items of elem bytes at off fit in size bytes, aligned to
 * align, after the header: written so that no sum or product can wrap. */
static bool table_ok(uint64_t off, uint64_t count, uint64_t elem,
                     uint64_t align, uint64_t size)
{
    if (off < sizeof(struct vd_state_hdr) || off > size || off % align)
        return false;
    return count <= (size - off) / elem;
}

int vd_state_check(const void *map, size_t size, struct vd_state_view *v,
                   char *why, size_t whylen)
{
    const uint8_t *p = map;
    const struct vd_state_hdr *h = map;
    if (size < sizeof(*h)) {
        snprintf(why, whylen, "%zu bytes, shorter than its header (%zu)", size,
                 sizeof(*h));
        return -EBADMSG;
    }
    if (memcmp(h->magic, VD_STATE_MAGIC, 8) != 0) {
        snprintf(why, whylen, "not a vramd state file (no magic)");
        return -EBADMSG;
    }
    if (h->version < VD_STATE_VERSION_NO_NAMES || h->version > VD_STATE_VERSION) {
        snprintf(why, whylen, "format version %u, this vramd reads %u to %u",
                 h->version, VD_STATE_VERSION_NO_NAMES, VD_STATE_VERSION);
        return -EBADMSG;
    }
    size_t holder_bytes = h->version >= VD_STATE_VERSION_NAMES
                              ? sizeof(struct vd_state_holder)
                              : VD_STATE_HOLDER_V2_BYTES;
    bool wsets = h->version >= 4;
    if (wsets && size < sizeof(*h) + sizeof(struct vd_state_hdr_wsets)) {
        snprintf(why, whylen, "%zu bytes, shorter than its header", size);
        return -EBADMSG;
    }
    if (h->size != (uint64_t)size) {
        snprintf(why, whylen, "truncated or extended: %zu bytes, its header "
                 "says %llu", size, (unsigned long long)h->size);
        return -EBADMSG;
    }
    if (h->ndev > VL_MAX_DEVICES) {
        snprintf(why, whylen, "%u devices, at most %d", h->ndev, VL_MAX_DEVICES);
        return -EBADMSG;
    }
    if (!table_ok(h->off_holders, h->nholders, holder_bytes, 8, size)) {
        snprintf(why, whylen, "the holder table (%u at offset %llu) is not "
                 "inside the file", h->nholders,
                 (unsigned long long)h->off_holders);
        return -EBADMSG;
    }
    uint32_t nstages = h->nstages ? h->nstages : VD_STATE_OLD_STAGES;
    if (nstages > VL_MAX_STAGES) {
        snprintf(why, whylen, "%u stage ids, at most %d", nstages, VL_MAX_STAGES);
        return -EBADMSG;
    }
    if (!table_ok(h->off_stages, nstages, sizeof(uint32_t), 4, size)) {
        snprintf(why, whylen, "the stage table (%u at offset %llu) is not "
                 "inside the file", nstages, (unsigned long long)h->off_stages);
        return -EBADMSG;
    }
    if (!table_ok(h->off_ranges, h->nranges, sizeof(struct vd_state_range), 8,
                  size)) {
        snprintf(why, whylen, "the range table (%u at offset %llu) is not "
                 "inside the file", h->nranges, (unsigned long long)h->off_ranges);
        return -EBADMSG;
    }
    for (uint32_t i = 0; i < h->ndev; i++) {
        if (!table_ok(h->off_chunks[i], h->dev[i].nchunks, sizeof(uint64_t), 8,
                      size)) {
            snprintf(why, whylen, "device %u's chunk table (%u at offset %llu) "
                     "is not inside the file", i, h->dev[i].nchunks,
                     (unsigned long long)h->off_chunks[i]);
            return -EBADMSG;
        }
        if (h->dev[i].chunk_bytes == 0) {
            snprintf(why, whylen, "device %u has chunks of 0 bytes", i);
            return -EBADMSG;
        }
    }
    v->wsets = NULL;
    v->wusers = NULL;
    v->nwsets = v->nwusers = 0;
    if (wsets) {
        const struct vd_state_hdr_wsets *x = (const void *)(p + sizeof(*h));
        if (x->nwsets > VL_MAX_WSETS ||
            !table_ok(x->off_wsets, x->nwsets, sizeof(struct vd_state_wset), 8,
                      size)) {
            snprintf(why, whylen, "the weight set table (%u at offset %llu) "
                     "is not inside the file", x->nwsets,
                     (unsigned long long)x->off_wsets);
            return -EBADMSG;
        }
        if (!table_ok(x->off_wusers, x->nwusers, sizeof(struct vd_state_wuser),
                      8, size)) {
            snprintf(why, whylen, "the weight set users' table (%u at offset "
                     "%llu) is not inside the file", x->nwusers,
                     (unsigned long long)x->off_wusers);
            return -EBADMSG;
        }
        v->wsets = (const void *)(p + x->off_wsets);
        v->nwsets = x->nwsets;
        v->wusers = (const void *)(p + x->off_wusers);
        v->nwusers = x->nwusers;
    }
    v->h = h;
    v->holders = p + h->off_holders;
    v->holder_bytes = holder_bytes;
    v->stages = (const void *)(p + h->off_stages);
    v->nstages = nstages;
    v->ranges = (const void *)(p + h->off_ranges);
    for (uint32_t i = 0; i < VL_MAX_DEVICES; i++)
        v->chunks[i] = i < h->ndev ? (const void *)(p + h->off_chunks[i]) : NULL;
    return 0;
}

void vd_state_holder_at(const struct vd_state_view *v, uint32_t i,
                        struct vd_state_holder *out)
{
    memset(out, 0, sizeof(*out));
    memcpy(out, v->holders + (size_t)i * v->holder_bytes, v->holder_bytes);
    out->name[sizeof(out->name) - 1] = '\0'; /* whatever the file holds */
}
