/* SPDX-License-Identifier: Apache-2.0 */
/* A client killed with SIGKILL: its chunks are quarantined until its process
 * is gone, then return to the pool; other clients keep being served. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static int victim(const struct daemon *d, void *p)
{
    struct rendezvous *rv = p;
    vram_client *c = connect_client(d, "victim");
    uint32_t stage, region;
    REQUIRE(vram_stage_register_adhoc(c, 1, 0, 47, &stage) == 0, "register");
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_FIXED, 512 * MIB, 1, &region) == 0,
            "create");
    REQUIRE(vram_region_grow(c, region, 100) == 0, "grow");
    rv_send(rv->to_parent[1], 1);
    pause(); /* killed here */
    return 0;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    vram_client *other = connect_client(&d, "bystander");
    uint32_t stage, region;
    REQUIRE(vram_stage_register_adhoc(other, 1, 0, 47, &stage) == 0, "register");
    REQUIRE(vram_region_create(other, stage, VRAM_REGION_KV, 64 * MIB, 1, &region) == 0,
            "create");
    REQUIRE(vram_region_grow(other, region, 4) == 0, "grow");
    fill_pattern(vram_region_slot(other, region, 0, 0), 2 * MIB, 77);

    struct rendezvous rv;
    rv_init(&rv);
    pid_t pid = spawn(victim, &d, &rv);
    REQUIRE(rv_recv(rv.to_parent[0]) == 1, "victim ready");
    cJSON *st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 1, "granted_bytes"), 104 * 2 * MIB);
    cJSON_Delete(st);

    kill(pid, SIGKILL);
    CHECK(wait_child(pid) == 128 + SIGKILL, "victim was not killed");
    CHECK(wait_dev_value(&d, 1, "granted_bytes", 4 * 2 * MIB, 5000),
          "the killed client's chunks did not return");
    CHECK(wait_dev_value(&d, 1, "quarantined_bytes", 0, 5000), "still quarantined");
    CHECK(daemon_log_wait(&d, "quarantined chunks back in the pool", 2000) ||
          daemon_log_contains(&d, "is gone"), "no log line for the reaped client");

    /* The bystander is still served, its data intact. */
    CHECK(check_pattern(vram_region_slot(other, region, 0, 0), 2 * MIB, 77),
          "bystander's data changed");
    CHECK(vram_region_grow(other, region, 2) == 0, "bystander grow: %s",
          vram_client_last_error(other));
    vram_client_close(other);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_client_killed");
}
