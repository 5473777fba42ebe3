/* SPDX-License-Identifier: Apache-2.0 */
/* vramd-holder.exe: keeps vramd's handles while vramd is not there, and
 * does nothing else (platform/keeper.h says why and when vramd starts it).
 *
 *   vramd-holder.exe --pipe NAME [--max N] [--grace-ms MS]
 *
 * It serves NAME (vramd's pipe with ".keeper" after it: the pipe listener's
 * security descriptor, SYSTEM, Administrators and its own user; the first
 * instance made as such, so a name someone else holds is refused), one
 * vramd of its own user at a time (keeper_lines.h), and exits once it
 * keeps nothing and no vramd is connected, or when no vramd came within
 * the grace period after its start. vramd starts it detached (no console,
 * a process group of its own, out of vramd's job where the job allows):
 * vramd's end, or a service stop, does not end it.
 *
 * Two threads: this one serves the connected vramd; the acceptor takes the
 * next connection and hands it over once the current one is gone, or
 * refuses it (another user; another vramd while one is connected) after
 * reading its hello, so the refusal's reason reaches it. */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/clock.h"
#include "platform/conn.h"
#include "platform/win32/identity.h"
#include "platform/win32/keeper_lines.h"
#include "platform/keeper_names.h"
#include "platform/win32/pipe_listener.h"
#include "platform/win32/push.h"

#define HELLO_MS 5000
#define GRACE_MS 10000
#define IO_MS 5000

struct client {
    vp_handle c;   /* VP_NONE when none */
    vp_handle pin; /* its process (PROCESS_DUP_HANDLE) */
    int64_t pid;
};

static struct {
    struct vp_pipe_listener *l;
    struct vp_sid self;
    SRWLOCK lock; /* current, pending */
    struct client current, pending;
    HANDLE handed; /* set when pending has a client */
    struct vpx_names kept;
} h = {.lock = SRWLOCK_INIT};

static void client_close(struct client *c)
{
    vp_close(&c->c);
    vp_close(&c->pin);
    c->pid = 0;
}

/* Whether the pipe's other end is still there. */
static bool alive(vp_handle c)
{
    DWORD avail;
    return vp_ok(c) && PeekNamedPipe((HANDLE)c.v, NULL, 0, NULL, &avail, NULL);
}

/* Answers c's hello with err, then lets it read the answer before the
 * close. */
static void refuse(vp_handle *c, int err, int64_t arg)
{
    struct vpw_lines in = {.c = *c};
    char line[VPW_LINE_MAX];
    if (vpw_line_recv(&in, line, sizeof(line), 2000) == 0)
        vpw_line_send(*c, 2000, "err %d %lld", err, (long long)arg);
    while (vpw_line_recv(&in, line, sizeof(line), 2000) == 0)
        ;
    vp_close(c);
}

static DWORD WINAPI acceptor(void *arg)
{
    (void)arg;
    struct vp_identity *id = malloc(sizeof(*id));
    if (!id)
        ExitProcess(3);
    for (;;) {
        struct vp_pipe_conn pc;
        if (vp_pipe_accept(h.l, -1, &pc) < 0) {
            Sleep(100); /* out of something: never spin */
            continue;
        }
        vp_handle pin = VP_NONE;
        char why[128];
        if (vp_identity_of_pipe(pc.h, pc.connected_at, id, &pin, why,
                                sizeof(why)) < 0 ||
            !vp_sid_equal(&id->user, &h.self)) {
            vp_close(&pin);
            refuse(&pc.h, EPERM, 0);
            continue;
        }
        AcquireSRWLockExclusive(&h.lock);
        bool busy = alive(h.current.c) || vp_ok(h.pending.c);
        int64_t other = vp_ok(h.current.c) ? h.current.pid : h.pending.pid;
        if (!busy)
            h.pending = (struct client){.c = pc.h, .pin = pin, .pid = id->pid};
        ReleaseSRWLockExclusive(&h.lock);
        if (busy) {
            vp_close(&pin);
            refuse(&pc.h, EBUSY, other);
        } else {
            SetEvent(h.handed);
        }
    }
}

/* One request of the current client: 0 to go on, < 0 to drop it. */
static int serve(struct client *c, char *line, bool *hello)
{
    char name[VP_KEEPER_NAME_MAX + 2];
    unsigned long long value;
    int version;
    if (!*hello) {
        if (sscanf(line, "hello %d", &version) != 1)
            return -EPROTO;
        if (version != VPW_KEEPER_VERSION) {
            vpw_line_send(c->c, IO_MS, "err %d %d", EPROTO, VPW_KEEPER_VERSION);
            return -EPROTO;
        }
        *hello = true;
        return vpw_line_send(c->c, IO_MS, "ok %d %zu %u", VPW_KEEPER_VERSION,
                             h.kept.n, h.kept.max);
    }
    if (sscanf(line, "put %65s %llu", name, &value) == 2) {
        /* The holder's own copy, made from vramd's handle: a value vramd
         * sends names one of vramd's handles, never one of the holder's. */
        HANDLE mine = NULL;
        if (!DuplicateHandle((HANDLE)c->pin.v, (HANDLE)(uintptr_t)value,
                             GetCurrentProcess(), &mine, 0, FALSE,
                             DUPLICATE_SAME_ACCESS))
            return vpw_line_send(c->c, IO_MS, "err %d", EBADF);
        int e = vpx_names_add(&h.kept, name, (int64_t)(uintptr_t)mine);
        if (e < 0) {
            CloseHandle(mine);
            return vpw_line_send(c->c, IO_MS, "err %d", -e);
        }
        return vpw_line_send(c->c, IO_MS, "ok");
    }
    if (sscanf(line, "remove %65s", name) == 1) {
        int64_t v;
        int e = vpx_names_del(&h.kept, name, &v);
        if (e < 0)
            return vpw_line_send(c->c, IO_MS, "err %d", -e);
        CloseHandle((HANDLE)(uintptr_t)v);
        return vpw_line_send(c->c, IO_MS, "ok");
    }
    if (strcmp(line, "list") == 0) {
        size_t n = 0;
        for (size_t i = 0; i < h.kept.cap; i++) {
            const struct vpx_name_slot *s = &h.kept.slot[i];
            uint64_t theirs;
            if (!s->name[0] ||
                vp_handle_push(c->pin, (vp_handle){(intptr_t)s->v}, VP_PUSH_SAME,
                               &theirs) < 0)
                continue;
            int e = vpw_line_send(c->c, IO_MS, "entry %s %" PRIu64, s->name,
                                  theirs);
            if (e < 0) {
                vp_handle_close_remote(c->pin, theirs);
                return e;
            }
            n++;
        }
        return vpw_line_send(c->c, IO_MS, "end %zu", n);
    }
    return -EPROTO;
}

static void usage(void)
{
    fprintf(stderr, "usage: vramd-holder.exe --pipe NAME [--max N] [--grace-ms MS]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *pipe = NULL;
    long max = VP_KEEPER_DEFAULT_MAX, grace = GRACE_MS;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            usage();
        const char *a = argv[i], *v = argv[i + 1];
        char *end = NULL;
        if (strcmp(a, "--pipe") == 0)
            pipe = v;
        else if (strcmp(a, "--max") == 0)
            max = strtol(v, &end, 10);
        else if (strcmp(a, "--grace-ms") == 0)
            grace = strtol(v, &end, 10);
        else
            usage();
        if (end && (*end || end == v))
            usage();
    }
    if (!pipe || max <= 0 || max > INT32_MAX || grace < 0)
        usage();
    struct vp_identity *me = malloc(sizeof(*me));
    if (!me || vp_identity_self(me) < 0) {
        fprintf(stderr, "vramd-holder: who am I?\n");
        return 1;
    }
    h.self = me->user;
    free(me);
    vpx_names_init(&h.kept, (unsigned)max);
    char why[256];
    struct vp_pipe_listen_cfg cfg = {.name = pipe};
    int e = vp_pipe_listen(&cfg, &h.l, why, sizeof(why));
    if (e < 0) {
        fprintf(stderr, "vramd-holder: %s\n", why);
        return e == -EADDRINUSE ? 3 : 1;
    }
    h.current.c = h.current.pin = h.pending.c = h.pending.pin = VP_NONE;
    h.handed = CreateEventW(NULL, FALSE, FALSE, NULL);
    if (!h.handed || !CreateThread(NULL, 0, acceptor, NULL, 0, NULL)) {
        fprintf(stderr, "vramd-holder: cannot start its acceptor\n");
        return 1;
    }
    int64_t idle_until = vp_now_ms() + grace;
    bool had_client = false;
    for (;;) {
        /* Nobody connected: wait for one (for ever while something is
         * kept; else within the grace period, or not at all once a vramd
         * came and went). */
        if (h.kept.n == 0 && had_client)
            ExitProcess(0);
        int64_t left = idle_until - vp_now_ms();
        DWORD wait = h.kept.n ? INFINITE : left > 0 ? (DWORD)left : 0;
        if (WaitForSingleObject(h.handed, wait) != WAIT_OBJECT_0) {
            if (h.kept.n == 0)
                ExitProcess(0);
            continue;
        }
        AcquireSRWLockExclusive(&h.lock);
        h.current = h.pending;
        h.pending = (struct client){.c = VP_NONE, .pin = VP_NONE};
        ReleaseSRWLockExclusive(&h.lock);
        if (!vp_ok(h.current.c))
            continue;
        had_client = true;
        struct vpw_lines in = {.c = h.current.c};
        bool hello = false;
        int64_t due = vp_now_ms() + HELLO_MS;
        for (;;) {
            char line[VPW_LINE_MAX];
            int ms = 0;
            if (!hello) {
                int64_t l2 = due - vp_now_ms();
                ms = l2 > 0 ? (int)l2 : 1;
            }
            if (vpw_line_recv(&in, line, sizeof(line), ms) < 0 ||
                serve(&h.current, line, &hello) < 0)
                break; /* whatever it did, what is kept stays kept */
        }
        AcquireSRWLockExclusive(&h.lock);
        client_close(&h.current);
        ReleaseSRWLockExclusive(&h.lock);
    }
}
