/* SPDX-License-Identifier: Apache-2.0 */
/* The named-pipe listener: one instance at a time waits for a client with
 * an overlapped ConnectNamedPipe; when it is connected the next instance
 * is made before the connected one goes to the caller (so the name is held
 * throughout, and nobody can make a "first" instance of it in between).
 *
 * The pipe has one security descriptor, not one per instance: a later
 * instance's is ignored (NPFS and wine's server both keep the first
 * instance's and only check later creates against it). So a new one is
 * set on the pipe through the waiting instance's handle
 * (SetKernelObjectSecurity, which takes WRITE_DAC: every instance is
 * opened with it), and holds for every instance at once; no instance is
 * replaced and the name is never let go. The acceptor thread makes and
 * closes instances while another thread may set the descriptor: the lock
 * keeps the handle alive while it is used, and says which descriptor a
 * new instance gets. */
#include "platform/win32/pipe_listener.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <sddl.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "platform/win32/winerr.h"
#include "platform/win32/wstr.h"

#define DEFAULT_NAME "\\\\.\\pipe\\vramd"
#define PIPE_PREFIX L"\\\\.\\pipe\\"
#define PIPE_NAME_MAX 256
#define DEFAULT_BUFFER (64u << 10)

/* What an allowed user or group may do on the pipe: FILE_GENERIC_READ
 * (read data and attributes, READ_CONTROL, SYNCHRONIZE) and FILE_WRITE_DATA.
 * Not FILE_APPEND_DATA, which on a pipe is FILE_CREATE_PIPE_INSTANCE (part
 * of GENERIC_WRITE), nor FILE_WRITE_ATTRIBUTES, WRITE_DAC or WRITE_OWNER. */
#define CLIENT_ACCESS (FILE_GENERIC_READ | FILE_WRITE_DATA)

/* The longest SDDL vp_pipe_sddl writes: four ACEs of its own and the
 * list's, each at most a SID and 16 characters. */
#define SDDL_MAX (VP_SID_STRING_MAX * (VP_ACCESS_MAX + 4))

enum state {
    NO_INSTANCE, /* making one failed: the next accept tries again */
    IDLE,        /* an instance, not yet waiting */
    WAITING,     /* ConnectNamedPipe in flight */
    CONNECTED,   /* a client is there */
};

struct vp_pipe_listener {
    wchar_t wname[PIPE_NAME_MAX + 1];
    char *name;
    /* Under lock: pending's value (not its I/O, which is the accepting
     * thread's), sd, and sd_stale. sddl changes only with sd, on
     * set_allow's thread. */
    SRWLOCK lock;
    char *sddl;
    PSECURITY_DESCRIPTOR sd;
    /* sd was set while no instance existed: the pipe still has the one
     * before, until the next instance made gives it sd. */
    bool sd_stale;
    DWORD bufsize, max_instances;
    HANDLE pending;
    OVERLAPPED ov;
    enum state state;
    HANDLE wake; /* auto-reset: one wake for one accept */
};

int vp_pipe_sddl(const struct vp_access_list *allow, const struct vp_sid *self,
                 char *buf, size_t len)
{
    struct vp_identity *me = NULL;
    struct vp_sid own;
    if (!self) {
        me = malloc(sizeof(*me));
        if (!me)
            return -ENOMEM;
        int e = vp_identity_self(me);
        own = me->user;
        free(me);
        if (e < 0)
            return e;
        self = &own;
    }
    if (allow && (allow->n < 0 || allow->n > VP_ACCESS_MAX))
        return -EINVAL;
    char s[VP_SID_STRING_MAX];
    /* P: protected, nothing inherited. SYSTEM and Administrators: full
     * control, as the system's default descriptor for pipes gives them. */
    int n = snprintf(buf, len, "D:P(A;;GA;;;SY)(A;;GA;;;BA)");
    if (n < 0 || (size_t)n >= len)
        return -ENOSPC;
    size_t used = (size_t)n;
    struct vp_sid sy;
    vp_sid_parse("S-1-5-18", &sy);
    /* The daemon's own user, unless it is SYSTEM: making the next
     * instance takes FILE_CREATE_PIPE_INSTANCE on the pipe. */
    if (!vp_sid_equal(self, &sy)) {
        if (vp_sid_format(self, s, sizeof(s)) < 0)
            return -EINVAL;
        n = snprintf(buf + used, len - used, "(A;;GA;;;%s)", s);
        if (n < 0 || (size_t)n >= len - used)
            return -ENOSPC;
        used += (size_t)n;
    }
    for (int i = 0; allow && i < allow->n; i++) {
        if (vp_sid_format(&allow->sids[i], s, sizeof(s)) < 0)
            return -EINVAL;
        n = snprintf(buf + used, len - used, "(A;;0x%lx;;;%s)",
                     (unsigned long)CLIENT_ACCESS, s);
        if (n < 0 || (size_t)n >= len - used)
            return -ENOSPC;
        used += (size_t)n;
    }
    return 0;
}

/* The descriptor for allow, as SDDL (*sddl, malloc'd) and converted (*sd,
 * LocalAlloc'd): 0 or a negative errno, with why. */
static int make_sd(const struct vp_access_list *allow, char **sddl,
                   PSECURITY_DESCRIPTOR *sd, char *why, size_t whylen)
{
    char *s = malloc(SDDL_MAX);
    wchar_t *w = malloc(SDDL_MAX * sizeof(wchar_t));
    PSECURITY_DESCRIPTOR d = NULL;
    int e = s && w ? 0 : -ENOMEM;
    if (e < 0) {
        snprintf(why, whylen, "out of memory");
        goto out;
    }
    if ((e = vp_pipe_sddl(allow, NULL, s, SDDL_MAX)) < 0) {
        snprintf(why, whylen, "cannot write the pipe's security descriptor: %s",
                 e == -EINVAL ? "an entry of the access list is no SID"
                              : strerror(-e));
        goto out;
    }
    if ((e = vpw_wide(s, w, SDDL_MAX)) < 0) {
        snprintf(why, whylen, "security descriptor %s: not valid UTF-8", s);
        goto out;
    }
    if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(w, SDDL_REVISION_1, &d,
                                                              NULL)) {
        DWORD err = GetLastError();
        e = vpw_errno(err);
        snprintf(why, whylen, "security descriptor %s refused: error %lu", s, err);
        goto out;
    }
    *sddl = s;
    *sd = d;
    s = NULL;
out:
    free(s);
    free(w);
    return e;
}

/* Gives the pipe that h is an instance of sd's DACL, protected as sd's:
 * 0 or a Win32 error. SetKernelObjectSecurity takes the protection from
 * sd's control (wine's SetSecurityInfo drops the protection); the owner
 * stays the pipe's. */
static DWORD set_pipe_dacl(HANDLE h, PSECURITY_DESCRIPTOR sd)
{
    return SetKernelObjectSecurity(h, DACL_SECURITY_INFORMATION, sd) ? 0 : GetLastError();
}

/* A new instance of l's pipe into l->pending (IDLE); l->lock held. */
static int make_instance_locked(struct vp_pipe_listener *l, bool first)
{
    SECURITY_ATTRIBUTES sa = {sizeof(sa), l->sd, FALSE};
    /* WRITE_DAC: set_allow sets the pipe's descriptor through this
     * handle. */
    HANDLE h = CreateNamedPipeW(
        l->wname,
        PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED | WRITE_DAC |
            (first ? FILE_FLAG_FIRST_PIPE_INSTANCE : 0),
        PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
        l->max_instances, l->bufsize, l->bufsize, 0, &sa);
    if (h == INVALID_HANDLE_VALUE) {
        DWORD err = GetLastError();
        l->state = NO_INSTANCE;
        /* A first instance of a name that exists is refused as access
         * denied; a name whose instances are all taken, as busy. */
        if (first && (err == ERROR_ACCESS_DENIED || err == ERROR_PIPE_BUSY))
            return -EADDRINUSE;
        if (err == ERROR_PIPE_BUSY)
            return -EBUSY; /* max_instances connected */
        return vpw_errno(err);
    }
    /* A descriptor set while there was no instance: the connected ones
     * kept the pipe, and its old descriptor, alive (sa was ignored). If
     * this fails too, the next instance tries again. */
    if (l->sd_stale && set_pipe_dacl(h, l->sd) == 0)
        l->sd_stale = false;
    l->pending = h;
    l->state = IDLE;
    return 0;
}

static int make_instance(struct vp_pipe_listener *l, bool first)
{
    AcquireSRWLockExclusive(&l->lock);
    int e = make_instance_locked(l, first);
    ReleaseSRWLockExclusive(&l->lock);
    return e;
}

static void drop_instance(struct vp_pipe_listener *l)
{
    if (l->state == WAITING) {
        DWORD n;
        CancelIoEx(l->pending, &l->ov);
        GetOverlappedResult(l->pending, &l->ov, &n, TRUE);
    }
    AcquireSRWLockExclusive(&l->lock);
    if (l->pending)
        CloseHandle(l->pending);
    l->pending = NULL;
    l->state = NO_INSTANCE;
    ReleaseSRWLockExclusive(&l->lock);
}

/* Starts waiting for a client on the IDLE instance. */
static int start_connect(struct vp_pipe_listener *l)
{
    for (;;) {
        ResetEvent(l->ov.hEvent);
        if (ConnectNamedPipe(l->pending, &l->ov)) {
            l->state = CONNECTED;
            return 0;
        }
        DWORD err = GetLastError();
        switch (err) {
        case ERROR_IO_PENDING:
            l->state = WAITING;
            return 0;
        case ERROR_PIPE_CONNECTED: /* a client came before the call */
            l->state = CONNECTED;
            return 0;
        case ERROR_NO_DATA: /* ... and left again: make room for the next */
            DisconnectNamedPipe(l->pending);
            continue;
        default:
            return vpw_errno(err);
        }
    }
}

int vp_pipe_listen(const struct vp_pipe_listen_cfg *cfg,
                   struct vp_pipe_listener **out, char *why, size_t whylen)
{
    const char *name = cfg->name ? cfg->name : DEFAULT_NAME;
    struct vp_pipe_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    int e = vpw_wide(name, l->wname, PIPE_NAME_MAX + 1);
    if (e < 0) {
        snprintf(why, whylen, "pipe name %s: %s", name,
                 e == -ENAMETOOLONG ? "longer than 256 characters"
                                    : "not valid UTF-8");
        goto fail;
    }
    if (_wcsnicmp(l->wname, PIPE_PREFIX, wcslen(PIPE_PREFIX)) != 0 ||
        !l->wname[wcslen(PIPE_PREFIX)] || wcschr(l->wname + wcslen(PIPE_PREFIX), L'\\')) {
        e = -EINVAL;
        snprintf(why, whylen, "pipe name %s is not of the form \\\\.\\pipe\\NAME", name);
        goto fail;
    }
    l->bufsize = cfg->buffer_bytes ? cfg->buffer_bytes : DEFAULT_BUFFER;
    l->max_instances = cfg->max_instances && cfg->max_instances < PIPE_UNLIMITED_INSTANCES
                           ? cfg->max_instances
                           : PIPE_UNLIMITED_INSTANCES;
    InitializeSRWLock(&l->lock);
    if ((e = make_sd(cfg->allow, &l->sddl, &l->sd, why, whylen)) < 0)
        goto fail;
    l->name = _strdup(name);
    l->ov.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
    l->wake = CreateEventW(NULL, FALSE, FALSE, NULL);
    if (!l->name || !l->ov.hEvent || !l->wake) {
        e = -ENOMEM;
        snprintf(why, whylen, "out of memory");
        goto fail;
    }
    /* Whether the name exists already, asked without connecting to it. This
     * is what refuses a second server under wine, which ignores
     * FILE_FLAG_FIRST_PIPE_INSTANCE; on Windows the flag closes the race
     * between this check and the create. */
    if (WaitNamedPipeW(l->wname, 1) || GetLastError() != ERROR_FILE_NOT_FOUND) {
        e = -EADDRINUSE;
        snprintf(why, whylen, "a pipe named %s exists already (another vramd, "
                 "or someone else's)", name);
        goto fail;
    }
    if ((e = make_instance(l, true)) < 0) {
        snprintf(why, whylen, "cannot create pipe %s: %s", name,
                 e == -EADDRINUSE ? "a pipe of that name exists already"
                                  : strerror(-e));
        goto fail;
    }
    *out = l;
    return 0;
fail:
    vp_pipe_listen_close(&l);
    return e;
}

int vp_pipe_accept(struct vp_pipe_listener *l, int timeout_ms,
                   struct vp_pipe_conn *out)
{
    for (;;) {
        int e;
        if (l->state == NO_INSTANCE && (e = make_instance(l, false)) < 0)
            return e;
        if (l->state == IDLE && (e = start_connect(l)) < 0) {
            drop_instance(l);
            return e;
        }
        if (l->state == WAITING) {
            HANDLE evs[2] = {l->ov.hEvent, l->wake};
            DWORD w = WaitForMultipleObjects(2, evs, FALSE,
                                             timeout_ms < 0 ? INFINITE
                                                            : (DWORD)timeout_ms);
            if (w == WAIT_OBJECT_0 + 1)
                return -EINTR;
            if (w == WAIT_TIMEOUT)
                return -EAGAIN;
            if (w != WAIT_OBJECT_0)
                return vpw_last_errno();
            DWORD n;
            if (!GetOverlappedResult(l->pending, &l->ov, &n, FALSE)) {
                DWORD err = GetLastError();
                if (err == ERROR_NO_DATA || err == ERROR_BROKEN_PIPE) {
                    DisconnectNamedPipe(l->pending);
                    l->state = IDLE;
                    continue;
                }
                drop_instance(l);
                return vpw_errno(err);
            }
            l->state = CONNECTED;
        }
        /* CONNECTED */
        struct vp_pipe_conn c = {.h = {(intptr_t)l->pending},
                                 .connected_at = vp_identity_now()};
        AcquireSRWLockExclusive(&l->lock);
        l->pending = NULL;
        l->state = NO_INSTANCE;
        /* The next instance now; if that fails, the next accept tries
         * again (and reports it). */
        make_instance_locked(l, false);
        ReleaseSRWLockExclusive(&l->lock);
        *out = c;
        return 0;
    }
}

void vp_pipe_listen_wake(struct vp_pipe_listener *l)
{
    SetEvent(l->wake);
}

int vp_pipe_listen_set_allow(struct vp_pipe_listener *l,
                             const struct vp_access_list *allow, char *why,
                             size_t whylen)
{
    char *sddl = NULL;
    PSECURITY_DESCRIPTOR sd = NULL;
    int e = make_sd(allow, &sddl, &sd, why, whylen);
    if (e < 0)
        return e;
    AcquireSRWLockExclusive(&l->lock);
    if (strcmp(sddl, l->sddl) == 0 && !l->sd_stale)
        goto out; /* e == 0: the pipe has it */
    if (l->pending) {
        /* The pipe's own descriptor, whoever's instance the next client
         * opens. */
        DWORD err = set_pipe_dacl(l->pending, sd);
        if (err) {
            e = vpw_errno(err);
            snprintf(why, whylen, "cannot give pipe %s the security descriptor %s: "
                     "error %lu", l->name, sddl, err);
            goto out;
        }
        l->sd_stale = false;
    } else {
        l->sd_stale = true; /* the next instance made sets it */
    }
    /* The old ones are freed below; an instance being made holds the
     * lock, so none uses them any more. */
    char *old_sddl = l->sddl;
    PSECURITY_DESCRIPTOR old_sd = l->sd;
    l->sddl = sddl;
    l->sd = sd;
    sddl = old_sddl;
    sd = old_sd;
    e = 1;
out:
    ReleaseSRWLockExclusive(&l->lock);
    free(sddl);
    LocalFree(sd);
    return e;
}

const char *vp_pipe_listen_name(const struct vp_pipe_listener *l)
{
    return l->name;
}

const char *vp_pipe_listen_sddl(const struct vp_pipe_listener *l)
{
    return l->sddl;
}

void vp_pipe_listen_close(struct vp_pipe_listener **lp)
{
    struct vp_pipe_listener *l = lp ? *lp : NULL;
    if (!l)
        return;
    drop_instance(l);
    if (l->ov.hEvent)
        CloseHandle(l->ov.hEvent);
    if (l->wake)
        CloseHandle(l->wake);
    if (l->sd)
        LocalFree(l->sd);
    free(l->name);
    free(l->sddl);
    free(l);
    *lp = NULL;
}
