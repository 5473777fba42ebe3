/* SPDX-License-Identifier: Apache-2.0 */
/* The seed replay: vram-replay drives tests/scenarios/seed-pp32-16.json (or
 * the scenario named as the argument: seed-pp32-16-1gpu.json puts both
 * stages on one device) against the real daemon, with one client process
 * per stage and with both stages in one client, and must reproduce the
 * seed's published figures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/integration/harness.h"

static const cJSON *stage_of(const cJSON *step, uint32_t stage)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(step, "stages"))
        if (json_u64(s, "stage") == stage)
            return s;
    return NULL;
}

/* Each stage's device, as the scenario places it. */
static uint64_t stage_device[2];

static void replay(const struct daemon *d, const char *scenario, const char *mode)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s --socket %s %s %s",
             getenv("VRAM_REPLAY_BIN") ? getenv("VRAM_REPLAY_BIN") : "vram-replay",
             d->sock, mode, scenario);
    FILE *p = popen(cmd, "r");
    REQUIRE(p, "popen");
    cJSON *steps[8] = {0};
    int n = 0;
    char line[1 << 14];
    while (fgets(line, sizeof(line), p) && n < 8) {
        steps[n] = cJSON_Parse(line);
        CHECK(steps[n] != NULL, "%s: not a JSON line: %s", mode, line);
        if (steps[n])
            n++;
    }
    int st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: vram-replay failed", mode);
    REQUIRE(n == 4, "%s: %d steps printed, expected 4", mode, n);

    static const char *keys[] = {"stage", "device", "prompt_tokens",
                                 "output_tokens", "kv_needed_bytes",
                                 "kv_mapped_bytes", "expert_loaned_bytes",
                                 "expert_slots_backed", "recalled_chunks",
                                 "step_us"};
    for (int i = 0; i < 4; i++)
        for (uint32_t s = 0; s < 2; s++) {
            const cJSON *o = stage_of(steps[i], s);
            REQUIRE(o, "%s: step %d has no stage %u", mode, i + 1, s);
            for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
                CHECK(cJSON_IsNumber(cJSON_GetObjectItem(o, keys[k])),
                      "%s: step %d stage %u lacks %s", mode, i + 1, s, keys[k]);
            CHECK_EQ_U(json_u64(o, "device"), stage_device[s]);
            CHECK_EQ_U(json_u64(o, "output_tokens"), 1024);
        }
    const cJSON *s0, *s1;
    /* 65,536 + 1,024 tokens → 73,728-token window → 19 chunks per lane. */
    s0 = stage_of(steps[0], 0);
    s1 = stage_of(steps[0], 1);
    CHECK_EQ_U(json_u64(s0, "kv_mapped_bytes"), 16 * 19 * 2 * MIB);
    CHECK_EQ_U(json_u64(s1, "kv_mapped_bytes"), 10 * 19 * 2 * MIB);
    CHECK_EQ_U(json_u64(s0, "kv_needed_bytes"), 16ull * 66560 * 528);
    /* The grow came out of the stage's own loans, moved without new fds. */
    CHECK_EQ_U(json_u64(s0, "recalled_chunks"), 16 * (19 - 5));
    CHECK_EQ_U(json_u64(s1, "recalled_chunks"), 10 * (19 - 5));
    CHECK_EQ_U(json_u64(s0, "expert_loaned_bytes"), 2112 * MIB - 608 * MIB);

    /* 261,000: the whole native window, nothing lent. */
    s0 = stage_of(steps[2], 0);
    s1 = stage_of(steps[2], 1);
    CHECK_EQ_U(json_u64(s0, "kv_mapped_bytes"), 2112 * MIB);
    CHECK_EQ_U(json_u64(s1, "kv_mapped_bytes"), 1320 * MIB);
    CHECK_EQ_U(json_u64(s0, "expert_loaned_bytes"), 0);
    CHECK_EQ_U(json_u64(s1, "expert_loaned_bytes"), 0);
    CHECK_EQ_U(json_u64(s0, "expert_slots_backed"), 0);

    /* 8,192 after the long prompt: the initial window; the rest is loans. */
    s0 = stage_of(steps[3], 0);
    s1 = stage_of(steps[3], 1);
    CHECK_EQ_U(json_u64(s0, "kv_mapped_bytes"), 160 * MIB);
    CHECK_EQ_U(json_u64(s1, "kv_mapped_bytes"), 100 * MIB);
    CHECK_EQ_U(json_u64(s0, "expert_loaned_bytes"), 1952 * MIB);
    CHECK_EQ_U(json_u64(s1, "expert_loaned_bytes"), 1220 * MIB);
    CHECK_EQ_U(json_u64(s0, "expert_slots_backed"), 1952 * 2 / 3);
    CHECK_EQ_U(json_u64(s1, "expert_slots_backed"), 1220 * 2 / 3);
    CHECK_EQ_U(json_u64(s0, "recalled_chunks"), 0);
    for (int i = 0; i < n; i++)
        cJSON_Delete(steps[i]);
}

int main(int argc, char **argv)
{
    char scenario[512];
    snprintf(scenario, sizeof(scenario), "%s/tests/scenarios/%s",
             getenv("VRAM_SOURCE_DIR") ? getenv("VRAM_SOURCE_DIR") : ".",
             argc > 1 ? argv[1] : "seed-pp32-16.json");
    FILE *f = fopen(scenario, "r");
    REQUIRE(f, "cannot open %s", scenario);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *doc = cJSON_Parse(text);
    REQUIRE(doc, "%s is not JSON", scenario);
    const cJSON *st_;
    cJSON_ArrayForEach(st_, cJSON_GetObjectItem(doc, "stages"))
        if (json_u64(st_, "id") < 2)
            stage_device[json_u64(st_, "id")] = json_u64(st_, "device");
    cJSON_Delete(doc);

    struct daemon d;
    REQUIRE(daemon_start(&d, text, NULL) == 0, "start vramd");
    replay(&d, scenario, "");
    daemon_check_no_leaks(&d);
    replay(&d, scenario, "--one-client");
    daemon_check_no_leaks(&d);
    cJSON *st = daemon_status(&d);
    CHECK(json_u64(cJSON_GetObjectItem(st, "counters"), "moves") > 0,
          "no chunk was moved between regions");
    cJSON_Delete(st);
    daemon_stop(&d);
    return check_report("test_seed_replay");
}
