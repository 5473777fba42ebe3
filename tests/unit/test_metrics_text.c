/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics exposition (client/tools/metrics_text.c) of a status made up
 * here: series per device, stage and client with their labels; a client
 * name with quotes, backslashes, a newline, a control character and bytes
 * that are not UTF-8 comes out as a valid, escaped label value; control
 * clients have no series; weight sets' bytes and counters, and none of
 * their samples from a vramd that does not send them; the text for a vramd
 * that cannot be read. */
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "client/tools/metrics_text.h"
#include "client/tools/textbuf.h"

static bool has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p++)
        if ((p == text || p[-1] == '\n') && (p[n] == '\n'))
            return true;
    return false;
}

int main(void)
{
    struct vw_t_device dev = {.id = 3, .backend = "cuda", .capacity_bytes = 1024,
                                .kv_bytes = 64, .free_bytes = 960,
                                .has_weights_bytes = true, .weights_bytes = 50331648,
                                .has_weights_cached_bytes = true,
                                .weights_cached_bytes = 16777216};
    uint32_t stg[2] = {0, 5};
    struct vw_t_stage stage = {.id = 5, .device = 3, .kv_needed_bytes = 77856768,
                                 .has_expert_slots = true, .expert_slots = 7};
    struct vw_t_client cl[3] = {
        {.id = 9, .name = "we\"ird\\na\nme\x01\xff\xc3\xa9", .pid = 4242,
         .role = "engine", .state = "quarantined", .quarantined_bytes = 2097152,
         .stages = {.v = stg, .n = 2}, .missed_recalls = 3, .delinquent = true},
        {.id = 10, .name = "vramctl", .pid = 1, .role = "ctl", .state = "connected"},
        {.id = 11, .name = "", .pid = 77, .role = "engine", .state = "connected",
         .held_bytes = 4096},
    };
    struct vw_rep_status st = {
        .backend = "cuda",
        .daemon = {.version = "0.1.0", .uptime_ms = 1500, .chunk_fds = 2},
        .devices = {.v = &dev, .n = 1},
        .stages = {.v = &stage, .n = 1},
        .clients = {.v = cl, .n = 3},
        .counters = {.grants = 12, .has_weights_hits = true, .weights_hits = 4,
                     .has_weights_misses = true, .weights_misses = 2,
                     .has_weights_evictions = true, .weights_evictions = 1},
    };
    struct tool_text t = {0};
    tool_metrics_render(&t, &st, 0.25);
    char *text = tool_text_take(&t, NULL);
    REQUIRE(text, "render failed");
    CHECK(has_line(text, "vramd_up 1"), "vramd_up");
    CHECK(has_line(text, "vramd_scrape_duration_seconds 0.250000"), "duration");
    CHECK(has_line(text, "vramd_info{version=\"0.1.0\",backend=\"cuda\"} 1"), "info");
    CHECK(has_line(text, "vramd_uptime_seconds 1.500"), "uptime");
    CHECK(has_line(text, "vramd_device_kv_bytes{device=\"3\",backend=\"cuda\"} 64"), "kv");
    CHECK(has_line(text, "vramd_stage_kv_needed_bytes{stage=\"5\",device=\"3\"} 77856768"),
          "needed");
    CHECK(has_line(text, "vramd_stage_expert_slots{stage=\"5\",device=\"3\"} 7"), "slots");
    CHECK(has_line(text, "vramd_grants_total 12"), "grants");
    CHECK(has_line(text, "# TYPE vramd_grants_total counter"), "a counter's type");
    CHECK(has_line(text, "vramd_device_weights_bytes{device=\"3\",backend=\"cuda\"} "
                         "50331648") &&
          has_line(text, "vramd_device_weights_cached_bytes{device=\"3\",backend="
                         "\"cuda\"} 16777216") &&
          has_line(text, "# TYPE vramd_device_weights_bytes gauge"),
          "weight sets' bytes:\n%s", text);
    CHECK(has_line(text, "vramd_weights_hits_total 4") &&
          has_line(text, "vramd_weights_misses_total 2") &&
          has_line(text, "vramd_weights_evictions_total 1") &&
          has_line(text, "# TYPE vramd_weights_evictions_total counter"),
          "weight sets' counters");
    /* Quotes and backslashes escaped as the format says; the newline, the
     * control character and the lone 0xff first as the text \xNN (as
     * every view shows them); é kept. */
    const char *lab = "{client=\"9\",name=\"we\\\"ird\\\\na\\\\x0ame\\\\x01\\\\xff\xc3\xa9\"}";
    char want[256];
    snprintf(want, sizeof(want), "vramd_client_quarantined_bytes%s 2097152", lab);
    CHECK(has_line(text, want), "the escaped client: want %s in\n%s", want, text);
    snprintf(want, sizeof(want), "vramd_client_stages%s 2", lab);
    CHECK(has_line(text, want), "stages of the client");
    snprintf(want, sizeof(want), "vramd_client_recalls_missed_total%s 3", lab);
    CHECK(has_line(text, want), "missed recalls");
    snprintf(want, sizeof(want), "vramd_client_delinquent%s 1", lab);
    CHECK(has_line(text, want), "delinquent");
    CHECK(strstr(text, "pid=\"4242\",state=\"quarantined\",role=\"engine\"} 1\n") != NULL,
          "info: the pid and the state");
    CHECK(has_line(text,
                   "vramd_client_held_bytes{client=\"11\",name=\"\"} 4096"),
          "a client without a name");
    CHECK(strstr(text, "name=\"vramctl\"") == NULL, "a control client has series");
    CHECK(has_line(text, "vramd_clients_connected 1"), "connected engines");
    /* Every line is a comment or a sample: nothing broke a line. */
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        REQUIRE(e, "the text does not end in a newline");
        CHECK(*p == '#' || (*p >= 'a' && *p <= 'z'), "a line: %.*s", (int)(e - p), p);
        p = e + 1;
    }
    free(text);

    /* A vramd without weight sets sends none of their fields: no samples
     * (a 0 would say it has none). */
    dev.has_weights_bytes = dev.has_weights_cached_bytes = false;
    st.counters.has_weights_hits = st.counters.has_weights_misses = false;
    st.counters.has_weights_evictions = false;
    tool_metrics_render(&t, &st, 0.25);
    text = tool_text_take(&t, NULL);
    REQUIRE(text, "render failed");
    CHECK(!strstr(text, "\nvramd_device_weights_bytes{") &&
          !strstr(text, "\nvramd_device_weights_cached_bytes{") &&
          !strstr(text, "\nvramd_weights_hits_total ") &&
          !strstr(text, "\nvramd_weights_misses_total ") &&
          !strstr(text, "\nvramd_weights_evictions_total "),
          "samples of fields vramd did not send:\n%s", text);
    CHECK(has_line(text, "vramd_device_kv_bytes{device=\"3\",backend=\"cuda\"} 64"),
          "the rest is there");
    free(text);

    /* A GPU's series carry its UUID, as DCGM's do. */
    dev.uuid = "GPU-8f7e6d5c-0000-1111-2222-333344445555";
    tool_metrics_render(&t, &st, 0.25);
    text = tool_text_take(&t, NULL);
    REQUIRE(text, "render failed");
    CHECK(has_line(text, "vramd_device_kv_bytes{device=\"3\",backend=\"cuda\","
                         "gpu_uuid=\"GPU-8f7e6d5c-0000-1111-2222-333344445555\"} 64"),
          "kv, with the GPU's UUID");
    free(text);
    dev.uuid = NULL;

    tool_metrics_render_down(&t, "no vramd is listening on /x\n(refused)");
    text = tool_text_take(&t, NULL);
    REQUIRE(text, "render_down failed");
    CHECK(has_line(text, "# no vramd is listening on /x\\x0a(refused)"),
          "why, on one line, its newline escaped");
    CHECK(has_line(text, "vramd_up 0"), "vramd_up 0");
    free(text);
    return check_report("test_metrics_text");
}
