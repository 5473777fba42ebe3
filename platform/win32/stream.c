/* SPDX-License-Identifier: Apache-2.0 */
/* Pipe connections handed to libuv, and the acceptor thread that feeds a
 * loop with connected instances. */
#include "platform/win32/stream.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "platform/win32/conn_state.h"

/* libuv's error codes on Windows are its own numbers, not the C runtime's
 * errno values: the ones uv_pipe_init and uv_pipe_open return. */
static int uv_errno(int e)
{
    switch (e) {
    case 0:
        return 0;
    case UV_EINVAL:
        return -EINVAL;
    case UV_EBADF:
        return -EBADF;
    case UV_EBUSY:
        return -EBUSY;
    case UV_EACCES:
        return -EACCES;
    case UV_ENOTSOCK:
        return -ENOTSOCK;
    case UV_ENOMEM:
        return -ENOMEM;
    case UV_EPIPE:
        return -EPIPE;
    case UV_EMFILE:
        return -EMFILE;
    default:
        return -EIO;
    }
}

int vp_stream_open(uv_loop_t *loop, uv_pipe_t *p, vp_handle *h)
{
    HANDLE os = (HANDLE)h->v;
    *h = VP_NONE;
    int e = uv_pipe_init(loop, p, 0);
    if (e) {
        CloseHandle(os);
        return uv_errno(e);
    }
    /* conn_win32.c's state of the handle (a vp_dial'd one) is not libuv's. */
    vpw_conn_forget(os);
    /* uv_pipe_open takes a C runtime descriptor. */
    int fd = _open_osfhandle((intptr_t)os, _O_BINARY);
    if (fd < 0) {
        CloseHandle(os);
        return -EMFILE;
    }
    e = uv_pipe_open(p, fd);
    /* For descriptors 0-2 (free in a service, which has no console) libuv
     * works on a duplicate of the handle and leaves the descriptor alone;
     * above them it owns the descriptor once it succeeded. */
    if (e || fd <= 2)
        _close(fd);
    return uv_errno(e);
}

/* Accepted instances waiting for the loop (or failures to report). */
struct item {
    struct vp_pipe_conn c;
    int err;
};

/* How many may wait before the thread stops accepting for a while (the
 * loop has not run for some time). */
#define QUEUE_MAX 256
#define PAUSE_MS 250

struct vp_acceptor {
    uv_async_t async;
    struct vp_pipe_listener *l;
    vp_acceptor_fn fn;
    vp_acceptor_err_fn err_fn;
    void *data;
    HANDLE thread;
    SRWLOCK lock;
    struct item q[QUEUE_MAX];
    size_t head, n;
    atomic_bool stop;
};

static bool push(struct vp_acceptor *a, struct item it)
{
    AcquireSRWLockExclusive(&a->lock);
    bool ok = a->n < QUEUE_MAX;
    if (ok)
        a->q[(a->head + a->n++) % QUEUE_MAX] = it;
    ReleaseSRWLockExclusive(&a->lock);
    return ok;
}

static bool pop(struct vp_acceptor *a, struct item *it)
{
    AcquireSRWLockExclusive(&a->lock);
    bool ok = a->n > 0;
    if (ok) {
        *it = a->q[a->head];
        a->head = (a->head + 1) % QUEUE_MAX;
        a->n--;
    }
    ReleaseSRWLockExclusive(&a->lock);
    return ok;
}

static DWORD WINAPI accept_thread(void *arg)
{
    struct vp_acceptor *a = arg;
    while (!atomic_load(&a->stop)) {
        struct item it = {.c = {.h = VP_NONE}};
        it.err = vp_pipe_accept(a->l, -1, &it.c);
        if (it.err == -EINTR)
            continue; /* woken: stop is looked at again */
        if (atomic_load(&a->stop)) {
            if (it.err == 0)
                vp_close(&it.c.h);
            break;
        }
        while (!push(a, it)) { /* full: the loop is behind */
            if (atomic_load(&a->stop)) {
                vp_close(&it.c.h);
                return 0;
            }
            Sleep(10);
        }
        uv_async_send(&a->async);
        /* After a failure, never spin (out of handles: the instances
         * cannot be made until some are closed). */
        if (it.err < 0)
            Sleep(PAUSE_MS);
    }
    return 0;
}

static void on_async(uv_async_t *as)
{
    struct vp_acceptor *a = as->data;
    struct item it;
    while (!atomic_load(&a->stop) && pop(a, &it)) {
        if (it.err == 0)
            a->fn(a->data, it.c);
        else if (a->err_fn)
            a->err_fn(a->data, it.err);
    }
}

static void acceptor_closed(uv_handle_t *h)
{
    free(h->data);
}

int vp_acceptor_start(uv_loop_t *loop, struct vp_pipe_listener *l,
                      vp_acceptor_fn fn, vp_acceptor_err_fn err_fn, void *data,
                      struct vp_acceptor **out)
{
    struct vp_acceptor *a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->l = l;
    a->fn = fn;
    a->err_fn = err_fn;
    a->data = data;
    InitializeSRWLock(&a->lock);
    atomic_init(&a->stop, false);
    int e = uv_async_init(loop, &a->async, on_async);
    if (e) {
        free(a);
        return uv_errno(e);
    }
    a->async.data = a;
    a->thread = CreateThread(NULL, 0, accept_thread, a, 0, NULL);
    if (!a->thread) {
        /* Freed when the loop has run the close. */
        uv_close((uv_handle_t *)&a->async, acceptor_closed);
        return -ENOMEM;
    }
    *out = a;
    return 0;
}

void vp_acceptor_stop(struct vp_acceptor *a)
{
    if (!a)
        return;
    atomic_store(&a->stop, true);
    vp_pipe_listen_wake(a->l);
    WaitForSingleObject(a->thread, INFINITE);
    CloseHandle(a->thread);
    struct item it;
    while (pop(a, &it))
        if (it.err == 0)
            vp_close(&it.c.h);
    uv_close((uv_handle_t *)&a->async, acceptor_closed);
}
