/* SPDX-License-Identifier: Apache-2.0 */
/* The ledger: every memory decision vramd makes, and nothing else.
 *
 * Pure C: no I/O, no clocks, no backend calls. Operations validate first and
 * change state only when they succeed; what the rest of the daemon must do as
 * a consequence (send a chunk's fd, tell a client to move or unmap a chunk,
 * free physical memory, announce a residency change) comes back as a list of
 * effects. Every rule of the broker lives in this folder: README.md lists
 * them, R1..R18, and names the file that enforces each; the code and the
 * tests (test_rNN_*) carry the same numbers.
 *
 * Accounting, per device, in chunks:
 *   fixed + kv + loaned + free + quarantined + weights == capacity
 * where "fixed" counts chunks granted to fixed and draft_kv regions, "kv"
 * chunks in kv regions, "loaned" chunks in expert regions (of a configured
 * stage: lent, state loaned or recalling; of an ad-hoc stage: granted). Every
 * chunk is in one state with at most one holder.
 *
 * Promises, per configured stage (R2 and R4 in README.md): the part
 * of its reservation not granted yet. "Hard" promises (fixed reservations,
 * the window of a no-loan stage) are always backed by free chunks; the rest
 * is backed by free chunks or by recallable pool loans.
 */
#ifndef VRAMD_LEDGER_H
#define VRAMD_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VL_MAX_DEVICES 64
/* Stage ids: configured stages use 0..VL_CONFIG_STAGES-1 (the
 * configuration's own ids); ad-hoc stages have a pool of their own above,
 * up to VL_MAX_STAGES-1 (32,512 ids, the lowest free first). How many one
 * user holds is bounded by its limits (R14, R16), and the ledger's table
 * grows with the ids in use. */
#define VL_CONFIG_STAGES 256
#define VL_MAX_STAGES 32768
#define VL_MAX_LANES 256
#define VL_MAX_FIXED 8
/* Fixed reservations of one stage that weight sets back (R17). */
#define VL_MAX_STAGE_SETS 2
/* A weight set's name (bytes, at most) and key (bytes) (R17). */
#define VL_WSET_NAME_MAX 64
#define VL_WSET_KEY 32
#define VL_NONE 0xffffffffu

enum vl_chunk_state {
    VL_FREE,
    VL_GRANTED,     /* to a kv, fixed, draft_kv or ad-hoc region slot */
    VL_LOANED,      /* to an expert region, out of KV headroom or the pool */
    VL_RECALLING,   /* its holder has been asked to give it back */
    VL_QUARANTINED, /* holder gone; waiting until its process can't touch it */
    VL_NSTATES
};

enum vl_region_kind { VL_KV, VL_EXPERT, VL_FIXED, VL_DRAFT_KV, VL_NKINDS };

enum vl_category { VL_CAT_NONE, VL_CAT_FIXED, VL_CAT_KV, VL_CAT_LOAN };

#define VL_QSTAGE_NONE 0xffffu
#define VL_CHUNK_NONE UINT64_MAX /* an empty slot */

struct vl_device_cfg {
    uint32_t id;
    uint64_t chunk_bytes;
    uint64_t capacity_bytes; /* already net of the reserve */
    bool lend_unreserved;    /* pool loans: lend memory no stage reserved, and
                                the KV windows of lending stages no client
                                has registered (explicit policy) */
};

struct vl_fixed_cfg {
    char name[32];
    uint8_t kind; /* VL_FIXED or VL_DRAFT_KV */
    uint8_t set;  /* R17: 1 + the index in the stage's sets[] of the weight
                     set that backs it instead of chunks; 0 for none */
    uint64_t bytes;
};

/* R17: a weight set that backs a fixed reservation. The stage reserves the
 * set's allocations, rounded up to whole chunks; registration makes no
 * region for it. Kept apart from vl_fixed_cfg, and few, because every
 * stage (ad-hoc ones too) carries its configuration: the names would
 * otherwise cost a kilobyte per stage id. */
struct vl_set_cfg {
    char name[65];
    uint8_t key[VL_WSET_KEY]; /* with has_key: an open of the set with */
    bool has_key;             /* another key is refused (-ESTALE) */
    uint64_t alloc;           /* its allocations' size */
};

struct vl_stage_cfg {
    uint32_t id;
    uint32_t device;
    uint32_t first_layer, last_layer;
    uint32_t lanes;
    uint64_t lane_bytes_per_token[VL_MAX_LANES];
    uint64_t native_context;  /* tokens */
    uint64_t initial_tokens;  /* initial KV window */
    uint64_t step_tokens;     /* growth step */
    struct vl_fixed_cfg fixed[VL_MAX_FIXED];
    uint32_t nfixed;
    struct vl_set_cfg sets[VL_MAX_STAGE_SETS];
    uint32_t nsets;
    uint64_t expert_slot_bytes;
    uint64_t expert_region_bytes; /* VA of the expert region; 0: derived */
    bool lend;                    /* loan policy */
    uint64_t headroom_bytes;      /* KV window kept unlent */
    uint32_t recall_deadline_ms;
    uint32_t hold_ms;
    bool kill_on_missed_recall; /* else: the client only gets no new loans */
};

/* The weight set that backs fixed reservation f of c, or NULL. */
static inline const struct vl_set_cfg *vl_fixed_set(const struct vl_stage_cfg *c,
                                                    uint32_t f)
{
    uint8_t i = c->fixed[f].set;
    return i && i <= c->nsets ? &c->sets[i - 1] : NULL;
}

enum vl_fx_kind {
    VL_FX_MAP,    /* send chunk's handle to client, map at (region, slot) */
    VL_FX_MOVE,   /* client already holds chunk: remap at (region, slot) */
    VL_FX_UNMAP,  /* ask client to unmap chunk and release it */
    VL_FX_DROP,   /* chunk left its holder for good: scrub or free physical */
    VL_FX_BUDGET, /* stage's expert residency changed */
    VL_FX_WSET_DROP, /* weight set `set` is gone: free its allocations (R17) */
};

struct vl_fx {
    uint8_t kind;
    uint32_t client;
    uint64_t chunk;
    uint32_t region;
    uint32_t slot;
    uint32_t stage;
    uint32_t set;  /* VL_FX_WSET_DROP */
    bool evicted;  /* ... to make room (not dropped by its users) */
};

struct vl_fxlist {
    struct vl_fx *v;
    size_t n, cap;
};

/* Address space a gone client's process still has reserved for a region:
 * nobody else gets it until that process is reaped or resumes (R13). */
struct vl_va_hold {
    uint32_t client;
    uint32_t region; /* the region's id, kept for a resume */
    uint64_t base, size;
    uint32_t tag;
};

struct vl_wset_view;

/* Sees every change a restarted daemon would need to know (R13): who
 * holds each chunk, which address ranges are reserved by whom, which ad-hoc
 * stage ids are taken. The daemon mirrors them into its state file. */
struct vl_observer {
    void *ctx;
    /* Chunk idx of device index dev is held by holder (0: free), counted for
     * configured stage stage (VL_QSTAGE_NONE: none). */
    void (*chunk)(void *ctx, uint32_t dev, uint32_t idx, uint32_t holder,
                  uint16_t stage, uint8_t cat);
    /* A range is reserved by client for region id; returns a tag that
     * comes back when the range is given up. */
    uint32_t (*va_take)(void *ctx, uint32_t region, uint32_t client,
                        uint64_t base, uint64_t size);
    void (*va_give)(void *ctx, uint32_t tag);
    /* The range of tag now belongs to client's region (a resume). */
    void (*va_move)(void *ctx, uint32_t tag, uint32_t region, uint32_t client);
    /* An ad-hoc stage id is taken (owner or holder) or free (0). */
    void (*stage)(void *ctx, uint32_t stage, uint32_t client);
    /* Weight set set is made or changed (v), or gone (v NULL) (R17). */
    void (*wset)(void *ctx, uint32_t set, const struct vl_wset_view *v);
};

/* The ledger itself is opaque: the rest of the daemon reads it through the
 * views below and changes it only through the operations. */
struct vl_ledger;

/* Per-client limits (R14). */
struct vl_limits {
    uint32_t chunks_per_client; /* a quota: grows and loans */
    uint32_t regions_per_client; /* ad-hoc regions */
    uint32_t stages_per_client;
    /* R16, 0 meaning none: address space a client's regions (and a gone
     * client's held ranges) take; and for all clients of one tenant (the
     * daemon's peer uid) together, bar exempt tenants: address space,
     * ad-hoc stage ids (owned or held for a gone client), gone clients. */
    uint64_t va_bytes_per_client;
    uint64_t va_bytes_per_tenant;
    uint32_t stages_per_tenant;
    uint32_t gone_per_tenant;
    uint32_t wsets_per_tenant; /* R17: weight sets a tenant's clients made */
};

/* Chunk ids are stable for the daemon's life: device index << 32 | index. */
static inline uint64_t vl_chunk_id(uint32_t dev, uint32_t idx)
{
    return ((uint64_t)dev << 32) | idx;
}

/* A ledger of ndev devices whose regions are carved from [va_base,
 * va_base + va_size) at region_align (0: the chunk size). -EINVAL,
 * -EEXIST, -ENOMEM with why. Limits start unbounded. */
int vl_new(const struct vl_device_cfg *devs, uint32_t ndev, uint64_t va_base,
           uint64_t va_size, uint64_t region_align, struct vl_ledger **out,
           char *why, size_t whylen);
void vl_free(struct vl_ledger *L); /* NULL-tolerant */
/* Installs (or, with NULL, removes) the observer (R13). */
void vl_set_observer(struct vl_ledger *L, const struct vl_observer *obs);
void vl_set_limits(struct vl_ledger *L, const struct vl_limits *lim);
const char *vl_why(const struct vl_ledger *L);
const char *vl_state_name(int state);
const char *vl_kind_name(int kind);
int vl_kind_parse(const char *s);

/* Stages of the configuration are added once, before clients connect. */
int vl_stage_configure(struct vl_ledger *L, const struct vl_stage_cfg *cfg);

int vl_client_add(struct vl_ledger *L, uint32_t client);
/* A client of tenant (R16; exempt: no tenant quota applies). vl_client_add
 * is tenant 0, exempt. */
int vl_client_add_tenant(struct vl_ledger *L, uint32_t client, uint32_t tenant,
                         bool exempt);
/* R16: before a client's first request that may give it memory, a resume
 * excepted: -EDQUOT when its tenant has its limit of gone clients (resumed
 * ones not counted); 0 once it passed, or resumed a gone client. */
int vl_client_admit(struct vl_ledger *L, uint32_t client);
/* A restored (gone) client's tenant, known once the state file is read. */
void vl_client_set_tenant(struct vl_ledger *L, uint32_t client, uint32_t tenant,
                          bool exempt);
/* The connection closed: chunks are quarantined, stages and regions dropped. */
int vl_client_disconnect(struct vl_ledger *L, uint32_t client,
                         struct vl_fxlist *fx);
/* The client's process can no longer touch memory: quarantine ends. */
int vl_client_reap(struct vl_ledger *L, uint32_t client, struct vl_fxlist *fx);

int vl_stage_register(struct vl_ledger *L, uint32_t client, uint32_t stage,
                      bool keep_window, struct vl_fxlist *fx);
int vl_stage_register_adhoc(struct vl_ledger *L, uint32_t client,
                            uint32_t device, uint32_t first_layer,
                            uint32_t last_layer, uint32_t *stage_out);
int vl_stage_release(struct vl_ledger *L, uint32_t client, uint32_t stage,
                     struct vl_fxlist *fx);

/* R18: the stage's owner copied what it keeps and unmapped every chunk of
 * the stage's regions: they all go free (DROP effects), whatever their
 * state; the regions stay. wake_tokens (may be NULL): the KV target a wake
 * maps again (configured stages; 0 for ad-hoc ones); freed_out the chunks
 * freed. -ENOENT not the client's stage, -EALREADY asleep already. */
int vl_stage_sleep(struct vl_ledger *L, uint32_t client, uint32_t stage,
                   uint64_t host_bytes, uint64_t took_us, uint64_t *wake_tokens,
                   uint32_t *freed_out, struct vl_fxlist *fx);
/* R18: the stage is awake again, holding nothing: its owner grants itself
 * its memory back (vl_kv_reserve of wake_tokens, vl_region_grow).
 * -ENOENT, -EALREADY awake. */
int vl_stage_wake(struct vl_ledger *L, uint32_t client, uint32_t stage,
                  uint64_t *wake_tokens);
/* R18: its owner reports a finished wake (for status). */
int vl_stage_woke(struct vl_ledger *L, uint32_t client, uint32_t stage,
                  uint64_t took_us);

int vl_region_create(struct vl_ledger *L, uint32_t client, uint32_t stage,
                     int kind, uint64_t lane_bytes, uint32_t lanes,
                     uint32_t *region_out);
int vl_region_grow(struct vl_ledger *L, uint32_t client, uint32_t region,
                   uint32_t chunks_per_lane, struct vl_fxlist *fx);
int vl_region_release(struct vl_ledger *L, uint32_t client, uint32_t region,
                      struct vl_fxlist *fx);

/* Chunks given back by their holder after unmapping. All or nothing. */
int vl_chunks_release(struct vl_ledger *L, uint32_t client,
                      const uint64_t *chunks, size_t n, struct vl_fxlist *fx);
/* A client moves a chunk it holds to an empty slot of another of its
 * (ad-hoc) regions: the handle stays, only the mapping moves. Foreign chunks
 * (another device's) are refused with -EXDEV. */
int vl_chunk_move(struct vl_ledger *L, uint32_t client, uint64_t chunk,
                  uint32_t region, uint32_t slot, struct vl_fxlist *fx);
/* Offer one chunk to a region slot; refuses foreign chunks. */
int vl_chunk_check_region(struct vl_ledger *L, uint64_t chunk,
                          uint32_t region);

/* Changes a device's capacity at run time, between what is in use (and
 * reserved by stages) and the device's size at start. -EBUSY with the reason
 * when the memory is in use or promised. With dry_run, only checks. */
int vl_device_set_capacity(struct vl_ledger *L, uint32_t device, uint64_t bytes,
                           bool dry_run);
/* A KV grow that must wait for chunks on their way back (R6). */
#define VL_PENDING 1

/* KV budget of a request. Returns 0 when the whole budget is mapped (map and
 * move effects for client), or VL_PENDING when it needs chunks that are on
 * their way back: recalls issued now to other clients (unmap effects for
 * them: those chunks are recalling from now on) or earlier, or the stage's
 * own trimmed chunks still being unmapped. Nothing is granted then; call
 * again after releases, up to the stage's hold bound (vl_hold_ms). Refusals
 * are negative errnos: -E2BIG over the native context, -ENOENT not the
 * client's stage, -EPERM an ad-hoc stage. */
int vl_kv_reserve(struct vl_ledger *L, uint32_t client, uint32_t stage,
                  uint64_t prompt_tokens, uint64_t output_tokens,
                  uint32_t *recalled_out, struct vl_fxlist *fx);
int vl_kv_trim(struct vl_ledger *L, uint32_t client, uint32_t stage,
               uint64_t tokens, struct vl_fxlist *fx);
int vl_expert_request(struct vl_ledger *L, uint32_t client, uint32_t stage,
                      uint64_t max_bytes, struct vl_fxlist *fx);
int vl_expert_claim(struct vl_ledger *L, uint32_t client, uint32_t stage,
                    uint32_t layer, const uint32_t *slots, size_t n);

/* KV tokens a request needs: prompt + output rounded up to the growth step
 * from the initial window, clamped to the native context. */
uint64_t vl_kv_target_tokens(const struct vl_stage_cfg *cfg, uint64_t tokens);
uint32_t vl_lane_chunks(const struct vl_stage_cfg *cfg, uint32_t lane,
                        uint64_t tokens, uint64_t chunk_bytes);
uint32_t vl_expert_slots_backed(const struct vl_ledger *L, uint32_t stage);

/* R6: how long a KV grow of stage may wait for recalls (its hold_ms; at
 * least 1 ms, a last try). */
uint32_t vl_hold_ms(const struct vl_ledger *L, uint32_t stage);

/* R15: missed recalls. A recall of stage's loans is due within this (its
 * recall_deadline_ms, or VL_RECALL_DEADLINE_MS). */
#define VL_RECALL_DEADLINE_MS 2000
uint32_t vl_recall_deadline_ms(const struct vl_ledger *L, uint32_t stage);
enum vl_missed {
    VL_MISSED_DENY_LOANS, /* the client gets no new loans */
    VL_MISSED_KILL,       /* and its process is killed */
};
/* A recall deadline of stage passed with chunks still held by client: it is
 * delinquent from now on (no new loans); what else happens is the stage's
 * policy. */
enum vl_missed vl_recall_missed(struct vl_ledger *L, uint32_t client,
                                uint32_t stage);

/* ---- views: read-only, current until the next operation ---- */

struct vl_device_view {
    uint32_t id;
    uint64_t chunk_bytes;
    uint32_t chunks;      /* its size when vramd started */
    uint32_t capacity;    /* now */
    uint32_t free;        /* free and not withheld */
    uint32_t fixed, kv, loaned; /* granted, by category */
    uint32_t recalling, quarantined;
    uint32_t reserved;    /* by configured stages: windows and fixed */
    uint32_t weights;     /* charged to weight sets (R17) */
    uint32_t weights_cached; /* of those, sealed sets nobody maps */
    bool lend_unreserved;
};
uint32_t vl_device_count(const struct vl_ledger *L);
/* The device at index (0 .. vl_device_count - 1); out is left alone for
 * any other index. */
void vl_device_view(const struct vl_ledger *L, uint32_t index,
                    struct vl_device_view *out);
/* The index of device id, or -ENODEV. */
int vl_device_index(const struct vl_ledger *L, uint32_t id);

struct vl_stage_view {
    uint32_t id;
    bool configured;
    const struct vl_stage_cfg *cfg; /* layers and device for ad-hoc ones too */
    uint32_t owner;                 /* 0: none */
    bool keep_window;
    uint64_t chunk_bytes;           /* of its device */
    uint32_t kv_chunks, window_chunks;
    uint32_t loan_chunks, recalling; /* loaned or recalling, and of those
                                        being recalled */
    uint32_t fixed_chunks, fixed_reserved, headroom_chunks;
    uint64_t kv_needed_bytes, residency_version;
    uint32_t expert_slots_backed;
    uint32_t expert_slots;             /* slots of its expert region */
    uint32_t kv_region, expert_region; /* 0 for ad-hoc stages */
    uint32_t fixed_region[VL_MAX_FIXED];
    uint32_t fixed_set[VL_MAX_FIXED];  /* R17: the set each backs, or 0 */
    bool asleep;                       /* R18, and what sleeps told */
    uint64_t wake_tokens, host_bytes, sleeps, wakes, sleep_us, wake_us;
};
/* false when no stage has that id. */
bool vl_stage_view(const struct vl_ledger *L, uint32_t id,
                   struct vl_stage_view *out);
/* The first stage id in use at or after from, or VL_NONE. */
uint32_t vl_stage_next(const struct vl_ledger *L, uint32_t from);

/* R6: whom a stage's held grow (or registration) waits for. */
struct vl_blocker {
    uint32_t client;            /* the lender, or a gone client */
    uint32_t stage;             /* the lender's stage; VL_NONE for a gone one */
    uint32_t chunks;            /* recalled and not given back, or quarantined */
    bool quarantined;           /* a gone client, until its process exits */
    bool kill_on_missed_recall; /* the lender's stage's policy */
};
/* false when nothing on the stage's device is on its way back. */
bool vl_stage_blocker(const struct vl_ledger *L, uint32_t stage,
                      struct vl_blocker *out);

struct vl_region_view {
    uint32_t id, client, stage, device;
    int kind;
    uint64_t base, lane_stride, va_bytes, chunk_bytes;
    uint32_t lanes, stride_slots, used;
    const uint32_t *lane_slots; /* per lane; valid until the ledger changes */
    const uint64_t *slot_chunk; /* lanes * stride_slots: the chunk in each
                                   slot, VL_CHUNK_NONE; valid as lane_slots */
};
bool vl_region_view(const struct vl_ledger *L, uint32_t id,
                    struct vl_region_view *out);
/* fn for each region of stage (VL_NONE: of every stage). */
void vl_each_region(const struct vl_ledger *L, uint32_t stage,
                    void (*fn)(void *ud, const struct vl_region_view *r),
                    void *ud);

struct vl_client_view {
    uint32_t id;
    bool gone, resumed, delinquent;
    uint32_t chunks;            /* held, in any state */
    uint64_t held_bytes;        /* granted, loaned or recalling */
    uint64_t quarantined_bytes;
    uint32_t regions;           /* ad-hoc regions (R14) */
    uint32_t stages;            /* stages it owns */
    uint64_t missed_recalls;
    uint32_t tenant;
    uint64_t va_bytes;          /* address space of its regions and ranges */
    uint32_t wsets;             /* weight sets it maps or writes (R17) */
};
bool vl_client_view(const struct vl_ledger *L, uint32_t client,
                    struct vl_client_view *out);
void vl_each_client(const struct vl_ledger *L,
                    void (*fn)(void *ud, const struct vl_client_view *c),
                    void *ud);
/* The stages client owns, ascending, at most max of them; their count (of
 * those written: vl_client_view's stages is the whole count). */
uint32_t vl_client_stages(const struct vl_ledger *L, uint32_t client,
                          uint32_t *ids, uint32_t max);

/* The chunks client holds (any state), at most max; their count. */
size_t vl_client_chunk_ids(const struct vl_ledger *L, uint32_t client,
                           uint64_t *ids, size_t max);

struct vl_chunk_view {
    int state; /* enum vl_chunk_state */
    uint32_t holder, region, slot;
};
bool vl_chunk_view(const struct vl_ledger *L, uint64_t chunk,
                   struct vl_chunk_view *out);

/* ---- restart (R13) ---- */

/* What a restarted daemon finds in its state file: processes that were
 * clients and still run, and what they hold. */
struct vl_restore_chunk {
    uint64_t chunk;
    uint32_t client;
    uint16_t stage; /* configured stage it counted for, or VL_QSTAGE_NONE */
    uint8_t cat;    /* what it counted as there (enum vl_category) */
};

/* Adds each client as gone, its chunks quarantined, its address ranges and
 * ad-hoc stage ids held, as if every client had just disconnected. Only
 * into a ledger no client has used yet. -EINVAL, with why, on anything
 * inconsistent (a chunk twice, overlapping ranges). */
int vl_restore(struct vl_ledger *L, const uint32_t *clients, size_t nclients,
               const struct vl_restore_chunk *chunks, size_t nchunks,
               const struct vl_va_hold *va, size_t nva,
               const uint32_t *adhoc_stage_holder /* [VL_MAX_STAGES] or NULL */);

/* What a process declares when it comes back as a new client. Entries that
 * cannot be taken back get lost set to a negative errno (and why). */
struct vl_resume_stage {
    uint32_t id;
    bool configured, keep_window;
    uint32_t device, first_layer, last_layer; /* ad-hoc */
    bool asleep;                /* R18 */
    uint64_t wake_tokens, host_bytes;
    int lost;
};

struct vl_resume_region {
    uint32_t id, stage;
    int kind;
    uint64_t base, lane_stride, va_bytes;
    uint32_t lanes;
    uint32_t lane_slots[VL_MAX_LANES];
    int lost;
};

struct vl_resume_chunk {
    uint64_t chunk;
    uint32_t region, slot;
    int lost;
};

struct vl_resume_claim {
    uint32_t stage, slot, layer;
};

struct vl_resume {
    uint32_t from; /* the gone client the process was */
    const uint32_t *also; /* other gone clients of the same process, whose */
    size_t nalso;         /* declared chunks it may take back too */
    struct vl_resume_stage *stages;
    size_t nstages;
    struct vl_resume_region *regions;
    size_t nregions;
    struct vl_resume_chunk *chunks;
    size_t nchunks;
    const struct vl_resume_claim *claims;
    size_t nclaims;
    size_t lost_chunks; /* out */
};

/* The process of gone client rs->from, connected again as client, takes
 * back what it declares: its stages (same ids), regions (same ids and
 * addresses) and chunks (same ids, slots and roles), from from or the
 * process's other gone clients rs->also. Chunks of from it does not
 * declare are freed; declared ones that cannot be placed stay quarantined
 * (its process unmaps them). Validates everything and allocates what it
 * needs before changing anything; fails as a whole only on a bad request
 * (-ENOENT, -EBUSY, -EINVAL, -ENOMEM with why). */
int vl_client_resume(struct vl_ledger *L, uint32_t client, struct vl_resume *rs,
                     struct vl_fxlist *fx);

/* ---- R17: weight sets ----
 * Named sets of large allocations that outlive the engine that wrote them.
 * A set is charged to its device's capacity in whole chunks (its bytes
 * rounded up), taken from memory no promise needs, as ad-hoc regions are;
 * its address range is carved from the window once and is the same in
 * every process that maps it. Its memory is the backend's, not chunks'. */
#define VL_WSET_ALLOCS_MAX 65536
#define VL_MAX_WSETS 4096

struct vl_wset_req {
    const char *name;         /* 1..64 printable bytes, no space */
    const uint8_t *key;       /* VL_WSET_KEY bytes: the set's layout */
    uint32_t device;
    uint64_t bytes;
    uint64_t alloc_bytes;     /* each allocation's size */
    bool keep;                /* never evicted (an admin's choice) */
};

/* Opens set req->name for client (R17). An existing sealed set of the same
 * key, device and size is mapped by client (it becomes a user; writer_out
 * false). Without one, client becomes the writer of a new set (writer_out
 * true), charged to the device after cached sets were evicted, least
 * recently used first (VL_FX_WSET_DROP each), if memory no promise needs
 * is short. -EAGAIN while another client writes it; -ESTALE for another
 * key, device or size (why names the set's); -ENOSPC no room; -EDQUOT the
 * tenant's limit; -EINVAL a bad request. Opening a set one already has
 * open gives it again. */
int vl_weights_open(struct vl_ledger *L, uint32_t client,
                    const struct vl_wset_req *req, uint32_t *set_out,
                    bool *writer_out, struct vl_fxlist *fx);
/* The writer is done: every mapping is read-only from now on. sealed_at is
 * the caller's clock, kept for messages. -EPERM not the writer, -EALREADY
 * sealed. */
int vl_weights_seal(struct vl_ledger *L, uint32_t client, uint32_t set,
                    uint64_t sealed_at);
/* Client no longer maps set. A sealed set nobody maps stays, cached; an
 * unsealed one its writer closes is dropped (VL_FX_WSET_DROP). */
int vl_weights_close(struct vl_ledger *L, uint32_t client, uint32_t set,
                     struct vl_fxlist *fx);
/* An admin drops set: -EBUSY while a client (gone ones included) maps it. */
int vl_weights_drop(struct vl_ledger *L, uint32_t set, struct vl_fxlist *fx);
/* Evicts cached sets of device (an index), least recently used first,
 * until memory no promise needs reaches need chunks; returns how many
 * went (VL_FX_WSET_DROP each). */
uint32_t vl_weights_make_room(struct vl_ledger *L, uint32_t device,
                              uint32_t need, struct vl_fxlist *fx);

struct vl_wset_view {
    uint32_t id;
    uint32_t device;          /* the device's id */
    const char *name;
    const uint8_t *key;
    uint64_t bytes, alloc_bytes;
    uint32_t nalloc, units;   /* allocations; chunks of capacity charged */
    uint64_t base, va_bytes;
    uint32_t writer;          /* its writer while unsealed, else 0 */
    bool sealed, keep;
    uint32_t tenant;          /* the writer's */
    uint32_t users;           /* clients mapping it, gone ones included */
    const uint32_t *user;     /* their ids; valid until the ledger changes */
    uint64_t sealed_at, last_use; /* the caller's clock; the ledger's tick */
    uint32_t stage, fixed;    /* the configured stage's fixed reservation it
                                 backs, or VL_NONE */
};
bool vl_wset_view(const struct vl_ledger *L, uint32_t set,
                  struct vl_wset_view *out);
/* The set named name, or 0. */
uint32_t vl_wset_find(const struct vl_ledger *L, const char *name);
void vl_each_wset(const struct vl_ledger *L,
                  void (*fn)(void *ud, const struct vl_wset_view *v), void *ud);

/* A sealed set a restarted daemon found again (its handles came back), as
 * it was, with its users (gone clients already restored). Before any client
 * connects. -EINVAL, with why, on anything inconsistent. */
int vl_weights_restore(struct vl_ledger *L, const struct vl_wset_view *v);

/* Checks every invariant; 0 or -EFAULT with the broken rule in why. */
int vl_check(struct vl_ledger *L);

void vl_fx_clear(struct vl_fxlist *fx);
void vl_fx_free(struct vl_fxlist *fx);

#endif
