/* SPDX-License-Identifier: Apache-2.0 */
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

/* Events. The callback runs on the thread that called into the library (a
 * blocking call or vram_client_dispatch), or on the library's event thread
 * (vram_client_start_event_thread). Before it runs, the library's state is
 * already the state after the change: vram_expert_residency and
 * vram_stage_info return the figures the event announces.
 *
 * Order: RECALL and EXPERT_SHRINK come first, while the memory is still
 * mapped; BUDGET_CHANGED follows, once the change is applied, at most once
 * per change. A change made by one of this client's own calls
 * (vram_kv_reserve, vram_kv_trim, vram_expert_request, ...) is announced
 * before that call returns, after its reply was applied; a change made by
 * someone else (another client's reserve recalled loans) is announced when
 * the library next reads the connection (any call, or dispatch). */
enum vram_event_type {
    /* The daemon asks for chunks of the stage's expert region back (another
     * stage's KV needs them). The expert slots [slot_first, slot_end) lose
     * their memory when the callback returns: stop using them (evict those
     * experts) before returning. The library then unmaps, closes the
     * handles and answers with a release, before deadline_ms passes. */
    VRAM_EVENT_RECALL = 1,
    /* A stage's expert residency changed (more or fewer slots backed):
     * slots below expert_slots_backed are backed, those at or beyond it
     * are not. residency_version counts the changes. */
    VRAM_EVENT_BUDGET_CHANGED = 2,
    /* Chunks of the stage's expert region are about to move into its KV (a
     * vram_kv_reserve that took back the stage's own loans). Same contract
     * as RECALL: slots [slot_first, slot_end) lose their memory. */
    VRAM_EVENT_EXPERT_SHRINK = 3,
    /* The connection to vramd broke (the daemon restarted, or the socket
     * failed) and the library connected again and took back what it holds:
     * same stages, regions, addresses and chunks; nchunks kept, lost_chunks
     * that could not be (unmapped already). The request that was in flight
     * was sent again and returns normally. vram_client_fd() keeps its
     * number, but epoll users must add it again (it is a new socket). On
     * Windows it is a new pipe HANDLE with another value: ask for it
     * again. */
    VRAM_EVENT_RECONNECTED = 4,
    /* During a reconnect (before RECONNECTED), a stage could not be taken
     * back (the configuration changed, or vramd lost its state): its
     * regions are unmapped and forgotten; register it again. */
    VRAM_EVENT_STAGE_LOST = 5,
};

struct vram_event {
    enum vram_event_type type;
    uint32_t stage;
    uint64_t residency_version;    /* the stage's, as of this event */
    uint32_t expert_slots_backed;  /* RECALL, EXPERT_SHRINK, BUDGET_CHANGED:
                                      after the change */
    uint64_t expert_loaned_bytes;  /* the same: after the change */
    uint32_t nchunks;              /* RECALL, EXPERT_SHRINK, RECONNECTED */
    uint32_t deadline_ms;          /* RECALL: from now */
    uint32_t lost_chunks;          /* RECONNECTED */
    /* RECALL, EXPERT_SHRINK: the expert slots that lose their memory,
     * slot_first (== expert_slots_backed) up to slot_end (the count
     * backed before), and the nchunks chunk ids leaving (valid during the
     * callback). */
    uint32_t slot_first, slot_end;
    const uint64_t *chunks;
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

/* A device of the daemon (vram_devices). */
struct vram_device_info {
    uint32_t id;              /* the GPU ordinal for cuda */
    char backend[16];         /* "host" or "cuda" */
    char name[96];
    char uuid[48];            /* cuda: the GPU's UUID; "" otherwise */
    uint64_t chunk_bytes;
    uint64_t capacity_bytes;  /* what vramd may hand out */
    uint64_t free_bytes;
    uint64_t granted_bytes;   /* fixed and KV */
    uint64_t loaned_bytes;    /* expert loans */
    uint64_t total_bytes;     /* the device's own size */
};

struct vram_region_info {
    uint32_t id;
    uint32_t stage;
    uint32_t device;
    enum vram_region_kind kind;
    void *base;               /* never changes */
    uint64_t lane_stride;     /* bytes between lanes */
    uint32_t lanes;
    uint32_t lane_slots;      /* usable slots of lane 0; other lanes may
                                 have fewer: vram_region_lane_slots */
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

/* Errors. Every call returns 0 (or a count) on success and a negative
 * errno on failure, with the daemon's own words in vram_client_last_error.
 * Any call that talks to the daemon may also fail with:
 *   -ETIMEDOUT   no reply within the client's timeout_ms (30 s by default)
 *   -ECONNRESET, -ENOTCONN  the connection broke and could not be made
 *                again within reconnect_ms (what the client held stays
 *                mapped; close it)
 *   -EPROTO      the daemon sent something that is not the protocol
 *   -ENOMEM      out of memory, here or in the daemon
 * and, where it moves memory, with -EIO (the backend failed) or -EXDEV
 * (foreign chunk: a chunk of another device; a daemon defect). The codes
 * of each call are listed with it. vram_strerror gives vramd's meaning of
 * a code ("over a limit (a count, or the stage's native context)" for
 * -E2BIG, not the C library's "Argument list too long"). */

/* ---- connection -------------------------------------------------------- */

/* Connects, says hello, maps nothing yet. path NULL: $VRAM_SOCKET, else
 * /run/vramd/vramd.sock. opt may be NULL. When opt->error is set it is
 * filled on every failure, naming the socket. The first connect of a
 * process raises its soft limit on open files to the hard one and, unless
 * it is a control client (opt->ctl), grows its fd table to 16384 (Linux: in a process with threads the kernel waits
 * a grace period for that, about 10 ms), so that no grant's handles wait
 * for the table: connect when the engine starts.
 *   -ENOENT, -ECONNREFUSED  no vramd listens there
 *   -EACCES      not allowed: the socket's permissions, or vramd's access
 *                rules (access.users / access.groups / access.admin)
 *   -E2BIG       vramd's connection limits (limits.clients,
 *                limits.connections_per_user)
 *   -EPROTONOSUPPORT  the daemon speaks another protocol version
 *   -ENODEV      the daemon's backend cannot be used here ("cuda" without
 *                a CUDA driver in this process) */
VRAM_API int vram_client_connect(const char *path,
                                 const struct vram_client_options *opt,
                                 vram_client **out);
/* Takes ownership of an already connected socket (closed on failure). */
VRAM_API int vram_client_connect_fd(vram_handle fd,
                                    const struct vram_client_options *opt,
                                    vram_client **out);
/* Releases the client's stages (their memory goes back to vramd's pool at
 * once: everything is unmapped here first), then disconnects and frees the
 * client. Memory still mapped when the connection is gone (a broken
 * connection) is quarantined by vramd until this process exits, as after a
 * crash. NULL-tolerant. Not from an event callback. */
VRAM_API void vram_client_close(vram_client *c);
/* What an engine's event loop waits on: on POSIX the connection's socket
 * (poll it for readability, then call vram_client_dispatch); its number
 * stays the same across a reconnect on POSIX (on Windows a reconnect gives
 * another pipe HANDLE: VRAM_EVENT_RECONNECTED). */
VRAM_API vram_handle vram_client_fd(const vram_client *c);
/* Handles whatever arrived: events are delivered and recalls answered.
 * It does not wait for data; only when the connection broke does it block,
 * connecting again and resuming (up to reconnect_ms). Returns the events
 * handled. */
VRAM_API int vram_client_dispatch(vram_client *c);
VRAM_API void vram_client_set_event_callback(vram_client *c, vram_event_fn fn,
                                             void *user);
/* Threads. A vram_client is used by one thread at a time, and its events
 * come only while the library reads its connection: inside a blocking call
 * or vram_client_dispatch. A process with several clients (one per stage,
 * say) whose threads block in calls, or that does not poll each client's
 * fd, starts an event thread for each: the library then reads the
 * connection on a thread of its own, answers recalls at once and runs the
 * callback there, and every call on this client takes the client's lock
 * (calls from several threads are serialised; a callback may call into
 * its own client, not into another one, and must not close its client).
 * Call it once, after vram_client_set_event_callback; it lasts until
 * vram_client_close. The thread ends by itself when the connection is lost
 * for good. -EALREADY when started already. */
VRAM_API int vram_client_start_event_thread(vram_client *c);
/* Mapping in the background, for an engine's start: it registers its
 * stages and asks for its weights' memory, its KV and its first loans,
 * then reads its weights from disk for seconds. With this on:
 *  - vram_region_grow, vram_kv_reserve and vram_expert_request send their
 *    request and return VRAM_PENDING at once, before vramd has answered
 *    (chunks beyond its standby are made on the way: that making, the
 *    transfer of the handles and the import and mapping all overlap the
 *    engine's work). A library thread reads the reply and imports and maps
 *    its chunks. vram_kv_reserve's out is not written then: after the
 *    wait, vram_kv_reserve_result gives it (or read vram_stage_info,
 *    vram_expert_residency or the regions).
 *    A negative return is a failure before the request left (as when
 *    blocking, or one reported from earlier: below). One request is in
 *    flight at a time: a second such call first waits for the earlier
 *    reply and its mapping, then sends its own;
 *  - vram_stage_register waits for its reply (its regions and out are
 *    needed at once) and returns 0; its initial window is mapped on the
 *    thread;
 *  - the memory may be touched (by a copy or a kernel) only after
 *    vram_client_wait() returned a count (not an error);
 *  - every other call on the client, vram_client_dispatch and the event
 *    thread wait for the pending reply and the mapping first, so the
 *    library never answers from a half-mapped state; events that came
 *    before the reply (a RECALL, a BUDGET_CHANGED) are handled then, in
 *    their order, before the reply is applied, as a blocking call handles
 *    them;
 *  - a request that fails after its call returned (-ENOSPC over capacity,
 *    -ETIMEDOUT past the stage's hold, -ECONNRESET when vramd went away,
 *    any refusal the blocking call would return) changes nothing in this
 *    process: none of its chunks is mapped or counted. vram_client_wait
 *    returns that failure, and so does, once, the next call that would
 *    send vramd a request (without sending it), each with vramd's words in
 *    vram_client_last_error, naming the call that failed. After a lost
 *    connection, the call after that connects again.
 * Off by default; calls made from an event callback always wait and map
 * before they return. */
#define VRAM_PENDING 1 /* sent: the reply is read in the background */
VRAM_API int vram_client_set_background_map(vram_client *c, int on);
/* Waits until every background request's reply came and every chunk a
 * background call brought is mapped. The number of chunks mapped in the
 * background since the last wait, or the first failure since then: a
 * request refused or lost (above), or a chunk that failed to map (-EIO,
 * with the driver's words in vram_client_last_error; it is not mapped,
 * vram_region_chunk says -ENOENT, and counts nowhere in this process; ask
 * again). */
VRAM_API int vram_client_wait(vram_client *c);
VRAM_API uint32_t vram_client_id(const vram_client *c);
/* "host" or "cuda": what the daemon's chunks are. */
VRAM_API const char *vram_client_backend(const vram_client *c);
/* The daemon's message for the last failed call on this client. */
VRAM_API const char *vram_client_last_error(const vram_client *c);
/* vramd's meaning of an error code (negative or not). */
VRAM_API const char *vram_strerror(int err);

/* The daemon's devices: up to max written to out (out may be NULL with max
 * 0); returns how many there are. */
VRAM_API int vram_devices(vram_client *c, struct vram_device_info *out,
                          size_t max);

/* ---- stages ------------------------------------------------------------ */

/* Takes a stage of vramd's configuration: its kv, expert and fixed regions
 * are created (their addresses never change) and its initial KV window is
 * mapped before this returns. When other stages' pool loans sit in that
 * window they are recalled and the call waits for them up to the stage's
 * hold_ms. out (may be NULL) is the stage's info.
 *   -ENOENT      no such stage in the configuration
 *   -EEXIST      already registered: by this client ("already yours"), or
 *                by another ("owned by client N")
 *   -EAGAIN      its previous owner's memory is still quarantined (that
 *                process has not exited yet)
 *   -ETIMEDOUT   the initial window's recalls did not complete in hold_ms
 *   -E2BIG       limits.stages_per_client or stages_per_user
 *   -EADDRINUSE  the stage's addresses are taken in this process */
VRAM_API int vram_stage_register(vram_client *c, uint32_t stage, unsigned flags,
                                 struct vram_stage_info *out);
/* A stage outside the configuration, for regions made by hand (layers
 * first..last of device). -ENODEV no such device, -EINVAL bad layers,
 * -E2BIG a stage limit or no stage id left. */
VRAM_API int vram_stage_register_adhoc(vram_client *c, uint32_t device,
                                       uint32_t first_layer, uint32_t last_layer,
                                       uint32_t *stage_out);
/* Unmaps and gives back everything of the stage. -ENOENT not this
 * client's; -EBUSY a chunk is still mapped or open elsewhere in this
 * process (host chunks: a copy of its handle, a mapping of its own), and
 * nothing was released. */
VRAM_API int vram_stage_release(vram_client *c, uint32_t stage);
/* The stage's figures as this process maps them, current after every call
 * and inside every event callback (no round trip). -ENOENT not
 * registered by this client. */
VRAM_API int vram_stage_info(vram_client *c, uint32_t stage,
                             struct vram_stage_info *out);
/* The stage's regions (kv, expert, fixed and draft_kv ones, and an ad-hoc
 * stage's): up to max ids into ids; returns how many there are, or
 * -ENOENT. */
VRAM_API int vram_stage_regions(const vram_client *c, uint32_t stage,
                                uint32_t *ids, size_t max);

/* ---- sleep and wake -------------------------------------------------------
 * A stage that sleeps gives all its GPU memory back to vramd (for other
 * engines: a model swap) and keeps its address ranges reserved here; a wake
 * gets memory again, maps it at the same addresses and copies the bytes
 * back, so pointers and captured CUDA graphs stay valid. The bytes are kept
 * in this process's host memory (pinned, on cuda): an engine that exits
 * asleep loses them, as its KV's sequences die with it; weights meant to
 * outlive an engine are a weight set's (vram_weights_open), which sleeping
 * does not touch.
 *
 * flags choose, per region kind, what is copied: 0 keeps every byte;
 * VRAM_SLEEP_DISCARD_KV drops the kv and draft_kv regions' bytes (their
 * memory comes back at the wake, its contents undefined);
 * VRAM_SLEEP_DISCARD_EXPERTS drops the expert region's. Fixed regions are
 * always kept. What a configured stage gives back goes to pool loans only
 * (its reservation stays its own: its KV window may be lent while it
 * sleeps, and is recalled at the wake); an ad-hoc stage's goes back to the
 * free pool, for anyone. */
#define VRAM_SLEEP_DISCARD_KV 0x1u
#define VRAM_SLEEP_DISCARD_EXPERTS 0x2u
/* A wake keeps the host buffer (pinned on cuda) for the stage's next sleep:
 * pinning host memory costs more than the copy itself (16 GiB: about 6 s
 * against 0.3 s on an H200 host), so engines that take turns (a model swap)
 * pay it once. The memory stays this process's until that sleep, the
 * stage's release, or vram_client_close. */
#define VRAM_WAKE_KEEP_HOST 0x1u

/* Copies what flags keep into host memory, unmaps every chunk of the
 * stage's regions and gives them back. A pending recall is answered by the
 * sleep (its expert slots lose their memory as RECALL says). While asleep,
 * calls that move the stage's memory fail with -EBUSY; vram_stage_info
 * shows nothing mapped. -ENOENT not this client's stage; -EALREADY asleep
 * already; -ENOMEM no host memory for the copy (nothing changed); -EIO the
 * copy failed (nothing changed). */
VRAM_API int vram_stage_sleep(vram_client *c, uint32_t stage, unsigned flags);
/* Gets the stage's memory again: a configured stage's KV as it was (its
 * pool loans recalled, waiting up to its hold_ms), its fixed regions, then
 * its expert loans as far as there are any (experts are a cache: slots not
 * backed again lose their bytes; vram_expert_residency says how many came
 * back); an ad-hoc stage's regions as they were. Then the kept bytes are
 * copied back and the host copy freed (kept with VRAM_WAKE_KEEP_HOST).
 * -EALREADY awake;
 * -ETIMEDOUT the hold bound passed, -ENOSPC an ad-hoc stage's memory is
 * taken (nothing is recalled for it): the stage sleeps on, its bytes kept,
 * and may be woken later. */
VRAM_API int vram_stage_wake(vram_client *c, uint32_t stage, unsigned flags);
/* 1 when the stage sleeps, 0 when awake, -ENOENT. */
VRAM_API int vram_stage_asleep(const vram_client *c, uint32_t stage);

/* ---- regions ------------------------------------------------------------ */

/* A region of an ad-hoc stage (configured stages get theirs at
 * registration): lanes of lane_bytes each, rounded up to whole chunks,
 * nothing mapped yet. -ENOENT not your stage; -EINVAL bad kind or size;
 * -EPERM a configured stage; -ENOSPC the address window is full; -E2BIG
 * limits.regions_per_client, more lanes than 256 or too large a lane;
 * -EDQUOT limits.address_space_per_client or _per_user. */
VRAM_API int vram_region_create(vram_client *c, uint32_t stage,
                                enum vram_region_kind kind, uint64_t lane_bytes,
                                uint32_t lanes, uint32_t *region_out);
/* No round trip. -ENOENT not a region of this client. */
VRAM_API int vram_region_info(const vram_client *c, uint32_t region,
                              struct vram_region_info *out);
/* A fixed or draft_kv region's name in the configuration ("weights");
 * its kind's name ("kv", "expert") for others; NULL when not this
 * client's region. */
VRAM_API const char *vram_region_name(const vram_client *c, uint32_t region);
/* Usable slots of one lane (lanes of different bytes per token have
 * different lengths); -ENOENT no such region or lane. */
VRAM_API int vram_region_lane_slots(const vram_client *c, uint32_t region,
                                    uint32_t lane);
/* Backs the next chunks slots of every lane (ad-hoc stages and fixed
 * regions; a configured stage's fixed regions start empty: grow them to
 * their reserved size). 0, or with background mapping VRAM_PENDING (the
 * failures below then come from vram_client_wait). -ENOENT not this client's region; -ENOSPC not
 * enough free memory; -EDQUOT over
 * limits.chunks_per_client or a fixed region's reservation; -E2BIG past the
 * region's end; -EPERM the kv or expert region of a configured stage
 * (vram_kv_reserve and vram_expert_request move those). */
VRAM_API int vram_region_grow(vram_client *c, uint32_t region, uint32_t chunks);
/* Unmaps and releases the last chunks of every lane. -ENOENT;
 * -EBUSY as for vram_stage_release. */
VRAM_API int vram_region_shrink(vram_client *c, uint32_t region, uint32_t chunks);
/* -ENOENT; -EBUSY as for vram_stage_release. */
VRAM_API int vram_region_release(vram_client *c, uint32_t region);
/* Moves the chunk at (src lane, slot) to an empty (dst lane, slot) of another
 * region of this client (ad-hoc stages): no handle travels, the memory keeps
 * its bytes. -EXDEV a chunk of another device (foreign chunk); -ENOENT no
 * chunk there; -EINVAL lane or slot out of range; -EBUSY the slot is
 * taken. */
VRAM_API int vram_region_move_chunk(vram_client *c, uint32_t src_region,
                                    uint32_t src_lane, uint32_t src_slot,
                                    uint32_t dst_region, uint32_t dst_lane,
                                    uint32_t dst_slot);
/* The chunk mapped at slot i of lane l: 0 and its id, or -ENOENT when the
 * slot holds no memory now (touching it would fault). */
VRAM_API int vram_region_chunk(const vram_client *c, uint32_t region,
                               uint32_t lane, uint32_t slot, uint64_t *chunk_out);
/* Address of chunk slot i of lane l, mapped or not: base + l * lane_stride
 * + i * chunk_bytes. NULL out of range. */
VRAM_API void *vram_region_slot(const vram_client *c, uint32_t region,
                                uint32_t lane, uint32_t slot);

/* ---- KV budget and expert loans of a configured stage ------------------- */

/* Before decode: maps KV for prompt + output tokens (rounded up to the
 * growth step from the initial window, each lane to whole chunks) and
 * returns when all of it is mapped. The stage's own expert loans are moved
 * into KV first (EXPERT_SHRINK tells the engine before, no handle
 * travels); other stages' pool loans are recalled. out may be NULL.
 * With background mapping it returns VRAM_PENDING once the request is
 * sent, out not written (vram_client_set_background_map).
 *   -E2BIG       prompt + output exceed the stage's native context (the
 *                message names it); nothing is clamped
 *   -EAGAIN      it must wait for recalls and VRAM_KV_HOLD was not given;
 *                the recalls were sent, so asking again soon may succeed
 *   -ETIMEDOUT   with VRAM_KV_HOLD: the stage's hold_ms passed first
 *   -ENOENT      not a stage of this client; -EPERM an ad-hoc stage
 *   -EBUSY       too many held requests on this connection */
VRAM_API int vram_kv_reserve(vram_client *c, uint32_t stage,
                             uint64_t prompt_tokens, uint64_t output_tokens,
                             unsigned flags, struct vram_kv_result *out);
/* With background mapping, what the stage's last vram_kv_reserve that
 * returned VRAM_PENDING did, once its reply came and its chunks were
 * mapped (this call waits for that, as every call does): 0 and out, as the
 * blocking call would have written it. That reserve's failure when it
 * failed (what vram_client_wait returned for it; nothing of it is
 * mapped); -ENOENT when the stage is not this client's or has had no
 * background reserve; -EINVAL out NULL. A blocking reserve changes none of
 * this. */
VRAM_API int vram_kv_reserve_result(vram_client *c, uint32_t stage,
                                    struct vram_kv_result *out);
/* After a request: KV back to the initial window (tokens 0) or to tokens.
 * The surplus becomes the stage's own expert loans as far as its window
 * has room beside its loans and headroom (BUDGET_CHANGED says so before
 * this returns); the rest is unmapped and given back. Pool loans are kept.
 * Nothing is trimmed for a stage registered with VRAM_STAGE_KEEP_WINDOW or
 * one that may not lend; a client that missed a recall deadline lends
 * nothing (the whole surplus is given back). -ENOENT, -EPERM as for
 * vram_kv_reserve. */
VRAM_API int vram_kv_trim(vram_client *c, uint32_t stage, uint64_t tokens);
/* Asks for expert loans out of the stage's unused KV window (less its
 * headroom) and, where the device lends unreserved memory, the pool; at
 * most max_bytes, or all there is when max_bytes is 0. Getting less, or
 * nothing, is not an error: read vram_expert_residency after. With
 * background mapping: VRAM_PENDING, as vram_region_grow.
 * max_bytes counts whole chunks, rounded down.
 *   -EPERM   this client missed a recall deadline (no new loans), or an
 *            ad-hoc stage
 *   -EDQUOT  limits.chunks_per_client reached
 *   -ENOENT  not a stage of this client */
VRAM_API int vram_expert_request(vram_client *c, uint32_t stage,
                                 uint64_t max_bytes);
/* Claims backed expert slots for one layer (so that a resume after a
 * reconnect keeps them). All or none:
 * Slots are numbered by their place in the expert region.
 *   -EINVAL  a slot not backed (at or beyond expert_slots_backed)
 *   -EBUSY   a slot claimed by another layer
 *   -EPERM   the layer is outside the stage's layers, or an ad-hoc stage
 *   -ENOENT  not a stage of this client */
VRAM_API int vram_expert_claim(vram_client *c, uint32_t stage, uint32_t layer,
                               const uint32_t *slots, size_t n);
/* The stage's residency, current (no round trip). -ENOENT. */
VRAM_API int vram_expert_residency(const vram_client *c, uint32_t stage,
                                   struct vram_residency *out);
/* Expert slots of the stage's expert region (backed or not), or -ENOENT. */
VRAM_API int vram_expert_slots(const vram_client *c, uint32_t stage);
/* Address of expert slot j: the expert region's base + j *
 * expert_slot_bytes (slots are expert-sized, chunks need not be). It has
 * memory while j < expert_slots_backed: the backed slots are always a
 * prefix. NULL past the region. */
VRAM_API void *vram_expert_slot(const vram_client *c, uint32_t stage,
                                uint32_t slot);

/* ---- weight sets ----------------------------------------------------------
 * Weights that outlive their engine (and vramd's own restarts): a named set
 * of large allocations on one device, written once by the first engine that
 * opens the name, then shared read-only by every engine that opens it with
 * the same key. The set is mapped at base, the same address in every
 * process and for the set's whole life: allocation i at base + i x
 * alloc_bytes, so bytes [0, bytes) are one contiguous range.
 *
 *   struct vram_weights_info w;
 *   vram_weights_open(c, "qwen3-30b/stage0", 0, bytes, key, 0, &w);
 *   if (w.writer) {            // nobody had it: load it, then seal it
 *       load((void *)(uintptr_t)w.base, bytes);
 *       vram_weights_seal(c, w.id);    // read-only from now on
 *   }
 *   ... use (const void *)(uintptr_t)w.base ...
 *   vram_weights_close(c, w.id);       // it stays cached for the next
 */
#define VRAM_WEIGHTS_KEY_BYTES 32
#define VRAM_WEIGHTS_NAME_MAX 64
/* Another client is writing the set: -EAGAIN at once instead of waiting
 * (within the call's timeout) for its seal. */
#define VRAM_WEIGHTS_NOWAIT 0x1u
/* Admins: the set is never evicted, only dropped by an admin. */
#define VRAM_WEIGHTS_KEEP 0x2u

struct vram_weights_info {
    uint32_t id;
    uint32_t device;
    uint64_t base;        /* where it is mapped; never changes */
    uint64_t bytes;       /* as opened */
    uint64_t alloc_bytes; /* each allocation's size */
    uint32_t allocs;
    uint8_t writer;       /* 1: this client writes it, mapped read-write */
    uint8_t sealed;       /* 1: read-only for everyone, this client too */
};

/* Opens weight set name (1 to 64 printable bytes, no spaces) of bytes on
 * device, whose layout key (32 bytes the engine computes from its model,
 * dtype, shapes and split) must match. When vramd has a sealed set of that
 * name, key, device and size, it is mapped read-only (writer false). When
 * it has none, this client becomes its writer: the set is mapped
 * read-write, the engine fills it and calls vram_weights_seal. While
 * another client writes it, the call waits for the seal (or -EAGAIN at
 * once with VRAM_WEIGHTS_NOWAIT; -ETIMEDOUT past the timeout). -ESTALE: a
 * set of that name exists with another key, size or device (the message
 * names its size and when it was sealed; it is never mapped); -EACCES:
 * another user's set (access.weights); -ENOSPC: no room on the device even
 * after evicting cached sets; -EDQUOT: limits.weight_sets_per_user. */
VRAM_API int vram_weights_open(vram_client *c, const char *name,
                               uint32_t device, uint64_t bytes,
                               const uint8_t key[VRAM_WEIGHTS_KEY_BYTES],
                               uint32_t flags, struct vram_weights_info *info);
/* The writer is done: every mapping of the set, this one's included, is
 * read-only from now on (host: sealed memory objects; cuda: read-only
 * access). -EPERM not its writer, -EALREADY sealed. */
VRAM_API int vram_weights_seal(vram_client *c, uint32_t id);
/* Unmaps the set here. A sealed set nobody maps stays cached on the
 * device (evicted least recently used first when memory is needed); one
 * its writer closes before sealing is dropped. */
VRAM_API int vram_weights_close(vram_client *c, uint32_t id);
/* This client's view of an open set; -ENOENT when it has none open. */
VRAM_API int vram_weights_info(const vram_client *c, uint32_t id,
                               struct vram_weights_info *out);
/* The set that backs fixed reservation name of a configured stage
 * ("fixed": [{"name": ..., "set": ..., "key": ...}] in vramd's
 * configuration). vram_stage_register opened it, with the configured key
 * and the reservation's bytes: read-only when sealed; else this client is
 * its writer, fills it and calls vram_weights_seal. Closed by
 * vram_stage_release. -ENOENT no such stage or reservation (or the set was
 * closed since); -ENODATA configured without a key (open it with
 * vram_weights_open: the daemon makes it in the stage's memory all the
 * same); else the error registration's open met (-EAGAIN another client
 * is writing it: open it by name to wait; -ESTALE, -ENOSPC, ...). */
VRAM_API int vram_stage_weights(vram_client *c, uint32_t stage, const char *name,
                                struct vram_weights_info *out);

/* Where a weight set is in its life (vram_weights_list). */
enum vram_weights_state {
    VRAM_WEIGHTS_WRITING = 0, /* its writer fills it; nobody else maps it */
    VRAM_WEIGHTS_SEALED = 1,  /* read-only, mapped by users */
    VRAM_WEIGHTS_CACHED = 2,  /* sealed, mapped by none: evicted when memory
                                 is needed, unless kept */
};

/* A weight set of the daemon's, any client's (vramctl weights). */
struct vram_weights_entry {
    uint32_t id;
    uint32_t device;
    char name[VRAM_WEIGHTS_NAME_MAX + 1];
    uint8_t key[VRAM_WEIGHTS_KEY_BYTES];
    uint64_t bytes;       /* as opened */
    uint64_t alloc_bytes; /* each allocation's size */
    uint32_t allocs;
    enum vram_weights_state state;
    uint32_t writer;      /* the client writing it; 0 once sealed */
    uint32_t users;       /* clients that map it (a gone one's process may) */
    uint32_t owner_uid;   /* its writer's uid: the set is that user's */
    uint8_t keep;         /* 1: never evicted, only dropped by an admin */
    uint64_t created_ms;  /* Unix time, milliseconds */
    uint64_t sealed_ms;   /* the same; 0 while written */
    uint64_t last_use_ms; /* the same: its last open or close */
};

/* Every weight set of the daemon: up to max written to out (out may be
 * NULL with max 0), in the daemon's order; returns how many there are
 * (call again with more room when that is more than max). -EPROTO: the
 * daemon sent a set this library cannot read (an unknown state, a key
 * that is not 32 bytes of hex). */
VRAM_API int vram_weights_list(vram_client *c, struct vram_weights_entry *out,
                               size_t max);

/* ---- administration and health ------------------------------------------ */

/* Admin only: disconnect another client (its chunks are quarantined until
 * its process is gone). -EPERM unless this peer is in access.admin;
 * -ENOENT no such client; -EINVAL oneself. */
VRAM_API int vram_admin_evict(vram_client *c, uint32_t client);

/* Admin only: drops weight set name, which no client may map (-EBUSY
 * names one that does); its memory is freed. -EPERM, -ENOENT. */
VRAM_API int vram_admin_weights_drop(vram_client *c, const char *name);

/* Admin only: a device's capacity at run time, down to what is in use and
 * reserved (-EBUSY says which), up to its size when vramd started (-E2BIG
 * above). -EPERM, -ENODEV. */
VRAM_API int vram_admin_set_capacity(vram_client *c, uint32_t device,
                                     uint64_t bytes);

/* A round trip that changes nothing. */
VRAM_API int vram_client_ping(vram_client *c);

/* The daemon's status as JSON text; give it back with vram_free. */
VRAM_API int vram_status_json(vram_client *c, char **json_out);
/* Frees what the library allocated for the caller (vram_status_json's
 * text). free() does the same where the engine and libvram share a C
 * runtime (Linux); on Windows an engine built with MSVC has a runtime of
 * its own, whose free() must not be given libvram's memory. NULL-tolerant. */
VRAM_API void vram_free(void *p);

/* Chunks this client holds a handle for (diagnostics). */
VRAM_API size_t vram_client_chunks_held(const vram_client *c);

#ifdef __cplusplus
}
#endif
#endif
