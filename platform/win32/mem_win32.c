/* SPDX-License-Identifier: Apache-2.0 */
/* Memory on Windows: host chunks are page-file-backed sections
 * (CreateFileMappingW on INVALID_HANDLE_VALUE, committed at creation, so a
 * chunk that exists has its memory); a client's region is a placeholder
 * reservation (VirtualAlloc2 with MEM_RESERVE_PLACEHOLDER), split at each
 * slot and replaced by a view (MapViewOfFile3 with MEM_REPLACE_PLACEHOLDER);
 * unmapping puts the placeholder back (UnmapViewOfFile2 with
 * MEM_PRESERVE_PLACEHOLDER), so the slot is never free for another
 * allocation to take, as PROT_NONE does on Linux.
 *
 * mingw-w64 10 neither declares nor imports VirtualAlloc2, MapViewOfFile3
 * and UnmapViewOfFile2: they are taken from kernelbase.dll at run time.
 * wine 8 has the three but refuses placeholders (error 87): without them
 * this falls back to plain reservations (mem_win32.h says what that
 * costs), which is what runs under wine. */
#include "platform/mem.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "platform/win32/mem_win32.h"
#include "platform/win32/winerr.h"

/* winnt.h's values, which mingw-w64 10 lacks. */
#define PLACEHOLDER_RESERVE 0x00040000u  /* MEM_RESERVE_PLACEHOLDER */
#define PLACEHOLDER_REPLACE 0x00004000u  /* MEM_REPLACE_PLACEHOLDER */
#define PLACEHOLDER_PRESERVE 0x00000002u /* MEM_PRESERVE_PLACEHOLDER */
#define PLACEHOLDER_COALESCE 0x00000001u /* MEM_COALESCE_PLACEHOLDERS */

typedef PVOID(WINAPI *virtual_alloc2_fn)(HANDLE, PVOID, SIZE_T, ULONG, ULONG,
                                         void *, ULONG);
typedef PVOID(WINAPI *map_view3_fn)(HANDLE, HANDLE, PVOID, ULONG64, SIZE_T, ULONG,
                                    ULONG, void *, ULONG);
typedef BOOL(WINAPI *unmap_view2_fn)(HANDLE, PVOID, ULONG);

static INIT_ONCE once = INIT_ONCE_STATIC_INIT;
static virtual_alloc2_fn virtual_alloc2;
static map_view3_fn map_view3;
static unmap_view2_fn unmap_view2;
static bool placeholders;
static uint64_t granularity;

static BOOL CALLBACK init(PINIT_ONCE o, PVOID param, PVOID *ctx)
{
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    granularity = si.dwAllocationGranularity;
    HMODULE kb = GetModuleHandleW(L"kernelbase.dll");
    if (kb) {
        /* Through void (*)(void), which converts to any function type. */
        virtual_alloc2 = (virtual_alloc2_fn)(void (*)(void))GetProcAddress(kb, "VirtualAlloc2");
        map_view3 = (map_view3_fn)(void (*)(void))GetProcAddress(kb, "MapViewOfFile3");
        unmap_view2 = (unmap_view2_fn)(void (*)(void))GetProcAddress(kb, "UnmapViewOfFile2");
    }
    if (virtual_alloc2 && map_view3 && unmap_view2) {
        /* Having the functions is not having placeholders: ask for one. */
        void *p = virtual_alloc2(GetCurrentProcess(), NULL, (SIZE_T)granularity,
                                 MEM_RESERVE | PLACEHOLDER_RESERVE, PAGE_NOACCESS,
                                 NULL, 0);
        if (p) {
            VirtualFree(p, 0, MEM_RELEASE);
            placeholders = true;
        }
    }
    return TRUE;
}

static void setup(void)
{
    InitOnceExecuteOnce(&once, init, NULL, NULL);
}

bool vpw_vm_placeholders(void)
{
    setup();
    return placeholders;
}

int vp_mem_create(uint64_t bytes, const char *name, vp_handle *out)
{
    /* Unnamed: a named section could be opened by anyone its default
     * descriptor lets, where this one reaches others only by
     * DuplicateHandle. Its size is fixed at creation (sections never
     * grow), and it reads as zeros. */
    if (bytes == 0)
        return -EINVAL;
    HANDLE s = CreateFileMappingW(INVALID_HANDLE_VALUE, NULL, PAGE_READWRITE | SEC_COMMIT,
                                  (DWORD)(bytes >> 32), (DWORD)bytes, NULL);
    if (!s)
        return vpw_last_errno();
    out->v = (intptr_t)s;
    return 0;
}

int vp_mem_create_sealable(uint64_t bytes, const char *name, vp_handle *out)
{
    return vp_mem_create(bytes, name, out);
}

int vp_mem_seal_write(vp_handle h)
{
    /* No seal exists: readers get handles with map-read access only. */
    return vp_ok(h) ? 0 : -EBADF;
}

uint64_t vp_mem_id(vp_handle h)
{
    /* A section has no identity that another process's view shows
     * (Linux: the memfd's inode in /proc/PID/maps). */
    return 0;
}

void vp_heap_trim(void)
{
    _heapmin();
    HeapCompact(GetProcessHeap(), 0);
}

uint64_t vp_page_size(void)
{
    /* Views start at multiples of the allocation granularity (64 KiB),
     * not of the 4 KiB page: that is what a chunk's size must be a
     * multiple of for base + i * chunk to be mappable. */
    setup();
    return granularity;
}

static bool query(const void *p, MEMORY_BASIC_INFORMATION *m)
{
    return VirtualQuery(p, m, sizeof(*m)) == sizeof(*m);
}

/* The end of the allocation (reservation, placeholder or view) that
 * starts at a. */
static char *alloc_end(char *a)
{
    MEMORY_BASIC_INFORMATION m;
    char *p = a;
    while (query(p, &m) && m.State != MEM_FREE && (char *)m.AllocationBase == a)
        p = (char *)m.BaseAddress + m.RegionSize;
    return p;
}

static bool aligned(uint64_t v)
{
    return v % granularity == 0;
}

int vp_vm_reserve(uint64_t base, uint64_t size, char *why, size_t whylen)
{
    setup();
    if (!base || !size || !aligned(base) || !aligned(size)) {
        snprintf(why, whylen, "cannot reserve %llu bytes at 0x%llx: both must be "
                 "non-zero multiples of %llu", (unsigned long long)size,
                 (unsigned long long)base, (unsigned long long)granularity);
        return -EINVAL;
    }
    void *want = (void *)(uintptr_t)base;
    void *p = placeholders
                  ? virtual_alloc2(GetCurrentProcess(), want, (SIZE_T)size,
                                   MEM_RESERVE | PLACEHOLDER_RESERVE, PAGE_NOACCESS,
                                   NULL, 0)
                  : VirtualAlloc(want, (SIZE_T)size, MEM_RESERVE, PAGE_NOACCESS);
    if (!p) {
        DWORD err = GetLastError();
        bool taken = err == ERROR_INVALID_ADDRESS;
        snprintf(why, whylen, "cannot reserve %llu bytes at 0x%llx: %s (error %lu)",
                 (unsigned long long)size, (unsigned long long)base,
                 taken ? "the range is already in use in this process"
                       : "refused by the system",
                 err);
        return taken ? -EADDRINUSE : vpw_errno(err);
    }
    if (p != want) {
        VirtualFree(p, 0, MEM_RELEASE);
        snprintf(why, whylen, "the system did not honour address 0x%llx",
                 (unsigned long long)base);
        return -EADDRINUSE;
    }
    return 0;
}

void vp_vm_release(uint64_t base, uint64_t size)
{
    char *p = (char *)(uintptr_t)base, *end = p + size;
    MEMORY_BASIC_INFORMATION m;
    /* Each slot may have become an allocation of its own (a placeholder
     * split off, a view): all that start inside the range go. */
    while (p < end && query(p, &m)) {
        char *next = (char *)m.BaseAddress + m.RegionSize;
        char *a = m.AllocationBase;
        if (m.State != MEM_FREE && a >= (char *)(uintptr_t)base && a < end) {
            if (m.Type == MEM_MAPPED)
                UnmapViewOfFile(a);
            else
                VirtualFree(a, 0, MEM_RELEASE);
        }
        p = next;
    }
}

/* Reserves [a, e) again after a view or reservation there went (the
 * fallback's moment of exposure). */
static int reserve_again(char *a, char *e)
{
    if (a >= e)
        return 0;
    return VirtualAlloc(a, (SIZE_T)(e - a), MEM_RESERVE, PAGE_NOACCESS) == a
               ? 0
               : -EADDRINUSE;
}

int vp_vm_dontfork(uint64_t addr, uint64_t bytes)
{
    (void)addr;
    (void)bytes;
    return 0;
}

int vp_vm_unmap(uint64_t addr, uint64_t bytes)
{
    setup();
    char *p = (char *)(uintptr_t)addr, *end = p + bytes;
    MEMORY_BASIC_INFORMATION m;
    int e = 0;
    while (p < end && query(p, &m)) {
        char *next = (char *)m.BaseAddress + m.RegionSize;
        if (m.State != MEM_FREE && m.Type == MEM_MAPPED) {
            char *v = m.AllocationBase, *ve = alloc_end(v);
            /* A view is unmapped whole; one that reaches outside the
             * range cannot be (POSIX would cut it). */
            if (v < (char *)(uintptr_t)addr || ve > end)
                return -EINVAL;
            if (placeholders) {
                if (!unmap_view2(GetCurrentProcess(), v, PLACEHOLDER_PRESERVE))
                    return vpw_last_errno();
            } else {
                if (!UnmapViewOfFile(v))
                    return vpw_last_errno();
                if (reserve_again(v, ve) < 0)
                    e = -EADDRINUSE; /* the slot was taken meanwhile */
            }
            next = ve;
        }
        p = next;
    }
    return e;
}

static int map_access(vp_handle h, uint64_t addr, uint64_t bytes, bool rw,
                      char *why, size_t whylen);

int vp_vm_map(vp_handle h, uint64_t addr, uint64_t bytes, char *why,
              size_t whylen)
{
    return map_access(h, addr, bytes, true, why, whylen);
}

int vp_vm_map_ro(vp_handle h, uint64_t addr, uint64_t bytes, char *why,
                 size_t whylen)
{
    return map_access(h, addr, bytes, false, why, whylen);
}

static int map_access(vp_handle h, uint64_t addr, uint64_t bytes, bool rw,
                      char *why, size_t whylen)
{
    setup();
    char *a = (char *)(uintptr_t)addr, *end = a + bytes;
    if (!addr || !bytes || !aligned(addr) || !aligned(bytes)) {
        snprintf(why, whylen, "cannot map %llu bytes at 0x%llx: both must be "
                 "non-zero multiples of %llu", (unsigned long long)bytes,
                 (unsigned long long)addr, (unsigned long long)granularity);
        return -EINVAL;
    }
    /* What is mapped there goes first (mmap's MAP_FIXED replaces it). */
    int e = vp_vm_unmap(addr, bytes);
    if (e < 0) {
        snprintf(why, whylen, "cannot unmap what is at 0x%llx: %s",
                 (unsigned long long)addr, strerror(-e));
        return e;
    }
    /* The reservations under [a, end): from the start of the one that
     * holds a to the end of the one that holds end - 1. */
    MEMORY_BASIC_INFORMATION m;
    if (!query(a, &m) || m.State != MEM_RESERVE) {
        snprintf(why, whylen, "cannot map at 0x%llx: not inside a reservation",
                 (unsigned long long)addr);
        return -EINVAL;
    }
    char *first = m.AllocationBase, *last_end = alloc_end(first);
    int pieces = 1;
    while (last_end < end) {
        if (!query(last_end, &m) || m.State != MEM_RESERVE ||
            (char *)m.AllocationBase != last_end) {
            snprintf(why, whylen, "cannot map %llu bytes at 0x%llx: the range "
                     "is not all reserved", (unsigned long long)bytes,
                     (unsigned long long)addr);
            return -EINVAL;
        }
        last_end = alloc_end(last_end);
        pieces++;
    }
    void *v;
    if (placeholders) {
        /* One placeholder exactly [a, end): merged, then split. */
        if (pieces > 1 && !VirtualFree(first, (SIZE_T)(last_end - first),
                                       MEM_RELEASE | PLACEHOLDER_COALESCE))
            goto failed;
        if (first < a && !VirtualFree(first, (SIZE_T)(a - first),
                                      MEM_RELEASE | PLACEHOLDER_PRESERVE))
            goto failed;
        if (end < last_end && !VirtualFree(a, (SIZE_T)bytes,
                                           MEM_RELEASE | PLACEHOLDER_PRESERVE))
            goto failed;
        v = map_view3((HANDLE)h.v, GetCurrentProcess(), a, 0, (SIZE_T)bytes,
                      PLACEHOLDER_REPLACE, rw ? PAGE_READWRITE : PAGE_READONLY,
                      NULL, 0);
        if (!v)
            goto failed; /* the placeholder stays */
        return 0;
    }
    /* No placeholders: release the reservations, reserve around the slot
     * again, map the view into the hole. */
    for (char *p = first; p < last_end;) {
        char *pe = alloc_end(p);
        VirtualFree(p, 0, MEM_RELEASE);
        p = pe;
    }
    if (reserve_again(first, a) < 0 || reserve_again(end, last_end) < 0) {
        reserve_again(a, end);
        snprintf(why, whylen, "cannot map at 0x%llx: part of the reservation "
                 "was taken while it was remade (no placeholders here)",
                 (unsigned long long)addr);
        return -EADDRINUSE;
    }
    v = MapViewOfFileEx((HANDLE)h.v, rw ? FILE_MAP_WRITE : FILE_MAP_READ, 0, 0,
                        (SIZE_T)bytes, a);
    if (v)
        return 0; /* at a: MapViewOfFileEx never moves a view */
    {
        DWORD err = GetLastError();
        bool lost = reserve_again(a, end) < 0;
        snprintf(why, whylen, "cannot map %llu bytes at 0x%llx: error %lu%s",
                 (unsigned long long)bytes, (unsigned long long)addr, err,
                 lost ? "; the slot was taken meanwhile" : "");
        return lost ? -EADDRINUSE : vpw_errno(err);
    }
failed:;
    DWORD err = GetLastError();
    snprintf(why, whylen, "cannot map %llu bytes at 0x%llx: error %lu",
             (unsigned long long)bytes, (unsigned long long)addr, err);
    return vpw_errno(err);
}
