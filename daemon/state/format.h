/* SPDX-License-Identifier: Apache-2.0 */
/* The state file's layout, and the check a file must pass before anything
 * of it is read. Pure: no I/O, so the fuzzer (tests/fuzz/fuzz_state.c)
 * runs the same check on any bytes.
 *
 * Layout, all little-endian host order: a header (and from version 4 its
 * extension), then the holder table, the ad-hoc stage table (by stage id:
 * who holds it), the range table, one 64-bit record per chunk of each
 * device, and from version 4 the weight sets and their users.
 *
 * Version 5 adds checksums (CRC-32C, crc32c.h) so that a file damaged in
 * any way is refused whole rather than trusted in part: a bit flipped in a
 * chunk record could otherwise hand a newcomer memory a live engine maps.
 * The header is written once, at creation, and carries its own checksum.
 * Each table is cut into blocks of whole records (VD_STATE_BLOCK bytes or
 * less; one record when a record is bigger), numbered across the tables in
 * the order of enum vd_state_table_id; the check table holds one checksum
 * per block, seeded with the block's number so that swapped blocks fail.
 * A change is a transaction on one block, made crash-safe by a one-entry
 * journal (journal.c): the block's old bytes and old checksum are copied
 * into the journal, sealed, and marked pending before the records change;
 * the new checksum is stored and the journal marked idle after. A reader
 * that finds it pending puts the old block back in its private copy, so a
 * kill at any instruction leaves a file whose records are each old or new
 * and whose checksums all hold. What changes after creation and was in the
 * header (the next client id) is a table of its own, the counters. */
#ifndef VRAMD_STATE_FORMAT_H
#define VRAMD_STATE_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/ledger/ledger.h"

#define VD_STATE_MAGIC "VRMDSTA1"
/* 4: sealed weight sets and who maps them (R17), in tables the header's
 * extension (struct vd_state_hdr_wsets, right after it) points to.
 * 3: holders carry the client's name. Files of versions 2 and 3 are read
 * too, so an upgrade over live engines keeps their memory theirs. */
#define VD_STATE_VERSION 5u
#define VD_STATE_VERSION_CRC 5u
#define VD_STATE_VERSION_WSETS 4u
#define VD_STATE_VERSION_NAMES 3u
#define VD_STATE_VERSION_NO_NAMES 2u
#define VD_STATE_NAME 48
#define VD_HOLDER_EVICTED 1u
#define VD_STATE_OLD_STAGES 256u

struct vd_state_hdr {
    char magic[8];
    uint32_t version, ndev;
    char boot_id[40];
    uint32_t next_client;
    uint32_t nholders, nranges;
    uint32_t nstages; /* entries of the ad-hoc stage table; 0 in files made
                         before it was sized: VD_STATE_OLD_STAGES */
    uint64_t off_holders, off_stages, off_ranges, size;
    uint64_t off_chunks[VL_MAX_DEVICES];
    struct {
        uint64_t chunk_bytes;
        uint32_t nchunks, id;
        char uuid[48]; /* the backend's, "" for host pools */
    } dev[VL_MAX_DEVICES];
};

/* Version 4: where the weight set tables are, right after the header. */
struct vd_state_hdr_wsets {
    uint32_t nwsets, nwusers;
    uint64_t off_wsets, off_wusers;
};

/* Version 5: where the checks are, right after the weight sets' extension.
 * crc covers the header from its first byte to crc. */
struct vd_state_hdr_check {
    uint32_t block_bytes; /* VD_STATE_BLOCK: how tables are cut */
    uint32_t nblocks;     /* entries of the check table */
    uint64_t off_check, off_journal, off_counters;
    uint32_t journal_bytes; /* room for one block's bytes in the journal */
    uint32_t crc;
};
#define VD_STATE_BLOCK 512u

/* The journal's states: 32-bit words far apart (all 32 bits differ), so that
 * no flip of a few bits turns one into the other. */
#define VD_JOURNAL_IDLE 0x1D1E1D1Eu
#define VD_JOURNAL_PENDING 0xE2E1E2E1u
struct vd_state_journal {
    uint32_t state;
    uint32_t seal; /* CRC-32C of block, old_crc and bytes: its data is
                      checked by old_crc itself once put back */
    uint32_t block, old_crc;
    uint32_t bytes, pad;
    /* then journal_bytes of data: the block as it was */
};

/* What changes in place and used to live in the header. */
struct vd_state_counters {
    uint32_t next_client, pad;
};

/* The tables, in the order their blocks are numbered. */
enum vd_state_table_id {
    VD_T_HOLDERS,
    VD_T_STAGES,
    VD_T_RANGES,
    VD_T_WSETS,
    VD_T_WUSERS,
    VD_T_COUNTERS,
    VD_T_CHUNKS, /* + the device's index */
    VD_T_MAX = VD_T_CHUNKS + VL_MAX_DEVICES
};

struct vd_state_table {
    uint64_t off;
    uint32_t rec, count; /* record bytes, records */
    uint32_t per_block;  /* records in a block */
    uint32_t first;      /* its first block's number */
};
struct vd_state_blocks {
    struct vd_state_table t[VD_T_MAX];
    uint32_t ntables, nblocks;
    uint32_t max_len; /* the longest block's bytes: the journal's room */
};

/* A sealed weight set (R17); its allocations' handles are the keeper's
 * (platform/keeper.h), named "ws<id>.<index>". */
struct vd_state_wset {
    uint32_t id; /* 0: free entry; written last */
    uint32_t device;
    uint64_t bytes, alloc_bytes;
    uint32_t nalloc, units;
    uint64_t base, va_bytes;
    uint32_t tenant, flags; /* VD_WSET_KEEP */
    uint64_t created_ms, sealed_ms;
    uint32_t stage, fixed; /* the configured stage's reservation it backs;
                              stage VL_NONE (0xffffffff) for none */
    uint8_t key[VL_WSET_KEY];
    char name[VL_WSET_NAME_MAX + 8]; /* NUL-terminated */
};
#define VD_WSET_KEEP 1u

/* A client that maps a set (a gone one's process may still map it). */
struct vd_state_wuser {
    uint32_t set; /* 0: free entry; written last */
    uint32_t client;
};

struct vd_state_holder {
    uint32_t client; /* 0: free entry */
    int32_t pid;
    uint64_t starttime;
    uint32_t flags;
    uint32_t uid; /* the peer's, for its quotas; 0 in older files */
    char name[VD_STATE_NAME]; /* as it said hello, for vramctl while it is
                                 gone; not in version 2 */
};
/* The version 2 record: the same less the name. */
#define VD_STATE_HOLDER_V2_BYTES 24u

struct vd_state_range {
    uint32_t client; /* 0: free entry */
    uint32_t region;
    uint64_t base, size;
};

/* The tables of a file that passed vd_state_check. */
struct vd_state_view {
    const struct vd_state_hdr *h;
    const uint8_t *holders; /* nholders records of holder_bytes */
    size_t holder_bytes;
    const uint32_t *stages; /* nstages: the holder of each ad-hoc stage id */
    uint32_t nstages;
    const struct vd_state_range *ranges;
    const uint64_t *chunks[VL_MAX_DEVICES];
    const struct vd_state_wset *wsets; /* version 4; else none */
    uint32_t nwsets;
    const struct vd_state_wuser *wusers;
    uint32_t nwusers;
    uint32_t next_client; /* the header's, or version 5's counters' */
};

/* Checks that buf (size bytes, 8-byte aligned: the caller's private copy
 * of the file, never the shared mapping, so nothing can change between the
 * check and the reading) is a whole state file of a version this vramd
 * reads: every table inside the file, aligned and not overlapping the
 * header, counts within bounds, computed without overflow; from version 5
 * every checksum holds, once a pending journal has put its block back in
 * buf (the only change made to it). 0 with *v filled; -EBADMSG with why
 * naming what is wrong (for a checksum: the table and the offset); or
 * -EPROTONOSUPPORT for a newer format, why naming both versions. */
int vd_state_check(void *buf, size_t size, struct vd_state_view *v,
                   char *why, size_t whylen);

/* The blocks of a version 5 file whose header h passed the structural
 * check (or that state.c is laying out): its tables and how they are cut. */
void vd_state_blocks(const struct vd_state_hdr *h, struct vd_state_blocks *b);
/* Block n's checksum over its bytes. */
uint32_t vd_state_block_crc(uint32_t n, const void *p, size_t len);
/* The header's checksum (of a file at least a version 5 header long). */
uint32_t vd_state_hdr_crc(const void *file);
/* Where block n (< b->nblocks) is: its table, offset and length. */
void vd_state_block_at(const struct vd_state_blocks *b, uint32_t n,
                       uint32_t *table, uint64_t *off, uint32_t *len);
/* "the holder table", "device 2's chunk table", ... */
void vd_state_table_name(uint32_t table, char *buf, size_t n);
/* The extensions of a file's header (versions 4 and 5). */
#define VD_STATE_WSETS_AT(h) ((struct vd_state_hdr_wsets *)(uintptr_t)((const uint8_t *)(h) + sizeof(struct vd_state_hdr)))
#define VD_STATE_CHECK_AT(h) ((struct vd_state_hdr_check *)(uintptr_t)((const uint8_t *)(h) + sizeof(struct vd_state_hdr) + sizeof(struct vd_state_hdr_wsets)))
#define VD_STATE_HDR_V5_BYTES (sizeof(struct vd_state_hdr) + sizeof(struct vd_state_hdr_wsets) + sizeof(struct vd_state_hdr_check))
/* Holder i (< nholders) of a checked file as a version 3 record: a version
 * 2 file's has an empty name. */
void vd_state_holder_at(const struct vd_state_view *v, uint32_t i,
                        struct vd_state_holder *out);

#endif
