/* SPDX-License-Identifier: Apache-2.0 */
/* Backends own physical memory: they create a device's chunks, hand out a
 * shareable handle for each (an fd on Linux, an NT handle on Windows), and
 * scrub or free a chunk when it leaves its holder. The ledger decides; the
 * backend only does. */
#ifndef VRAMD_BACKEND_H
#define VRAMD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/endpoint.h" /* VP_PUSH_*: what a handle given to a client may do */
#include "platform/handle.h"

/* What a backend's chunk handles are. On POSIX an fd travels as it is and
 * this is unused. On Windows io/ duplicates each handle into the client's
 * process (platform/win32/push.h) and must name the copy's access: a section's
 * map rights mean nothing on any other object, and a section pushed with
 * its original's access would give the client SECTION_EXTEND_SIZE and
 * WRITE_DAC over memory vramd shares out. Zero is sections: a backend that
 * forgot to say pushes least access, which fails closed (an import refused)
 * rather than open. */
enum vd_handle_kind {
    VD_HANDLES_SECTIONS = 0, /* memory objects the client maps (host) */
    VD_HANDLES_OPAQUE,       /* a driver's objects the client imports (cuda) */
};

/* The access a pushed handle of this kind gets: a section exactly what
 * mapping it read-write needs (map_host.c maps every chunk so), or reading
 * alone for read_only (a weight set's reader: it cannot map it writable,
 * whatever it asks); any other object the original's, as NVIDIA's IPC
 * sample duplicates CUDA's Win32 handles (DUPLICATE_SAME_ACCESS): CUDA's
 * shareable handles carry no access of their own, a reader's read-only
 * mapping is its own cuMemSetAccess (docs/engines.md). */
static inline unsigned vd_handle_push_access(enum vd_handle_kind k, bool read_only)
{
    return k == VD_HANDLES_OPAQUE ? VP_PUSH_SAME
           : read_only            ? VP_PUSH_MAP_READ
                                  : VP_PUSH_MAP_READ | VP_PUSH_MAP_WRITE;
}

struct vd_device_info {
    uint32_t id;
    char name[96];
    char uuid[48];
    uint64_t total_bytes;  /* what the device has */
    uint64_t granularity;  /* allocation granularity */
    bool vmm, posix_fd;
    uint64_t peers;        /* bit k: this device can access device k */
    uint32_t standby_chunks; /* made ahead at most (standby.h) */
};

struct vd_backend;

struct vd_backend_ops {
    const char *name;
    /* A shareable handle to send for chunk idx of device dev, creating the
     * chunk's memory if it has none yet. The caller owns the handle: the
     * daemon keeps no handle of a granted chunk, so granting a GPU's worth
     * of chunks costs no fds beyond those in flight. */
    int (*chunk_handle)(struct vd_backend *b, uint32_t dev, uint32_t idx,
                        vp_handle *out);
    /* The chunk left its holder for good: no one may see its bytes again. */
    void (*chunk_drop)(struct vd_backend *b, uint32_t dev, uint32_t idx);
    /* Off the critical path: up to n steps (a chunk made, exported, scrubbed
     * or given back) towards want chunks made ahead on device dev, which is
     * what the ledger could grant now (its free chunks). The backend may
     * keep fewer (its own bounds). Returns the steps taken: 0 when the pool
     * is where it can be. */
    int (*prefill)(struct vd_backend *b, uint32_t dev, uint32_t want, uint32_t n);
    /* Open handles held for chunks (the ready pool's), for leak accounting. */
    size_t (*fds_held)(struct vd_backend *b);
    /* What identifies a chunk's memory in a process's mappings
     * (vp_proc_count_mapped), or 0 where that cannot be seen (cuda).
     * Optional. */
    uint64_t (*chunk_mem_id)(struct vd_backend *b, uint32_t dev, uint32_t idx);
    /* Chunks created (and scrubbed) ahead, ready for a grant. */
    uint32_t (*pool_ready)(struct vd_backend *b, uint32_t dev);
    /* R17: n allocations of bytes each on device dev for a weight set,
     * each a handle the daemon keeps (with the clients' own, its memory's
     * only references: closing the last frees it). Made on the caller's
     * path; -ENOMEM, -ENOSPC, -EIO with why, nothing left made. */
    int (*wset_alloc)(struct vd_backend *b, uint32_t dev, uint64_t bytes,
                      uint32_t n, vp_handle *out, char *why, size_t whylen);
    /* One of a set's allocations becomes read-only for everyone: -EBUSY
     * while a process maps it writable (host: its write seal; cuda: 0, a
     * mapping's access is the client's to set read-only). */
    int (*wset_seal)(struct vd_backend *b, uint32_t dev, vp_handle h,
                     char *why, size_t whylen);
    void (*destroy)(struct vd_backend *b);
};

struct vd_backend {
    const struct vd_backend_ops *ops;
    bool gpu; /* its devices are GPUs (granularity, VMM, peers are real) */
    enum vd_handle_kind handles; /* what chunk_handle gives (how to push it) */
    uint32_t ndev;
    struct vd_device_info info[64];
};

struct vd_config;
struct vd_backend_conf;
struct vd_backend_section;

/* How a backend is made: from the configuration's devices (which a backend
 * may fill in, as cuda does with every GPU when none is configured) and its
 * own section, parsed into conf (section.h; zeros for a backend without
 * one). Fails with a one-line reason in why. */
typedef int (*vd_backend_create_fn)(struct vd_config *cfg,
                                    const struct vd_backend_conf *conf,
                                    struct vd_backend **out, char *why,
                                    size_t whylen);

/* host: sealed memory objects of host memory (host.c). */
int vd_backend_host_create(struct vd_config *cfg,
                           const struct vd_backend_conf *conf,
                           struct vd_backend **out, char *why, size_t whylen);
/* cuda: CUDA VMM allocations, the driver loaded at run time (cuda.c); its
 * section is "cuda" (scrub, peer_access). */
int vd_backend_cuda_create(struct vd_config *cfg,
                           const struct vd_backend_conf *conf,
                           struct vd_backend **out, char *why, size_t whylen);
extern const struct vd_backend_section vd_backend_cuda_section;

static inline void vd_backend_destroy(struct vd_backend *b)
{
    if (b)
        b->ops->destroy(b);
}

#endif
