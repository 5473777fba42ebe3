/* SPDX-License-Identifier: Apache-2.0 */
/* Connections on Windows: byte-mode named pipes opened for overlapped I/O
 * (vp_dial here; the listener's vp_pipe_accept, platform/win32/pipe_listener.h),
 * with handles carried inline in the frames (vp_handles_inline), never
 * beside the bytes.
 *
 * A pipe has no send that takes what fits and says how much: an overlapped
 * write completes at once when its bytes fit in the pipe's buffer, and
 * otherwise stays pending until the reader has taken them all; cancelling
 * it does not tell how much the reader took meanwhile (wine 8 reports 0
 * after the reader took part of it), so a cancelled write could be sent
 * twice. Instead a send that does not complete at once stays in flight,
 * from a copy of its bytes (conn_state.h), and counts as sent, as a POSIX
 * socket's buffer would have taken them. The next send returns -EAGAIN
 * until it completed, vp_conn_wait waits for it for VP_WRITABLE, and a
 * failure it meets is reported by the next send and by vp_conn_error.
 *
 * A receive without waiting asks the pipe how much is there
 * (PeekNamedPipe) and reads no more, so it never has to cancel; a waiting
 * receive waits for its read, the receive timeout or vp_conn_shut_receive,
 * and cancels the read if it has not completed (that loses nothing: a read
 * of a byte pipe completes as soon as any byte is there). Readability is
 * waited for with a zero-byte read, which completes when data arrives, as
 * libuv does on pipes. */
#include "platform/conn.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "platform/clock.h"
#include "platform/win32/conn_state.h"
#include "platform/win32/identity.h"
#include "platform/win32/winerr.h"
#include "platform/win32/wstr.h"

/* Where pipes live: a dial to anything else would open a file. */
#define PIPE_PREFIX L"\\\\.\\pipe\\"
/* Pipe names are at most 256 characters. */
#define PIPE_NAME_MAX 256
/* How long a dial waits for a free instance of a busy pipe (all the
 * daemon's instances taken: a POSIX connect would wait in the backlog). */
#define DIAL_BUSY_MS 5000

static HANDLE H(vp_handle h)
{
    return (HANDLE)h.v;
}

int vp_dial(const char *path, vp_handle *out)
{
    wchar_t name[PIPE_NAME_MAX + 1];
    if (!MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, name,
                             PIPE_NAME_MAX + 1))
        return GetLastError() == ERROR_INSUFFICIENT_BUFFER ? -ENAMETOOLONG
                                                           : -EINVAL;
    if (_wcsnicmp(name, PIPE_PREFIX, wcslen(PIPE_PREFIX)) != 0)
        return -EINVAL;
    int64_t deadline = vp_now_ms() + DIAL_BUSY_MS;
    HANDLE h;
    for (;;) {
        /* SECURITY_IDENTIFICATION: the daemon may read who we are from our
         * token, not act as us. Not inheritable (no security attributes).
         * FILE_WRITE_DATA, not GENERIC_WRITE: vramd's pipe grants its
         * clients no more (platform/win32/pipe_listener.h says why). */
        h = CreateFileW(name, GENERIC_READ | FILE_WRITE_DATA, 0, NULL,
                        OPEN_EXISTING,
                        FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT |
                            SECURITY_IDENTIFICATION,
                        NULL);
        if (h != INVALID_HANDLE_VALUE)
            break;
        DWORD err = GetLastError();
        if (err == ERROR_PIPE_NOT_CONNECTED)
            return -ECONNREFUSED; /* the server is closing that instance */
        if (err != ERROR_PIPE_BUSY)
            return vpw_errno(err);
        int64_t left = deadline - vp_now_ms();
        if (left <= 0)
            return -EAGAIN;
        /* Returns when an instance is free, the pipe is gone or left ran
         * out; the next CreateFileW tells which. */
        WaitNamedPipeW(name, (DWORD)left);
    }
    /* The path, for vp_conn_peer_path: a pipe does not tell its client. */
    struct vpw_conn *s;
    int e = vpw_conn_get(h, &s);
    if (e == 0 && !(s->peer_path = _strdup(path)))
        e = -ENOMEM;
    if (e < 0) {
        vpw_conn_forget(h);
        CloseHandle(h);
        return e;
    }
    out->v = (intptr_t)h;
    return 0;
}

/* A write's failure as a send reports it: the reader gone is EPIPE. */
static int send_errno(DWORD err)
{
    if (err == ERROR_BROKEN_PIPE || err == ERROR_NO_DATA ||
        err == ERROR_PIPE_NOT_CONNECTED)
        return -EPIPE;
    return vpw_errno(err);
}

/* Collects the write in flight if it ended: 0 when none is left (a failure
 * of it kept in werr), -EAGAIN while it runs. */
static int write_done(struct vpw_conn *s)
{
    if (!s->wpending)
        return 0;
    DWORD n;
    if (!GetOverlappedResult(s->h, &s->wov, &n, FALSE)) {
        DWORD err = GetLastError();
        if (err == ERROR_IO_INCOMPLETE)
            return -EAGAIN;
        s->werr = send_errno(err);
    }
    s->wpending = false;
    return 0;
}

long vp_send(vp_handle c, const void *buf, size_t len, const vp_handle *hs,
             int n)
{
    if (n != 0)
        return -EINVAL; /* handles travel inline here, in buf */
    struct vpw_conn *s;
    int e = vpw_conn_get(H(c), &s);
    if (e < 0)
        return e;
    if ((e = write_done(s)) < 0)
        return e;
    if (s->werr) {
        e = s->werr;
        s->werr = 0;
        return e;
    }
    if (len == 0)
        return 0;
    DWORD k = len < VPW_SEND_MAX ? (DWORD)len : VPW_SEND_MAX;
    /* The kernel reads the bytes until the write completes, which may be
     * after this call: they go from our own copy. */
    memcpy(s->wbuf, buf, k);
    DWORD done;
    if (WriteFile(s->h, s->wbuf, k, NULL, &s->wov))
        return GetOverlappedResult(s->h, &s->wov, &done, FALSE)
                   ? (long)done
                   : send_errno(GetLastError());
    DWORD err = GetLastError();
    if (err != ERROR_IO_PENDING)
        return send_errno(err);
    s->wpending = true;
    return (long)k;
}

/* A read's failure as a receive reports it: the writer's end closed is the
 * end of the stream (a pipe tells an orderly close from a crash no more
 * than it tells the two apart for the writer). */
static long recv_errno(DWORD err)
{
    return err == ERROR_BROKEN_PIPE ? 0 : vpw_errno(err);
}

long vp_recv(vp_handle c, void *buf, size_t len, vp_handle *hs, int max,
             int *nh, int flags, char *why, size_t whylen)
{
    *nh = 0; /* no handle comes beside the bytes here */
    struct vpw_conn *s;
    int e = vpw_conn_get(H(c), &s);
    if (e < 0)
        return e;
    if (atomic_load(&s->shut))
        return 0;
    if (len == 0)
        return -EAGAIN; /* no room; 0 would read as the end of the stream */
    DWORD want = len < MAXDWORD ? (DWORD)len : MAXDWORD;
    bool wait = (flags & VP_RECV_WAIT) && !s->nonblocking;
    if (!wait) {
        DWORD avail = 0;
        if (!PeekNamedPipe(s->h, NULL, 0, NULL, &avail, NULL))
            return recv_errno(GetLastError());
        if (avail == 0)
            return -EAGAIN;
        if (want > avail)
            want = avail; /* so the read completes at once */
    }
    DWORD got;
    if (ReadFile(s->h, buf, want, NULL, &s->rov))
        return GetOverlappedResult(s->h, &s->rov, &got, FALSE)
                   ? (long)got
                   : recv_errno(GetLastError());
    DWORD err = GetLastError();
    if (err != ERROR_IO_PENDING)
        return recv_errno(err);
    /* Pending: nothing there yet (or, without waiting, another thread took
     * it first). The shut flag is read after the read started, so a shut
     * that came before is seen here and one after sets the event. */
    if (wait && !atomic_load(&s->shut)) {
        HANDLE evs[2] = {s->rov.hEvent, s->shut_ev};
        WaitForMultipleObjects(2, evs, FALSE,
                               s->recv_timeout_ms ? s->recv_timeout_ms : INFINITE);
    }
    if (!HasOverlappedIoCompleted(&s->rov))
        CancelIoEx(s->h, &s->rov);
    if (GetOverlappedResult(s->h, &s->rov, &got, TRUE))
        /* 0 bytes is a peer's empty write, never the end of the stream. */
        return got ? (long)got : -EAGAIN;
    err = GetLastError();
    if (err == ERROR_OPERATION_ABORTED)
        return atomic_load(&s->shut) ? 0 : -EAGAIN;
    return recv_errno(err);
}

int vp_conn_set_blocking(vp_handle c, bool blocking)
{
    struct vpw_conn *s;
    int e = vpw_conn_get(H(c), &s);
    if (e == 0)
        s->nonblocking = !blocking;
    return e;
}

bool vp_conn_blocking(vp_handle c)
{
    struct vpw_conn *s;
    return vpw_conn_get(H(c), &s) == 0 && !s->nonblocking;
}

int vp_conn_set_recv_timeout(vp_handle c, int ms)
{
    if (ms < 0)
        return -EINVAL;
    struct vpw_conn *s;
    int e = vpw_conn_get(H(c), &s);
    if (e == 0)
        s->recv_timeout_ms = (DWORD)ms;
    return e;
}

int vp_conn_peer_path(vp_handle c, char *buf, size_t len)
{
    struct vpw_conn *s;
    int e = vpw_conn_get(H(c), &s);
    if (e < 0)
        return e;
    if (!s->peer_path)
        return -ENOENT; /* accepted, or not made by vp_dial */
    snprintf(buf, len, "%s", s->peer_path);
    return 0;
}

int vp_conn_error(vp_handle c)
{
    struct vpw_conn *s;
    int e = vpw_conn_get(H(c), &s);
    if (e < 0)
        return e;
    write_done(s);
    e = s->werr;
    s->werr = 0;
    return e;
}

int vp_conn_shut_receive(vp_handle c)
{
    struct vpw_conn *s;
    int e = vpw_conn_get(H(c), &s);
    if (e < 0)
        return e;
    /* A pipe has no half-close: receives see the end from now on, and the
     * event wakes one that waits. */
    atomic_store(&s->shut, true);
    SetEvent(s->shut_ev);
    return 0;
}

/* What c is ready for now, of events. Readable also when a receive would
 * fail or end at once (POSIX poll's POLLHUP and POLLERR). */
static int ready_now(struct vpw_conn *s, int events)
{
    int ready = 0;
    if ((events & VP_WRITABLE) && write_done(s) == 0)
        ready |= VP_WRITABLE;
    if (events & VP_READABLE) {
        DWORD avail = 0;
        if (atomic_load(&s->shut) || s->werr ||
            !PeekNamedPipe(s->h, NULL, 0, NULL, &avail, NULL) || avail)
            ready |= VP_READABLE;
    }
    return ready;
}

int vp_conn_wait(vp_handle c, int events, int timeout_ms)
{
    struct vpw_conn *s;
    int e = vpw_conn_get(H(c), &s);
    if (e < 0)
        return e;
    int ready = ready_now(s, events);
    if (ready || timeout_ms == 0)
        return ready;
    HANDLE evs[3];
    DWORD n = 0;
    bool zero = false;
    if (events & VP_READABLE) {
        static char none;
        if (!ReadFile(s->h, &none, 0, NULL, &s->zov)) {
            if (GetLastError() != ERROR_IO_PENDING)
                return ready_now(s, events) | VP_READABLE; /* fails at once */
            zero = true;
            evs[n++] = s->zov.hEvent;
            evs[n++] = s->shut_ev;
        } else {
            return ready_now(s, events); /* data came meanwhile */
        }
    }
    if ((events & VP_WRITABLE) && s->wpending)
        evs[n++] = s->wov.hEvent;
    if (n == 0)
        return 0;
    DWORD w = WaitForMultipleObjects(n, evs, FALSE,
                                     timeout_ms < 0 ? INFINITE : (DWORD)timeout_ms);
    int werr = w == WAIT_FAILED ? vpw_last_errno() : 0;
    if (zero) {
        DWORD x;
        if (!HasOverlappedIoCompleted(&s->zov))
            CancelIoEx(s->h, &s->zov);
        GetOverlappedResult(s->h, &s->zov, &x, TRUE);
    }
    return werr ? werr : ready_now(s, events);
}

/* The service's state and process id, by the service manager:
 * 0, -ENOENT (no such service), or another negative errno. */
static int service_status(const char *service, SERVICE_STATUS_PROCESS *out)
{
    wchar_t w[256];
    if (vpw_wide(service, w, 256) < 0)
        return -EINVAL;
    SC_HANDLE m = OpenSCManagerW(NULL, NULL, SC_MANAGER_CONNECT);
    if (!m)
        return vpw_last_errno();
    int e = 0;
    SC_HANDLE s = OpenServiceW(m, w, SERVICE_QUERY_STATUS);
    if (!s) {
        DWORD err = GetLastError();
        e = err == ERROR_SERVICE_DOES_NOT_EXIST ? -ENOENT : vpw_errno(err);
    } else {
        DWORD n;
        if (!QueryServiceStatusEx(s, SC_STATUS_PROCESS_INFO, (BYTE *)out,
                                  sizeof(*out), &n))
            e = vpw_last_errno();
        CloseServiceHandle(s);
    }
    CloseServiceHandle(m);
    return e;
}

/* The pipe at path, if the process serving it is expected_pid: a
 * service's name pinned to its process (identity.h). Here, with the dial
 * it wraps, so that conn_win32.c and identity.c do not call each other. */
int vp_dial_server(const char *path, int64_t expected_pid, vp_handle *out,
                   char *why, size_t whylen)
{
    vp_handle h;
    int e = vp_dial(path, &h);
    if (e < 0) {
        snprintf(why, whylen, "cannot connect to %s: %s", path, strerror(-e));
        return e;
    }
    int64_t pid = 0;
    if ((e = vp_conn_server_pid(h, &pid)) < 0) {
        snprintf(why, whylen, "cannot tell which process serves %s: %s", path,
                 strerror(-e));
        vp_close(&h);
        return e;
    }
    if (pid != expected_pid) {
        snprintf(why, whylen, "%s is served by process %lld, not by vramd's "
                 "(%lld): refusing to talk to it", path, (long long)pid,
                 (long long)expected_pid);
        vp_close(&h);
        return -EPERM;
    }
    *out = h;
    return 0;
}

int vp_dial_daemon(const char *path, const char *service, vp_handle *out,
                   char *why, size_t whylen)
{
    char none[8];
    if (!why || !whylen) {
        why = none;
        whylen = sizeof(none);
    }
    why[0] = '\0';
    if (!service || !service[0])
        return vp_dial(path, out);
    SERVICE_STATUS_PROCESS st;
    int e = service_status(service, &st);
    if (e == -ENOENT)
        return vp_dial(path, out); /* no service: vramd runs by hand */
    if (e < 0) {
        snprintf(why, whylen, "cannot ask the service manager about service "
                 "%s: %s", service, strerror(-e));
        return e;
    }
    /* The pipe exists from the start's first steps (START_PENDING) to the
     * end of the stop (STOP_PENDING); the process is the service's then. */
    if (st.dwProcessId == 0 || (st.dwCurrentState != SERVICE_RUNNING &&
                                st.dwCurrentState != SERVICE_START_PENDING &&
                                st.dwCurrentState != SERVICE_STOP_PENDING)) {
        snprintf(why, whylen, "service %s is installed but not running: "
                 "refusing whoever serves %s", service, path);
        return -ECONNREFUSED;
    }
    return vp_dial_server(path, (int64_t)st.dwProcessId, out, why, whylen);
}
