/* SPDX-License-Identifier: Apache-2.0 */
/* One user taking a shared resource from the others: the address window
 * (per client and per user), ad-hoc stage ids (their own pool, far larger
 * than any user's share) and gone clients per user.
 * Each is refused with EDQUOT naming its limit, changes nothing, and other
 * users and root go on. Needs root (to become other users). */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/attack/attack.h"

static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}],"
    " \"limits\": {\"address_space_per_client\": \"4GiB\","
    "              \"address_space_per_user\": \"6GiB\", \"stages_per_user\": 3,"
    "              \"gone_clients_per_user\": 2},"
    " \"access\": {\"allow\": {\"gids\": [65534]}, \"socket_group\": \"nogroup\","
    "            \"socket_mode\": \"0660\"}}";

static void become(uid_t uid)
{
    REQUIRE(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(uid) == 0,
            "become uid %u", (unsigned)uid);
}

/* A request and the error of its reply ("" when it succeeded). */
static const char *ask(int fd, const char *json, char *msg, size_t len,
                       uint64_t *stage)
{
    static char err[32];
    raw_send(fd, json);
    cJSON *r = raw_recv(fd, 3000);
    REQUIRE(r, "no reply to %s", json);
    const char *e = cJSON_GetStringValue(cJSON_GetObjectItem(r, "error"));
    const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(r, "message"));
    snprintf(err, sizeof(err), "%s", e ? e : "");
    if (msg)
        snprintf(msg, len, "%s", m ? m : "");
    if (stage)
        *stage = json_u64(cJSON_GetObjectItem(r, "stage"), "id");
    cJSON_Delete(r);
    return err;
}

static int hello(const struct daemon *d, const char *name)
{
    int fd = raw_connect(d);
    char m[128];
    snprintf(m, sizeof(m), "{\"type\":\"hello\",\"id\":1,\"version\":1,\"name\":"
             "\"%s\"}", name);
    char why[256];
    const char *e = ask(fd, m, why, sizeof(why), NULL);
    if (*e) {
        close(fd);
        return -1;
    }
    return fd;
}

static uint64_t adhoc(int fd, const char **err, char *why, size_t len)
{
    uint64_t st = 0;
    *err = ask(fd, "{\"type\":\"stage_register\",\"id\":2,\"device\":0,"
                   "\"first_layer\":0,\"last_layer\":1}", why, len, &st);
    return st;
}

static const char *region(int fd, uint64_t stage, uint64_t bytes, char *why,
                          size_t len)
{
    char m[160];
    snprintf(m, sizeof(m), "{\"type\":\"region_create\",\"id\":3,\"stage\":%llu,"
             "\"kind\":\"fixed\",\"bytes\":%llu}", (unsigned long long)stage,
             (unsigned long long)bytes);
    return ask(fd, m, why, len, NULL);
}

static int window_and_stages(const struct daemon *d, void *p)
{
    (void)p;
    become(20001);
    char why[256];
    const char *e;
    int a = hello(d, "a"), b = hello(d, "b");
    REQUIRE(a >= 0 && b >= 0, "hello");
    uint64_t sa = adhoc(a, &e, why, sizeof(why));
    CHECK(!*e, "a's stage: %s %s", e, why);
    for (int i = 0; i < 4; i++)
        CHECK(!*region(a, sa, GIB, why, sizeof(why)), "a's region %d: %s", i, why);
    e = region(a, sa, GIB, why, sizeof(why));
    CHECK(strcmp(e, "EDQUOT") == 0 && strstr(why, "address_space_per_client"),
          "a fifth GiB for one client: %s %s", e, why);
    uint64_t sb = adhoc(b, &e, why, sizeof(why));
    CHECK(!*e, "b's stage: %s", why);
    for (int i = 0; i < 2; i++)
        CHECK(!*region(b, sb, GIB, why, sizeof(why)), "b's region %d: %s", i, why);
    e = region(b, sb, GIB, why, sizeof(why));
    CHECK(strcmp(e, "EDQUOT") == 0 && strstr(why, "address_space_per_user"),
          "a seventh GiB for one user: %s %s", e, why);
    adhoc(b, &e, why, sizeof(why));
    CHECK(!*e, "the user's third stage: %s", why);
    adhoc(b, &e, why, sizeof(why));
    CHECK(strcmp(e, "EDQUOT") == 0 && strstr(why, "stages_per_user"),
          "a fourth stage for one user: %s %s", e, why);
    close(a);
    close(b);
    return check_failures ? 1 : 0;
}

static int other_user(const struct daemon *d, void *p)
{
    (void)p;
    become(20002);
    char why[256];
    const char *e;
    int c = hello(d, "c");
    REQUIRE(c >= 0, "hello");
    uint64_t s = adhoc(c, &e, why, sizeof(why));
    CHECK(!*e, "another user's stage: %s", why);
    for (int i = 0; i < 2; i++)
        CHECK(!*region(c, s, GIB, why, sizeof(why)), "another user's region: %s",
              why);
    close(c);
    return check_failures ? 1 : 0;
}

/* How many clients named name the daemon shows quarantined (gone, their
 * process holding their memory). */
static int gone_named(const struct daemon *d, const char *name)
{
    int fd = hello(d, "look");
    if (fd < 0)
        return -1;
    raw_send(fd, "{\"type\":\"status\",\"id\":9}");
    cJSON *st = raw_recv(fd, 3000);
    int n = 0;
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItem(st, "clients")) {
        const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(cl, "name"));
        const char *state = cJSON_GetStringValue(cJSON_GetObjectItem(cl, "state"));
        n += nm && state && strcmp(nm, name) == 0 &&
             strcmp(state, "quarantined") == 0;
    }
    cJSON_Delete(st);
    close(fd);
    return n;
}

/* Leaves gone clients (connections closed while the process lives and
 * holds their memory) until it is turned away: it may connect, but not
 * get memory (the limit is counted at the first request for it, so that
 * a gone client's process can always come back and resume). */
static int leaves_gone(const struct daemon *d, void *p)
{
    struct rendezvous *rv = p;
    become(20003);
    char why[256];
    const char *e;
    int n = 0;
    for (; n < 5; n++) {
        int fd = hello(d, "leaver");
        REQUIRE(fd >= 0, "a user at its limit of gone clients may connect");
        uint64_t s = adhoc(fd, &e, why, sizeof(why));
        if (*e) {
            CHECK(strcmp(e, "EDQUOT") == 0 &&
                      strstr(why, "limits.gone_clients_per_user"),
                  "refused with %s: %s", e, why);
            close(fd);
            break;
        }
        REQUIRE(!*region(fd, s, 8 * MIB, why, sizeof(why)), "region: %s", why);
        char m[128];
        raw_send(fd, "{\"type\":\"status\",\"id\":9}");
        cJSON *st = raw_recv(fd, 3000);
        uint64_t rid = 0;
        const cJSON *sg;
        cJSON_ArrayForEach(sg, cJSON_GetObjectItem(st, "stages"))
            if (json_u64(sg, "id") == s)
                rid = json_u64(cJSON_GetArrayItem(cJSON_GetObjectItem(sg, "regions"), 0),
                               "id");
        cJSON_Delete(st);
        snprintf(m, sizeof(m), "{\"type\":\"region_grow\",\"id\":4,\"region\":"
                 "%llu,\"chunks\":1}", (unsigned long long)rid);
        REQUIRE(!*ask(fd, m, why, sizeof(why), NULL), "grow: %s", why);
        close(fd);
        int gone = 0;
        for (int t = 0; t < 500 && (gone = gone_named(d, "leaver")) < n + 1; t++)
            usleep(10000);
        REQUIRE(gone == n + 1, "the daemon shows %d gone clients, not %d", gone,
                n + 1);
    }
    rv_send(rv->to_parent[1], (uint64_t)n);
    rv_recv(rv->to_child[0]);
    return 0;
}

int main(void)
{
    REQUIRE(geteuid() == 0, "this test needs root to become other users");
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    chmod(d.dir, 0755);
    struct attack_base b;
    attack_baseline(&d, &b);
    CHECK(wait_child(spawn(window_and_stages, &d, NULL)) == 0, "one user's limits");
    CHECK(wait_child(spawn(other_user, &d, NULL)) == 0, "another user held back");
    /* Root is not held back by any user's limits. */
    vram_client *root = connect_client(&d, "root");
    uint32_t st, r;
    CHECK(vram_stage_register_adhoc(root, 0, 0, 1, &st) == 0, "root's stage: %s",
          vram_client_last_error(root));
    CHECK(vram_region_create(root, st, VRAM_REGION_FIXED, 4 * MIB, 1, &r) == 0,
          "root's region: %s", vram_client_last_error(root));
    vram_client_close(root);
    /* Stage ids are not a small shared pool: 640 ad-hoc stages live at once
     * (there were 256 ids in all, configured ones included), on 40
     * connections of 16 stages each (limits.stages_per_client). */
    vram_client *many[40];
    uint32_t got = 0, top = 0;
    for (int i = 0; i < 40; i++) {
        many[i] = connect_client(&d, "many-stages");
        for (int k = 0; k < 16; k++) {
            uint32_t s;
            if (vram_stage_register_adhoc(many[i], 0, 0, 1, &s) == 0) {
                got++;
                top = s > top ? s : top;
            }
        }
    }
    CHECK_EQ_U(got, 640);
    CHECK(top >= 256 + 639, "the highest ad-hoc id is %u", top);
    CHECK(vram_client_ping(many[0]) == 0, "the daemon serves");
    for (int i = 0; i < 40; i++)
        vram_client_close(many[i]);
    struct rendezvous rv;
    rv_init(&rv);
    pid_t leaver = spawn(leaves_gone, &d, &rv);
    uint64_t n = rv_recv(rv.to_parent[0]);
    CHECK_EQ_U(n, 2);
    CHECK(daemon_log_contains(&d, "limits.gone_clients_per_user"),
          "the refusal is not logged");
    rv_send(rv.to_child[1], 1);
    wait_child(leaver);
    /* Its process gone, its clients are reaped and the user may come back. */
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 0, 3000),
          "the gone clients were not reaped");
    attack_after(&d, &b, "one user taking the window, stage ids and gone "
                 "clients", 4096);
    daemon_stop(&d);
    return check_report("test_attack_limits");
}
