/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/state/format.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "daemon/state/crc32c.h"

/* A version 2 holder is a version 3 one without its name. */
_Static_assert(offsetof(struct vd_state_holder, name) == VD_STATE_HOLDER_V2_BYTES,
               "version 2 holders must be a prefix of version 3's");
_Static_assert(sizeof(struct vd_state_holder) % 8 == 0, "holders stay aligned");
_Static_assert(sizeof(struct vd_state_wset) % 8 == 0, "sets stay aligned");
_Static_assert(sizeof(struct vd_state_hdr) % 8 == 0 &&
                   sizeof(struct vd_state_hdr_wsets) % 8 == 0 &&
                   sizeof(struct vd_state_hdr_check) % 8 == 0 &&
                   sizeof(struct vd_state_journal) % 8 == 0,
               "the header's extensions and the journal's data stay aligned");

void vd_state_blocks(const struct vd_state_hdr *h, struct vd_state_blocks *b)
{
    const struct vd_state_hdr_wsets *x = VD_STATE_WSETS_AT(h);
    const struct vd_state_hdr_check *c = VD_STATE_CHECK_AT(h);
    memset(b, 0, sizeof(*b));
    b->t[VD_T_HOLDERS] = (struct vd_state_table){
        .off = h->off_holders, .rec = sizeof(struct vd_state_holder),
        .count = h->nholders};
    b->t[VD_T_STAGES] = (struct vd_state_table){
        .off = h->off_stages, .rec = sizeof(uint32_t), .count = h->nstages};
    b->t[VD_T_RANGES] = (struct vd_state_table){
        .off = h->off_ranges, .rec = sizeof(struct vd_state_range),
        .count = h->nranges};
    b->t[VD_T_WSETS] = (struct vd_state_table){
        .off = x->off_wsets, .rec = sizeof(struct vd_state_wset),
        .count = x->nwsets};
    b->t[VD_T_WUSERS] = (struct vd_state_table){
        .off = x->off_wusers, .rec = sizeof(struct vd_state_wuser),
        .count = x->nwusers};
    b->t[VD_T_COUNTERS] = (struct vd_state_table){
        .off = c->off_counters, .rec = sizeof(struct vd_state_counters),
        .count = 1};
    uint32_t ndev = h->ndev < VL_MAX_DEVICES ? h->ndev : VL_MAX_DEVICES;
    for (uint32_t d = 0; d < ndev; d++)
        b->t[VD_T_CHUNKS + d] = (struct vd_state_table){
            .off = h->off_chunks[d], .rec = sizeof(uint64_t),
            .count = h->dev[d].nchunks};
    b->ntables = VD_T_CHUNKS + ndev;
    /* Counts are bounded by the structural check (every table inside a
     * file that fits in memory), so the sum cannot wrap 32 bits... unless
     * tables are tiny records of a huge file: saturate instead. */
    uint64_t n = 0;
    for (uint32_t i = 0; i < b->ntables; i++) {
        struct vd_state_table *t = &b->t[i];
        t->per_block = t->rec >= VD_STATE_BLOCK ? 1 : VD_STATE_BLOCK / t->rec;
        t->first = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
        n += ((uint64_t)t->count + t->per_block - 1) / t->per_block;
        if (t->count && (uint64_t)t->per_block * t->rec > b->max_len)
            b->max_len = t->per_block * t->rec;
    }
    b->nblocks = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

uint32_t vd_state_block_crc(uint32_t n, const void *p, size_t len)
{
    return vd_crc32c(vd_crc32c(0, &n, sizeof(n)), p, len);
}

uint32_t vd_state_hdr_crc(const void *file)
{
    return vd_crc32c(0, file, VD_STATE_HDR_V5_BYTES - sizeof(uint32_t));
}

void vd_state_block_at(const struct vd_state_blocks *b, uint32_t n,
                       uint32_t *table, uint64_t *off, uint32_t *len)
{
    uint32_t i = 0;
    while (i + 1 < b->ntables && n >= b->t[i + 1].first)
        i++;
    const struct vd_state_table *t = &b->t[i];
    uint64_t r0 = (uint64_t)(n - t->first) * t->per_block;
    uint64_t r1 = r0 + t->per_block;
    if (r1 > t->count)
        r1 = t->count;
    *table = i;
    *off = t->off + r0 * t->rec;
    *len = (uint32_t)((r1 - r0) * t->rec);
}

void vd_state_table_name(uint32_t table, char *buf, size_t n)
{
    static const char *const names[VD_T_CHUNKS] = {
        "the holder table", "the ad-hoc stage table", "the range table",
        "the weight set table", "the weight set users' table",
        "the counters"};
    if (table < VD_T_CHUNKS)
        snprintf(buf, n, "%s", names[table]);
    else
        snprintf(buf, n, "device %u's chunk table", table - VD_T_CHUNKS);
}

/* Version 5: the journal, then every block's checksum, on the private copy.
 * A journal pending and sealed is a change a kill interrupted: its block
 * goes back to what it was (the records the change made are lost, and none
 * had been answered to a client yet). Pending and not sealed cannot come
 * from a kill (the seal is stored before the state), so it is damage. */
static int check_sums(uint8_t *p, size_t size, const struct vd_state_blocks *b,
                      char *why, size_t whylen)
{
    const struct vd_state_hdr *h = (const void *)p;
    const struct vd_state_hdr_check *c = VD_STATE_CHECK_AT(h);
    uint32_t *check = (uint32_t *)(void *)(p + c->off_check);
    struct vd_state_journal *j = (void *)(p + c->off_journal);
    (void)size;
    if (j->state == VD_JOURNAL_PENDING) {
        uint32_t seal = vd_crc32c(0, &j->block, 3 * sizeof(uint32_t));
        uint64_t off = 0;
        uint32_t len = 0, table;
        if (j->block < b->nblocks)
            vd_state_block_at(b, j->block, &table, &off, &len);
        if (seal != j->seal || j->block >= b->nblocks || j->bytes != len ||
            len > c->journal_bytes) {
            snprintf(why, whylen, "the journal (offset %llu) is pending but "
                     "not sealed", (unsigned long long)c->off_journal);
            return -EBADMSG;
        }
        memcpy(p + off, (uint8_t *)(j + 1), len);
        check[j->block] = j->old_crc;
    } else if (j->state != VD_JOURNAL_IDLE) {
        snprintf(why, whylen, "the journal (offset %llu) is neither idle nor "
                 "pending", (unsigned long long)c->off_journal);
        return -EBADMSG;
    }
    for (uint32_t n = 0; n < b->nblocks; n++) {
        uint32_t table, len;
        uint64_t off;
        vd_state_block_at(b, n, &table, &off, &len);
        if (vd_state_block_crc(n, p + off, len) != check[n]) {
            char name[64];
            vd_state_table_name(table, name, sizeof(name));
            snprintf(why, whylen, "%s fails its checksum at offset %llu "
                     "(%u bytes, block %u of %u; its checksum at offset %llu)",
                     name, (unsigned long long)off, len,
                     n - b->t[table].first,
                     (table + 1 < b->ntables ? b->t[table + 1].first
                                             : b->nblocks) - b->t[table].first,
                     (unsigned long long)(c->off_check + 4ull * n));
            return -EBADMSG;
        }
    }
    return 0;
}

/* Whether count items of elem bytes at off fit in size bytes, aligned to
 * align, after the header: written so that no sum or product can wrap. */
static bool table_ok(uint64_t off, uint64_t count, uint64_t elem,
                     uint64_t align, uint64_t size, uint64_t hend)
{
    if (off < hend || off > size || off % align)
        return false;
    return count <= (size - off) / elem;
}

int vd_state_check(void *buf, size_t size, struct vd_state_view *out,
                   char *why, size_t whylen)
{
    struct vd_state_view view, *v = &view;
    uint8_t *p = buf;
    const struct vd_state_hdr *h = buf;
    if (size < sizeof(*h)) {
        snprintf(why, whylen, "%zu bytes, shorter than its header (%zu)", size,
                 sizeof(*h));
        return -EBADMSG;
    }
    if (memcmp(h->magic, VD_STATE_MAGIC, 8) != 0) {
        snprintf(why, whylen, "not a vramd state file (no magic)");
        return -EBADMSG;
    }
    if (h->version > VD_STATE_VERSION) {
        snprintf(why, whylen, "format version %u, this vramd reads %u to %u",
                 h->version, VD_STATE_VERSION_NO_NAMES, VD_STATE_VERSION);
        return -EPROTONOSUPPORT;
    }
    if (h->version < VD_STATE_VERSION_NO_NAMES) {
        snprintf(why, whylen, "format version %u, this vramd reads %u to %u",
                 h->version, VD_STATE_VERSION_NO_NAMES, VD_STATE_VERSION);
        return -EBADMSG;
    }
    size_t holder_bytes = h->version >= VD_STATE_VERSION_NAMES
                              ? sizeof(struct vd_state_holder)
                              : VD_STATE_HOLDER_V2_BYTES;
    bool wsets = h->version >= VD_STATE_VERSION_WSETS;
    bool sums = h->version >= VD_STATE_VERSION_CRC;
    size_t hbytes = sums    ? VD_STATE_HDR_V5_BYTES
                    : wsets ? sizeof(*h) + sizeof(struct vd_state_hdr_wsets)
                            : sizeof(*h);
    if (size < hbytes) {
        snprintf(why, whylen, "%zu bytes, shorter than its header (%zu)", size,
                 hbytes);
        return -EBADMSG;
    }
    if (h->size != (uint64_t)size) {
        snprintf(why, whylen, "truncated or extended: %zu bytes, its header "
                 "says %llu", size, (unsigned long long)h->size);
        return -EBADMSG;
    }
    /* A format 5 file whose version field was damaged down to 2, 3 or 4
     * (5 to 4 is one bit) would skip every checksum. Its header's
     * checksum, computed with the version read as 5, gives it away; a real
     * older file matches by chance with odds of 2^-32. */
    if (!sums && size >= VD_STATE_HDR_V5_BYTES) {
        uint8_t hv5[VD_STATE_HDR_V5_BYTES];
        uint32_t v5 = VD_STATE_VERSION_CRC, stored;
        memcpy(hv5, p, sizeof(hv5));
        memcpy(hv5 + offsetof(struct vd_state_hdr, version), &v5, sizeof(v5));
        memcpy(&stored, hv5 + sizeof(hv5) - sizeof(stored), sizeof(stored));
        if (vd_state_hdr_crc(hv5) == stored) {
            snprintf(why, whylen, "format version %u in a file whose header is "
                     "a format %u header's, damaged at offset %zu (the version)",
                     h->version, VD_STATE_VERSION_CRC,
                     offsetof(struct vd_state_hdr, version));
            return -EBADMSG;
        }
    }
    uint64_t hend = sums ? VD_STATE_HDR_V5_BYTES : sizeof(*h);
    const struct vd_state_hdr_check *c = VD_STATE_CHECK_AT(h);
    /* Before any field of it is believed: a damaged offset would otherwise
     * be reported as a misplaced table. */
    if (sums && vd_state_hdr_crc(p) != c->crc) {
        snprintf(why, whylen, "the header fails its checksum at offset 0 "
                 "(%zu bytes; its checksum at offset %zu)", hbytes,
                 hbytes - sizeof(uint32_t));
        return -EBADMSG;
    }
    if (h->ndev > VL_MAX_DEVICES) {
        snprintf(why, whylen, "%u devices, at most %d", h->ndev, VL_MAX_DEVICES);
        return -EBADMSG;
    }
    if (!table_ok(h->off_holders, h->nholders, holder_bytes, 8, size, hend)) {
        snprintf(why, whylen, "the holder table (%u at offset %llu) is not "
                 "inside the file", h->nholders,
                 (unsigned long long)h->off_holders);
        return -EBADMSG;
    }
    uint32_t nstages = h->nstages ? h->nstages : VD_STATE_OLD_STAGES;
    if (sums && !h->nstages) {
        snprintf(why, whylen, "an ad-hoc stage table of 0 entries");
        return -EBADMSG;
    }
    if (nstages > VL_MAX_STAGES) {
        snprintf(why, whylen, "%u stage ids, at most %d", nstages, VL_MAX_STAGES);
        return -EBADMSG;
    }
    if (!table_ok(h->off_stages, nstages, sizeof(uint32_t), 4, size, hend)) {
        snprintf(why, whylen, "the stage table (%u at offset %llu) is not "
                 "inside the file", nstages, (unsigned long long)h->off_stages);
        return -EBADMSG;
    }
    if (!table_ok(h->off_ranges, h->nranges, sizeof(struct vd_state_range), 8,
                  size, hend)) {
        snprintf(why, whylen, "the range table (%u at offset %llu) is not "
                 "inside the file", h->nranges, (unsigned long long)h->off_ranges);
        return -EBADMSG;
    }
    for (uint32_t i = 0; i < h->ndev; i++) {
        if (!table_ok(h->off_chunks[i], h->dev[i].nchunks, sizeof(uint64_t), 8,
                      size, hend)) {
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
                      size, hend)) {
            snprintf(why, whylen, "the weight set table (%u at offset %llu) "
                     "is not inside the file", x->nwsets,
                     (unsigned long long)x->off_wsets);
            return -EBADMSG;
        }
        if (!table_ok(x->off_wusers, x->nwusers, sizeof(struct vd_state_wuser),
                      8, size, hend)) {
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
    v->next_client = h->next_client;
    if (sums) {
        struct vd_state_blocks b;
        vd_state_blocks(h, &b);
        if (c->block_bytes != VD_STATE_BLOCK || c->nblocks != b.nblocks ||
            !table_ok(c->off_check, c->nblocks, sizeof(uint32_t), 8, size, hend) ||
            c->journal_bytes != b.max_len ||
            !table_ok(c->off_journal, 1, sizeof(struct vd_state_journal) +
                      (uint64_t)c->journal_bytes, 8, size, hend) ||
            !table_ok(c->off_counters, 1, sizeof(struct vd_state_counters), 8,
                      size, hend)) {
            snprintf(why, whylen, "the check table (%u blocks of %u bytes at "
                     "offset %llu) or the journal (offset %llu) is not inside "
                     "the file or not as its tables need",
                     c->nblocks, c->block_bytes,
                     (unsigned long long)c->off_check,
                     (unsigned long long)c->off_journal);
            return -EBADMSG;
        }
        int e = check_sums(p, size, &b, why, whylen);
        if (e < 0)
            return e;
        v->next_client =
            ((const struct vd_state_counters *)(const void *)(p + c->off_counters))
                ->next_client;
    }
    v->h = h;
    v->holders = p + h->off_holders;
    v->holder_bytes = holder_bytes;
    v->stages = (const void *)(p + h->off_stages);
    v->nstages = nstages;
    v->ranges = (const void *)(p + h->off_ranges);
    for (uint32_t i = 0; i < VL_MAX_DEVICES; i++)
        v->chunks[i] = i < h->ndev ? (const void *)(p + h->off_chunks[i]) : NULL;
    *out = view;
    return 0;
}

void vd_state_holder_at(const struct vd_state_view *v, uint32_t i,
                        struct vd_state_holder *out)
{
    memset(out, 0, sizeof(*out));
    memcpy(out, v->holders + (size_t)i * v->holder_bytes, v->holder_bytes);
    out->name[sizeof(out->name) - 1] = '\0'; /* whatever the file holds */
}
