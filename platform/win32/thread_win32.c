/* SPDX-License-Identifier: Apache-2.0 */
/* Threads and recursive mutexes on Windows. A CRITICAL_SECTION is recursive
 * already: the thread that holds it may enter it again, and must leave it
 * as often. */
#include "platform/thread.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <process.h>
#include <stdlib.h>

#include "platform/win32/winerr.h"

struct vp_thread {
    HANDLE h;
    void (*fn)(void *);
    void *arg;
};

struct vp_mutex {
    CRITICAL_SECTION cs;
};

static unsigned __stdcall trampoline(void *p)
{
    struct vp_thread *t = p;
    t->fn(t->arg);
    return 0;
}

int vp_thread_start(vp_thread **out, void (*fn)(void *), void *arg)
{
    struct vp_thread *t = malloc(sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->fn = fn;
    t->arg = arg;
    /* _beginthreadex, not CreateThread: the thread calls the C runtime
     * (snprintf, errno), whose per-thread state the runtime sets up for
     * threads it starts. Windows has no signal masks to clear: console
     * events come on a thread of their own. */
    uintptr_t h = _beginthreadex(NULL, 0, trampoline, t, 0, NULL);
    if (h == 0) {
        int e = errno ? -errno : -EAGAIN;
        free(t);
        return e;
    }
    t->h = (HANDLE)h;
    *out = t;
    return 0;
}

void vp_thread_join(vp_thread *t)
{
    if (!t)
        return;
    WaitForSingleObject(t->h, INFINITE);
    CloseHandle(t->h);
    free(t);
}

int vp_mutex_new(vp_mutex **out)
{
    struct vp_mutex *m = malloc(sizeof(*m));
    if (!m)
        return -ENOMEM;
    /* Cannot fail since Windows Vista. */
    InitializeCriticalSection(&m->cs);
    *out = m;
    return 0;
}

void vp_mutex_lock(vp_mutex *m)
{
    EnterCriticalSection(&m->cs);
}

void vp_mutex_unlock(vp_mutex *m)
{
    LeaveCriticalSection(&m->cs);
}

void vp_mutex_free(vp_mutex *m)
{
    if (!m)
        return;
    DeleteCriticalSection(&m->cs);
    free(m);
}
