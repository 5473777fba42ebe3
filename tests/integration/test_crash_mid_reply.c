/* SPDX-License-Identifier: Apache-2.0 */
/* vramd dies in the middle of a reply of several frames (a grant of 100
 * chunks goes out 32 handles a frame; VRAMD_TEST_CRASH_MID_REPLY kills it
 * after the second), so the engine has received handles of a reply that
 * never finished. It must give them up, reconnect, resume with what it held
 * before the call and send the call again: afterwards the region holds
 * exactly the 100 chunks asked for, as vramd says, all of them zeroed, and
 * what was held before keeps its bytes. (A library that mapped each frame's
 * chunks as it came and kept them would declare them in the resume, and the
 * call sent again would add 100 more: that was tried, and this test caught
 * it.) */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"512MiB\", \"chunk\": \"2MiB\"}],"
    " \"pool\": {\"prefill_chunks\": 0}}";

static int reconnects;

static void on_event(void *u, const struct vram_event *ev)
{
    (void)u;
    if (ev->type == VRAM_EVENT_RECONNECTED)
        reconnects++;
}

static bool all_zero(const void *p, size_t n)
{
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        if (w[i])
            return false;
    return true;
}

static int engine(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    vram_client *c = connect_client(d, "engine");
    vram_client_set_event_callback(c, on_event, NULL);
    uint32_t stage, region;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 7, &stage) == 0, "stage: %s",
            vram_client_last_error(c));
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_FIXED, 256 * MIB, 1,
                               &region) == 0, "region: %s",
            vram_client_last_error(c));
    /* Four chunks before, with data. */
    REQUIRE(vram_region_grow(c, region, 4) == 0, "grow 4: %s",
            vram_client_last_error(c));
    uint64_t before[4];
    for (uint32_t i = 0; i < 4; i++) {
        REQUIRE(vram_region_chunk(c, region, 0, i, &before[i]) == 0, "chunk %u", i);
        fill_pattern(vram_region_slot(c, region, 0, i), 2 * MIB, before[i]);
    }
    rv_send(rv->to_parent[1], 1); /* the test arms vramd and restarts it */
    if (rv_recv(rv->to_child[0]) != 1)
        return 100;
    REQUIRE(vram_client_ping(c) == 0, "ping after the armed restart: %s",
            vram_client_last_error(c));
    reconnects = 0;
    int r = vram_region_grow(c, region, 100);
    CHECK(r == 0, "grow 100 across the crash: %s (%s)", vram_strerror(r),
          vram_client_last_error(c));
    CHECK(reconnects == 1, "%d reconnects", reconnects);
    struct vram_region_info ri;
    REQUIRE(vram_region_info(c, region, &ri) == 0, "region info");
    CHECK(ri.mapped == 104, "%u chunks mapped, 104 expected", ri.mapped);
    CHECK(vram_client_chunks_held(c) == 104, "%zu chunks held, 104 expected",
          vram_client_chunks_held(c));
    uint32_t kept = 0, zero = 0;
    for (uint32_t i = 0; i < ri.lane_slots; i++) {
        uint64_t id;
        if (vram_region_chunk(c, region, 0, i, &id) < 0)
            continue;
        void *p = vram_region_slot(c, region, 0, i);
        bool old = false;
        for (int k = 0; k < 4; k++)
            old |= id == before[k];
        if (old)
            kept += check_pattern(p, 2 * MIB, id);
        else
            zero += all_zero(p, 2 * MIB);
    }
    CHECK(kept == 4, "%u of the 4 chunks held before kept their bytes", kept);
    CHECK(zero == 100, "%u of the 100 new chunks are zeroed", zero);
    cJSON *st = daemon_status(d);
    const cJSON *cl = cJSON_GetObjectItem(st, "clients");
    uint64_t held = 0;
    for (int i = 0; i < cJSON_GetArraySize(cl); i++) {
        const cJSON *o = cJSON_GetArrayItem(cl, i);
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(o, "name"));
        if (name && strcmp(name, "engine") == 0)
            held = json_u64(o, "held_bytes");
    }
    cJSON_Delete(st);
    CHECK(held == 104 * 2 * MIB, "vramd says the engine holds %llu MiB, not 208",
          (unsigned long long)(held / MIB));
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

int main(void)
{
    struct daemon d;
    setenv("VRAMD_TEST_CRASH_MID_REPLY", "region_grw", 1);
    CHECK(daemon_start(&d, config, NULL) < 0 &&
              daemon_log_contains(&d, "VRAMD_TEST_CRASH_MID_REPLY: 'region_grw'"),
          "a misspelt request type was not refused");
    unsetenv("VRAMD_TEST_CRASH_MID_REPLY");
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    struct rendezvous rv;
    rv_init(&rv);
    pid_t p = spawn(engine, &d, &rv);
    REQUIRE(rv_recv(rv.to_parent[0]) == 1, "the engine's start");
    REQUIRE(daemon_stop(&d) == 0, "stop vramd");
    setenv("VRAMD_TEST_CRASH_MID_REPLY", "region_grow", 1);
    REQUIRE(daemon_restart(&d, config, NULL) == 0, "restart vramd armed");
    unsetenv("VRAMD_TEST_CRASH_MID_REPLY");
    rv_send(rv.to_child[1], 1);
    int st = 0;
    bool died = false;
    for (int i = 0; i < 1000 && !died; i++) {
        died = waitpid(d.pid, &st, WNOHANG) == d.pid;
        if (!died)
            usleep(10000);
    }
    REQUIRE(died, "vramd did not die inside the grow's reply");
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "vramd ended otherwise (%d)",
          st);
    CHECK(daemon_log_contains(&d, "killed after two frames of a region_grow reply"),
          "the fault did not fire in the middle of the reply");
    d.pid = 0;
    REQUIRE(daemon_restart(&d, config, NULL) == 0, "restart vramd");
    CHECK(wait_child(p) == 0, "the engine failed");
    daemon_check_no_leaks(&d);
    CHECK(daemon_stop(&d) == 0, "vramd stops cleanly");
    return check_report("crash_mid_reply");
}
