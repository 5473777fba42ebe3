/* SPDX-License-Identifier: Apache-2.0 */
/* Handles on Windows are HANDLEs: pipes, sections, processes and events,
 * named by a value in this process's handle table. None is inheritable:
 * every one the platform makes is created so, and vp_dup keeps it so. */
#include "platform/handle.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>

#include "platform/win32/conn_state.h"
#include "platform/win32/winerr.h"

static HANDLE H(vp_handle h)
{
    return (HANDLE)h.v;
}

void vp_close(vp_handle *h)
{
    if (h && h->v != -1) {
        /* A connection's state goes first: its write in flight needs the
         * handle to be cancelled. */
        vpw_conn_forget(H(*h));
        CloseHandle(H(*h));
        h->v = -1;
    }
}

bool vp_valid(vp_handle h)
{
    DWORD flags;
    /* 0 is no handle on Windows, though vp_ok takes it. */
    return h.v != -1 && h.v != 0 && GetHandleInformation(H(h), &flags);
}

int vp_dup(vp_handle h, vp_handle *out)
{
    /* The copy is a connection of its own for conn_win32.c: blocking, no receive
     * timeout (POSIX shares O_NONBLOCK between the two; nothing here needs
     * that). */
    HANDLE d;
    if (!DuplicateHandle(GetCurrentProcess(), H(h), GetCurrentProcess(), &d,
                         0, FALSE, DUPLICATE_SAME_ACCESS))
        return vpw_last_errno();
    out->v = (intptr_t)d;
    return 0;
}

int vp_replace(vp_handle dst, vp_handle *src)
{
    /* Windows has no dup2: a handle value cannot be made to name another
     * object, so what keeps a number across a reconnect (client/lib's
     * connect_again) cannot work here. src stays open for the caller. */
    return -ENOSYS;
}

int vp_set_noinherit(vp_handle h)
{
    return SetHandleInformation(H(h), HANDLE_FLAG_INHERIT, 0) ? 0
                                                               : vpw_last_errno();
}

void vp_raise_handle_limit(void)
{
    /* Nothing to raise: Windows has no per-process soft limit on handles
     * (a process may hold about 16 million). */
}

void vp_reserve_handle_table(uint64_t n)
{
    (void)n; /* the handle table grows without waiting for other threads */
}

uint64_t vp_handle_limit(void)
{
    return 1ull << 24; /* about 16 million handles a process */
}

bool vp_handles_inline(void)
{
    /* A HANDLE's value means nothing in another process: the sender
     * duplicates each handle into the receiver's process and sends the
     * value it has there (proto/codec.h, inline mode). */
    return true;
}
