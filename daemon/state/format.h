/* SPDX-License-Identifier: Apache-2.0 */
/* The state file's layout, and the check a file must pass before anything
 * of it is read. Pure: no I/O, so the fuzzer (tests/fuzz/fuzz_state.c)
 * runs the same check on any bytes.
 *
 * Layout, all little-endian host order: a header (and from version 4 its
 * extension), then the holder table, the ad-hoc stage table (by stage id:
 * who holds it), the range table, one 64-bit record per chunk of each
 * device, and from version 4 the weight sets and their users. */
#ifndef VRAMD_STATE_FORMAT_H
#define VRAMD_STATE_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger.h"

#define VD_STATE_MAGIC "VRMDSTA1"
/* 4: sealed weight sets and who maps them (R17), in tables the header's
 * extension (struct vd_state_hdr_wsets, right after it) points to.
 * 3: holders carry the client's name. Files of versions 2 and 3 are read
 * too, so an upgrade over live engines keeps their memory theirs. */
#define VD_STATE_VERSION 4u
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
};

/* Checks that map (size bytes, 8-byte aligned) is a whole state file of
 * this version: every table inside the file, aligned and not overlapping
 * the header, counts within bounds, computed without overflow. 0 with *v
 * filled, or -EBADMSG with why naming what is wrong. */
int vd_state_check(const void *map, size_t size, struct vd_state_view *v,
                   char *why, size_t whylen);
/* Holder i (< nholders) of a checked file as a version 3 record: a version
 * 2 file's has an empty name. */
void vd_state_holder_at(const struct vd_state_view *v, uint32_t i,
                        struct vd_state_holder *out);

#endif
