/* SPDX-License-Identifier: Apache-2.0 */
/* libvram's private state. */
#ifndef VRAM_CLIENT_INTERNAL_H
#define VRAM_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "handle.h"
#include "thread.h"
#include "vram.h"
#include "vram_msg.h"
#include "wire.h"

#define VC_NO_SLOT UINT32_MAX

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

int vc_table_put(struct vc_chunk_table *t, const struct vc_chunk *c);
struct vc_chunk *vc_table_get(struct vc_chunk_table *t, uint64_t id);
void vc_table_del(struct vc_chunk_table *t, uint64_t id);
void vc_table_free(struct vc_chunk_table *t);

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
};

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

/* A weight set this client has open (weights.c): its allocations are
 * imported and mapped at info.base + i x alloc_bytes, outside the chunk
 * table. */
struct vc_wset {
    struct vram_weights_info info;
    uint64_t va_bytes;
    char name[VRAM_WEIGHTS_NAME_MAX + 1];
    struct vc_chunk *alloc;  /* info.allocs of them */
    uint32_t nmapped;        /* mapped, from the first */
};

/* How chunks become memory in this process: mmap for host chunks, CUDA VMM
 * for cuda chunks. */
struct vc_mapper {
    const char *name;
    int (*reserve)(vram_client *c, uint64_t base, uint64_t size);
    void (*unreserve)(vram_client *c, uint64_t base, uint64_t size);
    /* Takes the handle (stored in ch, closed at release). */
    int (*import)(vram_client *c, struct vc_chunk *ch, vp_handle h,
                  uint64_t bytes);
    int (*map)(vram_client *c, struct vc_chunk *ch, uint64_t addr, uint64_t bytes);
    /* The same, readable only (a sealed weight set). */
    int (*map_ro)(vram_client *c, struct vc_chunk *ch, uint64_t addr,
                  uint64_t bytes);
    int (*unmap)(vram_client *c, struct vc_chunk *ch, uint64_t addr, uint64_t bytes);
    void (*release)(vram_client *c, struct vc_chunk *ch);
    void (*destroy)(vram_client *c);
    /* Sleep and wake (sleep.c): bytes between mapped chunks at addr and
     * host memory; NULL host_alloc: malloc. */
    int (*copy_out)(vram_client *c, void *dst, uint64_t addr, uint64_t bytes);
    int (*copy_in)(vram_client *c, uint64_t addr, const void *src,
                   uint64_t bytes);
    void *(*host_alloc)(vram_client *c, uint64_t bytes);
    void (*host_free)(vram_client *c, void *p);
    /* For mapping on the library's background thread: what the calling
     * thread's driver state is (cuda: its current context), and making it
     * the background thread's. NULL when a mapper needs none. */
    void *(*thread_context)(vram_client *c);
    void (*thread_adopt)(vram_client *c, void *ctx);
};

extern const struct vc_mapper vc_host_mapper;
/* Loads the CUDA driver for this client; NULL with a reason when it can't. */
const struct vc_mapper *vc_cuda_mapper(vram_client *c, char *why, size_t whylen);

struct pending_map {
    uint64_t chunk;
    uint32_t region, slot;
    vp_handle h; /* VP_NONE: a chunk this client holds, moved */
};

/* A new chunk imported and mapped on the background thread (background.c). */
struct vc_bg_item {
    uint64_t chunk;
    uint64_t addr, bytes;
    vp_handle h;         /* the handle from the reply; the import's after */
    uint64_t handle;     /* the import's (cuda) */
    int err;
};

struct vc_bg {
    bool enabled;
    struct vc_bg_item *v;
    size_t n, cap;
    vp_thread *thread;   /* importing and mapping v now; NULL: not started */
    void *ctx;           /* the caller's driver context, for the thread */
    size_t done;         /* chunks taken since the last vram_client_wait */
    int err;             /* the first failure since then */
    char msg[512];
};

struct vram_client {
    vp_handle h;         /* the connection */
    /* how to connect again (session.c) */
    char path[108];
    char name[64];
    bool ctl;
    int reconnect_ms;  /* -1: never */
    bool reconnecting;
    uint32_t resume_from;    /* the id whose memory we hold, until a resume
                                is answered */
    uint32_t resume_sent_as; /* our id when a resume broke half-way */
    struct vram_wire wire;
    uint64_t next_id;
    uint32_t id;
    uint16_t version;    /* the protocol version hello agreed on; 0 before */
    char backend[16];
    char last_error[512];
    int timeout_ms;
    bool broken;
    bool blocking;       /* the socket blocks: replies are awaited in recv */
    vram_event_fn cb;
    void *cb_user;
    const struct vc_mapper *mapper;
    void *mapper_state;
    bool peer_access;
    /* The daemon's word on peer access (learnt at the first registration
     * of a client that asks for it): bit k of dev_peers[j]: device j may
     * access device k's chunks. None is used that vramd does not list. */
    uint64_t dev_peers[64];
    bool peers_known;
    struct vc_chunk_table chunks;
    struct vc_region **regions;
    size_t nregions;
    struct vc_stage *stages;
    size_t nstages;
    struct vc_wset *wsets;   /* open weight sets */
    size_t nwsets;
    /* the request being waited for (rpc.c) */
    uint64_t await_id;
    int await_type;
    void *await_rep;               /* its reply, decoded here */
    struct vram_arena *await_arena;
    bool await_done;
    uint32_t await_parts;          /* its frames so far that said more */
    int await_err;                 /* the daemon refused it */
    struct pending_map *pend;      /* its map entries, not applied yet */
    size_t npend, cappend;
    /* chunks a recall took, to release without waiting (events.c) */
    uint64_t *release_q;
    size_t nrelease, caprelease;
    /* calls in progress on this thread (lock.c): state is brought up to
     * date and BUDGET_CHANGED told when the outermost one returns */
    int depth;
    bool tables_changed;  /* a chunk was mapped or unmapped since */
    /* the event thread (thread.c) */
    vp_mutex *lock;
    vp_thread *thread;
    bool thread_stop;
    vp_handle thread_h;  /* the connection the thread waits on, or VP_NONE */
    vp_handle retired;   /* a replaced connection the thread may still wait
                            on (Windows: session.c), closed by the thread */
    /* new chunks being mapped in the background (background.c) */
    struct vc_bg bg;
    /* fire-and-forget requests (releases answering recalls) */
    uint64_t async_ids[64];
    size_t nasync;
    int async_error;
};

/* error.c */
int vc_set_error(vram_client *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* rpc.c: one request and its reply on the current connection, and the
 * events that come meanwhile */
/* Sends request type (enum vram_req_id) with its fields and waits for the
 * reply, decoded into rep (the type's reply struct, its arrays in a) and
 * checked against the catalogue; map entries are gathered into c->pend,
 * not applied. A refusal returns the daemon's error with its message in
 * last_error (map entries gathered all the same). */
int vc_rpc(vram_client *c, int type, const void *req, void *rep,
           struct vram_arena *a);
/* Sends a request whose reply is not waited for (its error is kept in
 * async_error). */
int vc_rpc_async(vram_client *c, int type, const void *req);
/* Handles what arrived without waiting; *events counts events handled. */
int vc_rpc_poll(vram_client *c, int *events);
/* Frames (or part of one) wait in the receive buffer: a reply stopped the
 * read so that its map is applied before what followed it. */
bool vc_rpc_buffered(const vram_client *c);
/* The wire and receive settings of a connection, new or made again. */
void vc_conn_setup(vram_client *c);

/* events.c */
/* An event arrived: the engine is told, the library's state follows. */
void vc_event(vram_client *c, int evt, const void *fields);
/* Sends the releases recalls asked for (fire and forget). */
void vc_send_releases(vram_client *c);

/* lock.c: every public call is framed by these */
/* Takes the client's lock (with an event thread) and counts the call. */
void vc_enter(const vram_client *c);
/* Counts the call out; the outermost brings every stage's figures up to
 * date with what is mapped and tells BUDGET_CHANGED for the residency
 * changes not told yet, then lets the lock go. Returns ret. */
int vc_leave(const vram_client *c, int ret);

/* thread.c: the event thread */
/* Ends it (the connection receives no more after). */
void vc_thread_stop(vram_client *c);

/* session.c: connecting, hello, and again after the connection broke */
int vc_hello(vram_client *c, char *error, size_t error_len);
bool vc_can_reconnect(const vram_client *c);
/* Connects again (with backoff, up to reconnect_ms), says hello and takes
 * back what this client holds (resume). Emits RECONNECTED. */
int vc_reconnect(vram_client *c);
void vc_stage_claims(vram_client *c, uint32_t stage, uint32_t layer,
                     const uint32_t *slots, size_t n);

/* background.c: mapping new chunks on a library thread */
/* Whether the new chunks of the reply being applied go to the background:
 * it is on, and this is an engine's own call (not one nested in a
 * callback). */
bool vc_bg_wanted(const vram_client *c);
/* Takes a new chunk, already in the tables as mapped at addr, to import
 * and map later; the handle is the item's from now on (closed on failure). */
int vc_bg_add(vram_client *c, uint64_t chunk, vp_handle h, uint64_t addr,
              uint64_t bytes);
/* Starts the thread on what was added (or maps it here if it cannot). */
void vc_bg_start(vram_client *c);
/* Waits for the thread (or does its work here when it was not started),
 * then makes the tables say what is mapped: a chunk that failed is
 * forgotten, and the first failure kept for vram_client_wait. */
void vc_bg_finish(vram_client *c);
/* Finishes, and frees the list (at close). */
void vc_bg_free(vram_client *c);

/* call.c: a request that survives a broken connection */
/* vc_rpc, and when the connection broke: connect again, resume, and send
 * the request once more. */
int vc_call(vram_client *c, int type, const void *req, void *rep,
            struct vram_arena *a);

/* mapping.c: what replies do to this process */
/* Region kinds by name (enum vram_region_kind), -1 for none. */
const char *vc_kind_name(int kind);
int vc_kind_of(const char *name);
struct vc_region *vc_region_get(const vram_client *c, uint32_t id);
struct vc_stage *vc_stage_get(const vram_client *c, uint32_t id);
uint64_t vc_slot_addr(const struct vc_region *r, uint32_t slot);
void vc_drop_chunk(vram_client *c, uint64_t id);
/* A held chunk out of its slot, its handle kept (0); on failure it stays
 * mapped unless forced. And back into a slot of r. */
int vc_unmap_chunk(vram_client *c, struct vc_chunk *ch, bool force);
/* sleep.c: a stage's sleep record freed (its release, a loss, close). */
void vc_sleep_forget(vram_client *c, struct vc_stage *st);
int vc_map_chunk(vram_client *c, struct vc_chunk *ch, struct vc_region *r,
                 uint32_t slot);
void vc_emit(vram_client *c, const struct vram_event *ev);
/* The stage's figures from what this process maps (kv and expert regions
 * of a configured stage). */
void vc_stage_refresh(vram_client *c, struct vc_stage *st);
/* Expert chunks ids[0..n) of stage are about to go (a recall, or moves
 * into KV): the residency after is set, the engine told (type RECALL or
 * EXPERT_SHRINK), before anything is unmapped. */
void vc_expert_leaving(vram_client *c, enum vram_event_type type,
                       uint32_t stage, const uint64_t *ids, size_t n,
                       uint32_t deadline_ms);
/* Takes the map entries of one reply frame (their handles move). */
int vc_gather_map(vram_client *c, struct vram_t_map_entry *map, size_t n);
int vc_apply_pending(vram_client *c);
void vc_clear_pending(vram_client *c);
int vc_region_add(vram_client *c, const struct vram_t_region *o);
void vc_region_forget(vram_client *c, struct vc_region *r);
void vc_stage_update(vram_client *c, const struct vram_t_stage *o);
int vc_stage_adopt(vram_client *c, const struct vram_t_stage *o);

/* weights.c: weight sets */
/* Unmaps and forgets every set (at close: told to vramd when tell). */
void vc_weights_close_all(vram_client *c, bool tell);
/* vram_weights_open and vram_weights_close, inside a call already. */
int vc_weights_open(vram_client *c, const char *name, uint32_t device,
                    uint64_t bytes, const uint8_t *key, uint32_t flags,
                    struct vram_weights_info *info);
int vc_weights_close(vram_client *c, uint32_t id);
/* Whether set id is open here. */
bool vc_weights_is_open(const vram_client *c, uint32_t id);

/* mappers.c: how chunks of the daemon's backend become memory here */
/* The mapper for backend ("host", "cuda"); NULL with why for a backend
 * this library does not know or cannot use. */
const struct vc_mapper *vc_mapper_open(vram_client *c, const char *backend,
                                       char *why, size_t whylen);

#endif
