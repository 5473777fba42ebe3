/* SPDX-License-Identifier: Apache-2.0 */
/* Access control: peers are judged by the kernel's credentials against the
 * configured lists. A peer not allowed gets a clear EACCES and a log line;
 * an allowed peer is served; only admins may evict, and an evicted client's
 * chunks are quarantined until its process is gone. Needs root (to become
 * other users), as CI runs. */
#include <errno.h>
#include <grp.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/integration/harness.h"

struct who {
    uid_t uid;
    gid_t gid;
    struct rendezvous rv;
};

static int as_user(const struct daemon *d, void *p)
{
    struct who *w = p;
    REQUIRE(setgroups(0, NULL) == 0 && setgid(w->gid) == 0 && setuid(w->uid) == 0,
            "become uid %u", (unsigned)w->uid);
    char err[256] = "";
    struct vram_client_options o = {.name = "user", .error = err,
                                    .error_len = sizeof(err)};
    vram_client *c;
    int e = vram_client_connect(d->sock, &o, &c);
    rv_send(w->rv.to_parent[1], (uint64_t)-e);
    if (e < 0) {
        CHECK(e == -EACCES, "refusal: %d %s", e, err);
        CHECK(strstr(err, "may not use vramd") != NULL, "unclear refusal: %s", err);
        return 0;
    }
    rv_send(w->rv.to_parent[1], vram_client_id(c));
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 1, &st) == 0, "stage");
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 16 * MIB, 1, &r) == 0, "region");
    REQUIRE(vram_region_grow(c, r, 3) == 0, "grow");
    /* Not an admin: may not evict anyone, nor change a capacity. */
    CHECK(vram_admin_evict(c, 1) == -EPERM, "non-admin evicted");
    CHECK(vram_admin_set_capacity(c, 0, 512 * MIB) == -EPERM,
          "non-admin changed a capacity");
    CHECK(strstr(vram_client_last_error(c), "access.admin") != NULL, "unclear: %s",
          vram_client_last_error(c));
    rv_send(w->rv.to_parent[1], 1);
    rv_recv(w->rv.to_child[0]); /* evicted meanwhile */
    CHECK(vram_region_grow(c, r, 1) < 0, "an evicted client was still served");
    rv_send(w->rv.to_parent[1], 2);
    rv_recv(w->rv.to_child[0]);
    vram_client_close(c);
    return 0;
}

int main(void)
{
    REQUIRE(geteuid() == 0, "this test needs root to become other users");
    const char *config =
        "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}],"
        " \"access\": {\"allow\": {\"uids\": [65534]}, \"socket_group\": \"nogroup\","
        "              \"socket_mode\": \"0660\"}}";
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    chmod(d.dir, 0755); /* let other users reach the socket's directory */
    struct stat sb;
    REQUIRE(stat(d.sock, &sb) == 0, "socket");
    CHECK((sb.st_mode & 0777) == 0660, "socket mode %o", sb.st_mode & 0777);
    struct group *ng = getgrnam("nogroup");
    CHECK(ng && sb.st_gid == ng->gr_gid, "socket group %u", (unsigned)sb.st_gid);

    /* Not on the list (though it can reach the socket): refused. */
    struct who stranger = {.uid = 12345, .gid = ng ? ng->gr_gid : 65534};
    rv_init(&stranger.rv);
    pid_t p = spawn(as_user, &d, &stranger);
    CHECK(rv_recv(stranger.rv.to_parent[0]) == EACCES, "stranger not refused");
    CHECK(wait_child(p) == 0, "stranger's checks");
    CHECK(daemon_log_wait(&d, "uid 12345 (gid", 2000), "refusal not logged");

    /* On the list: served, but no admin. */
    struct who nobody = {.uid = 65534, .gid = ng ? ng->gr_gid : 65534};
    rv_init(&nobody.rv);
    p = spawn(as_user, &d, &nobody);
    CHECK(rv_recv(nobody.rv.to_parent[0]) == 0, "allowed user refused");
    uint64_t id = rv_recv(nobody.rv.to_parent[0]);
    CHECK(rv_recv(nobody.rv.to_parent[0]) == 1, "allowed user's work");
    cJSON *st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "granted_bytes") + status_dev(st, 0, "loaned_bytes"),
               3 * 2 * MIB);
    cJSON_Delete(st);

    /* Root is an admin: evicts it; its chunks wait for its process. */
    vram_client *admin = connect_client(&d, "admin");
    CHECK(vram_admin_evict(admin, (uint32_t)id) == 0, "evict: %s",
          vram_client_last_error(admin));
    CHECK(vram_admin_evict(admin, 9999) == -ENOENT, "evict of nobody");
    CHECK(daemon_log_wait(&d, "evicted by client", 2000), "eviction not logged");
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 3 * 2 * MIB, 2000),
          "the evicted client's chunks are not quarantined");
    rv_send(nobody.rv.to_child[1], 1);
    CHECK(rv_recv(nobody.rv.to_parent[0]) == 2, "evicted client's check");
    rv_send(nobody.rv.to_child[1], 1);
    CHECK(wait_child(p) == 0, "allowed user's checks");
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 0, 3000),
          "quarantine did not end with the process");
    vram_client_close(admin);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_access");
}
