/* SPDX-License-Identifier: Apache-2.0 */
/* A helper process for the Windows tests: it dials the pipe named on its
 * command line and does what the test asks, one line each way, so that
 * identity, pushed handles and fixed-address views are seen from a
 * process of its own.
 *
 *   win_child.exe PIPE
 *
 * Commands (values in decimal; replies on one line):
 *   pid                      -> pid N
 *   map-read V SIZE          -> read HASH writeerr E access A
 *   map-write V SIZE TEXT    -> wrote | error E
 *   valid V                  -> valid 0|1
 *   vm V SIZE BASE           -> vm HASH reserved 0|1 free-after 0|1 | error ...
 *   exit N                   -> bye, then exits with N
 */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <winternl.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/conn.h"
#include "platform/mem.h"
#include "tests/win/wintest.h"

static uint64_t fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void reply(vp_handle c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply(vp_handle c, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    strcat(buf, "\n");
    if (!send_all(c, buf))
        exit(3);
}

static void map_read(vp_handle c, HANDLE s, size_t size)
{
    const unsigned char *p = MapViewOfFile(s, FILE_MAP_READ, 0, 0, size);
    if (!p) {
        reply(c, "error %lu", GetLastError());
        return;
    }
    uint64_t h = fnv(p, size);
    UnmapViewOfFile(p);
    void *w = MapViewOfFile(s, FILE_MAP_WRITE, 0, 0, size);
    DWORD werr = w ? 0 : GetLastError();
    if (w)
        UnmapViewOfFile(w);
    PUBLIC_OBJECT_BASIC_INFORMATION bi = {0};
    ULONG n;
    unsigned long access = NtQueryObject(s, ObjectBasicInformation, &bi, sizeof(bi), &n) >= 0
                               ? bi.GrantedAccess
                               : 0xffffffffu;
    reply(c, "read %" PRIu64 " writeerr %lu access %lu", h, werr, access);
}

static void map_write(vp_handle c, HANDLE s, size_t size, const char *text)
{
    char *p = MapViewOfFile(s, FILE_MAP_WRITE, 0, 0, size);
    if (!p) {
        reply(c, "error %lu", GetLastError());
        return;
    }
    memcpy(p, text, strlen(text) + 1);
    UnmapViewOfFile(p);
    reply(c, "wrote");
}

/* The client's path for a chunk: a reservation of four slots, the chunk
 * at slot 1, read, unmapped; the slot must stay reserved. */
static void vm(vp_handle c, HANDLE s, uint64_t size, uint64_t base)
{
    char why[256];
    int e = vp_vm_reserve(base, 4 * size, why, sizeof(why));
    if (e < 0) {
        reply(c, "error reserve %d %s", e, why);
        return;
    }
    uint64_t slot = base + size;
    e = vp_vm_map((vp_handle){(intptr_t)s}, slot, size, why, sizeof(why));
    if (e < 0) {
        reply(c, "error map %d %s", e, why);
        vp_vm_release(base, 4 * size);
        return;
    }
    uint64_t h = fnv((const unsigned char *)(uintptr_t)slot, size);
    e = vp_vm_unmap(slot, size);
    MEMORY_BASIC_INFORMATION m;
    bool reserved = e == 0 && VirtualQuery((void *)(uintptr_t)slot, &m, sizeof(m)) &&
                    m.State == MEM_RESERVE;
    vp_vm_release(base, 4 * size);
    bool freed = VirtualQuery((void *)(uintptr_t)base, &m, sizeof(m)) &&
                 m.State == MEM_FREE;
    reply(c, "vm %" PRIu64 " reserved %d free-after %d", h, reserved, freed);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: win_child PIPE\n");
        return 2;
    }
    vp_handle c;
    int e = vp_dial(argv[1], &c);
    if (e < 0) {
        fprintf(stderr, "win_child: cannot dial %s: %d\n", argv[1], e);
        return 2;
    }
    char line[512];
    while (recv_line(c, line, sizeof(line), 60000) >= 0) {
        unsigned long long v = 0, size = 0, base = 0;
        char text[256];
        int code;
        if (strcmp(line, "pid") == 0)
            reply(c, "pid %lu", GetCurrentProcessId());
        else if (sscanf(line, "map-read %llu %llu", &v, &size) == 2)
            map_read(c, (HANDLE)(uintptr_t)v, (size_t)size);
        else if (sscanf(line, "map-write %llu %llu %255s", &v, &size, text) == 3)
            map_write(c, (HANDLE)(uintptr_t)v, (size_t)size, text);
        else if (sscanf(line, "valid %llu", &v) == 1) {
            DWORD fl;
            reply(c, "valid %d", GetHandleInformation((HANDLE)(uintptr_t)v, &fl) ? 1 : 0);
        } else if (sscanf(line, "vm %llu %llu %llu", &v, &size, &base) == 3)
            vm(c, (HANDLE)(uintptr_t)v, size, base);
        else if (sscanf(line, "exit %d", &code) == 1) {
            reply(c, "bye");
            vp_close(&c);
            return code;
        } else
            reply(c, "unknown %s", line);
    }
    return 4; /* the test went away */
}
