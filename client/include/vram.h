/* libvram: the client library of vramd, the GPU memory broker.
 *
 * An engine connects to the daemon, registers its pipeline stages, and gets
 * memory as regions: ranges of virtual address space whose base the daemon
 * assigns and which never move. The library reserves each region once,
 * imports the chunks the daemon sends (handles: fds on Linux, NT handles on
 * Windows) and maps chunk slot i
 * at base + i * chunk_bytes, so pointers and captured CUDA graphs stay valid
 * across every budget change.
 *
 * Conventions: functions return 0 (or a count) on success and a negative
 * errno on failure; vram_strerror() describes an error, and
 * vram_client_last_error() gives the daemon's own message for the last
 * failed request. Out-parameters are written only on success. The library
 * never prints. A vram_client is not thread-safe: use one per thread or
 * serialise calls. Each chunk held keeps a file descriptor open, so the
 * first connect raises the process's soft limit on open files to its hard
 * limit (engines holding a whole GPU in 2 MiB chunks need tens of
 * thousands).
 *
 * Two ways to run: blocking calls (each returns when its reply arrived), or
 * an engine's own event loop watching vram_client_fd() for readability and
 * calling vram_client_dispatch(), which handles events (recalls, budget
 * changes) without blocking. Blocking calls handle events that arrive while
 * they wait, too.
 */
#ifndef VRAM_H
#define VRAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define VRAM_API __attribute__((visibility("default")))
#else
#define VRAM_API
#endif

typedef struct vram_client vram_client;

/* An operating-system handle, as an integer: a file descriptor on POSIX, a
 * HANDLE on Windows. */
typedef intptr_t vram_handle;

enum vram_region_kind {
    VRAM_REGION_KV = 0,
    VRAM_REGION_EXPERT = 1,
    VRAM_REGION_FIXED = 2,
    VRAM_REGION_DRAFT_KV = 3,
};

enum vram_event_type {
    /* The daemon asks for chunks back. Called before the library unmaps
     * them: stop using the listed expert slots (evict), then return. The
     * library unmaps, closes the handles and answers with a release. */
    VRAM_EVENT_RECALL = 1,
    /* A stage's expert residency changed: slots at or beyond
     * expert_slots_backed are no longer backed (refresh the residency table). */
    VRAM_EVENT_BUDGET_CHANGED = 2,
    /* Chunks of an expert region are about to move into KV (a KV grow that
     * took back the stage's own loans). Same contract as RECALL. */
    VRAM_EVENT_EXPERT_SHRINK = 3,
    /* The connection to vramd broke (the daemon restarted, or the socket
     * failed) and the library connected again and took back what it holds:
     * same stages, regions, addresses and chunks; nchunks kept, lost_chunks
     * that could not be (unmapped already). The request that was in flight
     * was sent again and returns normally. vram_client_fd() keeps its
     * number, but epoll users must add it again (it is a new socket). */
    VRAM_EVENT_RECONNECTED = 4,
    /* After a reconnect, a stage could not be taken back (the configuration
     * changed, or vramd lost its state): its regions are unmapped and
     * forgotten; register it again. */
    VRAM_EVENT_STAGE_LOST = 5,
};

struct vram_event {
    enum vram_event_type type;
    uint32_t stage;
    uint64_t residency_version;    /* BUDGET_CHANGED */
    uint32_t expert_slots_backed;  /* BUDGET_CHANGED, EXPERT_SHRINK: after */
    uint64_t expert_loaned_bytes;  /* BUDGET_CHANGED */
    uint32_t nchunks;              /* RECALL, EXPERT_SHRINK, RECONNECTED */
    uint32_t deadline_ms;          /* RECALL */
    uint32_t lost_chunks;          /* RECONNECTED */
};

typedef void (*vram_event_fn)(void *user, const struct vram_event *ev);

struct vram_client_options {
    const char *name;    /* shown by vramctl; default "pid-N" */
    int ctl;             /* connect as a control client (vramctl) */
    int timeout_ms;      /* per request; 0 = 30000 */
    int peer_access;     /* cuda: also map chunks for peer GPUs that can
                            access the owning GPU (owner-only otherwise) */
    char *error;         /* if set, why a connect failed (daemon's words) */
    size_t error_len;
    int reconnect_ms;    /* after the connection breaks, keep trying to
                            connect again and take everything back for this
                            long, then fail the call; 0 = 30000 (engines) or
                            never (control clients); -1 = never */
};

struct vram_region_info {
    uint32_t id;
    uint32_t stage;
    uint32_t device;
    enum vram_region_kind kind;
    void *base;               /* never changes */
    uint64_t lane_stride;     /* bytes between lanes */
    uint32_t lanes;
    uint32_t lane_slots;      /* usable slots of lane 0 */
    uint64_t chunk_bytes;
    uint32_t mapped;          /* chunks mapped now, all lanes */
};

struct vram_stage_info {
    uint32_t stage;
    uint32_t device;
    uint32_t first_layer, last_layer;
    uint32_t kv_region;       /* 0 for ad-hoc stages */
    uint32_t expert_region;   /* 0 for ad-hoc stages */
    uint64_t kv_mapped_bytes;
    uint64_t kv_max_bytes;
    uint64_t expert_loaned_bytes;
    uint32_t expert_slots_backed;
    uint64_t expert_slot_bytes;
};

struct vram_kv_result {
    uint64_t kv_needed_bytes;     /* exact bytes of the request's tokens */
    uint64_t kv_mapped_bytes;     /* mapped now, whole chunks */
    uint64_t expert_loaned_bytes;
    uint32_t expert_slots_backed;
    uint32_t recalled_chunks;     /* own loans moved back into KV */
};

struct vram_residency {
    uint64_t version;
    uint32_t expert_slots_backed;
    uint64_t expert_loaned_bytes;
};

#define VRAM_KV_HOLD 1u          /* wait for recalls up to the stage's bound */
#define VRAM_STAGE_KEEP_WINDOW 1u /* trim never shrinks this stage's KV */

/* Connection. path NULL: $VRAM_SOCKET, else /run/vramd/vramd.sock. */
VRAM_API int vram_client_connect(const char *path,
                                 const struct vram_client_options *opt,
                                 vram_client **out);
/* Takes ownership of an already connected socket (closed on failure). */
VRAM_API int vram_client_connect_fd(vram_handle fd,
                                    const struct vram_client_options *opt,
                                    vram_client **out);
/* Unmaps everything and disconnects. NULL-tolerant. */
VRAM_API void vram_client_close(vram_client *c);
/* What an engine's event loop waits on: on POSIX the connection's socket
 * (poll it for readability, then call vram_client_dispatch); its number
 * stays the same across a reconnect. */
VRAM_API vram_handle vram_client_fd(const vram_client *c);
/* Handles whatever arrived, without blocking. Returns events handled. */
VRAM_API int vram_client_dispatch(vram_client *c);
VRAM_API void vram_client_set_event_callback(vram_client *c, vram_event_fn fn,
                                             void *user);
VRAM_API uint32_t vram_client_id(const vram_client *c);
/* "host" or "cuda": what the daemon's chunks are. */
VRAM_API const char *vram_client_backend(const vram_client *c);
VRAM_API const char *vram_client_last_error(const vram_client *c);
VRAM_API const char *vram_strerror(int err);

/* Stages. */
VRAM_API int vram_stage_register(vram_client *c, uint32_t stage, unsigned flags,
                                 struct vram_stage_info *out);
VRAM_API int vram_stage_register_adhoc(vram_client *c, uint32_t device,
                                       uint32_t first_layer, uint32_t last_layer,
                                       uint32_t *stage_out);
VRAM_API int vram_stage_release(vram_client *c, uint32_t stage);
VRAM_API int vram_stage_info(vram_client *c, uint32_t stage,
                             struct vram_stage_info *out);

/* Regions (ad-hoc stages; configured stages get theirs at registration). */
VRAM_API int vram_region_create(vram_client *c, uint32_t stage,
                                enum vram_region_kind kind, uint64_t lane_bytes,
                                uint32_t lanes, uint32_t *region_out);
VRAM_API int vram_region_info(const vram_client *c, uint32_t region,
                              struct vram_region_info *out);
/* Backs the next chunks slots of every lane. */
VRAM_API int vram_region_grow(vram_client *c, uint32_t region, uint32_t chunks);
/* Unmaps and releases the last chunks of every lane. */
VRAM_API int vram_region_shrink(vram_client *c, uint32_t region, uint32_t chunks);
VRAM_API int vram_region_release(vram_client *c, uint32_t region);
/* Moves the chunk at (src lane, slot) to an empty (dst lane, slot) of another
 * region of this client (ad-hoc stages): no handle travels, the memory keeps
 * its bytes. A chunk of another device is refused (-EXDEV, foreign chunk). */
VRAM_API int vram_region_move_chunk(vram_client *c, uint32_t src_region,
                                    uint32_t src_lane, uint32_t src_slot,
                                    uint32_t dst_region, uint32_t dst_lane,
                                    uint32_t dst_slot);
/* The chunk mapped at slot i of lane l: 0 and its id, or -ENOENT when the
 * slot holds no memory now (touching it would fault). */
VRAM_API int vram_region_chunk(const vram_client *c, uint32_t region,
                               uint32_t lane, uint32_t slot, uint64_t *chunk_out);
/* Address of slot i of lane l (mapped or not). */
VRAM_API void *vram_region_slot(const vram_client *c, uint32_t region,
                                uint32_t lane, uint32_t slot);

/* KV budget and expert loans of a configured stage. */
VRAM_API int vram_kv_reserve(vram_client *c, uint32_t stage,
                             uint64_t prompt_tokens, uint64_t output_tokens,
                             unsigned flags, struct vram_kv_result *out);
VRAM_API int vram_kv_trim(vram_client *c, uint32_t stage, uint64_t tokens);
VRAM_API int vram_expert_request(vram_client *c, uint32_t stage,
                                 uint64_t max_bytes);
VRAM_API int vram_expert_claim(vram_client *c, uint32_t stage, uint32_t layer,
                               const uint32_t *slots, size_t n);
VRAM_API int vram_expert_residency(const vram_client *c, uint32_t stage,
                                   struct vram_residency *out);

/* Admin only: disconnect another client (its chunks are quarantined until
 * its process is gone). -EPERM unless this peer is in access.admin. */
VRAM_API int vram_admin_evict(vram_client *c, uint32_t client);

/* Admin only: a device's capacity at run time, down to what is in use and
 * reserved, up to its size when vramd started (-EBUSY says which). */
VRAM_API int vram_admin_set_capacity(vram_client *c, uint32_t device,
                                     uint64_t bytes);

/* A round trip that changes nothing. */
VRAM_API int vram_client_ping(vram_client *c);

/* The daemon's status as JSON text (free() it). */
VRAM_API int vram_status_json(vram_client *c, char **json_out);

/* Chunks this client holds a handle for (diagnostics). */
VRAM_API size_t vram_client_chunks_held(const vram_client *c);

#ifdef __cplusplus
}
#endif
#endif
