/* SPDX-License-Identifier: Apache-2.0 */
/* Handles pushed into a child process (platform/win32/push.h) under wine: a
 * page-file-backed section the parent wrote is duplicated into a child
 * (win_child.exe) with least access, its value sent over the pipe; the
 * child maps it and reads what the parent wrote, cannot map a read-only
 * copy for writing, writes through a read-write copy, and maps it at a
 * fixed address the way libvram will; a handle the parent closes in the
 * child is gone there. */
#include "tests/win/wintest.h"

#include <errno.h>
#include <inttypes.h>

#include "platform/conn.h"
#include "platform/win32/identity.h"
#include "platform/mem.h"
#include "platform/win32/pipe_listener.h"
#include "platform/proc.h"
#include "platform/win32/push.h"

#define SIZE (2u << 20)

static uint64_t fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static vp_handle child; /* the connection to it */

static void ask(const char *cmd, char *reply, size_t len)
{
    char line[512];
    snprintf(line, sizeof(line), "%s\n", cmd);
    MUST(send_all(child, line), "send %s", cmd);
    MUST(recv_line(child, reply, len, 20000) >= 0, "no reply to %s", cmd);
}

/* A free, 64 KiB-aligned range of this size in this process: the child's
 * address space is laid out alike (same program image), and the child
 * says when it is not free there. */
static uint64_t free_range(uint64_t size)
{
    void *p = VirtualAlloc(NULL, (SIZE_T)size, MEM_RESERVE, PAGE_NOACCESS);
    MUST(p, "VirtualAlloc");
    VirtualFree(p, 0, MEM_RELEASE);
    return (uint64_t)(uintptr_t)p;
}

int main(void)
{
    char name[128], why[256], exe[MAX_PATH * 3], line[512], cmd[256];
    unique_pipe(name, sizeof(name), "push");
    beside_me("win_child.exe", exe, sizeof(exe));
    struct vp_pipe_listen_cfg cfg = {.name = name};
    struct vp_pipe_listener *l;
    MUST(vp_pipe_listen(&cfg, &l, why, sizeof(why)) == 0, "listen: %s", why);
    char *argv[] = {exe, name, NULL};
    int64_t pid;
    MUST(vp_spawn(exe, argv, &pid) == 0, "spawn %s", exe);
    struct vp_pipe_conn c;
    MUST(vp_pipe_accept(l, 10000, &c) == 0, "the child connects");
    child = c.h;
    struct vp_identity *id = calloc(1, sizeof(*id));
    vp_handle pin = VP_NONE;
    MUST(id && vp_identity_of_pipe(c.h, c.connected_at, id, &pin, why, sizeof(why)) == 0,
         "identity: %s", why);
    MUST(id->pid == pid, "the child's pin");

    /* The section, written here. */
    vp_handle sec;
    MUST(vp_mem_create(SIZE, "vramd-chunk", &sec) == 0, "vp_mem_create");
    unsigned char *mine = MapViewOfFile((HANDLE)sec.v, FILE_MAP_WRITE, 0, 0, SIZE);
    MUST(mine, "map here");
    uint64_t zeros = fnv(mine, SIZE);
    for (size_t i = 0; i < SIZE; i++)
        mine[i] = (unsigned char)(i * 7 + 3);
    uint64_t want = fnv(mine, SIZE);
    CHECK(want != zeros, "written");

    /* Read-only into the child. */
    uint64_t ro = 0;
    CHECK(vp_handle_push(pin, sec, VP_PUSH_MAP_READ, &ro) == 0 && ro != 0, "push read-only");
    snprintf(cmd, sizeof(cmd), "map-read %" PRIu64 " %u", ro, SIZE);
    ask(cmd, line, sizeof(line));
    uint64_t got = 0;
    unsigned long werr = 0, access = 0;
    CHECK(sscanf(line, "read %" SCNu64 " writeerr %lu access %lu", &got, &werr, &access) ==
              3,
          "reply %s", line);
    CHECK(got == want, "the child read what the parent wrote");
    CHECK(werr == ERROR_ACCESS_DENIED, "a read-only copy cannot be mapped for writing: %lu",
          werr);
    CHECK(access == SECTION_MAP_READ, "least access: granted 0x%lx, asked SECTION_MAP_READ",
          access);

    /* Read-write: the child's write shows here. */
    uint64_t rw = 0;
    CHECK(vp_handle_push(pin, sec, VP_PUSH_MAP_READ | VP_PUSH_MAP_WRITE, &rw) == 0, "push rw");
    snprintf(cmd, sizeof(cmd), "map-read %" PRIu64 " %u", rw, SIZE);
    ask(cmd, line, sizeof(line));
    CHECK(sscanf(line, "read %" SCNu64 " writeerr %lu access %lu", &got, &werr, &access) ==
                  3 &&
              werr == 0 && access == (SECTION_MAP_READ | SECTION_MAP_WRITE),
          "rw: %s", line);
    snprintf(cmd, sizeof(cmd), "map-write %" PRIu64 " %u child-was-here", rw, SIZE);
    ask(cmd, line, sizeof(line));
    CHECK(strcmp(line, "wrote") == 0, "the child wrote: %s", line);
    CHECK(strcmp((char *)mine, "child-was-here") == 0, "the parent sees the child's write");
    memset(mine, 0, 16);
    for (size_t i = 0; i < 16; i++)
        mine[i] = (unsigned char)(i * 7 + 3);

    /* At a fixed address in the child (libvram's path): reserve, map the
     * slot, read, unmap: the slot stays reserved. */
    uint64_t base = free_range(4ull * SIZE);
    snprintf(cmd, sizeof(cmd), "vm %" PRIu64 " %u %" PRIu64, rw, SIZE, base);
    ask(cmd, line, sizeof(line));
    int reserved = 0, freed = 0;
    CHECK(sscanf(line, "vm %" SCNu64 " reserved %d free-after %d", &got, &reserved, &freed) ==
              3,
          "vm: %s", line);
    CHECK(got == want, "the child read the section through its fixed-address view");
    CHECK(reserved == 1, "the unmapped slot stayed reserved");
    CHECK(freed == 1, "the release freed the range");

    /* Closing a handle inside the child. */
    snprintf(cmd, sizeof(cmd), "valid %" PRIu64, rw);
    ask(cmd, line, sizeof(line));
    CHECK(strcmp(line, "valid 1") == 0, "the rw copy is open in the child: %s", line);
    CHECK(vp_handle_close_remote(pin, rw) == 0, "close it there");
    ask(cmd, line, sizeof(line));
    CHECK(strcmp(line, "valid 0") == 0, "gone in the child: %s", line);
    /* A value that names nothing there. (Not rw again: a closed value is
     * free for the child's next handle, which wine's I/O in the child took
     * in one run; the daemon closes only values its client never had the
     * chance to close itself.) */
    ask("valid 32764", line, sizeof(line));
    CHECK(strcmp(line, "valid 0") == 0, "32764 names nothing in the child: %s", line);
    int none = vp_handle_close_remote(pin, 32764);
    CHECK(none == -EBADF, "closing nothing: EBADF, not %d", none);
    snprintf(cmd, sizeof(cmd), "valid %" PRIu64, ro);
    ask(cmd, line, sizeof(line));
    CHECK(strcmp(line, "valid 1") == 0, "the other copy is untouched: %s", line);

    /* Any object with its own access (a CUDA handle is pushed so). */
    vp_handle ev = {(intptr_t)CreateEventW(NULL, TRUE, FALSE, NULL)};
    uint64_t evv = 0;
    CHECK(vp_handle_push(pin, ev, VP_PUSH_SAME, &evv) == 0, "push an event as it is");
    snprintf(cmd, sizeof(cmd), "valid %" PRIu64, evv);
    ask(cmd, line, sizeof(line));
    CHECK(strcmp(line, "valid 1") == 0, "open there: %s", line);
    CHECK(vp_handle_push(pin, ev, 8, &evv) == -EINVAL, "an unknown access");
    vp_close(&ev);

    ask("exit 0", line, sizeof(line));
    CHECK(strcmp(line, "bye") == 0, "bye");
    int status = -1;
    /* Bounded: vp_wait_child waits for ever. */
    if (WaitForSingleObject((HANDLE)pin.v, 10000) != WAIT_OBJECT_0) {
        CHECK(false, "the child did not exit: killed");
        vp_proc_kill(pin);
    }
    CHECK(vp_wait_child(pid, &status) == 0 && status == 0, "the child exited with %d",
          status);
    /* The process is gone: nothing to push into. */
    uint64_t v;
    CHECK(vp_handle_push(pin, sec, VP_PUSH_MAP_READ, &v) < 0, "no pushing into the dead");
    UnmapViewOfFile(mine);
    vp_close(&sec);
    vp_close(&pin);
    vp_close(&child);
    vp_pipe_listen_close(&l);
    free(id);
    return win_report("test_win_push");
}
