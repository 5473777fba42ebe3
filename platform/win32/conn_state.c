/* SPDX-License-Identifier: Apache-2.0 */
/* The table of connection entries: a hash of handle values, chained,
 * doubling as it fills, under one slim reader/writer lock. */
#include "platform/win32/conn_state.h"

#include <winternl.h>

#include <errno.h>
#include <stdlib.h>

static SRWLOCK lock = SRWLOCK_INIT;
static struct vpw_conn **buckets;
static size_t nbuckets, count;

/* Handle values are multiples of 4: mixed (Fibonacci hashing) so that
 * consecutive ones spread over the buckets. */
static size_t slot(HANDLE h, size_t n)
{
    return (size_t)((((uintptr_t)h >> 2) * 0x9e3779b97f4a7c15ull) >> 20) & (n - 1);
}

static struct vpw_conn *find_locked(HANDLE h)
{
    if (!nbuckets)
        return NULL;
    struct vpw_conn *s = buckets[slot(h, nbuckets)];
    while (s && s->h != h)
        s = s->next;
    return s;
}

/* Twice the buckets; on failure the table stays as it is, only slower. */
static void grow_locked(void)
{
    size_t n = nbuckets ? 2 * nbuckets : 64;
    struct vpw_conn **b = calloc(n, sizeof(*b));
    if (!b)
        return;
    for (size_t i = 0; i < nbuckets; i++)
        for (struct vpw_conn *s = buckets[i], *next; s; s = next) {
            next = s->next;
            size_t k = slot(s->h, n);
            s->next = b[k];
            b[k] = s;
        }
    free(buckets);
    buckets = b;
    nbuckets = n;
}

static void entry_free(struct vpw_conn *s)
{
    HANDLE evs[] = {s->shut_ev, s->wov.hEvent, s->rov.hEvent, s->zov.hEvent};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        if (evs[i])
            CloseHandle(evs[i]);
    free(s->wbuf);
    free(s->peer_path);
    free(s);
}

/* Whether h is a pipe whose I/O is overlapped (FILE_FLAG_OVERLAPPED at
 * CreateFile or CreateNamedPipe): the synchronous-I/O flags show in the
 * file's mode, which only ntdll tells. */
static int check_pipe(HANDLE h)
{
    DWORD flags;
    if (!GetHandleInformation(h, &flags))
        return -EBADF;
    if (GetFileType(h) != FILE_TYPE_PIPE)
        return -ENOTSOCK;
    IO_STATUS_BLOCK io;
    ULONG mode = 0;
    if (NtQueryInformationFile(h, &io, &mode, sizeof(mode), FileModeInformation) < 0)
        return -ENOTSOCK;
    return mode & (FILE_SYNCHRONOUS_IO_ALERT | FILE_SYNCHRONOUS_IO_NONALERT)
               ? -ENOTSOCK
               : 0;
}

static struct vpw_conn *entry_new(HANDLE h)
{
    struct vpw_conn *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->h = h;
    atomic_init(&s->shut, false);
    /* Manual-reset events: each call resets its own before starting I/O. */
    s->shut_ev = CreateEventW(NULL, TRUE, FALSE, NULL);
    s->wov.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
    s->rov.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
    s->zov.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
    s->wbuf = malloc(VPW_SEND_MAX);
    if (!s->shut_ev || !s->wov.hEvent || !s->rov.hEvent || !s->zov.hEvent ||
        !s->wbuf) {
        entry_free(s);
        return NULL;
    }
    return s;
}

int vpw_conn_get(HANDLE h, struct vpw_conn **out)
{
    AcquireSRWLockShared(&lock);
    struct vpw_conn *s = find_locked(h);
    ReleaseSRWLockShared(&lock);
    if (s) {
        *out = s;
        return 0;
    }
    int e = check_pipe(h);
    if (e < 0)
        return e;
    struct vpw_conn *made = entry_new(h);
    if (!made)
        return -ENOMEM;
    AcquireSRWLockExclusive(&lock);
    s = find_locked(h); /* another thread may have made it meanwhile */
    if (!s) {
        if (count >= 2 * nbuckets)
            grow_locked();
        if (nbuckets) {
            size_t k = slot(h, nbuckets);
            made->next = buckets[k];
            buckets[k] = made;
            count++;
            s = made;
            made = NULL;
        }
    }
    ReleaseSRWLockExclusive(&lock);
    if (made)
        entry_free(made);
    if (!s)
        return -ENOMEM;
    *out = s;
    return 0;
}

void vpw_conn_forget(HANDLE h)
{
    /* Every vp_close comes here, most for handles that are no connection
     * (sections, processes): those only share the lock. */
    AcquireSRWLockShared(&lock);
    bool known = find_locked(h) != NULL;
    ReleaseSRWLockShared(&lock);
    if (!known)
        return;
    AcquireSRWLockExclusive(&lock);
    struct vpw_conn *s = NULL;
    if (nbuckets) {
        struct vpw_conn **p = &buckets[slot(h, nbuckets)];
        while (*p && (*p)->h != h)
            p = &(*p)->next;
        if ((s = *p)) {
            *p = s->next;
            count--;
        }
    }
    ReleaseSRWLockExclusive(&lock);
    if (!s)
        return;
    if (s->wpending) {
        /* The kernel writes from wbuf until the write ends: cancel it and
         * wait for that before freeing. */
        DWORD n;
        CancelIoEx(h, &s->wov);
        GetOverlappedResult(h, &s->wov, &n, TRUE);
    }
    entry_free(s);
}
