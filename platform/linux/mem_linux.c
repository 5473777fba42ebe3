/* SPDX-License-Identifier: Apache-2.0 */
/* Memory on Linux: memory objects are sealed memfds (nobody can resize
 * them; a weight set's can be made read-only for everyone), a reservation
 * takes exactly the range asked for (MAP_FIXED_NOREPLACE), and
 * MADV_DONTFORK keeps mappings from a forked child. The rest of mem.h is
 * portable (platform/posix/mem_posix.c). */
#include "platform/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
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

int vp_vm_dontfork(uint64_t addr, uint64_t bytes)
{
    return madvise((void *)(uintptr_t)addr, bytes, MADV_DONTFORK) < 0 ? -errno
                                                                       : 0;
}
