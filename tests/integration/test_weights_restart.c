/* SPDX-License-Identifier: Apache-2.0 */
/* Weight sets outlive vramd (R17, issue 31 item 4), on the host backend,
 * through vramd's holder (no systemd here):
 *  1. A writer seals a set and exits; vramd is killed with SIGKILL and
 *     started again with no engine connected: the next engine maps the
 *     set, loading nothing, with every byte; a set that was being written
 *     when vramd died is gone.
 *  2. An engine that maps a set while vramd is killed comes back (resume)
 *     still mapping it: vramd counts it a user (an admin's drop is refused)
 *     until it closes the set.
 *  3. The same across an orderly stop and start.
 *  4. Once every set is dropped, the holder exits: no process is left
 *     holding memory. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"
#include "tests/integration/holders.h"

static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"256MiB\"}],"
    " \"pool\": {\"prefill_chunks\": 4},"
    " \"weights\": {\"alloc\": \"8MiB\"}}";

static const uint8_t key[VRAM_WEIGHTS_KEY_BYTES] = {0x42, 0x17};

/* Writes and seals set name (20 MiB of pattern tag), then exits. */
static int writer(const struct daemon *d, void *arg)
{
    const char *name = arg;
    vram_client *c = connect_client(d, "writer");
    struct vram_weights_info w;
    REQUIRE(vram_weights_open(c, name, 0, 20 * MIB, key, 0, &w) == 0 && w.writer,
            "open %s: %s", name, vram_client_last_error(c));
    fill_pattern((void *)(uintptr_t)w.base, 20 * MIB, 99);
    REQUIRE(vram_weights_seal(c, w.id) == 0, "seal: %s", vram_client_last_error(c));
    vram_client_close(c);
    return 0;
}

/* Opens set name and checks it is the sealed one, bytes and all. */
static int reader(const struct daemon *d, void *arg)
{
    const char *name = arg;
    vram_client *c = connect_client(d, "reader");
    struct vram_weights_info w;
    int e = vram_weights_open(c, name, 0, 20 * MIB, key, VRAM_WEIGHTS_NOWAIT, &w);
    CHECK(e == 0 && !w.writer && w.sealed, "open %s after the restart: %d %s "
          "(writer %u)", name, e, vram_client_last_error(c), e ? 0 : w.writer);
    CHECK(e || check_pattern((void *)(uintptr_t)w.base, 20 * MIB, 99),
          "the set's bytes did not survive");
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

/* Opens a set as its writer and waits to be told to exit. */
static int unsealed(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    vram_client *c = connect_client(d, "unsealed-writer");
    struct vram_weights_info w;
    REQUIRE(vram_weights_open(c, "half", 0, 8 * MIB, key, 0, &w) == 0 && w.writer,
            "open half");
    rv_send(rv->to_parent[1], 1);
    rv_recv(rv->to_child[0]);
    return 0;
}

/* Maps set a across the restarts, then closes it when told. */
static int holder_engine(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    vram_client *c = connect_client(d, "mapping-engine");
    struct vram_weights_info w;
    REQUIRE(vram_weights_open(c, "model/a", 0, 20 * MIB, key, 0, &w) == 0 &&
                !w.writer,
            "open a: %s", vram_client_last_error(c));
    int failures = 0;
    for (;;) {
        rv_send(rv->to_parent[1], 1);
        uint64_t cmd = rv_recv(rv->to_child[0]);
        if (cmd != 1)
            break;
        /* vramd was restarted: the next call reconnects and resumes. */
        if (vram_client_ping(c) != 0) {
            fprintf(stderr, "mapping engine: ping: %s\n", vram_client_last_error(c));
            failures++;
        }
        if (!check_pattern((void *)(uintptr_t)w.base, 20 * MIB, 99)) {
            fprintf(stderr, "mapping engine: the bytes changed\n");
            failures++;
        }
    }
    if (vram_weights_close(c, w.id) != 0) {
        fprintf(stderr, "mapping engine: close: %s\n", vram_client_last_error(c));
        failures++;
    }
    vram_client_close(c);
    rv_send(rv->to_parent[1], (uint64_t)failures);
    return failures;
}

static uint64_t weights_bytes(const struct daemon *d)
{
    cJSON *st = daemon_status(d);
    uint64_t v = status_dev(st, 0, "weights_bytes");
    cJSON_Delete(st);
    return v;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");

    /* ---- 1. kill -9 with no engine ---- */
    CHECK(wait_child(spawn(writer, &d, "model/a")) == 0, "the writer");
    CHECK_EQ_U(weights_bytes(&d), 24 * MIB);
    CHECK_EQ_U(daemon_holders(&d, NULL), 1);
    struct rendezvous uv;
    rv_init(&uv);
    pid_t u = spawn(unsealed, &d, &uv);
    rv_recv(uv.to_parent[0]);
    CHECK_EQ_U(weights_bytes(&d), 32 * MIB);
    daemon_kill(&d);
    rv_send(uv.to_child[1], 1);
    wait_child(u); /* the unsealed writer is gone before vramd is back */
    REQUIRE(daemon_restart(&d, config, NULL) == 0, "start vramd again");
    CHECK(daemon_log_contains(&d, "weight set 1 'model/a' (20 MiB on device 0) "
                                  "came back with its 3 allocations"),
          "the restarted vramd does not say the set came back");
    CHECK_EQ_U(weights_bytes(&d), 24 * MIB);
    cJSON *st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "weights_cached_bytes"), 24 * MIB);
    cJSON_Delete(st);
    uint64_t hits0 = 0;
    CHECK(wait_child(spawn(reader, &d, "model/a")) == 0, "the reader after kill -9");
    (void)hits0;

    /* ---- 2. an engine mapping the set across a kill -9 ---- */
    struct rendezvous rv;
    rv_init(&rv);
    pid_t e = spawn(holder_engine, &d, &rv);
    rv_recv(rv.to_parent[0]);
    daemon_kill(&d);
    REQUIRE(daemon_restart(&d, config, NULL) == 0, "start vramd a second time");
    vram_client *admin = connect_client(&d, "admin");
    CHECK(vram_admin_weights_drop(admin, "model/a") == -EBUSY,
          "a set a gone engine maps was dropped");
    rv_send(rv.to_child[1], 1); /* it resumes and reads */
    rv_recv(rv.to_parent[0]);
    CHECK(vram_admin_weights_drop(admin, "model/a") == -EBUSY,
          "a set a resumed engine maps was dropped");
    vram_client_close(admin);

    /* ---- 3. an orderly stop and start ---- */
    CHECK(daemon_stop(&d) == 0, "stop vramd");
    REQUIRE(daemon_restart(&d, config, NULL) == 0, "start vramd a third time");
    rv_send(rv.to_child[1], 1);
    rv_recv(rv.to_parent[0]);
    rv_send(rv.to_child[1], 2); /* close it and exit */
    CHECK(rv_recv(rv.to_parent[0]) == 0, "the mapping engine failed");
    CHECK(wait_child(e) == 0, "the mapping engine");
    CHECK(wait_child(spawn(reader, &d, "model/a")) == 0, "the reader after a stop");

    /* ---- 4. dropped: nothing is left holding it ---- */
    admin = connect_client(&d, "admin");
    CHECK(vram_admin_weights_drop(admin, "model/a") == 0, "drop: %s",
          vram_client_last_error(admin));
    vram_client_close(admin);
    CHECK_EQ_U(weights_bytes(&d), 0);
    bool gone = false;
    for (int i = 0; i < 300 && !gone; i++) {
        gone = daemon_holders(&d, NULL) == 0;
        if (!gone)
            usleep(20000);
    }
    CHECK(gone, "the holder still runs with nothing to keep");
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_weights_restart");
}
