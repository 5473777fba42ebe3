/* SPDX-License-Identifier: Apache-2.0 */
/* Peer identity (platform/win32/identity.h) under wine: SIDs, account names, the
 * access lists, the identity of a pipe's client (this process, and a child
 * process started for it), the start-time guard against a reused pid, the
 * client's check of the server's pid, and the pin's liveness. The
 * identification-only impersonation level is checked on real Windows only
 * (wine gives the server impersonation level, docs/windows.md). */
#include "tests/win/wintest.h"

#include <errno.h>
#include <inttypes.h>

#include "platform/conn.h"
#include "platform/win32/identity.h"
#include "platform/win32/pipe_listener.h"
#include "platform/proc.h"

static void test_sids(void)
{
    struct vp_sid a, b;
    char s[VP_SID_STRING_MAX];
    CHECK(vp_sid_parse("S-1-5-32-544", &a) == 0, "parse");
    CHECK(vp_sid_format(&a, s, sizeof(s)) == 0 && strcmp(s, "S-1-5-32-544") == 0,
          "format %s", s);
    CHECK(a.len == 16, "binary length %u", a.len);
    CHECK(vp_sid_parse("s-1-5-32-544", &b) == 0 && vp_sid_equal(&a, &b), "lower case s");
    CHECK(vp_sid_parse("S-1-5-32-545", &b) == 0 && !vp_sid_equal(&a, &b), "differs");
    CHECK(vp_sid_format(&a, s, 5) == -ENOSPC, "format into too little");
    CHECK(vp_sid_parse("BA", &b) == -EINVAL, "an SDDL alias is no SID string");
    CHECK(vp_sid_parse("S-1-x", &b) == -EINVAL, "not a SID");
    CHECK(vp_sid_parse("", &b) == -EINVAL && vp_sid_parse(NULL, &b) == -EINVAL, "empty");
    struct vp_sid none = {0};
    CHECK(!vp_sid_equal(&none, &none), "an empty SID equals nothing");
}

static void test_self_and_accounts(void)
{
    struct vp_identity *me = calloc(1, sizeof(*me));
    MUST(me && vp_identity_self(me) == 0, "vp_identity_self");
    char s[VP_SID_STRING_MAX];
    CHECK(vp_sid_format(&me->user, s, sizeof(s)) == 0 && strncmp(s, "S-1-5-", 6) == 0,
          "the user's SID %s", s);
    printf("this process: pid %lld user %s, %d groups\n", (long long)me->pid, s,
           me->ngroups);
    CHECK(me->pid == (int64_t)GetCurrentProcessId(), "pid");
    CHECK(me->start_time > 0 && me->start_time <= vp_identity_now(), "start time");
    CHECK(me->start_time == vp_proc_start_time(me->pid), "the same as proc.h's");
    CHECK(me->ngroups > 0 && !me->groups_truncated, "groups");
    struct vp_sid everyone;
    vp_sid_parse("S-1-1-0", &everyone);
    bool has_everyone = false;
    for (int i = 0; i < me->ngroups; i++)
        has_everyone |= vp_sid_equal(&me->groups[i], &everyone);
    CHECK(has_everyone, "Everyone is among the groups");

    /* The current user by name. */
    wchar_t wn[256];
    DWORD n = 256;
    MUST(GetUserNameW(wn, &n), "GetUserNameW");
    char name[512];
    WideCharToMultiByte(CP_UTF8, 0, wn, -1, name, sizeof(name), NULL, NULL);
    struct vp_sid sid;
    enum vp_account_kind kind = 0;
    CHECK(vp_account_lookup(name, &sid, &kind) == 0 && vp_sid_equal(&sid, &me->user) &&
              kind == VP_ACCOUNT_USER,
          "user %s by name is this process's user", name);
    CHECK(vp_account_lookup("Administrators", &sid, &kind) == 0 &&
              vp_sid_format(&sid, s, sizeof(s)) == 0 && strcmp(s, "S-1-5-32-544") == 0 &&
              kind == VP_ACCOUNT_GROUP,
          "Administrators is group S-1-5-32-544: %s", s);
    CHECK(vp_account_lookup("BUILTIN\\Users", &sid, &kind) == 0 &&
              vp_sid_format(&sid, s, sizeof(s)) == 0 && strcmp(s, "S-1-5-32-545") == 0,
          "BUILTIN\\Users");
    char made_up[64];
    wt_unique(made_up, sizeof(made_up), "vramd-nobody");
    CHECK(vp_account_lookup(made_up, &sid, &kind) == -ENOENT, "no account %s", made_up);
    CHECK(vp_account_lookup("", &sid, NULL) == -EINVAL, "an empty name");

    /* Access lists: names, SIDs and groups. */
    char why[256];
    struct vp_access_list l = {0};
    CHECK(!vp_access_allows(&l, me), "an empty list allows nobody");
    CHECK(vp_access_add(&l, made_up, why, sizeof(why)) == -ENOENT &&
              strstr(why, made_up) != NULL,
          "a made-up account is refused, by name: %s", why);
    CHECK(vp_access_add(&l, "S-1-5-21-9-9-9-4242", why, sizeof(why)) == 0 && l.n == 1,
          "a SID nobody has");
    CHECK(!vp_access_allows(&l, me), "... allows not this user");
    CHECK(vp_access_add(&l, "S-1-nonsense", why, sizeof(why)) == -EINVAL, "a bad SID");
    CHECK(vp_access_add(&l, name, why, sizeof(why)) == 0 && l.n == 2, "by name: %s", why);
    CHECK(vp_access_allows(&l, me), "the current user by name is allowed");
    CHECK(vp_access_add(&l, name, why, sizeof(why)) == 0 && l.n == 2, "no duplicates");

    struct vp_access_list g = {0};
    CHECK(vp_access_add(&g, "Everyone", why, sizeof(why)) == 0, "Everyone: %s", why);
    CHECK(vp_access_allows(&g, me), "allowed by a group (Everyone)");
    struct vp_access_list adm = {0};
    CHECK(vp_access_add(&adm, "S-1-5-32-544", why, sizeof(why)) == 0, "admins by SID");
    /* Whether this token counts as Administrators, by the system's own
     * check (enabled, not deny-only: what an elevated or wine token has,
     * and a filtered admin token on Windows has not). */
    PSID ba = NULL;
    SID_IDENTIFIER_AUTHORITY nt = SECURITY_NT_AUTHORITY;
    BOOL is_admin = FALSE;
    AllocateAndInitializeSid(&nt, 2, SECURITY_BUILTIN_DOMAIN_RID,
                             DOMAIN_ALIAS_RID_ADMINS, 0, 0, 0, 0, 0, 0, &ba);
    CheckTokenMembership(NULL, ba, &is_admin);
    FreeSid(ba);
    CHECK(vp_access_allows(&adm, me) == !!is_admin,
          "Administrators by SID: %d, the system says %d", vp_access_allows(&adm, me),
          is_admin);
    struct vp_access_list full = {0};
    for (int i = 0; i < VP_ACCESS_MAX; i++) {
        char x[64];
        snprintf(x, sizeof(x), "S-1-5-21-1-1-1-%d", 2000 + i);
        vp_access_add(&full, x, why, sizeof(why));
    }
    CHECK(full.n == VP_ACCESS_MAX &&
              vp_access_add(&full, "S-1-5-21-1-1-1-9999", why, sizeof(why)) == -ENOSPC,
          "a full list");
    free(me);
}

static struct vp_pipe_listener *listen_on(const char *name)
{
    struct vp_pipe_listen_cfg cfg = {.name = name};
    struct vp_pipe_listener *l = NULL;
    char why[256] = "";
    MUST(vp_pipe_listen(&cfg, &l, why, sizeof(why)) == 0, "listen %s: %s", name, why);
    return l;
}

static void test_pipe_identity_self(void)
{
    char name[128], why[256];
    unique_pipe(name, sizeof(name), "id");
    struct vp_pipe_listener *l = listen_on(name);
    vp_handle cl, pin = VP_NONE;
    struct vp_pipe_conn c;
    MUST(vp_dial(name, &cl) == 0, "dial");
    MUST(vp_pipe_accept(l, 2000, &c) == 0, "accept");
    struct vp_identity *id = calloc(1, sizeof(*id)), *me = calloc(1, sizeof(*me));
    MUST(id && me && vp_identity_self(me) == 0, "self");
    int e = vp_identity_of_pipe(c.h, c.connected_at, id, &pin, why, sizeof(why));
    CHECK(e == 0, "vp_identity_of_pipe: %d %s", e, why);
    CHECK(id->pid == me->pid && vp_sid_equal(&id->user, &me->user),
          "the client is this process and user");
    CHECK(id->start_time == me->start_time, "its start time");
    CHECK(id->ngroups == me->ngroups, "its groups: %d, the token has %d", id->ngroups,
          me->ngroups);
    CHECK(vp_ok(pin) && GetProcessId((HANDLE)pin.v) == GetCurrentProcessId(),
          "the pin is a handle to the client's process");
    CHECK(!vp_proc_exited(pin), "alive");
    vp_close(&pin);
    /* Nothing written on failure. */
    id->pid = -7;
    CHECK(vp_identity_of_pipe(c.h, me->start_time - 1, id, &pin, why, sizeof(why)) ==
              -ESRCH,
          "a process that started after the connect is a reused pid: %s", why);
    CHECK(id->pid == -7 && !vp_ok(pin), "out-parameters untouched on failure");
    vp_handle ev = {(intptr_t)CreateEventW(NULL, TRUE, FALSE, NULL)};
    CHECK(vp_identity_of_pipe(ev, 0, id, NULL, why, sizeof(why)) < 0,
          "an event has no pipe client: %s", why);
    vp_close(&ev);

    /* The client's side: the server's pid. */
    int64_t spid = 0;
    CHECK(vp_conn_server_pid(cl, &spid) == 0 && spid == me->pid, "server pid %lld",
          (long long)spid);
    vp_handle cl2 = VP_NONE, cl3 = VP_NONE;
    MUST(vp_pipe_accept(l, 0, &c) == -EAGAIN, "nobody else yet");
    CHECK(vp_dial_server(name, me->pid + 4, &cl2, why, sizeof(why)) == -EPERM &&
              !vp_ok(cl2) && strstr(why, "refusing") != NULL,
          "a server that is not the expected pid is refused: %s", why);
    MUST(vp_pipe_accept(l, 2000, &c) == 0, "accept the refused one");
    vp_close(&c.h);
    CHECK(vp_dial_server(name, me->pid, &cl3, why, sizeof(why)) == 0 && vp_ok(cl3),
          "the expected server: %s", why);
    MUST(vp_pipe_accept(l, 2000, &c) == 0, "accept the third");
    /* What the server may do with the client's token. */
    if (WINDOWS_ONLY("the client's token reaches the server at identification "
                     "level only (SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION)",
                     "wine 8 gives the server impersonation level (docs/windows.md)")) {
        HANDLE t = NULL;
        SECURITY_IMPERSONATION_LEVEL lv = SecurityDelegation;
        DWORD n;
        MUST(ImpersonateNamedPipeClient((HANDLE)c.h.v), "impersonate");
        BOOL ok = OpenThreadToken(GetCurrentThread(), TOKEN_QUERY, TRUE, &t);
        MUST(RevertToSelf(), "revert");
        CHECK(ok && GetTokenInformation(t, TokenImpersonationLevel, &lv, sizeof(lv), &n) &&
                  lv == SecurityIdentification,
              "impersonation level %d", (int)lv);
        if (t)
            CloseHandle(t);
    }
    vp_close(&c.h);
    vp_close(&cl3);
    vp_close(&cl);
    vp_pipe_listen_close(&l);
    free(id);
    free(me);
}

/* A child process as the client: its pid, start time and exit. */
static void test_pipe_identity_child(void)
{
    char name[128], why[256], exe[MAX_PATH * 3];
    unique_pipe(name, sizeof(name), "child");
    beside_me("win_child.exe", exe, sizeof(exe));
    struct vp_pipe_listener *l = listen_on(name);
    char *argv[] = {exe, name, NULL};
    int64_t pid = 0;
    MUST(vp_spawn(exe, argv, &pid) == 0 && pid > 0, "spawn %s", exe);
    struct vp_pipe_conn c;
    MUST(vp_pipe_accept(l, 10000, &c) == 0, "the child connects");
    struct vp_identity *id = calloc(1, sizeof(*id));
    vp_handle pin = VP_NONE;
    MUST(id, "calloc");
    int e = vp_identity_of_pipe(c.h, c.connected_at, id, &pin, why, sizeof(why));
    CHECK(e == 0, "identity of the child: %s", why);
    CHECK(id->pid == pid, "the pipe names the child: pid %lld, spawned %lld",
          (long long)id->pid, (long long)pid);
    CHECK(id->start_time == vp_proc_start_time(pid) && id->start_time <= c.connected_at,
          "its start time, before the connect");
    char line[128];
    char want[64];
    snprintf(want, sizeof(want), "pid %lld", (long long)pid);
    CHECK(send_all(c.h, "pid\n") && recv_line(c.h, line, sizeof(line), 5000) > 0 &&
              strcmp(line, want) == 0,
          "the child says %s", line);
    CHECK(!vp_proc_exited(pin), "the pin: alive");
    CHECK(send_all(c.h, "exit 7\n") && recv_line(c.h, line, sizeof(line), 5000) > 0 &&
              strcmp(line, "bye") == 0,
          "exit");
    MUST(WaitForSingleObject((HANDLE)pin.v, 10000) == WAIT_OBJECT_0 && vp_proc_exited(pin),
         "the pin signals the exit");
    DWORD code = 0;
    CHECK(GetExitCodeProcess((HANDLE)pin.v, &code) && code == 7, "exit code %lu", code);
    int status = -1;
    CHECK(vp_wait_child(pid, &status) == 0 && status == 7, "vp_wait_child: %d", status);
    CHECK(vp_wait_child(pid, &status) == -ECHILD, "waited for once only");
    /* A gone client's pipe still names its pid, and its process object
     * lingers while the pin is open (token and all): it is refused. */
    CHECK(vp_identity_of_pipe(c.h, c.connected_at, id, NULL, why, sizeof(why)) == -ESRCH &&
              strstr(why, "exited") != NULL,
          "a client that exited: %s", why);
    vp_close(&pin);
    vp_close(&c.h);

    /* Killing through a pin. */
    MUST(vp_spawn(exe, argv, &pid) == 0, "spawn again");
    MUST(vp_pipe_accept(l, 10000, &c) == 0, "connects");
    MUST(vp_identity_of_pipe(c.h, c.connected_at, id, &pin, why, sizeof(why)) == 0, "%s", why);
    CHECK(vp_proc_kill(pin) == 0, "kill");
    MUST(WaitForSingleObject((HANDLE)pin.v, 10000) == WAIT_OBJECT_0, "killed");
    CHECK(vp_proc_kill(pin) == 0, "killing the dead is no error");
    CHECK(vp_wait_child(pid, &status) == 0 && status == 128 + 9, "status %d", status);
    vp_close(&pin);
    vp_close(&c.h);
    CHECK(vp_proc_pin(0, &pin) == -ESRCH, "no process 0 to pin");
    vp_pipe_listen_close(&l);
    free(id);
}

int main(void)
{
    test_sids();
    test_self_and_accounts();
    test_pipe_identity_self();
    test_pipe_identity_child();
    return win_report("test_win_identity");
}
