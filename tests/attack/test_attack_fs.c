/* SPDX-License-Identifier: Apache-2.0 */
/* Attacks through the filesystem: socket directories other users can
 * write into (sticky or not), that another user owns, or that are links; a
 * socket path that is not a socket; and a second vramd, even after the
 * first's socket and state file were deleted. vramd refuses each, naming
 * the directory, and the first daemon serves on. Needs root (chown). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/attack/attack.h"

static char base[64];

static void refused_dir(const char *what, mode_t mode, uid_t uid, gid_t gid,
                        const char *needle)
{
    char dir[128], sock[160], out[4096];
    snprintf(dir, sizeof(dir), "%s/%s", base, what);
    REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    REQUIRE(chown(dir, uid, gid) == 0 && chmod(dir, mode) == 0, "chown %s", dir);
    snprintf(sock, sizeof(sock), "%s/vramd.sock", dir);
    const char *args[] = {"--backend", "host", "--socket", sock, NULL};
    int rc = vramd_run(args, out, sizeof(out), 5000);
    CHECK(rc == 1, "%s: vramd exited with %d", what, rc);
    CHECK(strstr(out, dir) && strstr(out, needle), "%s: no '%s' naming %s in:\n%s",
          what, needle, dir, out);
    CHECK(access(sock, F_OK) != 0, "%s: a socket was made", what);
}

int main(void)
{
    REQUIRE(geteuid() == 0, "this test needs root (chown)");
    snprintf(base, sizeof(base), "/tmp/vram-attack-fs-XXXXXX");
    REQUIRE(mkdtemp(base), "mkdtemp");

    refused_dir("sticky", 01777, 0, 0, "can be written by other users");
    refused_dir("world", 0777, 0, 0, "can be written by other users");
    refused_dir("group", 0770, 0, 12345, "can be written by other users");
    refused_dir("theirs", 0755, 12345, 12345, "belongs to uid 12345");
    {
        char real[128], link[128], sock[160], out[4096];
        snprintf(real, sizeof(real), "%s/real", base);
        snprintf(link, sizeof(link), "%s/link", base);
        REQUIRE(mkdir(real, 0700) == 0 && symlink(real, link) == 0, "link");
        snprintf(sock, sizeof(sock), "%s/vramd.sock", link);
        const char *args[] = {"--backend", "host", "--socket", sock, NULL};
        int rc = vramd_run(args, out, sizeof(out), 5000);
        CHECK(rc == 1 && strstr(out, "symbolic link"), "a linked directory: %d\n%s",
              rc, out);
    }

    /* A second vramd in the directory of a running one: refused, also once
     * the first's socket and state file are gone. */
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    struct attack_base b;
    attack_baseline(&d, &b);
    char out[4096];
    const char *args[] = {"--backend", "host", "--socket", d.sock, NULL};
    int rc = vramd_run(args, out, sizeof(out), 5000);
    CHECK(rc == 1 && strstr(out, "another vramd runs in"), "second vramd: %d\n%s",
          rc, out);
    attack_after(&d, &b, "a second vramd", 4096);
    char other[200];
    snprintf(other, sizeof(other), "%s/other.sock", d.dir);
    const char *args2[] = {"--backend", "host", "--socket", other, NULL};
    rc = vramd_run(args2, out, sizeof(out), 5000);
    CHECK(rc == 1 && strstr(out, "another vramd runs in"),
          "second vramd on another name in the same directory: %d\n%s", rc, out);
    /* A regular file where the socket should be. */
    char state[200];
    snprintf(state, sizeof(state), "%s.state", d.sock);
    REQUIRE(unlink(d.sock) == 0 && unlink(state) == 0, "unlink");
    rc = vramd_run(args, out, sizeof(out), 5000);
    CHECK(rc == 1 && strstr(out, "another vramd runs in"),
          "after the socket and state file went: %d\n%s", rc, out);
    CHECK(kill(d.pid, 0) == 0, "the first vramd is gone");
    daemon_stop(&d);
    {
        char dir[128], sock[160];
        snprintf(dir, sizeof(dir), "%s/file", base);
        REQUIRE(mkdir(dir, 0700) == 0, "mkdir");
        snprintf(sock, sizeof(sock), "%s/vramd.sock", dir);
        FILE *f = fopen(sock, "w");
        fclose(f);
        const char *a3[] = {"--backend", "host", "--socket", sock, NULL};
        rc = vramd_run(a3, out, sizeof(out), 5000);
        CHECK(rc == 1 && strstr(out, "is not a socket"), "a file as the socket: "
              "%d\n%s", rc, out);
        CHECK(access(sock, F_OK) == 0, "the file was replaced");
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    if (system(cmd)) {}
    return check_report("test_attack_fs");
}
