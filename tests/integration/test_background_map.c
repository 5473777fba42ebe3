/* SPDX-License-Identifier: Apache-2.0 */
/* Mapping in the background (vram_client_set_background_map): grows return
 * once their request is sent (VRAM_PENDING), registration once vramd
 * granted; the library reads the replies and maps on its own thread, and
 * vram_client_wait says how many chunks it mapped. Every call waits for the
 * mapping before it answers, so the library's figures, the daemon's and the
 * memory agree after each; a recall that comes while chunks are being
 * mapped (answered by the event thread) takes them properly, and what
 * was written there stays. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/harness.h"
#include "tests/integration/regions_named.h"

/* 128 chunks of 2 MiB. Stage 0: a 64 MiB weights region, one KV lane (16
 * chunks, initial 2), 2 MiB expert slots. Stage 1: one lane of 32 chunks,
 * initial 2, lent to stage 0 while idle: its reserve recalls them. */
static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"256MiB\", \"chunk\": \"2MiB\","
    "                \"lend_unreserved\": true}],"
    " \"pool\": {\"prefill_chunks\": 0},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256], \"native_context\": 131072,"
    "   \"initial_tokens\": 16384, \"step_tokens\": 8192,"
    "   \"expert_slot\": \"2MiB\","
    "   \"fixed\": [{\"name\": \"weights\", \"kind\": \"fixed\", \"bytes\": \"64MiB\"}],"
    "   \"loan\": {\"recall_deadline_ms\": 2000, \"hold_ms\": 3000}},"
    "  {\"id\": 1, \"device\": 0, \"first_layer\": 16, \"last_layer\": 31,"
    "   \"kv_lanes\": [256], \"native_context\": 262144,"
    "   \"initial_tokens\": 16384, \"step_tokens\": 8192,"
    "   \"expert_slot\": \"2MiB\", \"loan\": {\"hold_ms\": 3000}}]}";

/* The library's figures and the daemon's agree. */
static void agree(const struct daemon *d, vram_client *c, uint32_t stage,
                  const char *when)
{
    struct vram_stage_info in;
    REQUIRE(vram_stage_info(c, stage, &in) == 0, "stage_info");
    cJSON *st = daemon_status(d);
    const cJSON *s = status_stage(st, stage);
    CHECK(in.kv_mapped_bytes == json_u64(s, "kv_mapped_bytes"),
          "%s: kv %llu here, %llu in vramd", when,
          (unsigned long long)in.kv_mapped_bytes,
          (unsigned long long)json_u64(s, "kv_mapped_bytes"));
    CHECK(in.expert_loaned_bytes == json_u64(s, "expert_loaned_bytes"),
          "%s: loans %llu here, %llu in vramd", when,
          (unsigned long long)in.expert_loaned_bytes,
          (unsigned long long)json_u64(s, "expert_loaned_bytes"));
    cJSON_Delete(st);
}

/* Every slot of the first n of a one-lane region holds memory. */
static int mapped_slots(vram_client *c, uint32_t region, uint32_t n)
{
    int k = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t chunk;
        if (vram_region_chunk(c, region, 0, i, &chunk) == 0)
            k++;
    }
    return k;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");

    /* ---- one engine's start, mapped in the background ---- */
    vram_client *a = connect_client(&d, "engine-a");
    CHECK(vram_client_wait(a) == 0, "nothing under way: 0");
    REQUIRE(vram_client_set_background_map(a, 1) == 0, "background on");
    struct vram_stage_info ai;
    REQUIRE(vram_stage_register(a, 0, 0, &ai) == 0, "register: %s",
            vram_client_last_error(a));
    /* The initial window: 16384 tokens x 256 B = 4 MiB, 2 chunks. */
    CHECK_EQ_U(ai.kv_mapped_bytes, 2 * 2 * MIB);
    int n = vram_client_wait(a);
    CHECK(n == 2, "the initial window: %d chunks mapped in the background", n);
    CHECK(vram_client_wait(a) == 0, "a second wait: nothing more");

    uint32_t w = weights_of(a, 0);
    REQUIRE(w != 0, "no weights region");
    REQUIRE(vram_region_grow(a, w, 32) == VRAM_PENDING, "grow: %s",
            vram_client_last_error(a));
    /* Any call answers from a whole state: vram_region_chunk waits for the
     * mapping, and the memory is there once it returns. */
    CHECK(mapped_slots(a, w, 32) == 32, "weights: %d of 32 slots mapped",
          mapped_slots(a, w, 32));
    n = vram_client_wait(a);
    CHECK(n == 32, "grow: %d chunks mapped in the background", n);
    for (uint32_t i = 0; i < 32; i++)
        fill_pattern(vram_region_slot(a, w, 0, i), 2 * MIB, 100 + i);
    bool same = true;
    for (uint32_t i = 0; i < 32; i++)
        same = same && check_pattern(vram_region_slot(a, w, 0, i), 2 * MIB, 100 + i);
    CHECK(same, "the weights' memory does not keep what was written");
    agree(&d, a, 0, "after the grow");

    /* ---- loans in the background, recalled while being mapped ---- */
    REQUIRE(vram_client_start_event_thread(a) == 0, "event thread");
    /* 128 - 32 weights - 2 KV: 14 more of its own window, stage 1's idle
     * window but its initial 2 chunks (kept for its registration: 30) and
     * 48 unreserved; stage 1 takes its window while they are being mapped
     * (the recall is answered on A's event thread, which waits for the
     * mapping first). */
    REQUIRE(vram_expert_request(a, 0, 0) == VRAM_PENDING, "loans: %s",
            vram_client_last_error(a));
    vram_client *b = connect_client(&d, "engine-b");
    struct vram_stage_info bi;
    int e = vram_stage_register(b, 1, 0, &bi);
    CHECK(e == 0, "register stage 1: %s (%s)", vram_strerror(e),
          vram_client_last_error(b));
    struct vram_kv_result br;
    e = vram_kv_reserve(b, 1, 250000, 12144, VRAM_KV_HOLD, &br);
    CHECK(e == 0, "stage 1's whole window over stage 0's loans: %s (%s)",
          vram_strerror(e), vram_client_last_error(b));
    CHECK_EQ_U(br.kv_mapped_bytes, 32 * 2 * MIB);
    n = vram_client_wait(a);
    CHECK(n == 92, "loans: %d chunks mapped in the background (%s)", n,
          n < 0 ? vram_strerror(n) : "");
    struct vram_residency res;
    REQUIRE(vram_expert_residency(a, 0, &res) == 0, "residency");
    CHECK_EQ_U(res.expert_slots_backed, 92 - 30);
    agree(&d, a, 0, "after the recall");
    same = true;
    for (uint32_t i = 0; i < 32; i++)
        same = same && check_pattern(vram_region_slot(a, w, 0, i), 2 * MIB, 100 + i);
    CHECK(same, "the weights changed across the recall");

    /* ---- off again: calls map before they return ---- */
    REQUIRE(vram_client_set_background_map(a, 0) == 0, "background off");
    REQUIRE(vram_kv_trim(a, 0, 0) == 0, "trim");
    struct vram_kv_result r;
    REQUIRE(vram_kv_reserve(a, 0, 30000, 1000, VRAM_KV_HOLD, &r) == 0,
            "reserve: %s", vram_client_last_error(a));
    CHECK(vram_client_wait(a) == 0, "nothing was mapped in the background");
    agree(&d, a, 0, "after a reserve");

    vram_client_close(b);
    vram_client_close(a);
    daemon_check_no_leaks(&d);
    CHECK(daemon_stop(&d) == 0, "vramd stops cleanly");
    return check_report("background_map");
}
