/* SPDX-License-Identifier: Apache-2.0 */
/* The ledger's private helpers, shared between its files (prefix vli_).
 * Nothing outside daemon/ledger/ includes this; the public API is ledger.h,
 * the rules R1..R18 are in README.md. Grouped by the file that defines
 * them. */
#ifndef VRAMD_LEDGER_INTERNAL_H
#define VRAMD_LEDGER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/ledger/ledger.h"

/* ---- the ledger's state (opaque outside this folder) ---- */

struct vl_chunk {
    uint8_t state;
    uint8_t cat;     /* what the chunk counts as while held */
    uint8_t mark;    /* set only inside one operation (a release's
                        duplicates), clear between operations */
    uint32_t holder; /* client id, 0 when free */
    uint32_t region; /* region id, 0 when not mapped in a region */
    uint32_t slot;   /* flat slot index inside the region */
    uint16_t qstage; /* quarantined: the configured stage it came from, or
                        VL_QSTAGE_NONE */
    uint8_t qcat;    /* ... and what it counted as there (enum vl_category) */
    /* The holder's chunks of this device, a list through the chunks (indexes,
     * VL_NONE at the ends), so what a client holds is found without walking
     * the device. */
    uint32_t hnext, hprev;
};

struct vl_region {
    uint32_t id;
    uint32_t client;
    uint32_t stage;
    uint8_t kind;
    uint32_t device;
    uint64_t base;
    uint64_t lane_stride; /* bytes between lanes */
    uint64_t va_bytes;    /* address space held: lanes * lane_stride, rounded */
    uint32_t lanes;
    uint32_t lane_slots[VL_MAX_LANES]; /* usable slots per lane */
    uint32_t stride_slots;             /* slots between lanes */
    uint64_t *slot_chunk;              /* lanes * stride_slots, VL_CHUNK_NONE */
    uint32_t used;                     /* occupied slots */
    /* Per lane, kept by place/unplace so no operation scans a region:
     * occupied slots, the lowest slot that may be empty (all below are
     * occupied), and one past the highest occupied slot. */
    uint32_t lane_count[VL_MAX_LANES];
    uint32_t lane_lo[VL_MAX_LANES];
    uint32_t lane_hi[VL_MAX_LANES];
    /* Expert regions: lane 0's leading slots holding loaned chunks (the
     * backed expert slots), kept where chunks come, go or are recalled, so
     * a stage's view costs O(1), not its loans. */
    uint32_t loaned_prefix;
    uint32_t fixed_index;              /* for fixed regions of a stage */
    uint32_t tag;                      /* the observer's record of its range */
    size_t index;                      /* in L->region */
};


struct vl_stage {
    bool used;
    bool configured;
    struct vl_stage_cfg cfg;
    uint32_t owner; /* client id; 0 = unowned */
    bool keep_window;
    /* derived from cfg */
    uint32_t lane_window[VL_MAX_LANES]; /* chunks per lane at native context */
    uint32_t window_chunks;             /* sum over lanes */
    uint32_t fixed_reserved;            /* chunks for fixed reservations */
    uint32_t headroom_chunks;
    bool no_loan;             /* whole window mapped at registration */
    uint32_t register_chunks; /* KV chunks a registration maps (at most) */
    /* state */
    uint32_t kv_region, expert_region;
    uint32_t fixed_region[VL_MAX_FIXED];
    uint32_t kv_chunks;      /* granted to the kv region */
    uint32_t fixed_chunks;   /* granted to fixed regions of this stage */
    uint32_t set_chunks;     /* R17: charged to the weight sets of its fixed
                                reservations that name one */
    uint32_t fixed_set[VL_MAX_FIXED]; /* ... each one's set id, 0: none yet */
    uint32_t loan_chunks;    /* loaned or recalling in the expert region */
    uint32_t recalling;      /* of loan_chunks, being recalled */
    uint64_t kv_needed_bytes;
    uint64_t kv_peak_tokens; /* largest window reached (keep_window) */
    uint64_t residency_version;
    uint16_t *slot_layer;    /* per expert slot: owning layer, 0xffff none */
    uint32_t nslots;         /* expert slots in the region */
    uint32_t claim_hi;       /* no slot at or above it is claimed: what a
                                residency change clears is bounded by the
                                claims, not by the region's size */
    uint64_t recalls_total, grants_total;
    uint32_t quarantined;    /* chunks of its regions waiting for a reap */
    uint32_t q_fixed;        /* of those, fixed chunks */
    uint32_t held_by;        /* ad-hoc, unowned: kept for this gone client,
                                whose process may come back for it (R13) */
    /* R18: asleep, it holds no chunk; its regions keep their addresses.
     * What its owner said it keeps in host memory, and what its sleeps and
     * wakes took, for status. */
    bool asleep;
    uint64_t wake_tokens;
    uint64_t host_bytes;
    uint64_t sleeps, wakes, sleep_us, wake_us;
};

struct vl_device {
    struct vl_device_cfg cfg;
    uint32_t nchunks;
    struct vl_chunk *chunks;
    uint32_t *free_stack;
    uint32_t nfree;
    uint32_t count[VL_NSTATES];
    uint32_t fixed, kv, loaned; /* granted chunks by category */
    uint32_t reserved;          /* sum over stages: window + fixed */
    uint32_t withheld;          /* free chunks kept out: capacity lowered */
    uint32_t weights;           /* free chunks kept out: charged to weight
                                   sets, whose memory is the backend's (R17) */
};

/* R17: a weight set. */
struct vl_wset {
    uint32_t id;
    uint32_t dev;             /* device index */
    char name[VL_WSET_NAME_MAX + 1];
    uint8_t key[VL_WSET_KEY];
    uint64_t bytes, alloc_bytes;
    uint32_t nalloc, units;
    uint64_t base, va_bytes;
    uint32_t writer;          /* 0 once sealed */
    bool sealed, keep;
    uint32_t stage, fixed;    /* a configured stage's fixed reservation it
                                 backs (never evicted), or VL_NONE */
    uint32_t tenant;
    bool exempt;              /* made by an exempt client: not counted */
    uint64_t sealed_at, last_use;
    uint32_t *user;           /* clients mapping it (gone ones too) */
    uint32_t nuser, user_cap;
};

struct vl_client {
    uint32_t id;
    bool gone;        /* disconnected; chunks quarantined until reaped */
    bool resumed;     /* gone, and its process came back as another client */
    bool delinquent;  /* missed a recall deadline: no new loans */
    uint32_t chunks;  /* held, any state */
    uint64_t missed_recalls;
    /* Kept where chunks and stages change hands, so that a view and a quota
     * (R14) cost O(1); vl_check recounts them. A chunk's bytes are its
     * device's chunk_bytes. */
    uint64_t held_bytes;        /* granted, loaned or recalling */
    uint64_t quarantined_bytes;
    uint32_t regions;           /* regions of ad-hoc stages */
    uint32_t stages;            /* stages it owns */
    uint64_t va_bytes;          /* its regions' and held ranges' (R16) */
    uint32_t tenant;            /* R16 */
    bool exempt;
    bool admitted;              /* counted against gone clients (R16) */
    bool holds_ids;             /* gone: ad-hoc stage ids may be held for
                                   it (held_by), which its reap frees */
    uint32_t hfirst[VL_MAX_DEVICES]; /* its chunks' list per device */
    uint32_t wsets;             /* weight sets it maps (R17) */
};

struct vl_ledger {
    struct vl_device dev[VL_MAX_DEVICES];
    uint32_t ndev;
    struct vl_stage *stage; /* by id, nstage of them (grown on demand) */
    uint32_t nstage;
    struct vl_region **region;
    size_t nregion, region_cap;
    /* id -> index + 1 in region[] (0 empty, UINT32_MAX removed): a lookup
     * costs the same with 10 regions or 100,000 */
    uint32_t *rh;
    size_t rh_cap, rh_used;
    uint32_t next_region_id;
    struct vl_client *client;
    size_t nclient, client_cap;
    /* id -> index + 1 in client[] (0 empty, UINT32_MAX removed): a
     * chunk's holder is found in O(1) with 256 clients or 65,536 */
    uint32_t *ch;
    size_t ch_cap, ch_used;
    size_t ngone; /* clients gone (R13), which a tenant's count can't pass */
    /* the virtual address window regions are carved from */
    uint64_t va_base, va_size;
    uint64_t region_align; /* base alignment of regions (0: the chunk size) */
    struct vl_va_range { uint64_t base, size; } *va_free;
    size_t nva_free;
    struct vl_va_hold *va_hold;
    size_t nva_hold;
    struct vl_wset **wset;    /* R17, in no order */
    size_t nwset;
    uint32_t next_wset_id;
    uint64_t tick;            /* R17's clock for least recent use */
    struct vl_observer obs;
    struct vl_limits limits; /* per client (R14); UINT32_MAX: unbounded */
    char why[256];
    bool check_every_op; /* run vl_check after every operation */
};

/* Capacity in chunks now. */
static inline uint32_t vl_capacity(const struct vl_device *d)
{
    return d->nchunks - d->withheld;
}

/* A ledger in storage the caller owns (the unit tests keep it on the
 * stack); vl_new and vl_free wrap these. */
int vl_init(struct vl_ledger *L, const struct vl_device_cfg *devs, uint32_t ndev,
            uint64_t va_base, uint64_t va_size);
void vl_fini(struct vl_ledger *L);

/* ---- helpers ---- */

/* vl_stage.slot_layer of a slot no layer claims. */
#define VLI_SLOT_LAYER_NONE 0xffffu

/* Without overflow for any a (a + b - 1 wraps near UINT64_MAX). */
static inline uint64_t vli_div_up(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

/* pool.c: devices, chunks and their states */
int vli_fail(struct vl_ledger *L, int err, const char *fmt, ...);
struct vl_device *vli_dev_get(struct vl_ledger *L, uint32_t id);
uint32_t vli_dev_index(struct vl_ledger *L, const struct vl_device *d);
struct vl_chunk *vli_chunk_get(struct vl_ledger *L, uint64_t id,
                               struct vl_device **d_out, uint32_t *idx_out);
void vli_set_state(struct vl_device *d, struct vl_chunk *c, int st);
void vli_set_cat(struct vl_device *d, struct vl_chunk *c, int cat);
int vli_cat_of_kind(const struct vl_region *r);
void vli_place(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
               struct vl_region *r, uint32_t slot, int state);
void vli_unplace(struct vl_ledger *L, struct vl_chunk *c);
/* The chunk in slot of expert region r is no longer loaned (recalled). */
void vli_expert_unloaned(struct vl_region *r, uint32_t slot);
/* Lane 0's loaned prefix of expert region r, recounted (vl_check). */
uint32_t vli_loaned_prefix_count(struct vl_ledger *L, const struct vl_region *r);
uint32_t vli_dev_free(const struct vl_device *d);
uint32_t vli_take_free(struct vl_device *d);
void vli_to_free(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
                 struct vl_fxlist *fx);

/* fxlist.c: effect lists */
int vli_fx_push(struct vl_fxlist *fx, struct vl_fx e);
int vli_fx_reserve(struct vl_fxlist *fx, size_t more);

/* observer.c: what a restarted vramd needs to know (R13) */
void vli_note_chunk(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
                    const struct vl_region *r);
uint32_t vli_note_va_take(struct vl_ledger *L, uint32_t region,
                          uint32_t client, uint64_t base, uint64_t size);
void vli_note_va_give(struct vl_ledger *L, uint32_t tag);
void vli_note_stage(struct vl_ledger *L, uint32_t stage, uint32_t client);

/* va.c: the address window and held ranges */
int vli_va_alloc(struct vl_ledger *L, uint64_t size, uint64_t align,
                 uint64_t *out);
ptrdiff_t vli_va_find(const struct vl_ledger *L, uint64_t base, uint64_t size);
void vli_va_release(struct vl_ledger *L, uint64_t base, uint64_t size);
int vli_va_take_exact(struct vl_ledger *L, uint64_t base, uint64_t size);
int vli_hold_add(struct vl_ledger *L, const struct vl_va_hold *h);

/* promise.c: promises per stage and device (R2, R4, R7) */
struct vli_promises {
    uint32_t hard, need, claim;
};
uint32_t vli_window_free(const struct vl_stage *s);
uint32_t vli_fixed_free(const struct vl_stage *s);
uint32_t vli_fixed_entry_chunks(const struct vl_stage_cfg *c, uint32_t f,
                                uint64_t cb);
uint32_t vli_pool_loans(const struct vl_stage *s);
/* The chunk's holder becomes holder (0: none), its list entry following. */
void vli_holder_set(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
                    uint32_t holder);
/* The stage table covers ids below n (new entries unused): 0, or -ENOMEM.
 * Stage pointers taken before it may move. */
int vli_stages_cover(struct vl_ledger *L, uint32_t n);
uint32_t vli_dev_pool_loans(struct vl_ledger *L, const struct vl_device *d);
uint32_t vli_stage_full(const struct vl_stage *s);
struct vli_promises vli_dev_promises(struct vl_ledger *L,
                                     const struct vl_device *d);
uint32_t vli_dev_unpromised(struct vl_ledger *L, struct vl_device *d);
uint32_t vli_dev_unclaimed(struct vl_ledger *L, struct vl_device *d);
uint32_t vli_free_for_window(struct vl_ledger *L, struct vl_device *d,
                             const struct vl_stage *s);
uint32_t vli_free_for_fixed(struct vl_ledger *L, struct vl_device *d,
                            const struct vl_stage *s);

/* region.c: regions and their lanes */
struct vli_geometry {
    uint64_t lane_stride, total, va_bytes, unit;
};
int vli_region_geometry(struct vl_ledger *L, const struct vl_device *d,
                        uint32_t lanes, const uint32_t *lane_slots,
                        struct vli_geometry *g);
struct vl_region *vli_region_find(const struct vl_ledger *L, uint32_t id);
/* Every region joins and leaves region[] through these two. */
int vli_region_add(struct vl_ledger *L, struct vl_region *r);
/* Room for n more regions: the next n adds cannot fail. */
int vli_region_reserve(struct vl_ledger *L, size_t n);
void vli_region_remove(struct vl_ledger *L, struct vl_region *r);
int vli_region_new(struct vl_ledger *L, uint32_t client, struct vl_stage *s,
                   int kind, uint32_t lanes, const uint32_t *lane_slots,
                   struct vl_region **out);
void vli_region_free(struct vl_region *r);
void vli_region_count(struct vl_ledger *L, const struct vl_region *r, bool in);
struct vl_region *vli_own_region(struct vl_ledger *L, uint32_t client,
                                 uint32_t region);
uint32_t vli_lane_used(const struct vl_region *r, uint32_t lane);
uint32_t vli_lane_first_empty(const struct vl_region *r, uint32_t lane);
uint32_t vli_lane_last_below(struct vl_ledger *L, const struct vl_region *r,
                             uint32_t lane, int st, uint32_t below);
uint32_t vli_lane_last_in(struct vl_ledger *L, const struct vl_region *r,
                          uint32_t lane, int st);
void vli_grant_lanes(struct vl_ledger *L, struct vl_region *r,
                     const uint32_t *per_lane, int state,
                     struct vl_fxlist *fx);
void vli_drop_regions(struct vl_ledger *L, uint32_t client, uint32_t stage,
                      bool quarantine, struct vl_fxlist *fx);

/* stage.c: stages and their owners */
const struct vl_stage *vli_stage_peek(const struct vl_ledger *L, uint32_t id);
struct vl_stage *vli_stage_get(struct vl_ledger *L, uint32_t id);
void vli_stage_set_owner(struct vl_ledger *L, struct vl_stage *s,
                         uint32_t client);
int vli_own_stage(struct vl_ledger *L, uint32_t client, uint32_t stage,
                  struct vl_stage **out);
void vli_stage_reset(struct vl_ledger *L, struct vl_stage *s);
/* sleep_wake.c: 0, or -EBUSY when the stage sleeps (R18). */
int vli_stage_awake(struct vl_ledger *L, const struct vl_stage *s);

/* client.c: clients, what they hold (R14), and quarantine that stands for
 * a stage's promise (R11) */
struct vl_client *vli_client_find(const struct vl_ledger *L, uint32_t id);
/* R16: address space and ad-hoc stages against the client's and its
 * tenant's quotas (-EDQUOT with why); the client's address space kept. */
int vli_quota_va(struct vl_ledger *L, uint32_t client, uint64_t more);
int vli_quota_stage(struct vl_ledger *L, uint32_t client);
void vli_client_va(struct vl_ledger *L, uint32_t client, int64_t delta);
void vli_client_gain(struct vl_client *cl, const struct vl_device *d,
                     int state);
void vli_client_lose(struct vl_client *cl, const struct vl_device *d,
                     int state);
void vli_qstage_set(struct vl_ledger *L, struct vl_chunk *c, uint32_t stage,
                    int cat);
void vli_qstage_clear(struct vl_ledger *L, struct vl_chunk *c);

/* loans.c: expert loans and recalls (R5, R6) */
uint32_t vli_expert_room(struct vl_ledger *L, struct vl_stage *s);
int vli_recall_pool_loans(struct vl_ledger *L, struct vl_stage *s,
                          struct vl_device *d, uint32_t short_by,
                          struct vl_fxlist *fx);

/* weight_cache.c: weight sets (R17) */
/* Client's uses of sets end (its process is gone): it maps none, and its
 * unsealed sets are dropped. */
void vli_weights_client_gone(struct vl_ledger *L, uint32_t client,
                             struct vl_fxlist *fx);
/* Client's uses move to client to (a resume). */
void vli_weights_client_move(struct vl_ledger *L, uint32_t from, uint32_t to);
void vli_weights_free_all(struct vl_ledger *L);
/* Sets a tenant's clients made, and whether cl maps or writes any. */
uint32_t vli_weights_of_tenant(const struct vl_ledger *L, uint32_t tenant);
/* Chunks of capacity that cached sets of device (an index) hold. */
uint32_t vli_weights_cached(const struct vl_ledger *L, uint32_t device);

/* slots.c: expert slots (R9) */
void vli_budget_changed(struct vl_ledger *L, struct vl_stage *s,
                        struct vl_fxlist *fx);

#endif
