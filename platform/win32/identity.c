/* SPDX-License-Identifier: Apache-2.0 */
/* Peer identity on Windows. The pipe's client token (who opened the pipe,
 * captured by the system at CreateFile) gives the user and the groups; the
 * client process id (GetNamedPipeClientProcessId) gives the process, which
 * is opened at once and kept as the pin. A pid can be reused between the
 * connect and the OpenProcess: a process created after the connect cannot
 * have made it, so its start time is compared with the connect's time. */
#include "platform/win32/identity.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <sddl.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/conn.h"
#include "platform/win32/procinfo.h"
#include "platform/win32/winerr.h"
#include "platform/win32/wstr.h"

/* What the daemon does with a client's process: waits for its exit,
 * reads its token and start time, pushes handles into it, and may end it
 * (a client that misses a recall's deadline, by policy). */
#define PIN_ACCESS                                                             \
    (SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_DUP_HANDLE |    \
     PROCESS_TERMINATE)

static int sid_copy(PSID s, struct vp_sid *out)
{
    if (!s || !IsValidSid(s))
        return -EINVAL;
    DWORD n = GetLengthSid(s);
    if (n > VP_SID_BYTES)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    out->len = (uint8_t)n;
    memcpy(out->b, s, n);
    return 0;
}

bool vp_sid_equal(const struct vp_sid *a, const struct vp_sid *b)
{
    return a->len && a->len == b->len && memcmp(a->b, b->b, a->len) == 0;
}

int vp_sid_parse(const char *s, struct vp_sid *out)
{
    wchar_t w[VP_SID_STRING_MAX];
    /* ConvertStringSidToSidW also takes SDDL's two-letter aliases ("BA"):
     * only the S-1- form is a SID string here. */
    if (!s || (s[0] != 'S' && s[0] != 's') || s[1] != '-' ||
        vpw_wide(s, w, VP_SID_STRING_MAX) < 0)
        return -EINVAL;
    PSID sid = NULL;
    if (!ConvertStringSidToSidW(w, &sid))
        return -EINVAL;
    struct vp_sid r;
    int e = sid_copy(sid, &r);
    LocalFree(sid);
    if (e == 0)
        *out = r;
    return e;
}

int vp_sid_format(const struct vp_sid *sid, char *buf, size_t len)
{
    if (!sid->len || !IsValidSid((PSID)sid->b))
        return -EINVAL;
    wchar_t *w = NULL;
    if (!ConvertSidToStringSidW((PSID)sid->b, &w))
        return vpw_last_errno();
    int e = vpw_utf8(w, buf, len);
    LocalFree(w);
    return e == -ENAMETOOLONG ? -ENOSPC : e;
}

/* A token's information of class c, in a buffer of its size (free it). */
static int token_info(HANDLE t, TOKEN_INFORMATION_CLASS c, void **out)
{
    DWORD n = 0;
    if (GetTokenInformation(t, c, NULL, 0, &n) || GetLastError() != ERROR_INSUFFICIENT_BUFFER)
        return vpw_last_errno();
    void *b = malloc(n);
    if (!b)
        return -ENOMEM;
    if (!GetTokenInformation(t, c, b, n, &n)) {
        int e = vpw_last_errno();
        free(b);
        return e;
    }
    *out = b;
    return 0;
}

static int token_user(HANDLE t, struct vp_sid *out)
{
    TOKEN_USER *u = NULL;
    int e = token_info(t, TokenUser, (void **)&u);
    if (e < 0)
        return e;
    e = sid_copy(u->User.Sid, out);
    free(u);
    return e;
}

/* The token's user and the groups that count for access: enabled, not
 * deny-only (those only ever deny), not the integrity label. */
static int token_identity(HANDLE t, struct vp_identity *id)
{
    int e = token_user(t, &id->user);
    if (e < 0)
        return e;
    TOKEN_GROUPS *g = NULL;
    if ((e = token_info(t, TokenGroups, (void **)&g)) < 0)
        return e;
    id->ngroups = 0;
    id->groups_truncated = false;
    for (DWORD i = 0; i < g->GroupCount; i++) {
        DWORD a = g->Groups[i].Attributes;
        if (!(a & SE_GROUP_ENABLED) || (a & SE_GROUP_USE_FOR_DENY_ONLY) ||
            (a & SE_GROUP_INTEGRITY))
            continue;
        if (id->ngroups == VP_ID_MAX_GROUPS) {
            id->groups_truncated = true;
            break;
        }
        if (sid_copy(g->Groups[i].Sid, &id->groups[id->ngroups]) == 0)
            id->ngroups++;
    }
    free(g);
    return 0;
}

uint64_t vp_identity_now(void)
{
    /* The precise clock: a process's creation time is never later than
     * this for a process created before the call. */
    FILETIME ft;
    GetSystemTimePreciseAsFileTime(&ft);
    return (uint64_t)ft.dwHighDateTime << 32 | ft.dwLowDateTime;
}

/* The token the client opened the pipe with, at identification level
 * (SECURITY_IDENTIFICATION: the daemon can read it, not act with it). The
 * thread impersonates only to open it. Where impersonating is refused
 * (ERROR_CANNOT_IMPERSONATE: some systems want data read first), 0 and
 * *t NULL: the caller falls back to the process's token. */
static int pipe_client_token(HANDLE pipe, HANDLE *t)
{
    *t = NULL;
    if (!ImpersonateNamedPipeClient(pipe)) {
        DWORD err = GetLastError();
        return err == ERROR_CANNOT_IMPERSONATE ? 0 : vpw_errno(err);
    }
    /* OpenAsSelf: the access check on the thread token is made with the
     * daemon's own token, not the client's (which may not open its own). */
    BOOL ok = OpenThreadToken(GetCurrentThread(), TOKEN_QUERY, TRUE, t);
    DWORD err = GetLastError();
    if (!RevertToSelf())
        /* Going on as the client would be worse than stopping. */
        abort();
    return ok ? 0 : vpw_errno(err);
}

int vp_identity_of_pipe(vp_handle c, uint64_t connected_at,
                        struct vp_identity *out, vp_handle *pin, char *why,
                        size_t whylen)
{
    HANDLE pipe = (HANDLE)c.v;
    if (!connected_at)
        connected_at = vp_identity_now();
    ULONG pid = 0, session = 0;
    if (!GetNamedPipeClientProcessId(pipe, &pid)) {
        int e = vpw_last_errno();
        snprintf(why, whylen, "GetNamedPipeClientProcessId: error %lu", GetLastError());
        return e;
    }
    if (!GetNamedPipeClientSessionId(pipe, &session))
        session = 0;
    struct vp_identity *id = calloc(1, sizeof(*id));
    if (!id)
        return -ENOMEM;
    HANDLE tok = NULL, ptok = NULL, proc = NULL;
    int e = pipe_client_token(pipe, &tok);
    if (e < 0) {
        snprintf(why, whylen, "cannot read the pipe client's token: error %lu",
                 GetLastError());
        goto out;
    }
    proc = OpenProcess(PIN_ACCESS, FALSE, pid);
    if (!proc) {
        e = vpw_last_errno();
        snprintf(why, whylen, "cannot open the client's process %lu: error %lu%s",
                 pid, GetLastError(),
                 e == -EACCES ? " (serving other users' processes takes "
                                "LocalSystem)"
                              : "");
        goto out;
    }
    if (WaitForSingleObject(proc, 0) == WAIT_OBJECT_0) {
        /* Its process object lingers while handles to it are open, token
         * and all: a client that is gone is no client. */
        e = -ESRCH;
        snprintf(why, whylen, "the client's process %lu has exited", pid);
        goto out;
    }
    if ((e = vpw_process_start(proc, &id->start_time)) < 0) {
        snprintf(why, whylen, "cannot read the start time of process %lu", pid);
        goto out;
    }
    if (id->start_time > connected_at) {
        e = -ESRCH;
        snprintf(why, whylen, "process %lu started after the connection was "
                 "made: the client is gone and its pid was reused", pid);
        goto out;
    }
    if (!OpenProcessToken(proc, TOKEN_QUERY, &ptok)) {
        e = vpw_last_errno();
        snprintf(why, whylen, "cannot read the token of process %lu: error %lu",
                 pid, GetLastError());
        goto out;
    }
    if ((e = token_identity(tok ? tok : ptok, id)) < 0) {
        snprintf(why, whylen, "cannot read the client's user and groups");
        goto out;
    }
    if (tok) {
        struct vp_sid puser;
        if ((e = token_user(ptok, &puser)) < 0) {
            snprintf(why, whylen, "cannot read the user of process %lu", pid);
            goto out;
        }
        if (!vp_sid_equal(&puser, &id->user)) {
            char a[VP_SID_STRING_MAX] = "?", b[VP_SID_STRING_MAX] = "?";
            vp_sid_format(&id->user, a, sizeof(a));
            vp_sid_format(&puser, b, sizeof(b));
            e = -EPERM;
            snprintf(why, whylen, "the pipe was opened as %s but its client "
                     "process %lu runs as %s", a, pid, b);
            goto out;
        }
    }
    id->pid = pid;
    id->session = session;
    *out = *id;
    if (pin) {
        pin->v = (intptr_t)proc;
        proc = NULL;
    }
    e = 0;
out:
    if (tok)
        CloseHandle(tok);
    if (ptok)
        CloseHandle(ptok);
    if (proc)
        CloseHandle(proc);
    free(id);
    return e;
}

int vp_identity_self(struct vp_identity *out)
{
    struct vp_identity *id = calloc(1, sizeof(*id));
    if (!id)
        return -ENOMEM;
    HANDLE t;
    int e = 0;
    if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &t)) {
        e = vpw_last_errno();
        goto out;
    }
    e = token_identity(t, id);
    CloseHandle(t);
    if (e < 0 || (e = vpw_process_start(GetCurrentProcess(), &id->start_time)) < 0)
        goto out;
    id->pid = GetCurrentProcessId();
    DWORD session = 0;
    ProcessIdToSessionId(GetCurrentProcessId(), &session);
    id->session = session;
    *out = *id;
out:
    free(id);
    return e;
}

int vp_account_lookup(const char *name, struct vp_sid *out,
                      enum vp_account_kind *kind)
{
    wchar_t w[512];
    if (!name || !name[0] || vpw_wide(name, w, 512) < 0)
        return -EINVAL;
    BYTE sid[SECURITY_MAX_SID_SIZE];
    wchar_t dom[256];
    DWORD sl = sizeof(sid), dl = 256;
    SID_NAME_USE use;
    if (!LookupAccountNameW(NULL, w, sid, &sl, dom, &dl, &use)) {
        DWORD err = GetLastError();
        return err == ERROR_NONE_MAPPED ? -ENOENT : vpw_errno(err);
    }
    struct vp_sid r;
    int e = sid_copy(sid, &r);
    if (e < 0)
        return e;
    if (kind) {
        switch (use) {
        case SidTypeUser:
            *kind = VP_ACCOUNT_USER;
            break;
        case SidTypeGroup:
        case SidTypeAlias:
        case SidTypeWellKnownGroup:
            *kind = VP_ACCOUNT_GROUP;
            break;
        default:
            *kind = VP_ACCOUNT_OTHER;
        }
    }
    *out = r;
    return 0;
}

int vp_access_add(struct vp_access_list *l, const char *entry, char *why,
                  size_t whylen)
{
    struct vp_sid sid;
    int e;
    if (entry && (entry[0] == 'S' || entry[0] == 's') && entry[1] == '-') {
        if ((e = vp_sid_parse(entry, &sid)) < 0) {
            snprintf(why, whylen, "'%s' is not a valid SID", entry);
            return e;
        }
    } else {
        enum vp_account_kind kind;
        e = vp_account_lookup(entry, &sid, &kind);
        if (e == -ENOENT) {
            snprintf(why, whylen, "no user or group named '%s'", entry);
            return e;
        }
        if (e < 0) {
            snprintf(why, whylen, "cannot look up '%s': %s", entry ? entry : "(null)",
                     strerror(-e));
            return e;
        }
        if (kind == VP_ACCOUNT_OTHER) {
            snprintf(why, whylen, "'%s' is neither a user nor a group", entry);
            return -EINVAL;
        }
    }
    for (int i = 0; i < l->n; i++)
        if (vp_sid_equal(&l->sids[i], &sid))
            return 0;
    if (l->n >= VP_ACCESS_MAX) {
        snprintf(why, whylen, "at most %d entries", VP_ACCESS_MAX);
        return -ENOSPC;
    }
    l->sids[l->n++] = sid;
    return 0;
}

bool vp_access_allows(const struct vp_access_list *l, const struct vp_identity *id)
{
    for (int i = 0; i < l->n; i++) {
        if (vp_sid_equal(&l->sids[i], &id->user))
            return true;
        for (int k = 0; k < id->ngroups; k++)
            if (vp_sid_equal(&l->sids[i], &id->groups[k]))
                return true;
    }
    return false;
}

int vp_conn_server_pid(vp_handle c, int64_t *pid)
{
    ULONG p;
    if (!GetNamedPipeServerProcessId((HANDLE)c.v, &p))
        return vpw_last_errno();
    *pid = p;
    return 0;
}
