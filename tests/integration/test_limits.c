/* SPDX-License-Identifier: Apache-2.0 */
/* Limits on what a client controls: connections, stages, regions, chunks
 * (a quota that loans count against too). Over a limit: a clear error, and
 * nothing else disturbed. */
#include <errno.h>
#include <string.h>

#include "tests/integration/harness.h"

int main(void)
{
    const char *config =
        "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}],"
        " \"limits\": {\"clients\": 3, \"chunks_per_client\": 8,"
        "              \"regions_per_client\": 2, \"stages_per_client\": 2,"
        "              \"admin_connections\": 1},"
        " \"stages\": [{\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 1,"
        "   \"kv_lanes\": [64], \"expert_slot\": \"2MiB\"}]}";
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    vram_client *a = connect_client(&d, "a");
    vram_client *b = connect_client(&d, "b");
    /* Stages: two per client. */
    uint32_t s1, s2, s3, r1, r2, r3;
    REQUIRE(vram_stage_register_adhoc(a, 0, 0, 1, &s1) == 0, "stage 1");
    REQUIRE(vram_stage_register(a, 0, 0, NULL) == 0, "configured stage: %s",
            vram_client_last_error(a));
    s2 = 0;
    CHECK(vram_stage_register_adhoc(a, 0, 2, 3, &s3) == -E2BIG, "third stage");
    CHECK(strstr(vram_client_last_error(a), "2 stages per client") != NULL,
          "unclear: %s", vram_client_last_error(a));
    /* Regions: two per client. */
    REQUIRE(vram_region_create(a, s1, VRAM_REGION_FIXED, 64 * MIB, 1, &r1) == 0, "r1");
    REQUIRE(vram_region_create(a, s1, VRAM_REGION_FIXED, 64 * MIB, 1, &r2) == 0, "r2");
    CHECK(vram_region_create(a, s1, VRAM_REGION_FIXED, 64 * MIB, 1, &r3) == -E2BIG,
          "third region");
    /* Chunks: a quota of 8 (the configured stage's KV already holds some). */
    struct vram_stage_info si;
    vram_stage_info(a, s2, &si);
    uint32_t kv = (uint32_t)(si.kv_mapped_bytes / (2 * MIB));
    CHECK(vram_region_grow(a, r1, 9) == -EDQUOT, "grow over the quota");
    CHECK(vram_region_grow(a, r1, 8 - kv) == 0, "grow to the quota: %s",
          vram_client_last_error(a));
    /* Loans count too: nothing more can be lent. */
    CHECK(vram_expert_request(a, s2, 0) == -EDQUOT, "loans over the quota: %s",
          vram_client_last_error(a));
    /* Connections: three clients, then one slot kept for admins (root is
     * one), then a fifth is turned away, clearly. */
    vram_client *c = connect_client(&d, "c");
    vram_client *admin = connect_client(&d, "admin");
    char err[256] = "";
    struct vram_client_options o = {.name = "d", .error = err, .error_len = sizeof(err)};
    vram_client *dd = NULL;
    int e = vram_client_connect(d.sock, &o, &dd);
    CHECK(e == -E2BIG, "fifth client: %d", e);
    CHECK(strstr(err, "too many clients") != NULL, "unclear: %s", err);
    vram_client_close(admin);
    /* Nothing else disturbed. */
    uint32_t bs, br;
    CHECK(vram_stage_register_adhoc(b, 0, 4, 5, &bs) == 0, "b's stage");
    CHECK(vram_region_create(b, bs, VRAM_REGION_FIXED, 16 * MIB, 1, &br) == 0, "b's region");
    CHECK(vram_region_grow(b, br, 4) == 0, "b's grow: %s", vram_client_last_error(b));
    vram_client_close(c);
    vram_client_close(b);
    vram_client_close(a);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_limits");
}
