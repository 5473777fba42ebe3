/* SPDX-License-Identifier: Apache-2.0 */
/* Data survives other grants, and region addresses never move across grows
 * and shrinks, in single- and multi-lane regions. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tests/integration/harness.h"

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    vram_client *c = connect_client(&d, "stable");
    uint32_t stage, kv, ex;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 31, &stage) == 0, "register");
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_KV, 64 * MIB, 4, &kv) == 0,
            "create kv: %s", vram_client_last_error(c));
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_EXPERT, 128 * MIB, 1, &ex) == 0,
            "create expert: %s", vram_client_last_error(c));
    struct vram_region_info k0, e0, k1, e1;
    vram_region_info(c, kv, &k0);
    vram_region_info(c, ex, &e0);
    CHECK(k0.lane_stride >= 64 * MIB, "lane stride %llu",
          (unsigned long long)k0.lane_stride);
    /* No overlap between the two regions. */
    uint64_t ka = (uint64_t)(uintptr_t)k0.base, kb = ka + k0.lanes * k0.lane_stride;
    uint64_t ea = (uint64_t)(uintptr_t)e0.base, eb = ea + e0.lanes * e0.lane_stride;
    CHECK(kb <= ea || eb <= ka, "regions overlap");

    REQUIRE(vram_region_grow(c, kv, 3) == 0, "grow: %s", vram_client_last_error(c));
    for (uint32_t l = 0; l < 4; l++)
        for (uint32_t i = 0; i < 3; i++)
            fill_pattern(vram_region_slot(c, kv, l, i), 2 * MIB, l * 100 + i);
    char *lane2_slot1 = vram_region_slot(c, kv, 2, 1);

    /* Other grants in between. */
    REQUIRE(vram_region_grow(c, ex, 10) == 0, "grow expert");
    for (uint32_t i = 0; i < 10; i++)
        fill_pattern(vram_region_slot(c, ex, 0, i), 2 * MIB, 9000 + i);
    REQUIRE(vram_region_grow(c, kv, 5) == 0, "grow kv again");
    for (uint32_t l = 0; l < 4; l++)
        for (uint32_t i = 3; i < 8; i++)
            fill_pattern(vram_region_slot(c, kv, l, i), 2 * MIB, l * 100 + i);
    REQUIRE(vram_region_shrink(c, kv, 2) == 0, "shrink: %s",
            vram_client_last_error(c));
    REQUIRE(vram_region_shrink(c, ex, 4) == 0, "shrink expert");

    vram_region_info(c, kv, &k1);
    vram_region_info(c, ex, &e1);
    CHECK(k1.base == k0.base, "kv region moved");
    CHECK(e1.base == e0.base, "expert region moved");
    CHECK_EQ_U(k1.mapped, 4 * 6);
    CHECK_EQ_U(e1.mapped, 6);
    CHECK(lane2_slot1 == vram_region_slot(c, kv, 2, 1), "slot address moved");
    CHECK(check_pattern(lane2_slot1, 2 * MIB, 201), "data through an old pointer");
    for (uint32_t l = 0; l < 4; l++)
        for (uint32_t i = 0; i < 6; i++)
            CHECK(check_pattern(vram_region_slot(c, kv, l, i), 2 * MIB, l * 100 + i),
                  "kv lane %u slot %u lost its data", l, i);
    for (uint32_t i = 0; i < 6; i++)
        CHECK(check_pattern(vram_region_slot(c, ex, 0, i), 2 * MIB, 9000 + i),
              "expert slot %u lost its data", i);

    cJSON *st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "granted_bytes"), 24 * 2 * MIB);
    CHECK_EQ_U(status_dev(st, 0, "loaned_bytes"), 6 * 2 * MIB);
    cJSON_Delete(st);

    /* Grow beyond the region: refused, nothing else disturbed. */
    CHECK(vram_region_grow(c, kv, 100) == -E2BIG, "grow over the region: %s",
          vram_client_last_error(c));
    CHECK_EQ_U(vram_client_chunks_held(c), 30);
    /* Grow after regrow reuses the freed slots at the same addresses. */
    REQUIRE(vram_region_grow(c, kv, 2) == 0, "regrow");
    vram_region_info(c, kv, &k1);
    CHECK(k1.base == k0.base, "kv region moved on regrow");
    CHECK_EQ_U(k1.mapped, 32);
    /* Fresh memory after a shrink: no bytes from before. */
    CHECK(!check_pattern(vram_region_slot(c, kv, 0, 7), 2 * MIB, 7),
          "a released chunk came back with its old contents");

    REQUIRE(vram_region_release(c, ex) == 0, "release expert");
    REQUIRE(vram_stage_release(c, stage) == 0, "release stage: %s",
            vram_client_last_error(c));
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_stable_addresses");
}
