/* SPDX-License-Identifier: Apache-2.0 */
/* How chunks of the daemon's backend become memory in this process (the
 * state layer's lowest part): the mapper interface, the mappers libvram has
 * (map_host.c, map_cuda.c), and choosing one by the backend's name
 * (mappers.c). */
#ifndef VRAM_CLIENT_MAPPERS_H
#define VRAM_CLIENT_MAPPERS_H

#include <stddef.h>
#include <stdint.h>

#include "client/lib/client_state.h"
#include "platform/handle.h"
#include "client/include/vram.h"

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

/* The mapper for backend ("host", "cuda"); NULL with why for a backend
 * this library does not know or cannot use. */
const struct vc_mapper *vc_mapper_open(vram_client *c, const char *backend,
                                       char *why, size_t whylen);

#endif
