/* libvram's private state. */
#ifndef VRAM_CLIENT_INTERNAL_H
#define VRAM_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "handle.h"
#include "wire.h"
#include "vram.h"

#define VC_NO_SLOT UINT32_MAX

/* A chunk this client holds: its handle stays open while held, so a move
 * between regions never needs the daemon to send the fd again. */
struct vc_chunk {
    uint64_t id;
    vp_handle h;         /* host: the memory object; cuda: the exported
                            handle, kept until the release */
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
    uint64_t base, lane_stride, chunk_bytes, va_bytes;
    uint32_t lanes, lane_slots, stride_slots;
    uint32_t *lane_counts;   /* usable slots per lane */
    uint64_t *slot_chunk;    /* lanes * stride_slots; UINT64_MAX empty */
    uint32_t mapped;
};

struct vc_stage {
    uint32_t id;
    bool configured;     /* registered by id from the daemon's configuration */
    bool keep_window;
    struct vram_stage_info info;
    struct vram_residency res;
    uint16_t *slot_layer; /* expert slot claims, for a resume; 0xffff none */
    uint32_t nslots;
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
    int (*unmap)(vram_client *c, struct vc_chunk *ch, uint64_t addr, uint64_t bytes);
    void (*release)(vram_client *c, struct vc_chunk *ch);
    void (*destroy)(vram_client *c);
};

extern const struct vc_mapper vc_host_mapper;
/* Loads the CUDA driver for this client; NULL with a reason when it can't. */
const struct vc_mapper *vc_cuda_mapper(vram_client *c, char *why, size_t whylen);

struct pending_map {
    uint64_t chunk;
    uint32_t region, slot;
    vp_handle h; /* VP_NONE: a chunk this client holds, moved */
};

struct vram_client {
    vp_handle h;         /* the connection */
    /* how to connect again (reconnect.c) */
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
    struct vc_chunk_table chunks;
    struct vc_region **regions;
    size_t nregions;
    struct vc_stage *stages;
    size_t nstages;
    /* the request being waited for */
    uint64_t await_id;
    cJSON *reply;
    struct pending_map *pend;
    size_t npend, cappend;
    /* fire-and-forget requests (releases answering recalls) */
    uint64_t async_ids[64];
    size_t nasync;
    int async_error;
};

/* client.c: the connection, requests and replies, events */
int vc_set_error(vram_client *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
cJSON *vc_msg_new(const char *type);
/* Sends msg (consumed) and waits for its final reply (caller deletes);
 * the reply's map entries are gathered, not yet applied. */
int vc_request(vram_client *c, cJSON *msg, cJSON **reply_out);
/* A request whose reply carries nothing the caller needs. */
int vc_call(vram_client *c, cJSON *msg);
/* The wire and receive settings of a connection, new or made again. */
void vc_conn_setup(vram_client *c);
/* Hello on a fresh connection: the client id and backend. */
int vc_hello(vram_client *c, char *error, size_t error_len);

/* reconnect.c: after the connection broke */
bool vc_can_reconnect(const vram_client *c);
/* Connects again (with backoff, up to reconnect_ms), says hello and takes
 * back what this client holds (resume). Emits RECONNECTED. */
int vc_reconnect(vram_client *c);
void vc_stage_claims(vram_client *c, uint32_t stage, uint32_t layer,
                     const uint32_t *slots, size_t n);

/* mapping.c: what replies do to this process */
struct vc_region *vc_region_get(const vram_client *c, uint32_t id);
struct vc_stage *vc_stage_get(const vram_client *c, uint32_t id);
uint64_t vc_slot_addr(const struct vc_region *r, uint32_t slot);
void vc_drop_chunk(vram_client *c, uint64_t id);
void vc_emit(vram_client *c, enum vram_event_type type, uint32_t stage,
             uint32_t n, uint32_t deadline);
int vc_gather_map(vram_client *c, const cJSON *msg, struct vram_codec_frame *f);
int vc_apply_pending(vram_client *c);
void vc_clear_pending(vram_client *c);
int vc_region_add(vram_client *c, const cJSON *o);
void vc_region_forget(vram_client *c, struct vc_region *r);
void vc_stage_update(vram_client *c, const cJSON *o);

#endif
