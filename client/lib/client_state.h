/* SPDX-License-Identifier: Apache-2.0 */
/* libvram's state layer: what this process holds and maps of the daemon's
 * memory (chunks, regions, stages, and new chunks being mapped in the
 * background), as the client's record keeps it. Its files: chunk_table.c,
 * region_table.c, stage_table.c, mapping.c, background.c, events.c and the
 * mappers (mappers.h); each has its own header. */
#ifndef VRAM_CLIENT_STATE_H
#define VRAM_CLIENT_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/handle.h"
#include "platform/thread.h"
#include "client/include/vram.h"

/* A chunk this client holds: its handle stays open while held, so a move
 * between regions never needs the daemon to send the fd again. */
struct vc_chunk {
    uint64_t id;
    vp_handle h;         /* host: the memory object; cuda: the exported
                            handle, kept until the release on Linux (closing
                            it is slow there), closed after the import on
                            Windows (VP_NONE) */
    uint64_t handle;     /* cuda: CUmemGenericAllocationHandle */
    uint32_t device;
    uint32_t region;     /* 0 when not mapped */
    uint32_t slot;
};

struct vc_chunk_table {
    struct vc_chunk *v;
    size_t cap, n, used; /* used counts tombstones too */
};

struct vc_region {
    uint32_t id, stage, device;
    int kind;
    char name[32];           /* fixed and draft_kv regions: from the config */
    uint64_t base, lane_stride, chunk_bytes, va_bytes;
    uint32_t lanes, lane_slots, stride_slots;
    uint32_t *lane_counts;   /* usable slots per lane */
    uint64_t *slot_chunk;    /* lanes * stride_slots; UINT64_MAX empty */
    uint32_t mapped;
};

/* R17: a reservation of a configured stage that a weight set backs (the
 * daemon's stage object says), and the set registration opened for it. */
#define VC_STAGE_SETS 8
struct vc_stage_set {
    char name[32];                          /* the reservation's */
    char set[VRAM_WEIGHTS_NAME_MAX + 1];
    uint64_t bytes;
    uint8_t key[VRAM_WEIGHTS_KEY_BYTES];
    bool has_key;       /* configured with one: registration opens it */
    uint32_t id;        /* the set registration opened here; 0 none */
    int err;            /* that open's error, 0 */
    char why[512];      /* and its message (last_error's size) */
};

struct vc_stage {
    uint32_t id;
    bool configured;     /* registered by id from the daemon's configuration */
    bool keep_window;
    struct vram_stage_info info;
    struct vram_residency res;
    uint64_t told_version; /* the residency version BUDGET_CHANGED told */
    uint32_t expert_slots; /* of its expert region */
    uint16_t *slot_layer; /* expert slot claims, for a resume; 0xffff none */
    uint32_t nslots;
    struct vc_stage_set sets[VC_STAGE_SETS];
    uint32_t nsets;
    struct vc_sleep *sleep; /* while asleep (sleep.c), else NULL */
    bool falling_asleep;    /* its chunks are unmapped, the sleep in flight */
    /* A wake with VRAM_WAKE_KEEP_HOST keeps the host buffer for the next
     * sleep (pinning costs more than the copy). */
    unsigned char *spare;
    uint64_t spare_bytes;
    bool spare_pinned;
    /* The last vram_kv_reserve that returned VRAM_PENDING, for
     * vram_kv_reserve_result: 0 none, VC_KV_SENT on its way, VC_KV_DONE
     * with its result in bg_kv, or the negative errno it failed with. */
    int bg_kv_state;
    struct vram_kv_result bg_kv;
};
#define VC_KV_SENT 1
#define VC_KV_DONE 2

/* What a sleeping stage keeps (sleep.c): the bytes of the slots it copied,
 * one host buffer, and what to grant again at the wake. */
struct vc_saved_slot {
    uint32_t region, slot;
};
struct vc_regrow {
    uint32_t region, per_lane;
};
struct vc_sleep {
    uint64_t wake_tokens;   /* the daemon's: kv_reserve at the wake */
    uint64_t expert_bytes;  /* loans to ask for again */
    unsigned char *host;    /* nsaved x their regions' chunk bytes */
    uint64_t host_bytes;
    uint64_t host_cap;      /* its size (a kept buffer may be larger) */
    bool pinned;            /* host came from the mapper's host_alloc */
    struct vc_saved_slot *saved;
    size_t nsaved;
    struct vc_regrow *regrow;
    size_t nregrow;
};

/* A new chunk imported and mapped on the background thread (background.c). */
struct vc_bg_item {
    uint64_t chunk;
    uint64_t addr, bytes;
    vp_handle h;         /* the handle from the reply; the import's after */
    uint64_t handle;     /* the import's (cuda) */
    uint32_t device;
    /* A chunk of a reply the thread read: not in the tables until the
     * finish puts it at region/slot; else it is there from the call. */
    bool adopt;
    uint32_t region, slot;
    int err;
};

/* The request a background call sent, its reply read by the thread. */
struct vc_bg_reply;

struct vc_bg {
    bool enabled;
    struct vc_bg_item *v;
    size_t n, cap;
    vp_thread *thread;   /* importing and mapping v now; NULL: not started */
    void *ctx;           /* the caller's driver context, for the thread */
    struct vc_bg_reply *reply; /* sent, not applied yet; NULL: none */
    bool finishing;      /* vc_bg_finish runs (what it calls nests) */
    size_t done;         /* chunks taken since the last vram_client_wait */
    int err;             /* the first failure since then */
    char msg[512];
    bool report;         /* the next call sending a request returns err */
    uint32_t kv_stage;   /* the stage of the kv_reserve in reply */
};

#endif
