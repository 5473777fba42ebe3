/* SPDX-License-Identifier: Apache-2.0 */
/* Identity: an unprivileged user made for the test with useradd, refused
 * when the configuration does not name it and served when it does, judged
 * by the kernel's credentials (its name in hello changes nothing). Needs
 * root and useradd. */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/attack/attack.h"

static char user[32];

static void remove_user(void)
{
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "userdel %s 2>/dev/null", user);
    if (system(cmd)) {}
}

struct who {
    uid_t uid;
    gid_t gid;
    int want; /* 0 served, else the error expected */
};

static int as_user(const struct daemon *d, void *p)
{
    const struct who *w = p;
    REQUIRE(setgroups(0, NULL) == 0 && setgid(w->gid) == 0 && setuid(w->uid) == 0,
            "become %s", user);
    char err[256] = "";
    /* It calls itself root: the daemon goes by its credentials. */
    struct vram_client_options o = {.name = "root", .error = err,
                                    .error_len = sizeof(err)};
    vram_client *c = NULL;
    int e = vram_client_connect(d->sock, &o, &c);
    CHECK(e == w->want, "%s: connect gave %d (%s), expected %d", user, e, err,
          w->want);
    if (e == 0) {
        uint32_t st;
        CHECK(vram_stage_register_adhoc(c, 0, 0, 1, &st) == 0, "served: %s",
              vram_client_last_error(c));
        CHECK(vram_admin_evict(c, 1) == -EPERM, "an unprivileged user evicted");
        vram_client_close(c);
    } else {
        CHECK(strstr(err, "may not use vramd") != NULL, "unclear: %s", err);
    }
    return check_failures ? 1 : 0;
}

static void run(const char *config, const struct who *w, const char *what)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    chmod(d.dir, 0755);
    struct attack_base b;
    attack_baseline(&d, &b);
    CHECK(wait_child(spawn(as_user, &d, (void *)w)) == 0, "%s", what);
    attack_after(&d, &b, what, 4096);
    daemon_stop(&d);
}

int main(void)
{
    REQUIRE(geteuid() == 0, "this test needs root (useradd)");
    unique_name(user, sizeof(user), "vrat"); /* 21 characters: useradd takes 32 */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "useradd -M -N -g nogroup -s /usr/sbin/nologin %s",
             user);
    REQUIRE(system(cmd) == 0, "useradd %s", user);
    atexit(remove_user);
    struct passwd *pw = getpwnam(user);
    REQUIRE(pw, "no user %s", user);
    struct who w = {.uid = pw->pw_uid, .gid = pw->pw_gid};
    char config[512];
    /* The socket is the group's (nogroup); only the named user is allowed. */
    snprintf(config, sizeof(config),
             "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}],"
             " \"access\": {\"allow\": {\"users\": [\"%s\"]},"
             "  \"socket_group\": \"nogroup\", \"socket_mode\": \"0660\"}}", user);
    w.want = 0;
    run(config, &w, "a user the configuration allows");
    snprintf(config, sizeof(config),
             "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}],"
             " \"access\": {\"allow\": {\"users\": [\"nobody\"]},"
             "  \"socket_group\": \"nogroup\", \"socket_mode\": \"0660\"}}");
    w.want = -EACCES;
    run(config, &w, "a user the configuration does not allow");
    return check_report("test_attack_identity");
}
