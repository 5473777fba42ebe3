/* SPDX-License-Identifier: Apache-2.0 */
/* R12: a device's capacity changed at run time: the ledger keeps its
 * accounting (free + held == capacity) and refuses what is in use, reserved
 * or above the size it started with. */
#include <errno.h>
#include <string.h>

#include "tests/check.h"
#include "daemon/ledger/internal.h"

#define MiB (1024ull * 1024)

static void ok(struct vl_ledger *L, int r, int want, const char *what)
{
    CHECK(r == want, "%s: %d, expected %d (%s)", what, r, want, vl_why(L));
    CHECK(vl_check(L) == 0, "%s: invariant: %s", what, vl_why(L));
}

/* 64 chunks */
static const struct vl_device_cfg dev = {.id = 0, .chunk_bytes = 2 * MiB,
                                         .capacity_bytes = 128 * MiB};

/* Down to what is in use, never below it, and back up to the size at start. */
static void test_r12_capacity_in_use(void)
{
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &dev, 1, 1ull << 40, 1ull << 40) == 0, "init");
    struct vl_fxlist fx = {0};
    uint32_t st, r;
    ok(&L, vl_client_add(&L, 1), 0, "client");
    ok(&L, vl_stage_register_adhoc(&L, 1, 0, 0, 1, &st), 0, "stage");
    ok(&L, vl_region_create(&L, 1, st, VL_FIXED, 128 * MiB, 1, &r), 0, "region");
    ok(&L, vl_region_grow(&L, 1, r, 20, &fx), 0, "grow 20");

    ok(&L, vl_device_set_capacity(&L, 0, 38 * MiB, false), -EBUSY, "below in use");
    CHECK(strstr(vl_why(&L), "40 MiB are in use") != NULL, "why: %s", vl_why(&L));
    ok(&L, vl_device_set_capacity(&L, 0, 130 * MiB, false), -E2BIG, "above the start");
    ok(&L, vl_device_set_capacity(&L, 0, 40 * MiB, true), 0, "dry run");
    CHECK_EQ_U(vl_capacity(&L.dev[0]), 64);
    ok(&L, vl_device_set_capacity(&L, 0, 40 * MiB, false), 0, "down to what is used");
    CHECK_EQ_U(vl_capacity(&L.dev[0]), 20);
    ok(&L, vl_region_grow(&L, 1, r, 1, &fx), -ENOSPC, "no room left");
    ok(&L, vl_device_set_capacity(&L, 0, 128 * MiB, false), 0, "back up");
    ok(&L, vl_region_grow(&L, 1, r, 44, &fx), 0, "the whole device again");
    uint32_t r2;
    ok(&L, vl_region_create(&L, 1, st, VL_FIXED, 16 * MiB, 1, &r2), 0, "region 2");
    ok(&L, vl_region_grow(&L, 1, r2, 1, &fx), -ENOSPC, "full");
    vl_fx_free(&fx);
    vl_fini(&L);
}

/* A configured stage's reservation is not given away (R2). */
static void test_r12_capacity_reserved(void)
{
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &dev, 1, 1ull << 40, 1ull << 40) == 0, "init");
    struct vl_stage_cfg sc;
    memset(&sc, 0, sizeof(sc));
    sc.id = 0;
    sc.lanes = 1;
    sc.last_layer = 1;
    sc.lane_bytes_per_token[0] = 128; /* 262144 tokens: 32 MiB, 16 chunks */
    sc.native_context = 262144;
    sc.initial_tokens = 16384;
    sc.step_tokens = 8192;
    sc.expert_slot_bytes = 2 * MiB;
    sc.lend = true;
    ok(&L, vl_stage_configure(&L, &sc), 0, "configure");
    ok(&L, vl_device_set_capacity(&L, 0, 30 * MiB, false), -EBUSY, "under the reservation");
    CHECK(strstr(vl_why(&L), "reserve 32 MiB") != NULL, "why: %s", vl_why(&L));
    ok(&L, vl_device_set_capacity(&L, 0, 32 * MiB, false), 0, "at the reservation");
    vl_fini(&L);
}

int main(void)
{
    test_r12_capacity_in_use();
    test_r12_capacity_reserved();
    return check_report("test_ledger_capacity");
}
