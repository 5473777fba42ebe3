/* SPDX-License-Identifier: Apache-2.0 */
/* The keeper on Windows: the holder only (holder_win32.c). Windows has no
 * service manager that keeps a service's handles across its restarts (the
 * SCM keeps none), so VP_KEEPER_FDSTORE is -ENOTSUP; a holder process keeps
 * its own duplicates of vramd's handles, and a section or a CUDA
 * allocation's NT handle lives as long as one handle to it does, in any
 * process. */
#include "platform/keeper.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/clock.h"
#include "platform/conn.h"
#include "platform/win32/identity.h"
#include "platform/win32/keeper_lines.h"
#include "platform/keeper_names.h"
#include "platform/proc.h"
#include "platform/win32/winerr.h"
#include "platform/win32/wstr.h"

#define PATH_BYTES (MAX_PATH * 3)

struct vp_keeper {
    unsigned max;
    struct vpx_names names;
    char pipe[300];
    char prog[PATH_BYTES];
    char prog_why[PATH_BYTES + 64];
    struct vpw_lines link; /* link.c VP_NONE when not connected */
    int64_t pid, last_pid;
    char note[320];
};

const char *vp_keeper_kind_name(enum vp_keeper_kind kind)
{
    return kind == VP_KEEPER_FDSTORE ? "fd store"
           : kind == VP_KEEPER_HOLDER ? "holder"
                                      : "auto";
}

void vp_keeper_entries_free(struct vp_keeper_entry *e, size_t n)
{
    if (!e)
        return;
    for (size_t i = 0; i < n; i++)
        vp_close(&e[i].h);
    free(e);
}

/* Whether process pid runs as this process's user. */
static bool runs_as_me(int64_t pid)
{
    struct vp_identity *me = malloc(sizeof(*me));
    bool same = false;
    HANDLE p = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid);
    HANDLE t = NULL;
    union {
        TOKEN_USER u;
        char b[sizeof(TOKEN_USER) + VP_SID_BYTES];
    } tu;
    DWORD len;
    if (me && vp_identity_self(me) == 0 && p && OpenProcessToken(p, TOKEN_QUERY, &t) &&
        GetTokenInformation(t, TokenUser, &tu, sizeof(tu), &len)) {
        DWORD n = GetLengthSid(tu.u.User.Sid);
        same = n == me->user.len && memcmp(tu.u.User.Sid, me->user.b, n) == 0;
    }
    if (t)
        CloseHandle(t);
    if (p)
        CloseHandle(p);
    free(me);
    return same;
}

static void disconnect(struct vp_keeper *k)
{
    vp_close(&k->link.c);
    k->link.have = 0;
}

/* Connects to the holder and says hello: 0, 1 when none serves the pipe,
 * or a negative errno with why. */
static int connect_holder(struct vp_keeper *k, char *why, size_t whylen)
{
    vp_handle c;
    int e = vp_dial(k->pipe, &c);
    if (e == -ENOENT || e == -ECONNREFUSED)
        return 1;
    if (e < 0) {
        snprintf(why, whylen, "cannot reach the holder at %s: %s", k->pipe,
                 strerror(-e));
        return e;
    }
    int64_t pid = 0;
    if ((e = vp_conn_server_pid(c, &pid)) < 0 || !runs_as_me(pid)) {
        snprintf(why, whylen, "the pipe %s is served by process %lld, which "
                 "does not run as vramd's user; refusing it", k->pipe,
                 (long long)pid);
        vp_close(&c);
        return -EPERM;
    }
    k->link = (struct vpw_lines){.c = c};
    char line[VPW_LINE_MAX];
    int version = 0;
    unsigned long long a = 0, b = 0;
    int err = 0;
    if ((e = vpw_line_send(c, VP_KEEPER_TIMEOUT_MS, "hello %d", VPW_KEEPER_VERSION)) < 0 ||
        (e = vpw_line_recv(&k->link, line, sizeof(line), VP_KEEPER_TIMEOUT_MS)) < 0) {
        disconnect(k);
        if (e == -ECONNRESET || e == -EPIPE)
            return 1; /* a holder that was exiting: it keeps nothing then */
        snprintf(why, whylen, "the holder at %s (pid %lld) did not say hello",
                 k->pipe, (long long)pid);
        return e == -EPROTO ? -EPROTO : -ETIMEDOUT;
    }
    if (sscanf(line, "err %d %llu", &err, &a) >= 1) {
        disconnect(k);
        if (err == EBUSY)
            snprintf(why, whylen, "the holder at %s (pid %lld) serves another "
                     "vramd (pid %llu)", k->pipe, (long long)pid, a);
        else if (err == EPROTO)
            snprintf(why, whylen, "the holder at %s (pid %lld) speaks the "
                     "keeper's protocol version %llu, this vramd version %d",
                     k->pipe, (long long)pid, a, VPW_KEEPER_VERSION);
        else
            snprintf(why, whylen, "the holder at %s (pid %lld) refused vramd: "
                     "%s", k->pipe, (long long)pid, strerror(err));
        return err > 0 ? -err : -EPROTO;
    }
    if (sscanf(line, "ok %d %llu %llu", &version, &a, &b) != 3 ||
        version != VPW_KEEPER_VERSION) {
        disconnect(k);
        snprintf(why, whylen, "%s answered \"%.40s\": not a holder of the "
                 "keeper's protocol version %d", k->pipe, line,
                 VPW_KEEPER_VERSION);
        return -EPROTO;
    }
    k->pid = k->last_pid = pid;
    if (b && b < k->max)
        k->max = k->names.max = (unsigned)b;
    return 0;
}

/* The holder's list: each entry's handle (ours: the holder put it here)
 * to fn, or closed when fn is NULL. 0 with *count, or a negative errno. */
static int list(struct vp_keeper *k, struct vp_keeper_entry **out, size_t *count,
                char *why, size_t whylen)
{
    int e = vpw_line_send(k->link.c, VP_KEEPER_TIMEOUT_MS, "list");
    size_t n = 0, cap = 0;
    struct vp_keeper_entry *v = NULL;
    k->names.max = UINT_MAX; /* all of it, whatever today's max */
    vpx_names_clear(&k->names, NULL);
    while (e == 0) {
        char line[VPW_LINE_MAX], name[VP_KEEPER_NAME_MAX + 2];
        unsigned long long value, total;
        if ((e = vpw_line_recv(&k->link, line, sizeof(line), VP_KEEPER_TIMEOUT_MS)) < 0)
            break;
        if (sscanf(line, "end %llu", &total) == 1) {
            e = total == n ? 0 : -EPROTO;
            break;
        }
        if (sscanf(line, "entry %65s %llu", name, &value) != 2 ||
            vpx_names_add(&k->names, name, 0) < 0) {
            e = -EPROTO;
            break;
        }
        n++;
        vp_handle h = {(intptr_t)value};
        if (!out) {
            vp_close(&h);
            continue;
        }
        if (n > cap) {
            size_t c2 = cap ? cap * 2 : 16;
            struct vp_keeper_entry *m = realloc(v, c2 * sizeof(*m));
            if (!m) {
                vp_close(&h);
                e = -ENOMEM;
                break;
            }
            v = m;
            cap = c2;
        }
        snprintf(v[n - 1].name, sizeof(v[n - 1].name), "%s", name);
        v[n - 1].h = h;
    }
    k->names.max = k->max;
    if (e < 0) {
        snprintf(why, whylen, "taking back what the holder (pid %lld) keeps: %s",
                 (long long)k->pid, strerror(-e));
        vp_keeper_entries_free(v, out ? n : 0);
        disconnect(k);
        return e;
    }
    if (out)
        *out = v;
    *count = n;
    return 0;
}

int vp_keeper_open(const struct vp_keeper_cfg *cfg, struct vp_keeper **out,
                   struct vp_keeper_entry **left, size_t *nleft, char *why,
                   size_t whylen)
{
    if (cfg->kind == VP_KEEPER_FDSTORE) {
        snprintf(why, whylen, "Windows has no service manager that keeps a "
                 "service's handles: the holder keeps them (kind auto)");
        return -ENOTSUP;
    }
    struct vp_keeper *k = calloc(1, sizeof(*k));
    if (!k) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    k->link.c = VP_NONE;
    k->max = cfg->max ? cfg->max : VP_KEEPER_DEFAULT_MAX;
    vpx_names_init(&k->names, k->max);
    const char *base = cfg->socket_path && cfg->socket_path[0] ? cfg->socket_path
                                                                : VP_DEFAULT_ENDPOINT;
    int e = 0;
    if ((size_t)snprintf(k->pipe, sizeof(k->pipe), "%s%s", base,
                         VPW_KEEPER_SUFFIX) >= sizeof(k->pipe)) {
        snprintf(why, whylen, "the pipe name %s is too long", base);
        e = -ENAMETOOLONG;
        goto fail;
    }
    snprintf(k->note, sizeof(k->note), "the holder (Windows has no service "
             "manager that keeps handles)");
    if (cfg->holder_path && cfg->holder_path[0]) {
        snprintf(k->prog, sizeof(k->prog), "%s", cfg->holder_path);
    } else {
        char exe[PATH_BYTES];
        if (vp_self_exe(exe, sizeof(exe)) == 0) {
            char *slash = strrchr(exe, '\\');
            if (slash)
                *slash = '\0';
            snprintf(k->prog, sizeof(k->prog), "%s\\vramd-holder.exe", exe);
        }
    }
    e = connect_holder(k, why, whylen);
    if (e < 0)
        goto fail;
    size_t n = 0;
    struct vp_keeper_entry *v = NULL;
    if (e == 0 && (e = list(k, &v, &n, why, whylen)) < 0)
        goto fail;
    *out = k;
    *left = v;
    *nleft = n;
    return 0;
fail:
    vp_keeper_close(k);
    return e;
}

/* Starts a holder and waits until it serves its pipe. */
static int spawn(struct vp_keeper *k, char *why, size_t whylen)
{
    wchar_t exe[MAX_PATH * 2], line[MAX_PATH * 3 + 400];
    char cmd[sizeof(line) / sizeof(line[0])];
    snprintf(cmd, sizeof(cmd), "\"%s\" --pipe \"%s\" --max %u", k->prog, k->pipe,
             k->max);
    if (!k->prog[0] || vpw_wide(k->prog, exe, sizeof(exe) / sizeof(exe[0])) < 0 ||
        vpw_wide(cmd, line, sizeof(line) / sizeof(line[0])) < 0) {
        snprintf(why, whylen, "no holder program (vramd-holder.exe beside "
                 "this program)");
        return -ENOENT;
    }
    /* No standard handles either: none of vramd's (a log, a test
     * runner's pipe) is held open by the holder. */
    STARTUPINFOW si = {.cb = sizeof(si), .dwFlags = STARTF_USESTDHANDLES};
    PROCESS_INFORMATION pi;
    /* Nothing inherited, no console, a process group of its own, and out
     * of this process's job where the job lets it go: the end of vramd
     * (or of its service) is not the holder's. */
    DWORD flags = DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP |
                  CREATE_BREAKAWAY_FROM_JOB;
    if (!CreateProcessW(exe, line, NULL, NULL, FALSE, flags, NULL, NULL, &si, &pi)) {
        DWORD err = GetLastError();
        flags &= ~(DWORD)CREATE_BREAKAWAY_FROM_JOB;
        if (err != ERROR_ACCESS_DENIED ||
            !CreateProcessW(exe, line, NULL, NULL, FALSE, flags, NULL, NULL, &si,
                            &pi)) {
            int e = vpw_errno(err == ERROR_ACCESS_DENIED ? GetLastError() : err);
            snprintf(why, whylen, "cannot start the holder %s: %s", k->prog,
                     strerror(-e));
            return e;
        }
    }
    CloseHandle(pi.hThread);
    int64_t end = vp_now_ms() + VP_KEEPER_TIMEOUT_MS;
    int e;
    for (;;) {
        e = connect_holder(k, why, whylen);
        if (e <= 0)
            break;
        DWORD code = 0;
        if (WaitForSingleObject(pi.hProcess, 0) == WAIT_OBJECT_0) {
            GetExitCodeProcess(pi.hProcess, &code);
            snprintf(why, whylen, "the holder %s exited at once (%lu%s)", k->prog,
                     (unsigned long)code,
                     code == 3 ? ": a pipe of its name exists" : "");
            e = code == 3 ? -EADDRINUSE : -EIO;
            break;
        }
        if (vp_now_ms() >= end) {
            snprintf(why, whylen, "the holder %s did not serve %s in time",
                     k->prog, k->pipe);
            TerminateProcess(pi.hProcess, 1);
            e = -ETIMEDOUT;
            break;
        }
        Sleep(10);
    }
    CloseHandle(pi.hProcess);
    return e;
}

/* Every handle the holder kept went with it. */
static int holder_lost(struct vp_keeper *k, char *why, size_t whylen)
{
    snprintf(why, whylen, "the holder (pid %lld) is gone; the %zu handles it "
             "kept are lost", (long long)k->last_pid, k->names.n);
    vpx_names_clear(&k->names, NULL);
    return -EPIPE;
}

/* A connected holder (what it keeps listed again after a reconnection),
 * started if none runs. */
static int linked(struct vp_keeper *k, char *why, size_t whylen)
{
    if (vp_ok(k->link.c))
        return 0;
    int e = connect_holder(k, why, whylen);
    if (e < 0)
        return e;
    if (e == 1 && k->names.n)
        return holder_lost(k, why, whylen);
    if (e == 1)
        return spawn(k, why, whylen);
    size_t n;
    return list(k, NULL, &n, why, whylen);
}

/* One put (h non-NULL) or remove, with one more try after a broken link,
 * as on POSIX (keeper_posix.c there). */
static int holder_call(struct vp_keeper *k, const char *name, const vp_handle *h,
                       char *why, size_t whylen)
{
    for (int attempt = 0;; attempt++) {
        int e = linked(k, why, whylen);
        if (e < 0)
            return e;
        if (attempt && vpx_names_find(&k->names, name, NULL) == (h != NULL))
            return 0;
        char line[VPW_LINE_MAX];
        e = h ? vpw_line_send(k->link.c, VP_KEEPER_TIMEOUT_MS, "put %s %" PRIu64,
                              name, (uint64_t)(uintptr_t)h->v)
              : vpw_line_send(k->link.c, VP_KEEPER_TIMEOUT_MS, "remove %s", name);
        if (e == 0)
            e = vpw_line_recv(&k->link, line, sizeof(line), VP_KEEPER_TIMEOUT_MS);
        if (e == 0) {
            int err = 0;
            if (strcmp(line, "ok") == 0)
                return 0;
            if (sscanf(line, "err %d", &err) == 1 && err > 0) {
                const char *say = vpx_names_refusal(-err);
                snprintf(why, whylen, "the holder refused %s: %s", name,
                         say[0] ? say : strerror(err));
                return -err;
            }
            e = -EPROTO;
        }
        disconnect(k);
        if (e == -ETIMEDOUT) {
            snprintf(why, whylen, "the holder (pid %lld) did not answer within "
                     "%d ms", (long long)k->pid, VP_KEEPER_TIMEOUT_MS);
            return e;
        }
        if (attempt) {
            snprintf(why, whylen, "the holder (pid %lld) dropped vramd's "
                     "connection again", (long long)k->pid);
            return -EPIPE;
        }
    }
}

int vp_keeper_put(struct vp_keeper *k, const char *name, vp_handle h, char *why,
                  size_t whylen)
{
    DWORD flags;
    if (!vp_keeper_name_ok(name)) {
        snprintf(why, whylen, "%.80s: %s", name ? name : "(null)",
                 vpx_names_refusal(-EINVAL));
        return -EINVAL;
    }
    if (!vp_ok(h) || !GetHandleInformation((HANDLE)h.v, &flags)) {
        snprintf(why, whylen, "%s: not an open handle", name);
        return -EBADF;
    }
    if (GetFileType((HANDLE)h.v) == FILE_TYPE_PIPE) {
        snprintf(why, whylen, "%s: the keeper keeps memory, not pipes", name);
        return -EINVAL;
    }
    if (vpx_names_find(&k->names, name, NULL)) {
        snprintf(why, whylen, "%s: %s", name, vpx_names_refusal(-EEXIST));
        return -EEXIST;
    }
    if (k->names.n >= k->max ||
        k->names.bytes + strlen(name) + 1 > VP_KEEPER_NAMES_BYTES) {
        snprintf(why, whylen, "%s: the keeper is full (%zu of %u handles, "
                 "%zu of %d bytes of names)", name, k->names.n, k->max,
                 k->names.bytes, VP_KEEPER_NAMES_BYTES);
        return -ENOSPC;
    }
    int e = holder_call(k, name, &h, why, whylen);
    if (e == 0 && !vpx_names_find(&k->names, name, NULL) &&
        (e = vpx_names_add(&k->names, name, 0)) < 0) {
        char w[8];
        holder_call(k, name, NULL, w, sizeof(w));
        snprintf(why, whylen, "%s: out of memory", name);
    }
    return e;
}

int vp_keeper_remove(struct vp_keeper *k, const char *name, char *why,
                     size_t whylen)
{
    if (!vpx_names_find(&k->names, name, NULL)) {
        snprintf(why, whylen, "%.80s is not kept", name ? name : "(null)");
        return -ENOENT;
    }
    int e = holder_call(k, name, NULL, why, whylen);
    if (e == -ENOENT)
        e = 0; /* gone already: the end wanted */
    if (e == 0)
        vpx_names_del(&k->names, name, NULL);
    return e;
}

bool vp_keeper_has(const struct vp_keeper *k, const char *name)
{
    return vpx_names_find(&k->names, name, NULL);
}

void vp_keeper_info(const struct vp_keeper *k, struct vp_keeper_info *out)
{
    memset(out, 0, sizeof(*out));
    out->kind = VP_KEEPER_HOLDER;
    out->max = k->max;
    out->held = (unsigned)k->names.n;
    out->holder_pid = vp_ok(k->link.c) ? k->pid : 0;
    snprintf(out->note, sizeof(out->note), "%s", k->note);
}

void vp_keeper_close(struct vp_keeper *k)
{
    if (!k)
        return;
    disconnect(k);
    vpx_names_fini(&k->names);
    free(k);
}
