/* SPDX-License-Identifier: Apache-2.0 */
/* The backend's pool of chunks made ahead follows what the ledger could
 * grant: it fills after start, shrinks when the capacity goes down or
 * clients take chunks (it never holds more than is free), and is made
 * again when chunks come back or the capacity goes up. The host backend
 * keeps at most 16 (each is an fd). A configured standby (pool.standby)
 * bounds it: a grant beyond it makes its chunks as asked, the pool never
 * holds more, and what vramd holds is the standby plus what it granted. */
#include <errno.h>
#include <stdio.h>

#include "tests/integration/harness.h"

#define POOL(n, why) \
    CHECK(wait_dev_value(&d, 0, "pool_ready_chunks", (n), 5000), \
          "the pool did not reach %d chunks %s (it has %llu)", (n), (why), \
          (unsigned long long)pool(&d))

static uint64_t pool(const struct daemon *d)
{
    cJSON *st = daemon_status(d);
    uint64_t n = status_dev(st, 0, "pool_ready_chunks");
    cJSON_Delete(st);
    return n;
}

int main(void)
{
    /* 32 chunks of 2 MiB, no pool setting: the default. */
    struct daemon d;
    REQUIRE(daemon_start(&d, "{\"devices\": [{\"id\": 0, \"capacity\": "
                             "\"64MiB\", \"chunk\": \"2MiB\"}]}", NULL) == 0,
            "start vramd");
    POOL(16, "after start");

    vram_client *c = connect_client(&d, "pool-test");
    REQUIRE(c, "connect");
    /* Root is an admin: 10 chunks of capacity, nothing held. */
    CHECK(vram_admin_set_capacity(c, 0, 20 * MIB) == 0, "lower the capacity: %s",
          vram_client_last_error(c));
    POOL(10, "with a capacity of 10 chunks");

    /* A client takes 6 of the 10: 4 are left to make ahead. */
    uint32_t stage, region;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 0, &stage) == 0, "stage");
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_FIXED, 6 * 2 * MIB, 1,
                               &region) == 0, "region");
    CHECK(vram_region_grow(c, region, 6) == 0, "grow: %s", vram_client_last_error(c));
    POOL(4, "with 6 of 10 chunks held");

    /* They come back: replaced. */
    CHECK(vram_region_release(c, region) == 0, "release: %s",
          vram_client_last_error(c));
    POOL(10, "once the 6 came back");

    CHECK(vram_admin_set_capacity(c, 0, 64 * MIB) == 0, "raise the capacity: %s",
          vram_client_last_error(c));
    POOL(16, "with the capacity back (at most 16 on the host)");

    vram_client_close(c);
    daemon_stop(&d);

    /* ---- a bounded standby (issue 30): pool.standby 8 MiB = 4 chunks ---- */
    REQUIRE(daemon_start(&d, "{\"devices\": [{\"id\": 0, \"capacity\": "
                             "\"64MiB\", \"chunk\": \"2MiB\"}],"
                             " \"pool\": {\"standby\": \"8MiB\"}}", NULL) == 0,
            "start vramd with a standby");
    POOL(4, "with a standby of 4 chunks");
    cJSON *st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "standby_max_bytes"), 8 * MIB);
    CHECK_EQ_U(status_dev(st, 0, "standby_bytes"), 8 * MIB);
    /* What vramd holds is the standby: the rest stays free for others. */
    CHECK_EQ_U(status_dev(st, 0, "held_bytes"), 8 * MIB);
    cJSON_Delete(st);
    c = connect_client(&d, "standby-test");
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 0, &stage) == 0, "stage");
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_FIXED, 20 * 2 * MIB, 1,
                               &region) == 0, "region");
    /* A grant beyond the standby: the rest is made as it is asked for. */
    CHECK(vram_region_grow(c, region, 20) == 0, "a grant past the standby: %s",
          vram_client_last_error(c));
    POOL(4, "refilled after the grant");
    uint64_t most = 0;
    for (int i = 0; i < 20; i++) {
        uint64_t n = pool(&d);
        most = n > most ? n : most;
    }
    CHECK(most <= 4, "the pool held %llu chunks, over its standby of 4",
          (unsigned long long)most);
    st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "held_bytes"), (20 + 4) * 2 * MIB);
    cJSON_Delete(st);
    CHECK(vram_region_release(c, region) == 0, "release: %s",
          vram_client_last_error(c));
    /* Returned host chunks are never reused (fresh memory): the pool stays
     * at its standby. */
    POOL(4, "after the release");
    CHECK(wait_dev_value(&d, 0, "held_bytes", 8 * MIB, 5000),
          "vramd holds more than the standby once nothing is granted");
    vram_client_close(c);
    daemon_stop(&d);

    /* A standby of 0: nothing made ahead, every grant makes its chunks. */
    REQUIRE(daemon_start(&d, "{\"devices\": [{\"id\": 0, \"capacity\": "
                             "\"64MiB\"}], \"pool\": {\"standby\": 0}}",
                         NULL) == 0, "start vramd with no standby");
    c = connect_client(&d, "no-standby");
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 0, &stage) == 0, "stage");
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_FIXED, 4 * MIB, 1,
                               &region) == 0, "region");
    CHECK(vram_region_grow(c, region, 2) == 0, "a grant with no standby: %s",
          vram_client_last_error(c));
    CHECK_EQ_U(pool(&d), 0);
    vram_client_close(c);
    daemon_stop(&d);
    return check_report("test_pool");
}
