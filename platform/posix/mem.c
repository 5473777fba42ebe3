/* SPDX-License-Identifier: Apache-2.0 */
/* Memory on Linux: sealed memfds, and PROT_NONE reservations with chunks
 * mapped over them (MAP_FIXED); unmapping puts PROT_NONE back, so a range
 * is never left for someone else's mmap to take. */
#include "mem.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

int vp_mem_create(uint64_t bytes, const char *name, vp_handle *out)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)bytes) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    out->v = fd;
    return 0;
}

int vp_mem_create_sealable(uint64_t bytes, const char *name, vp_handle *out)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)bytes) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    out->v = fd;
    return 0;
}

int vp_mem_seal_write(vp_handle h)
{
    /* A shared mapping of an fd opened read-write counts as writable even
     * when it is mapped PROT_READ: every process must have unmapped it. */
    if (fcntl((int)h.v, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SEAL) < 0)
        return -errno;
    return 0;
}

uint64_t vp_mem_id(vp_handle h)
{
    struct stat st;
    if (!vp_ok(h) || fstat((int)h.v, &st) < 0)
        return 0;
    return (uint64_t)st.st_ino;
}

uint64_t vp_page_size(void)
{
    return (uint64_t)sysconf(_SC_PAGESIZE);
}

int vp_vm_reserve(uint64_t base, uint64_t size, char *why, size_t whylen)
{
    void *want = (void *)(uintptr_t)base;
    void *p = mmap(want, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        snprintf(why, whylen, "cannot reserve %llu bytes at 0x%llx: %s",
                 (unsigned long long)size, (unsigned long long)base,
                 e == EEXIST ? "the range is already in use in this process"
                             : strerror(e));
        return e == EEXIST ? -EADDRINUSE : -e;
    }
    if (p != want) { /* a kernel that ignores MAP_FIXED_NOREPLACE */
        munmap(p, size);
        snprintf(why, whylen, "the kernel did not honour address 0x%llx",
                 (unsigned long long)base);
        return -EADDRINUSE;
    }
    return 0;
}

void vp_vm_release(uint64_t base, uint64_t size)
{
    munmap((void *)(uintptr_t)base, size);
}

static int map_prot(vp_handle h, uint64_t addr, uint64_t bytes, int prot,
                    char *why, size_t whylen)
{
    void *p = mmap((void *)(uintptr_t)addr, bytes, prot,
                   MAP_SHARED | MAP_FIXED, (int)h.v, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        snprintf(why, whylen, "cannot map %llu bytes at 0x%llx: %s",
                 (unsigned long long)bytes, (unsigned long long)addr,
                 strerror(e));
        return -e;
    }
    return 0;
}

int vp_vm_map(vp_handle h, uint64_t addr, uint64_t bytes, char *why,
              size_t whylen)
{
    return map_prot(h, addr, bytes, PROT_READ | PROT_WRITE, why, whylen);
}

int vp_vm_map_ro(vp_handle h, uint64_t addr, uint64_t bytes, char *why,
                 size_t whylen)
{
    return map_prot(h, addr, bytes, PROT_READ, why, whylen);
}

int vp_vm_dontfork(uint64_t addr, uint64_t bytes)
{
    return madvise((void *)(uintptr_t)addr, bytes, MADV_DONTFORK) < 0 ? -errno
                                                                       : 0;
}

int vp_vm_unmap(uint64_t addr, uint64_t bytes)
{
    void *p = mmap((void *)(uintptr_t)addr, bytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p == MAP_FAILED ? -errno : 0;
}

void vp_heap_trim(void)
{
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}
