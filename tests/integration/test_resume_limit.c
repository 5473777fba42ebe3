/* SPDX-License-Identifier: Apache-2.0 */
/* A resume never counts against the gone-clients limit (R16, issue 25).
 * One user runs 64 engines that hold memory, the default
 * limits.gone_clients_per_user. vramd is killed with SIGKILL and started
 * again: it finds 64 gone clients of that user in its state file. Every
 * engine's next call reconnects and resumes, with its chunk and its bytes,
 * and may then ask for more memory; a newcomer of that user while they are
 * all gone is turned away at its first request for memory, not at connect.
 * Needs root (to become another user: root is exempt from every limit). */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/integration/harness.h"

#define ENGINES 64 /* the default gone_clients_per_user and connections_per_user */
#define USER 20004

static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"512MiB\"}],"
    " \"pool\": {\"prefill_chunks\": 4},"
    " \"access\": {\"allow\": {\"gids\": [65534]}, \"socket_group\": \"nogroup\","
    "            \"socket_mode\": \"0660\"}}";

static void become(uid_t uid)
{
    REQUIRE(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(uid) == 0,
            "become uid %u", (unsigned)uid);
}

static int reconnects;

static void on_event(void *u, const struct vram_event *ev)
{
    (void)u;
    reconnects += ev->type == VRAM_EVENT_RECONNECTED;
}

/* Holds one chunk of an ad-hoc stage's fixed region, filled with a pattern
 * of its own; after the restart, takes it back and grows the region. */
static int engine(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    become(USER);
    vram_client *c = connect_client(d, "resumer");
    vram_client_set_event_callback(c, on_event, NULL);
    uint32_t stage, region;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 1, &stage) == 0, "register: %s",
            vram_client_last_error(c));
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_FIXED, 4 * MIB, 1,
                               &region) == 0, "create: %s",
            vram_client_last_error(c));
    REQUIRE(vram_region_grow(c, region, 1) == 0, "grow: %s",
            vram_client_last_error(c));
    void *p = vram_region_slot(c, region, 0, 0);
    fill_pattern(p, 2 * MIB, (uintptr_t)p ^ (uint64_t)getpid());
    rv_send(rv->to_parent[1], 1);
    if (rv_recv(rv->to_child[0]) != 1)
        return 10;
    int failures = 0;
    if (vram_client_ping(c) != 0) {
        fprintf(stderr, "engine %d: ping after the restart: %s\n", (int)getpid(),
                vram_client_last_error(c));
        failures++;
    }
    if (reconnects != 1 || vram_region_chunk(c, region, 0, 0, NULL) != 0 ||
        !check_pattern(p, 2 * MIB, (uintptr_t)p ^ (uint64_t)getpid())) {
        fprintf(stderr, "engine %d: %d reconnects, its chunk or bytes not kept\n",
                (int)getpid(), reconnects);
        failures++;
    }
    /* Resumed, it is a client like any other: it may ask for memory. */
    if (vram_region_grow(c, region, 1) != 0) {
        fprintf(stderr, "engine %d: grow after the resume: %s\n", (int)getpid(),
                vram_client_last_error(c));
        failures++;
    }
    rv_send(rv->to_parent[1], (uint64_t)failures);
    rv_recv(rv->to_child[0]);
    vram_client_close(c);
    return failures;
}

/* A newcomer of the same user while its 64 gone clients wait: it connects
 * and looks, but gets no memory. */
static int newcomer(const struct daemon *d, void *arg)
{
    (void)arg;
    become(USER);
    vram_client *c = connect_client(d, "newcomer");
    CHECK(vram_client_ping(c) == 0, "a user at its limit may connect and look");
    uint32_t stage;
    int e = vram_stage_register_adhoc(c, 0, 0, 1, &stage);
    CHECK(e == -EDQUOT && strstr(vram_client_last_error(c),
                                 "limits.gone_clients_per_user"),
          "a newcomer at the limit got %d: %s", e, vram_client_last_error(c));
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

int main(void)
{
    REQUIRE(geteuid() == 0, "this test needs root to become another user");
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    chmod(d.dir, 0755);
    struct rendezvous rv[ENGINES];
    pid_t pid[ENGINES];
    for (int i = 0; i < ENGINES; i++) {
        rv_init(&rv[i]);
        pid[i] = spawn(engine, &d, &rv[i]);
    }
    for (int i = 0; i < ENGINES; i++)
        REQUIRE(rv_recv(rv[i].to_parent[0]) == 1, "engine %d is not ready", i);
    cJSON *st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "granted_bytes"), ENGINES * 2 * MIB);
    cJSON_Delete(st);

    daemon_kill(&d);
    REQUIRE(daemon_restart(&d, config, NULL) == 0, "start vramd again");
    st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "quarantined_bytes"), ENGINES * 2 * MIB);
    cJSON_Delete(st);
    CHECK(wait_child(spawn(newcomer, &d, NULL)) == 0,
          "a newcomer at the limit");
    for (int i = 0; i < ENGINES; i++)
        rv_send(rv[i].to_child[1], 1);
    uint64_t failed = 0;
    for (int i = 0; i < ENGINES; i++)
        failed += rv_recv(rv[i].to_parent[0]) != 0;
    CHECK(failed == 0, "%llu of %d engines did not resume",
          (unsigned long long)failed, ENGINES);
    st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "quarantined_bytes"), 0);
    CHECK_EQ_U(status_dev(st, 0, "granted_bytes"), ENGINES * 4 * MIB);
    cJSON_Delete(st);
    CHECK(!daemon_log_contains(&d, "EDQUOT") ||
              daemon_log_contains(&d, "newcomer"),
          "an engine was refused");
    for (int i = 0; i < ENGINES; i++)
        rv_send(rv[i].to_child[1], 1);
    for (int i = 0; i < ENGINES; i++)
        CHECK(wait_child(pid[i]) == 0, "engine %d exited with failures", i);
    CHECK(wait_dev_value(&d, 0, "granted_bytes", 0, 5000),
          "the engines' memory did not come back");
    daemon_stop(&d);
    return check_report("test_resume_limit");
}
