/* SPDX-License-Identifier: Apache-2.0 */
/* Memory on POSIX: the address space a client reserves, with memory objects
 * mapped over it (MAP_FIXED); unmapping puts PROT_NONE back, so a range is
 * never left for someone else's mmap to take. Creating and sealing memory
 * objects, reserving an exact range and keeping mappings from a fork are
 * each OS's own (platform/linux/mem_linux.c). */
#include "platform/mem.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* No swap is set aside for the inaccessible range where the system has the
 * flag; elsewhere there is nothing to ask for. */
#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

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
