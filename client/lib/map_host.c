/* SPDX-License-Identifier: Apache-2.0 */
/* Mapping host chunks into this process: a region is reserved once,
 * inaccessible, at the daemon's address, and a chunk (a memory object) is
 * mapped over its slot; unmapping puts the reservation back, so the range
 * is never left for someone else's mapping to take (platform/mem.h). */
#include <string.h>

#include "client/lib/client_record.h"
#include "client/lib/mappers.h"
#include "platform/mem.h"

static int host_reserve(vram_client *c, uint64_t base, uint64_t size)
{
    return vp_vm_reserve(base, size, c->last_error, sizeof(c->last_error));
}

static void host_unreserve(vram_client *c, uint64_t base, uint64_t size)
{
    (void)c;
    vp_vm_release(base, size);
}

static int host_import(vram_client *c, struct vc_chunk *ch, vp_handle h,
                       uint64_t bytes)
{
    (void)c;
    (void)bytes;
    ch->h = h;
    return 0;
}

static int host_map(vram_client *c, struct vc_chunk *ch, uint64_t addr,
                    uint64_t bytes)
{
    return vp_vm_map(ch->h, addr, bytes, c->last_error, sizeof(c->last_error));
}

static int host_map_ro(vram_client *c, struct vc_chunk *ch, uint64_t addr,
                       uint64_t bytes)
{
    return vp_vm_map_ro(ch->h, addr, bytes, c->last_error,
                        sizeof(c->last_error));
}

static int host_unmap(vram_client *c, struct vc_chunk *ch, uint64_t addr,
                      uint64_t bytes)
{
    (void)c;
    (void)ch;
    return vp_vm_unmap(addr, bytes);
}

static void host_release(vram_client *c, struct vc_chunk *ch)
{
    (void)c;
    vp_close(&ch->h);
}

/* Host chunks are this process's memory, mapped read-write. */
static int host_copy_out(vram_client *c, void *dst, uint64_t addr,
                         uint64_t bytes)
{
    (void)c;
    memcpy(dst, (const void *)(uintptr_t)addr, (size_t)bytes);
    return 0;
}

static int host_copy_in(vram_client *c, uint64_t addr, const void *src,
                        uint64_t bytes)
{
    (void)c;
    memcpy((void *)(uintptr_t)addr, src, (size_t)bytes);
    return 0;
}

const struct vc_mapper vc_host_mapper = {
    .name = "host",
    .reserve = host_reserve,
    .unreserve = host_unreserve,
    .import = host_import,
    .map = host_map,
    .map_ro = host_map_ro,
    .unmap = host_unmap,
    .release = host_release,
    .copy_out = host_copy_out,
    .copy_in = host_copy_in,
};
