/* SPDX-License-Identifier: Apache-2.0 */
/* The named-pipe listener (platform/win32/pipe_listener.h) under wine: the
 * security descriptor it writes and the one the pipe gets, a new one set
 * while it listens (vp_pipe_listen_set_allow: every instance has it, also
 * while another thread accepts, and a bad list changes nothing), one
 * server per name, accepting (timeouts, wake-ups, a client gone before it
 * was taken, the next instance ready before the connected one is handed
 * on), and the client's access. What wine does not enforce (the DACL at open, the first
 * instance flag itself) is checked on real Windows only. */
#include "tests/win/wintest.h"

#include <aclapi.h>
#include <sddl.h>

#include <errno.h>

#include "platform/conn.h"
#include "platform/win32/identity.h"
#include "platform/win32/pipe_listener.h"

static struct vp_pipe_listener *listen_on(const char *name,
                                          const struct vp_access_list *allow)
{
    struct vp_pipe_listen_cfg cfg = {.name = name, .allow = allow};
    struct vp_pipe_listener *l = NULL;
    char why[256] = "";
    int e = vp_pipe_listen(&cfg, &l, why, sizeof(why));
    MUST(e == 0 && l, "vp_pipe_listen %s: %d %s", name, e, why);
    return l;
}

static void test_sddl(void)
{
    struct vp_access_list allow = {0};
    char why[256];
    CHECK(vp_access_add(&allow, "S-1-5-32-545", why, sizeof(why)) == 0, "Users: %s", why);
    CHECK(vp_access_add(&allow, "S-1-5-21-7-8-9-1001", why, sizeof(why)) == 0, "%s", why);
    struct vp_sid self, sy;
    MUST(vp_sid_parse("S-1-5-21-1-2-3-1000", &self) == 0, "parse");
    MUST(vp_sid_parse("S-1-5-18", &sy) == 0, "parse SYSTEM");
    char s[1024];
    CHECK(vp_pipe_sddl(&allow, &self, s, sizeof(s)) == 0, "sddl");
    /* read + FILE_WRITE_DATA = 0x12008b: not GENERIC_WRITE (0x40000000),
     * no FILE_APPEND_DATA (0x4, create pipe instance). */
    CHECK(strcmp(s, "D:P(A;;GA;;;SY)(A;;GA;;;BA)(A;;GA;;;S-1-5-21-1-2-3-1000)"
                    "(A;;0x12008b;;;S-1-5-32-545)(A;;0x12008b;;;S-1-5-21-7-8-9-1001)") == 0,
          "sddl %s", s);
    CHECK((0x12008b & (FILE_APPEND_DATA | GENERIC_WRITE | FILE_WRITE_ATTRIBUTES |
                       WRITE_DAC | WRITE_OWNER)) == 0 &&
              (0x12008b & FILE_WRITE_DATA) && (0x12008b & FILE_READ_DATA),
          "the client's mask reads and writes data only");
    /* A service (SYSTEM) needs no ACE of its own. */
    CHECK(vp_pipe_sddl(NULL, &sy, s, sizeof(s)) == 0 &&
              strcmp(s, "D:P(A;;GA;;;SY)(A;;GA;;;BA)") == 0,
          "as SYSTEM, nobody else: %s", s);
    CHECK(vp_pipe_sddl(&allow, &self, s, 40) == -ENOSPC, "too small a buffer");
    /* The system accepts what it writes. */
    CHECK(vp_pipe_sddl(&allow, NULL, s, sizeof(s)) == 0, "for this process");
    wchar_t w[1024];
    MultiByteToWideChar(CP_UTF8, 0, s, -1, w, 1024);
    PSECURITY_DESCRIPTOR sd = NULL;
    CHECK(ConvertStringSecurityDescriptorToSecurityDescriptorW(w, SDDL_REVISION_1, &sd,
                                                               NULL),
          "ConvertStringSecurityDescriptorToSecurityDescriptorW(%s): %lu", s,
          GetLastError());
    LocalFree(sd);
}

/* The DACL of h as the system keeps it equals the one sddl describes:
 * ACE by ACE, generic rights mapped as for files (Windows stores them
 * mapped; wine as given). */
static void check_dacl(HANDLE h, const char *sddl)
{
    PACL got = NULL;
    PSECURITY_DESCRIPTOR gsd = NULL;
    DWORD e = GetSecurityInfo(h, SE_KERNEL_OBJECT, DACL_SECURITY_INFORMATION, NULL,
                              NULL, &got, NULL, &gsd);
    MUST(e == 0 && got, "GetSecurityInfo: %lu", e);
    SECURITY_DESCRIPTOR_CONTROL ctl = 0;
    DWORD rev;
    GetSecurityDescriptorControl(gsd, &ctl, &rev);
    CHECK(ctl & SE_DACL_PROTECTED, "the pipe's DACL is protected (no inherited ACEs)");
    wchar_t w[2048];
    MultiByteToWideChar(CP_UTF8, 0, sddl, -1, w, 2048);
    PSECURITY_DESCRIPTOR wsd = NULL;
    MUST(ConvertStringSecurityDescriptorToSecurityDescriptorW(w, SDDL_REVISION_1, &wsd,
                                                              NULL),
         "convert");
    BOOL present, defaulted;
    PACL want = NULL;
    GetSecurityDescriptorDacl(wsd, &present, &want, &defaulted);
    CHECK_EQ_U(got->AceCount, want->AceCount);
    GENERIC_MAPPING map = {FILE_GENERIC_READ, FILE_GENERIC_WRITE, FILE_GENERIC_EXECUTE,
                           FILE_ALL_ACCESS};
    for (DWORD i = 0; i < got->AceCount && i < want->AceCount; i++) {
        ACCESS_ALLOWED_ACE *a, *b;
        GetAce(got, i, (void **)&a);
        GetAce(want, i, (void **)&b);
        DWORD ma = a->Mask, mb = b->Mask;
        MapGenericMask(&ma, &map);
        MapGenericMask(&mb, &map);
        CHECK(a->Header.AceType == ACCESS_ALLOWED_ACE_TYPE &&
                  a->Header.AceType == b->Header.AceType,
              "ACE %lu is an allow ACE", i);
        CHECK(ma == mb, "ACE %lu: mask 0x%lx, expected 0x%lx", i, ma, mb);
        CHECK(EqualSid((PSID)&a->SidStart, (PSID)&b->SidStart), "ACE %lu: SID", i);
    }
    LocalFree(wsd);
    LocalFree(gsd);
}

/* Whether h's pipe's DACL, as the system keeps it, has an ACE for sid. */
static bool dacl_names(HANDLE h, const char *sid)
{
    PACL got = NULL;
    PSECURITY_DESCRIPTOR gsd = NULL;
    if (GetSecurityInfo(h, SE_KERNEL_OBJECT, DACL_SECURITY_INFORMATION, NULL, NULL, &got,
                        NULL, &gsd) != 0 || !got)
        return false;
    struct vp_sid want;
    bool found = false;
    if (vp_sid_parse(sid, &want) == 0)
        for (DWORD i = 0; i < got->AceCount && !found; i++) {
            ACCESS_ALLOWED_ACE *a;
            GetAce(got, i, (void **)&a);
            found = EqualSid((PSID)&a->SidStart, (PSID)want.b);
        }
    LocalFree(gsd);
    return found;
}

struct accept_arg {
    struct vp_pipe_listener *l;
    struct vp_pipe_conn c;
    int e;
};

static DWORD WINAPI accept_thread(void *p)
{
    struct accept_arg *a = p;
    a->e = vp_pipe_accept(a->l, 10000, &a->c);
    return 0;
}

/* A new descriptor while listening: the pipe has one for all its
 * instances, so it reaches the one waiting, the connected ones and the
 * next; a bad list leaves the old one. */
static void test_set_allow(void)
{
    char name[128], why[256];
    unique_pipe(name, sizeof(name), "reallow");
    struct vp_access_list a1 = {0}, a2 = {0};
    MUST(vp_access_add(&a1, "S-1-5-32-545", why, sizeof(why)) == 0, "Users: %s", why);
    MUST(vp_access_add(&a1, "S-1-5-21-7-8-9-1001", why, sizeof(why)) == 0, "%s", why);
    /* 1001 taken off, 2002 added, Users kept. */
    MUST(vp_access_add(&a2, "S-1-5-32-545", why, sizeof(why)) == 0, "Users: %s", why);
    MUST(vp_access_add(&a2, "S-1-5-21-7-8-9-2002", why, sizeof(why)) == 0, "%s", why);
    char want1[2048], want2[2048];
    MUST(vp_pipe_sddl(&a1, NULL, want1, sizeof(want1)) == 0, "sddl 1");
    MUST(vp_pipe_sddl(&a2, NULL, want2, sizeof(want2)) == 0, "sddl 2");
    struct vp_pipe_listener *l = listen_on(name, &a1);
    CHECK(strcmp(vp_pipe_listen_sddl(l), want1) == 0, "the first descriptor: %s",
          vp_pipe_listen_sddl(l));

    /* A client connected under the first descriptor. */
    vp_handle c1;
    struct vp_pipe_conn s1;
    MUST(vp_dial(name, &c1) == 0, "dial 1");
    MUST(vp_pipe_accept(l, 2000, &s1) == 0, "accept 1");
    check_dacl((HANDLE)s1.h.v, want1);

    /* The second, while the next instance waits. */
    CHECK(vp_pipe_listen_set_allow(l, &a2, why, sizeof(why)) == 1, "set_allow: %s", why);
    CHECK(strcmp(vp_pipe_listen_sddl(l), want2) == 0, "the SDDL is the new one: %s",
          vp_pipe_listen_sddl(l));
    CHECK(strstr(vp_pipe_listen_sddl(l), "(A;;0x12008b;;;S-1-5-21-7-8-9-2002)") &&
              !strstr(vp_pipe_listen_sddl(l), "S-1-5-21-7-8-9-1001"),
          "2002 in, 1001 out: %s", vp_pipe_listen_sddl(l));
    /* The instance that waited when it was set is the next client's. */
    vp_handle c2;
    struct vp_pipe_conn s2;
    MUST(vp_dial(name, &c2) == 0, "dial 2 after set_allow");
    MUST(vp_pipe_accept(l, 2000, &s2) == 0, "accept 2");
    check_dacl((HANDLE)s2.h.v, want2);
    CHECK(dacl_names((HANDLE)s2.h.v, "S-1-5-21-7-8-9-2002") &&
              !dacl_names((HANDLE)s2.h.v, "S-1-5-21-7-8-9-1001"),
          "the next instance's DACL has 2002 and not 1001");
    /* The pipe has one descriptor: the connected instance and the
     * client's end read the new one too (the connected client stays). */
    CHECK(dacl_names((HANDLE)s1.h.v, "S-1-5-21-7-8-9-2002") &&
              !dacl_names((HANDLE)s1.h.v, "S-1-5-21-7-8-9-1001"),
          "the connected instance reads the new DACL");
    CHECK(dacl_names((HANDLE)c2.v, "S-1-5-21-7-8-9-2002"), "and a client's end");
    char line[64];
    CHECK(send_all(c2, "after\n") && recv_line(s2.h, line, sizeof(line), 2000) == 5 &&
              strcmp(line, "after") == 0,
          "a client after set_allow is served: %s", line);
    CHECK(send_all(c1, "still\n") && recv_line(s1.h, line, sizeof(line), 2000) == 5 &&
              strcmp(line, "still") == 0,
          "the one connected before still is: %s", line);

    /* The same list again: nothing to do. */
    CHECK(vp_pipe_listen_set_allow(l, &a2, why, sizeof(why)) == 0, "unchanged: 0");

    /* A bad list: an entry that is no SID, a count out of range. Nothing
     * changes, and why says what. */
    struct vp_access_list *bad = calloc(1, sizeof(*bad));
    MUST(bad, "calloc");
    MUST(vp_access_add(bad, "S-1-5-21-7-8-9-3003", why, sizeof(why)) == 0, "%s", why);
    bad->n = 2; /* sids[1] is all zero */
    why[0] = 0;
    CHECK(vp_pipe_listen_set_allow(l, bad, why, sizeof(why)) == -EINVAL,
          "an entry that is no SID: -EINVAL");
    CHECK(strstr(why, "no SID") != NULL, "why: %s", why);
    bad->n = VP_ACCESS_MAX + 1;
    CHECK(vp_pipe_listen_set_allow(l, bad, why, sizeof(why)) == -EINVAL,
          "a count beyond the list: -EINVAL");
    bad->n = -1;
    CHECK(vp_pipe_listen_set_allow(l, bad, why, sizeof(why)) == -EINVAL,
          "a negative count: -EINVAL");
    free(bad);
    CHECK(strcmp(vp_pipe_listen_sddl(l), want2) == 0, "the SDDL stays: %s",
          vp_pipe_listen_sddl(l));
    check_dacl((HANDLE)s2.h.v, want2);
    CHECK(!dacl_names((HANDLE)s2.h.v, "S-1-5-21-7-8-9-3003"), "the DACL stays");

    /* Set from another thread while one waits in vp_pipe_accept (the
     * daemon's loop and its acceptor): back to the first list. */
    struct accept_arg arg = {.l = l, .e = 1};
    HANDLE t = CreateThread(NULL, 0, accept_thread, &arg, 0, NULL);
    MUST(t, "thread");
    Sleep(100);
    CHECK(vp_pipe_listen_set_allow(l, &a1, why, sizeof(why)) == 1,
          "set_allow during an accept: %s", why);
    vp_handle c3;
    CHECK(vp_dial(name, &c3) == 0, "dial 3");
    CHECK(WaitForSingleObject(t, 10000) == WAIT_OBJECT_0 && arg.e == 0,
          "the waiting accept took it: %d", arg.e);
    CloseHandle(t);
    if (arg.e == 0) {
        check_dacl((HANDLE)arg.c.h.v, want1);
        CHECK(dacl_names((HANDLE)arg.c.h.v, "S-1-5-21-7-8-9-1001") &&
                  !dacl_names((HANDLE)arg.c.h.v, "S-1-5-21-7-8-9-2002"),
              "1001 back, 2002 gone");
        CHECK(send_all(c3, "third\n") && recv_line(arg.c.h, line, sizeof(line), 2000) == 5,
              "and it is served");
        vp_close(&arg.c.h);
    }

    /* Why it is set on the pipe: an instance made with a descriptor of
     * its own does not change the pipe's (the first instance's stays). */
    PSECURITY_DESCRIPTOR other = NULL;
    MUST(ConvertStringSecurityDescriptorToSecurityDescriptorW(L"D:P(A;;GA;;;WD)",
                                                              SDDL_REVISION_1, &other, NULL),
         "sd");
    SECURITY_ATTRIBUTES sa = {sizeof(sa), other, FALSE};
    wchar_t wn[128];
    MultiByteToWideChar(CP_UTF8, 0, name, -1, wn, 128);
    HANDLE raw = CreateNamedPipeW(wn, PIPE_ACCESS_DUPLEX, PIPE_TYPE_BYTE,
                                  PIPE_UNLIMITED_INSTANCES, 4096, 4096, 0, &sa);
    CHECK(raw != INVALID_HANDLE_VALUE, "another instance: %lu", GetLastError());
    if (raw != INVALID_HANDLE_VALUE) {
        check_dacl(raw, want1);
        CHECK(!dacl_names(raw, "S-1-1-0"), "its own descriptor was ignored");
        CloseHandle(raw);
    }
    LocalFree(other);

    vp_close(&c3);
    vp_close(&s1.h);
    vp_close(&s2.h);
    vp_close(&c1);
    vp_close(&c2);
    vp_pipe_listen_close(&l);
}

static void test_listen_and_accept(void)
{
    char name[128];
    unique_pipe(name, sizeof(name), "listen");
    struct vp_access_list allow = {0};
    char why[256];
    MUST(vp_access_add(&allow, "Users", why, sizeof(why)) == 0, "Users: %s", why);
    struct vp_pipe_listener *l = listen_on(name, &allow);
    CHECK(strcmp(vp_pipe_listen_name(l), name) == 0, "its name");
    CHECK(strstr(vp_pipe_listen_sddl(l), "(A;;0x12008b;;;S-1-5-32-545)") != NULL,
          "Users may read and write data: %s", vp_pipe_listen_sddl(l));

    struct vp_pipe_conn c;
    CHECK(vp_pipe_accept(l, 0, &c) == -EAGAIN, "nobody there: EAGAIN at once");
    uint64_t t0 = GetTickCount64();
    CHECK(vp_pipe_accept(l, 200, &c) == -EAGAIN, "nobody there: EAGAIN after 200 ms");
    CHECK(GetTickCount64() - t0 >= 150, "it waited");
    vp_pipe_listen_wake(l);
    CHECK(vp_pipe_accept(l, 5000, &c) == -EINTR, "a wake ends a wait with EINTR");

    /* A client, with the access vp_dial asks for (GENERIC_READ |
     * FILE_WRITE_DATA, which the DACL grants). */
    vp_handle cl;
    MUST(vp_dial(name, &cl) == 0, "vp_dial %s", name);
    uint64_t before = vp_identity_now();
    MUST(vp_pipe_accept(l, 2000, &c) == 0, "accept");
    CHECK(c.connected_at >= before && c.connected_at <= vp_identity_now(),
          "connected_at is when it was taken");
    check_dacl((HANDLE)c.h.v, vp_pipe_listen_sddl(l));
    /* The next instance is there before the connected one is handed on:
     * a second client finds it without another accept. */
    CHECK(WaitNamedPipeW(L"\\\\.\\pipe\\nothing-here-vramd", 0) == FALSE,
          "(WaitNamedPipe on no pipe fails)");
    wchar_t wn[128];
    MultiByteToWideChar(CP_UTF8, 0, name, -1, wn, 128);
    CHECK(WaitNamedPipeW(wn, 0), "an instance waits already: %lu", GetLastError());
    CHECK(send_all(cl, "hello\n"), "send");
    char line[64];
    CHECK(recv_line(c.h, line, sizeof(line), 2000) == 5 && strcmp(line, "hello") == 0,
          "the server reads the client");
    CHECK(send_all(c.h, "back\n") && recv_line(cl, line, sizeof(line), 2000) == 4 &&
              strcmp(line, "back") == 0,
          "and the client the server");
    ULONG flags = 0;
    CHECK(GetNamedPipeInfo((HANDLE)c.h.v, &flags, NULL, NULL, NULL) &&
              (flags & PIPE_SERVER_END) && !(flags & PIPE_TYPE_MESSAGE),
          "a byte pipe's server end (flags %lx)", flags);

    /* A client that came and went before it was taken is skipped. */
    vp_handle gone;
    MUST(vp_dial(name, &gone) == 0, "dial the one that goes");
    vp_close(&gone);
    int e = vp_pipe_accept(l, 300, &c);
    vp_handle c2;
    if (e == 0) {
        /* Connected before it left (the connect had been started): its
         * instance reads as the end of the stream, never as another's. */
        char x;
        int nh;
        CHECK(vp_recv(c.h, &x, 1, NULL, 0, &nh, VP_RECV_WAIT, why, sizeof(why)) <= 0,
              "the one that went reads as ended");
        vp_close(&c.h);
    } else {
        CHECK(e == -EAGAIN, "skipped, then nobody: %d", e);
    }
    MUST(vp_dial(name, &c2) == 0, "a third client");
    MUST(vp_pipe_accept(l, 2000, &c) == 0, "accept the third");
    CHECK(send_all(c2, "third\n") && recv_line(c.h, line, sizeof(line), 2000) == 5 &&
              strcmp(line, "third") == 0,
          "the instance taken is the live client's: %s", line);
    vp_close(&c.h);
    vp_close(&c2);
    vp_close(&cl);
    vp_pipe_listen_close(&l);
    CHECK(l == NULL, "close sets NULL");
    vp_pipe_listen_close(&l);
}

static void test_one_server_per_name(void)
{
    char name[128], why[256];
    unique_pipe(name, sizeof(name), "first");
    struct vp_pipe_listener *l = listen_on(name, NULL), *l2 = NULL;
    struct vp_pipe_listen_cfg cfg = {.name = name};
    CHECK(vp_pipe_listen(&cfg, &l2, why, sizeof(why)) == -EADDRINUSE && !l2,
          "a second server on the name is refused");
    CHECK(strstr(why, "exists already") != NULL, "why: %s", why);
    /* Also while every instance of the first is connected (busy). */
    vp_handle cl;
    struct vp_pipe_conn c;
    MUST(vp_dial(name, &cl) == 0, "dial");
    MUST(vp_pipe_accept(l, 2000, &c) == 0, "accept");
    CHECK(vp_pipe_listen(&cfg, &l2, why, sizeof(why)) == -EADDRINUSE,
          "refused while a client is connected");
    /* Gone for good once the last instance closes. */
    vp_close(&c.h);
    vp_close(&cl);
    vp_pipe_listen_close(&l);
    CHECK(vp_pipe_listen(&cfg, &l2, why, sizeof(why)) == 0, "free again: %s", why);
    vp_pipe_listen_close(&l2);

    cfg.name = "\\\\.\\pipe\\";
    CHECK(vp_pipe_listen(&cfg, &l2, why, sizeof(why)) == -EINVAL, "no name: %s", why);
    cfg.name = "C:\\vramd";
    CHECK(vp_pipe_listen(&cfg, &l2, why, sizeof(why)) == -EINVAL, "not a pipe");
    cfg.name = "\\\\.\\pipe\\a\\b";
    CHECK(vp_pipe_listen(&cfg, &l2, why, sizeof(why)) == -EINVAL, "a backslash in it");
}

/* What only Windows enforces: FILE_FLAG_FIRST_PIPE_INSTANCE on its own,
 * and the DACL when a client opens the pipe or a server adds an instance. */
static void test_windows_enforcement(void)
{
    if (WINDOWS_ONLY("FILE_FLAG_FIRST_PIPE_INSTANCE refuses a name in use",
                     "wine 8 ignores the flag (docs/windows.md)")) {
        char name[128];
        wchar_t w[128];
        unique_pipe(name, sizeof(name), "raw");
        MultiByteToWideChar(CP_UTF8, 0, name, -1, w, 128);
        HANDLE a = CreateNamedPipeW(w, PIPE_ACCESS_DUPLEX | FILE_FLAG_FIRST_PIPE_INSTANCE,
                                    PIPE_TYPE_BYTE, PIPE_UNLIMITED_INSTANCES, 4096, 4096,
                                    0, NULL);
        HANDLE b = CreateNamedPipeW(w, PIPE_ACCESS_DUPLEX | FILE_FLAG_FIRST_PIPE_INSTANCE,
                                    PIPE_TYPE_BYTE, PIPE_UNLIMITED_INSTANCES, 4096, 4096,
                                    0, NULL);
        DWORD err = GetLastError();
        CHECK(a != INVALID_HANDLE_VALUE && b == INVALID_HANDLE_VALUE &&
                  err == ERROR_ACCESS_DENIED,
              "the second first instance is refused: %lu", err);
        CloseHandle(a);
        if (b != INVALID_HANDLE_VALUE)
            CloseHandle(b);
    }
    if (WINDOWS_ONLY("the DACL: GENERIC_WRITE and a new instance refused, "
                     "read + FILE_WRITE_DATA granted",
                     "wine 8 never checks a pipe's DACL (docs/windows.md)")) {
        /* Everyone may read and write data, nobody more (not even this
         * process, which is admin or not). */
        PSECURITY_DESCRIPTOR sd;
        MUST(ConvertStringSecurityDescriptorToSecurityDescriptorW(
                 L"D:P(A;;0x12008b;;;WD)", SDDL_REVISION_1, &sd, NULL),
             "sd");
        SECURITY_ATTRIBUTES sa = {sizeof(sa), sd, FALSE};
        char name[128];
        wchar_t w[128];
        unique_pipe(name, sizeof(name), "dacl");
        MultiByteToWideChar(CP_UTF8, 0, name, -1, w, 128);
        HANDLE s = CreateNamedPipeW(w, PIPE_ACCESS_DUPLEX | FILE_FLAG_FIRST_PIPE_INSTANCE,
                                    PIPE_TYPE_BYTE, PIPE_UNLIMITED_INSTANCES, 4096, 4096,
                                    0, &sa);
        MUST(s != INVALID_HANDLE_VALUE, "pipe");
        HANDLE c = CreateFileW(w, GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_EXISTING, 0,
                               NULL);
        CHECK(c == INVALID_HANDLE_VALUE && GetLastError() == ERROR_ACCESS_DENIED,
              "GENERIC_WRITE is refused");
        c = CreateFileW(w, GENERIC_READ | FILE_WRITE_DATA, 0, NULL, OPEN_EXISTING, 0, NULL);
        CHECK(c != INVALID_HANDLE_VALUE, "read + FILE_WRITE_DATA is granted: %lu",
              GetLastError());
        HANDLE s2 = CreateNamedPipeW(w, PIPE_ACCESS_DUPLEX, PIPE_TYPE_BYTE,
                                     PIPE_UNLIMITED_INSTANCES, 4096, 4096, 0, &sa);
        CHECK(s2 == INVALID_HANDLE_VALUE && GetLastError() == ERROR_ACCESS_DENIED,
              "no FILE_CREATE_PIPE_INSTANCE: no second instance");
        if (c != INVALID_HANDLE_VALUE)
            CloseHandle(c);
        CloseHandle(s);
        LocalFree(sd);
    }
    /* Not even one Windows machine can: it takes a client on another. */
    printf("NOT TESTED: PIPE_REJECT_REMOTE_CLIENTS (a client on a second machine "
           "is needed)\n");
}

int main(void)
{
    test_sddl();
    test_listen_and_accept();
    test_set_allow();
    test_one_server_per_name();
    test_windows_enforcement();
    return win_report("test_win_listener");
}
