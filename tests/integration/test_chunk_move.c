/* SPDX-License-Identifier: Apache-2.0 */
/* Moving a held chunk between a client's own regions: the bytes come along,
 * no handle travels, and a chunk of another device is refused as foreign. */
#include <errno.h>
#include <string.h>

#include "tests/integration/harness.h"

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    vram_client *c = connect_client(&d, "mover");
    uint32_t s0, s1, a, b, x;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 15, &s0) == 0, "stage on 0");
    REQUIRE(vram_stage_register_adhoc(c, 1, 16, 31, &s1) == 0, "stage on 1");
    REQUIRE(vram_region_create(c, s0, VRAM_REGION_KV, 32 * MIB, 2, &a) == 0, "a");
    REQUIRE(vram_region_create(c, s0, VRAM_REGION_EXPERT, 32 * MIB, 1, &b) == 0, "b");
    REQUIRE(vram_region_create(c, s1, VRAM_REGION_EXPERT, 32 * MIB, 1, &x) == 0, "x");
    REQUIRE(vram_region_grow(c, a, 2) == 0, "grow a");
    REQUIRE(vram_region_grow(c, x, 1) == 0, "grow x");
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t i = 0; i < 2; i++)
            fill_pattern(vram_region_slot(c, a, l, i), 2 * MIB, 10 * l + i);
    fill_pattern(vram_region_slot(c, x, 0, 0), 2 * MIB, 99);
    size_t held = vram_client_chunks_held(c);
    cJSON *st = daemon_status(&d);
    uint64_t grants = json_u64(cJSON_GetObjectItem(st, "counters"), "grants");
    cJSON_Delete(st);

    /* Lane 1 slot 1 of a → slot 5 of b: same bytes at the new address. */
    REQUIRE(vram_region_move_chunk(c, a, 1, 1, b, 0, 5) == 0, "move: %s",
            vram_client_last_error(c));
    CHECK(check_pattern(vram_region_slot(c, b, 0, 5), 2 * MIB, 11),
          "the moved chunk lost its bytes");
    struct vram_region_info ia, ib;
    vram_region_info(c, a, &ia);
    vram_region_info(c, b, &ib);
    CHECK_EQ_U(ia.mapped, 3);
    CHECK_EQ_U(ib.mapped, 1);
    CHECK_EQ_U(vram_client_chunks_held(c), held);
    st = daemon_status(&d);
    CHECK_EQ_U(json_u64(cJSON_GetObjectItem(st, "counters"), "grants"), grants);
    CHECK(json_u64(cJSON_GetObjectItem(st, "counters"), "moves") >= 1, "no move");
    cJSON_Delete(st);

    /* A chunk of device 1 offered to a region of device 0: refused. */
    int e = vram_region_move_chunk(c, x, 0, 0, b, 0, 0);
    CHECK(e == -EXDEV, "foreign chunk: %d", e);
    CHECK(strstr(vram_client_last_error(c), "foreign chunk") != NULL,
          "unclear error: %s", vram_client_last_error(c));
    CHECK(check_pattern(vram_region_slot(c, x, 0, 0), 2 * MIB, 99),
          "the refused chunk changed");
    /* Taken and out-of-range slots. */
    CHECK(vram_region_move_chunk(c, a, 0, 0, b, 0, 5) == -EBUSY, "taken slot");
    CHECK(vram_region_move_chunk(c, a, 0, 0, b, 0, 4000) == -EINVAL, "range");
    CHECK(check_pattern(vram_region_slot(c, a, 0, 0), 2 * MIB, 0), "a[0][0]");
    /* Shrinking b gives the moved chunk back. */
    REQUIRE(vram_region_release(c, b) == 0, "release b");
    st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "granted_bytes") + status_dev(st, 0, "loaned_bytes"),
               3 * 2 * MIB);
    cJSON_Delete(st);
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_chunk_move");
}
