/* SPDX-License-Identifier: Apache-2.0 */
/* vramd's access lists on Windows, under wine: the configuration's
 * access.allow and access.admin name users and groups by account name or
 * SID, and the daemon judges a pipe client's token by them
 * (daemon/config.c, platform/win32/peer_map.c, daemon/core/access.c, the
 * numbering in platform/win32/peer_win32.c), with per-user counting by SID and
 * the pipe's security descriptor made from the same lists.
 *
 * Under wine every process is an administrator, so no real client can be
 * refused here (test_win_vramd is served as one). The judging is tested
 * with identities written as data: what vp_identity_of_pipe gives for a
 * token (a user SID and enabled groups), for users that do not exist on
 * this machine too, which is what an access list must refuse. */
#include "tests/win/wintest.h"

#include <errno.h>

#include "daemon/core/clients/access.h"
#include "daemon/config.h"
#include "platform/win32/identity.h"
#include "platform/peer.h"
#include "platform/win32/peer_map.h"
#include "platform/win32/pipe_listener.h"

static char tmpdir[MAX_PATH];

static int load(const char *json, struct vd_config *c, char errs[][256], int *nerrs)
{
    char path[MAX_PATH + 32];
    snprintf(path, sizeof(path), "%s\\access.json", tmpdir);
    FILE *f = fopen(path, "wb");
    MUST(f, "cannot write %s", path);
    fputs(json, f);
    fclose(f);
    *nerrs = 0;
    return vd_config_load(path, c, errs, nerrs);
}

static const char *base_device =
    "\"devices\": [{\"id\": 0, \"capacity\": \"64MiB\", \"chunk\": \"2MiB\"}]";

/* A token as the system would give it: user and enabled groups. */
static struct vp_identity *token(const char *user, const char *const *groups)
{
    struct vp_identity *id = calloc(1, sizeof(*id));
    MUST(id, "out of memory");
    id->pid = 4242;
    id->start_time = 1;
    MUST(vp_sid_parse(user, &id->user) == 0, "SID %s", user);
    for (int i = 0; groups && groups[i]; i++)
        MUST(vp_sid_parse(groups[i], &id->groups[id->ngroups++]) == 0, "SID %s",
             groups[i]);
    return id;
}

static bool admitted(const struct vd_config *c, const struct vp_identity *id,
                     struct vp_peer *p)
{
    char why[256];
    return vpw_peer_map(id, p, why, sizeof(why)) == 0 && vd_access_connect(c, p);
}

/* Two users that exist nowhere, and well-known groups. */
#define NOBODY_A "S-1-5-21-111-222-333-4001"
#define NOBODY_B "S-1-5-21-111-222-333-4002"
#define USERS "S-1-5-32-545"
#define EVERYONE "S-1-1-0"
#define ADMINS "S-1-5-32-544"

static void test_numbering(const char *me_name, const struct vp_sid *me_sid)
{
    uint32_t a, b, g, u;
    char s[VP_SID_STRING_MAX];
    CHECK(vp_user_id(me_name, &a) == 0 && a >= VP_SID_ID_BASE, "user %s by name: %u",
          me_name, a);
    vp_sid_format(me_sid, s, sizeof(s));
    CHECK(vp_user_id(s, &b) == 0 && b == a, "the same user by SID %s: %u", s, b);
    CHECK(vp_self_uid() == a, "vramd's own user has that number");
    struct vp_sid back;
    CHECK(vp_id_sid(a, &back) == 0 && vp_sid_equal(&back, me_sid), "the number's SID");
    CHECK(vp_group_id("Users", &g) == 0 && g != a, "group Users: %u", g);
    CHECK(vp_group_id(USERS, &u) == 0 && u == g, "the same group by SID");
    CHECK(vp_user_id("Users", &u) == -ENOENT, "a group is not a user");
    CHECK(vp_group_id(me_name, &u) == -ENOENT, "a user is not a group");
    CHECK(vp_user_id("vramd-no-such-user", &u) == -ENOENT, "no such user");
    CHECK(vp_user_id("S-1-nonsense", &u) == -ENOENT, "a bad SID string");
    CHECK(vp_id_sid(0, &back) == -ENOENT && vp_id_sid(VP_SID_ID_BASE + 4000, &back) == -ENOENT,
          "numbers nobody has");
    CHECK(!vp_ids_numeric(), "Windows has no numeric ids of its own");
    char d[128];
    vp_user_describe(a, d, sizeof(d));
    CHECK(strncmp(d, "user S-1-5-", 11) == 0, "described by SID: %s", d);
    vp_user_describe(0, d, sizeof(d));
    CHECK(strstr(d, "SYSTEM") != NULL, "0 is SYSTEM or an administrator: %s", d);
}

/* A SID's number is the same in another process that numbered other SIDs
 * first, or none: what a vramd started again over its state file (whose
 * clients' uids are numbers) needs. The other process is this program,
 * run with "--number SID": its exit code is the number. */
static void test_stable_numbers(void)
{
    const char *others[] = {"S-1-5-21-7-8-9-1001", "S-1-5-21-7-8-9-1002",
                            "S-1-5-21-7-8-9-1003", NULL};
    for (int i = 0; others[i]; i++) {
        uint32_t x;
        MUST(vp_user_id(others[i], &x) == 0, "numbering %s", others[i]);
    }
    uint32_t here = 0, again = 0;
    CHECK(vp_user_id(NOBODY_B, &here) == 0 && vp_user_id(NOBODY_B, &again) == 0 &&
              here == again && here >= VP_SID_ID_BASE && here < 2 * VP_SID_ID_BASE,
          "%s numbered %u, then %u", NOBODY_B, here, again);
    char exe[MAX_PATH], line[MAX_PATH + 64];
    MUST(GetModuleFileNameA(NULL, exe, MAX_PATH), "GetModuleFileNameA");
    snprintf(line, sizeof(line), "\"%s\" --number %s", exe, NOBODY_B);
    STARTUPINFOA si = {.cb = sizeof(si)};
    PROCESS_INFORMATION pi;
    MUST(CreateProcessA(exe, line, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi),
         "CreateProcessA: %lu", GetLastError());
    DWORD code = 0;
    WaitForSingleObject(pi.hProcess, 30000);
    GetExitCodeProcess(pi.hProcess, &code);
    CloseHandle(pi.hThread);
    CloseHandle(pi.hProcess);
    CHECK(code == here, "%s is %u here, after three others, and %lu in a process "
          "that numbered it first", NOBODY_B, here, code);
}

static void test_config_errors(const char *me_name)
{
    struct vd_config c;
    char errs[VD_MAX_CONFIG_ERRORS][256], json[1024];
    int n;
    snprintf(json, sizeof(json), "{%s, \"access\": {\"allow\": {\"uids\": [1000]}}}",
             base_device);
    CHECK(load(json, &c, errs, &n) == -EINVAL && n == 1 &&
              strstr(errs[0], "access.allow.uids[0]") &&
              strstr(errs[0], "account name or SID"),
          "numeric uids refused: %s", n ? errs[0] : "(none)");
    vd_config_free(&c);
    snprintf(json, sizeof(json), "{%s, \"access\": {\"admin\": {\"gids\": [0]}}}",
             base_device);
    CHECK(load(json, &c, errs, &n) == -EINVAL && n == 1 && strstr(errs[0], "access.admin.gids[0]"),
          "numeric gids refused: %s", n ? errs[0] : "(none)");
    vd_config_free(&c);
    snprintf(json, sizeof(json), "{%s, \"access\": {\"allow\": {\"users\": "
             "[\"vramd-no-such-user\", \"%s\"], \"groups\": [\"%s\"]}}}",
             base_device, me_name, me_name);
    CHECK(load(json, &c, errs, &n) == -EINVAL && n == 2 &&
              strstr(errs[0], "no user named 'vramd-no-such-user'") &&
              strstr(errs[1], "access.allow.groups[0]") && strstr(errs[1], "no group named"),
          "unknown user, a user as a group: %s / %s", n > 0 ? errs[0] : "",
          n > 1 ? errs[1] : "");
    vd_config_free(&c);
}

static void test_judging(const char *me_sid)
{
    struct vd_config c;
    char errs[VD_MAX_CONFIG_ERRORS][256], json[1024];
    int n;
    /* allow: this user by SID, NOBODY_A by SID, the group Users by name;
     * admin: NOBODY_B. */
    snprintf(json, sizeof(json), "{%s, \"access\": {\"allow\": {\"users\": "
             "[\"%s\", \"%s\"], \"groups\": [\"Users\"]}, \"admin\": {\"users\": "
             "[\"%s\"]}}}",
             base_device, me_sid, NOBODY_A, NOBODY_B);
    int e = load(json, &c, errs, &n);
    MUST(e == 0, "config: %s", n ? errs[0] : "?");
    CHECK(c.allow_given && c.allow.nuids == 2 && c.allow.ngids == 1 && c.admin.nuids == 1,
          "lists: %u users, %u groups, %u admins", c.allow.nuids, c.allow.ngids,
          c.admin.nuids);

    struct vp_peer pa, pb, pc, ps, pm;
    const char *users_only[] = {EVERYONE, USERS, NULL};
    const char *everyone_only[] = {EVERYONE, NULL};
    const char *admins[] = {EVERYONE, ADMINS, NULL};
    struct vp_identity *a = token(NOBODY_A, everyone_only);
    struct vp_identity *b = token(NOBODY_B, everyone_only);
    struct vp_identity *bu = token(NOBODY_B, users_only);
    struct vp_identity *other = token("S-1-5-21-111-222-333-4003", users_only);
    struct vp_identity *sys = token("S-1-5-18", NULL);
    struct vp_identity *adm = token("S-1-5-21-111-222-333-4004", admins);
    struct vp_identity *me = token(me_sid, everyone_only);

    CHECK(admitted(&c, a, &pa), "a listed user is admitted");
    CHECK(pa.uid >= VP_SID_ID_BASE && !vd_access_admin(&c, &pa), "... as no admin");
    CHECK(!admitted(&c, b, &pb), "an unlisted user in no listed group is refused");
    CHECK(vpw_peer_map(b, &pb, (char[256]){0}, 256) == 0 && vd_access_admin(&c, &pb),
          "the admin list names NOBODY_B, but admins must be allowed to connect "
          "first, as on Linux");
    CHECK(admitted(&c, bu, &pc) && vd_access_admin(&c, &pc) && pc.uid == pb.uid,
          "the same user in group Users: admitted, an admin, the same number");
    struct vp_peer po;
    CHECK(admitted(&c, other, &po) && po.uid != pa.uid && po.uid != pb.uid,
          "another user in Users: admitted, a number of its own (per-user limits)");
    CHECK(po.ngroups == 1, "only the listed group is numbered: %d", po.ngroups);
    CHECK(admitted(&c, sys, &ps) && ps.uid == 0, "SYSTEM: uid 0");
    CHECK(admitted(&c, adm, &pm) && pm.uid == 0 && vd_access_admin(&c, &pm),
          "an enabled Administrators group: uid 0, an admin");
    struct vp_peer pme;
    CHECK(admitted(&c, me, &pme) && pme.uid == vp_self_uid(),
          "this user by SID: admitted with its own number");

    /* The pipe's descriptor gives exactly the allowed ones read + write data. */
    struct vp_access_list l = {0};
    for (uint32_t i = 0; i < c.allow.nuids; i++)
        MUST(vp_id_sid(c.allow.uids[i], &l.sids[l.n++]) == 0, "SID of uid %u", i);
    for (uint32_t i = 0; i < c.allow.ngids; i++)
        MUST(vp_id_sid(c.allow.gids[i], &l.sids[l.n++]) == 0, "SID of gid %u", i);
    char sddl[2048];
    CHECK(vp_pipe_sddl(&l, NULL, sddl, sizeof(sddl)) == 0 && strstr(sddl, NOBODY_A) &&
              strstr(sddl, USERS) && !strstr(sddl, NOBODY_B),
          "the pipe's descriptor: %s", sddl);
    vd_config_free(&c);

    /* No allow list: vramd's own user (and group vramd, which wine lacks). */
    snprintf(json, sizeof(json), "{%s}", base_device);
    MUST(load(json, &c, errs, &n) == 0, "default config");
    CHECK(admitted(&c, me, &pme), "default: vramd's own user");
    CHECK(!admitted(&c, a, &pa), "default: nobody else");
    CHECK(admitted(&c, sys, &ps), "default: SYSTEM");
    vd_config_free(&c);
    free(a);
    free(b);
    free(bu);
    free(other);
    free(sys);
    free(adm);
    free(me);
}

int main(int argc, char **argv)
{
    /* test_stable_numbers' other process. */
    if (argc == 3 && strcmp(argv[1], "--number") == 0) {
        uint32_t id = 0;
        return vp_user_id(argv[2], &id) == 0 ? (int)id : 1;
    }
    DWORD n = GetTempPathA(sizeof(tmpdir), tmpdir);
    MUST(n > 0 && n < sizeof(tmpdir), "GetTempPath");
    wt_unique(tmpdir + n, sizeof(tmpdir) - n, "vram-access");
    MUST(CreateDirectoryA(tmpdir, NULL), "mkdir %s", tmpdir);

    struct vp_identity *me = calloc(1, sizeof(*me));
    MUST(me && vp_identity_self(me) == 0, "vp_identity_self");
    wchar_t wn[256];
    DWORD len = 256;
    MUST(GetUserNameW(wn, &len), "GetUserNameW");
    char name[512], sid[VP_SID_STRING_MAX];
    WideCharToMultiByte(CP_UTF8, 0, wn, -1, name, sizeof(name), NULL, NULL);
    vp_sid_format(&me->user, sid, sizeof(sid));

    test_numbering(name, &me->user);
    test_stable_numbers();
    test_config_errors(name);
    test_judging(sid);

    char path[MAX_PATH + 32];
    snprintf(path, sizeof(path), "%s\\access.json", tmpdir);
    DeleteFileA(path);
    RemoveDirectoryA(tmpdir);
    free(me);
    return win_report("test_win_access");
}
