/* Mapping chunks into this process. Host chunks are memfds: a region is
 * reserved once as PROT_NONE at the daemon's address, and a chunk is mapped
 * over its slot with MAP_FIXED; unmapping puts the PROT_NONE reservation
 * back, so the range is never left for someone else's mmap to take. */
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

static int host_reserve(vram_client *c, uint64_t base, uint64_t size)
{
    void *want = (void *)(uintptr_t)base;
    void *p = mmap(want, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        snprintf(c->last_error, sizeof(c->last_error),
                 "cannot reserve %llu bytes at 0x%llx: %s",
                 (unsigned long long)size, (unsigned long long)base,
                 e == EEXIST ? "the range is already in use in this process"
                             : "mmap failed");
        return e == EEXIST ? -EADDRINUSE : -e;
    }
    if (p != want) { /* a kernel that ignores MAP_FIXED_NOREPLACE */
        munmap(p, size);
        snprintf(c->last_error, sizeof(c->last_error),
                 "the kernel did not honour address 0x%llx",
                 (unsigned long long)base);
        return -EADDRINUSE;
    }
    return 0;
}

static void host_unreserve(vram_client *c, uint64_t base, uint64_t size)
{
    (void)c;
    munmap((void *)(uintptr_t)base, size);
}

static int host_import(vram_client *c, struct vc_chunk *ch, int fd,
                       uint64_t bytes)
{
    (void)c;
    (void)bytes;
    ch->fd = fd;
    return 0;
}

static int host_map(vram_client *c, struct vc_chunk *ch, uint64_t addr,
                    uint64_t bytes)
{
    void *p = mmap((void *)(uintptr_t)addr, bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, ch->fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        snprintf(c->last_error, sizeof(c->last_error),
                 "cannot map chunk %llu at 0x%llx: errno %d",
                 (unsigned long long)ch->id, (unsigned long long)addr, e);
        return -e;
    }
    return 0;
}

static int host_unmap(vram_client *c, struct vc_chunk *ch, uint64_t addr,
                      uint64_t bytes)
{
    (void)c;
    (void)ch;
    void *p = mmap((void *)(uintptr_t)addr, bytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p == MAP_FAILED ? -errno : 0;
}

static void host_release(vram_client *c, struct vc_chunk *ch)
{
    (void)c;
    if (ch->fd >= 0)
        close(ch->fd);
    ch->fd = -1;
}

const struct vc_mapper vc_host_mapper = {
    .name = "host",
    .reserve = host_reserve,
    .unreserve = host_unreserve,
    .import = host_import,
    .map = host_map,
    .unmap = host_unmap,
    .release = host_release,
};
