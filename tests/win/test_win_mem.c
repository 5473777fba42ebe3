/* SPDX-License-Identifier: Apache-2.0 */
/* Host backend primitives on Windows (platform/mem.h): page-file-backed
 * sections, and views at fixed addresses inside a reservation, with an
 * unmapped slot kept reserved. wine 8 has no placeholders (VirtualAlloc2
 * refuses MEM_RESERVE_PLACEHOLDER with error 87): there the fallback runs
 * and the placeholder path is for real Windows (10 1803 and later), which
 * must have it. */
#include "tests/win/wintest.h"

#include <errno.h>

#include "platform/mem.h"
#include "platform/win32/mem_win32.h"

#define C (2ull << 20) /* a chunk */

static uint64_t free_range(uint64_t size)
{
    void *p = VirtualAlloc(NULL, (SIZE_T)size, MEM_RESERVE, PAGE_NOACCESS);
    MUST(p, "VirtualAlloc");
    VirtualFree(p, 0, MEM_RELEASE);
    return (uint64_t)(uintptr_t)p;
}

static DWORD state_at(uint64_t a)
{
    MEMORY_BASIC_INFORMATION m;
    MUST(VirtualQuery((void *)(uintptr_t)a, &m, sizeof(m)) == sizeof(m), "VirtualQuery");
    return m.State;
}

static DWORD type_at(uint64_t a)
{
    MEMORY_BASIC_INFORMATION m;
    MUST(VirtualQuery((void *)(uintptr_t)a, &m, sizeof(m)) == sizeof(m), "VirtualQuery");
    return m.Type;
}

/* Whether another allocation could take [a, a + C) now. */
static bool takeable(uint64_t a)
{
    void *p = VirtualAlloc((void *)(uintptr_t)a, (SIZE_T)C, MEM_RESERVE, PAGE_NOACCESS);
    if (p)
        VirtualFree(p, 0, MEM_RELEASE);
    return p != NULL;
}

static vp_handle chunk(uint64_t bytes, unsigned char fill)
{
    vp_handle h;
    MUST(vp_mem_create(bytes, "vramd-chunk", &h) == 0, "vp_mem_create");
    unsigned char *p = MapViewOfFile((HANDLE)h.v, FILE_MAP_WRITE, 0, 0, (SIZE_T)bytes);
    MUST(p, "map");
    bool zero = true;
    for (uint64_t i = 0; i < bytes; i++)
        zero &= p[i] == 0;
    CHECK(zero, "a new section reads as zeros");
    memset(p, fill, (size_t)bytes);
    UnmapViewOfFile(p);
    return h;
}

static void test_sections(void)
{
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    CHECK(vp_page_size() == si.dwAllocationGranularity && vp_page_size() == 65536,
          "the mapping granularity: %llu", (unsigned long long)vp_page_size());
    vp_handle h;
    CHECK(vp_mem_create(0, "x", &h) == -EINVAL, "no empty section");
    h = chunk(C, 0x5a);
    CHECK(vp_mem_id(h) == 0, "sections have no id a mapping shows");
    /* Two views of one section are one memory. */
    unsigned char *a = MapViewOfFile((HANDLE)h.v, FILE_MAP_WRITE, 0, 0, C);
    unsigned char *b = MapViewOfFile((HANDLE)h.v, FILE_MAP_READ, 0, 0, C);
    MUST(a && b && a != b, "two views");
    a[12345] = 0x11;
    CHECK(b[12345] == 0x11 && b[0] == 0x5a, "shared");
    UnmapViewOfFile(a);
    UnmapViewOfFile(b);
    /* A view keeps the section alive after its handle is closed. */
    b = MapViewOfFile((HANDLE)h.v, FILE_MAP_READ, 0, 0, C);
    vp_close(&h);
    CHECK(b && b[12345] == 0x11, "the view outlives the handle");
    UnmapViewOfFile(b);
    vp_heap_trim();
}

static void test_views(void)
{
    bool ph = vpw_vm_placeholders();
    printf("placeholders: %s\n", ph ? "yes (VirtualAlloc2 + MapViewOfFile3)"
                                    : "no: plain reservations (the fallback)");
    if (WINDOWS_ONLY("placeholders (VirtualAlloc2 MEM_RESERVE_PLACEHOLDER, "
                     "MapViewOfFile3 MEM_REPLACE_PLACEHOLDER, UnmapViewOfFile2 "
                     "MEM_PRESERVE_PLACEHOLDER) are there",
                     "wine 8 refuses MEM_RESERVE_PLACEHOLDER (error 87): the "
                     "fallback runs here"))
        CHECK(ph, "Windows 10 1803 or later has placeholders");

    char why[256];
    uint64_t base = free_range(8 * C);
    CHECK(vp_vm_reserve(base + 1, C, why, sizeof(why)) == -EINVAL, "unaligned: %s", why);
    CHECK(vp_vm_reserve(base, 8 * C, why, sizeof(why)) == 0, "reserve: %s", why);
    CHECK(vp_vm_reserve(base, 8 * C, why, sizeof(why)) == -EADDRINUSE,
          "the range is in use: %s", why);
    for (int i = 0; i < 8; i++)
        CHECK(state_at(base + i * C) == MEM_RESERVE && !takeable(base + i * C),
              "slot %d reserved", i);

    vp_handle a = chunk(C, 0xa1), b = chunk(C, 0xb2), two = chunk(2 * C, 0xc3);
    uint64_t s2 = base + 2 * C;
    CHECK(vp_vm_map(a, s2, C, why, sizeof(why)) == 0, "map a at slot 2: %s", why);
    unsigned char *p = (unsigned char *)(uintptr_t)s2;
    CHECK(type_at(s2) == MEM_MAPPED && p[0] == 0xa1 && p[C - 1] == 0xa1, "a is there");
    p[100] = 0x42;
    unsigned char *v = MapViewOfFile((HANDLE)a.v, FILE_MAP_READ, 0, 0, C);
    CHECK(v && v[100] == 0x42, "a write at the slot is a write to the section");
    UnmapViewOfFile(v);
    CHECK(state_at(s2 - C) == MEM_RESERVE && state_at(s2 + C) == MEM_RESERVE &&
              !takeable(s2 - C) && !takeable(s2 + C),
          "the neighbours stay reserved");
    /* Mapping over a mapped slot replaces it (MAP_FIXED's meaning). */
    CHECK(vp_vm_map(b, s2, C, why, sizeof(why)) == 0 && p[0] == 0xb2, "b replaces a: %s",
          why);
    CHECK(vp_vm_map(a, base + 3 * C, C, why, sizeof(why)) == 0 &&
              ((unsigned char *)(uintptr_t)(base + 3 * C))[100] == 0x42,
          "a at slot 3, next to b");
    /* Unmapping keeps the slot reserved: nothing else can take it. */
    CHECK(vp_vm_unmap(s2, C) == 0, "unmap slot 2");
    CHECK(state_at(s2) == MEM_RESERVE && !takeable(s2), "slot 2 is reserved again");
    CHECK(type_at(base + 3 * C) == MEM_MAPPED, "slot 3 still mapped");
    CHECK(vp_vm_unmap(s2, C) == 0, "unmapping a reserved slot is nothing");
    /* A chunk over two slots, where two reservations (or placeholders)
     * were. */
    CHECK(vp_vm_map(two, base + 4 * C, 2 * C, why, sizeof(why)) == 0 &&
              ((unsigned char *)(uintptr_t)(base + 5 * C))[C - 1] == 0xc3,
          "a double chunk at slots 4-5: %s", why);
    CHECK(vp_vm_unmap(base + 3 * C, 3 * C) == 0 && state_at(base + 3 * C) == MEM_RESERVE &&
              state_at(base + 4 * C) == MEM_RESERVE && state_at(base + 5 * C) == MEM_RESERVE,
          "unmapping slots 3-5 at once");
    CHECK(vp_vm_map(b, base + 4 * C, C, why, sizeof(why)) == 0, "a single one at slot 4");
    CHECK(vp_vm_unmap(base + 4 * C + 65536, 65536) == -EINVAL,
          "half a view cannot be unmapped");
    /* Refusals. */
    CHECK(vp_vm_map(a, base + 8 * C, C, why, sizeof(why)) == -EINVAL,
          "outside the reservation: %s", why);
    CHECK(vp_vm_map(a, base + 7 * C + 4096, C, why, sizeof(why)) == -EINVAL, "unaligned");
    CHECK(vp_vm_map(a, base + 7 * C, 2 * C, why, sizeof(why)) == -EINVAL,
          "running past the reservation: %s", why);
    CHECK(state_at(base + 7 * C) == MEM_RESERVE, "a refused map leaves the slot reserved");
    /* Release: everything, the views too. */
    vp_vm_release(base, 8 * C);
    for (int i = 0; i < 8; i++)
        CHECK(state_at(base + i * C) == MEM_FREE, "slot %d free after release", i);
    CHECK(vp_vm_reserve(base, 8 * C, why, sizeof(why)) == 0, "reserve again: %s", why);
    vp_vm_release(base, 8 * C);
    vp_close(&a);
    vp_close(&b);
    vp_close(&two);
}

int main(void)
{
    test_sections();
    test_views();
    return win_report("test_win_mem");
}
