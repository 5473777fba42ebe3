/* The backend's pool of chunks made ahead follows what the ledger could
 * grant: it fills after start, shrinks when the capacity goes down or
 * clients take chunks (it never holds more than is free), and is made
 * again when chunks come back or the capacity goes up. The host backend
 * keeps at most 16 (each is an fd). */
#include <errno.h>
#include <stdio.h>

#include "harness.h"

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
    return check_report("test_pool");
}
