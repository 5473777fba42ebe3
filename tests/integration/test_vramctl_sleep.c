/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl and stages that sleep (R18), with the real vramd, vramctl run as
 * a process of its own. One configured stage, registered with its initial
 * window (16384 tokens x 256 B = 4 MiB = 2 chunks), then put to sleep and
 * woken by its engine:
 *  - vramctl stages: STATE - without an owner, awake once registered,
 *    asleep while it sleeps with HOST the bytes status says its owner
 *    keeps (the window's 4 MiB) and KV-MAPPED 0 B; awake again with HOST -
 *    after the wake; no line ends in a space;
 *  - vramctl stages --json: asleep, host_bytes, wake_tokens, sleeps and
 *    wakes as status has them;
 *  - vramctl metrics: vramd_stage_asleep and vramd_stage_host_bytes
 *    (gauges), vramd_stage_sleeps_total, _wakes_total, _sleep_seconds_total
 *    and _wake_seconds_total (counters, the times status's microseconds
 *    as seconds), with HELP and TYPE, labelled stage and device; promtool
 *    check metrics accepts it;
 *  - vramctl top (one frame, standard output not a terminal): a line for
 *    the sleeping stage with its host bytes, none once it is awake. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/integration/harness.h"

static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"256MiB\", \"chunk\": \"2MiB\"}],"
    " \"pool\": {\"prefill_chunks\": 0},"
    " \"stages\": [{\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\"}]}";

static char out[1 << 16];

static const char *vramctl(void)
{
    return getenv("VRAMCTL_BIN") ? getenv("VRAMCTL_BIN") : "vramctl";
}

/* vramctl ARGS: its exit status, standard output and error in out. */
static int run(const struct daemon *d, const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --socket %s %s 2>&1", vramctl(), d->sock, args);
    FILE *p = popen(cmd, "r");
    REQUIRE(p, "popen %s", cmd);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A line of text ending in a space (table rows are trimmed), or NULL. */
static const char *trailing_space(const char *text)
{
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        if (n && l[n - 1] == ' ')
            return l;
        if (!e)
            break;
        l = e + 1;
    }
    return NULL;
}

/* The line of text that begins with start (copied into buf), or NULL. */
static const char *line_starting(const char *text, const char *start, char *buf,
                                 size_t len)
{
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, start, strlen(start)) == 0) {
            snprintf(buf, len, "%.*s", (int)strcspn(l, "\n"), l);
            return buf;
        }
    return NULL;
}

/* The value of column col in row, by the header's layout: from where col's
 * name begins to where the next column's begins, trimmed. */
static const char *cell(const char *header, const char *row, const char *col,
                        char *buf, size_t len)
{
    buf[0] = '\0';
    size_t n = strlen(col);
    const char *h = header;
    /* The whole name (HOST), not a part of another's. */
    while ((h = strstr(h, col)) &&
           !((h == header || h[-1] == ' ') && (h[n] == ' ' || !h[n])))
        h += n;
    if (!h)
        return buf;
    size_t from = (size_t)(h - header), to = from + n;
    while (header[to] == ' ')
        to++;
    if (!header[to])
        to = strlen(row) > from ? strlen(row) : from;
    if (strlen(row) <= from)
        return buf;
    snprintf(buf, len, "%.*s", (int)(to - from), row + from);
    for (size_t k = strlen(buf); k && buf[k - 1] == ' '; k--)
        buf[k - 1] = '\0';
    return buf;
}

/* The sample of a series (its name and labels as the text has them), as
 * text, or "" when it has none. */
static const char *sample(const char *text, const char *series, char *buf,
                          size_t len)
{
    char want[256];
    snprintf(want, sizeof(want), "\n%s ", series);
    const char *p = strstr(text, want);
    buf[0] = '\0';
    if (p)
        snprintf(buf, len, "%.*s", (int)strcspn(p + strlen(want), "\n"),
                 p + strlen(want));
    return buf;
}

/* Stage 0's row of vramctl stages: STATE, HOST and KV-MAPPED must be
 * state, host and kv. */
static void check_table(const struct daemon *d, const char *state, const char *host,
                        const char *kv)
{
    char hd[512], rw[512], v[64];
    CHECK(run(d, "stages") == 0, "stages: %s", out);
    REQUIRE(line_starting(out, "STAGE ", hd, sizeof(hd)) &&
                line_starting(out, "0 ", rw, sizeof(rw)),
            "no stage 0 in:\n%s", out);
    CHECK(strcmp(cell(hd, rw, "STATE", v, sizeof(v)), state) == 0,
          "STATE '%s', want '%s':\n%s", v, state, out);
    CHECK(strcmp(cell(hd, rw, "HOST", v, sizeof(v)), host) == 0,
          "HOST '%s', want '%s':\n%s", v, host, out);
    CHECK(strcmp(cell(hd, rw, "KV-MAPPED", v, sizeof(v)), kv) == 0,
          "KV-MAPPED '%s', want '%s':\n%s", v, kv, out);
    CHECK(strcmp(cell(hd, rw, "LAYERS", v, sizeof(v)), "0-15") == 0 &&
              strcmp(cell(hd, rw, "BLOCKED-BY", v, sizeof(v)), "-") == 0,
          "the other columns moved:\n%s", out);
    const char *ts = trailing_space(out);
    CHECK(ts == NULL, "stages: a line ends in a space: '%.*s'",
          (int)strcspn(ts ? ts : "", "\n"), ts ? ts : "");
}

/* vramctl stages --json's stage 0 has the sleep fields status has. */
static void check_json(const struct daemon *d, bool asleep)
{
    cJSON *st = daemon_status(d);
    const cJSON *want = status_stage(st, 0);
    REQUIRE(want, "status has no stage 0");
    CHECK(run(d, "stages --json") == 0, "stages --json: %s", out);
    cJSON *j = cJSON_Parse(out);
    const cJSON *s, *got = NULL;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(j, "stages"))
        if (json_u64(s, "id") == 0)
            got = s;
    REQUIRE(got, "stages --json has no stage 0: %.300s", out);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(got, "asleep")) == asleep,
          "stages --json: asleep should be %d: %.400s", asleep, out);
    static const char *const keys[] = {"host_bytes", "wake_tokens", "sleeps",
                                       "wakes", "sleep_us", "wake_us"};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        bool has = cJSON_GetObjectItem(want, keys[k]) != NULL;
        CHECK((cJSON_GetObjectItem(got, keys[k]) != NULL) == has,
              "stages --json: %s %s, status %s", keys[k],
              has ? "missing" : "there", has ? "has it" : "has not");
        if (has)
            CHECK(json_u64(got, keys[k]) == json_u64(want, keys[k]),
                  "stages --json: %s %llu, status %llu", keys[k],
                  (unsigned long long)json_u64(got, keys[k]),
                  (unsigned long long)json_u64(want, keys[k]));
    }
    /* While asleep the fields that only a sleep has are there. */
    CHECK(!asleep || (cJSON_GetObjectItem(got, "host_bytes") &&
                      cJSON_GetObjectItem(got, "wake_tokens")),
          "asleep without host_bytes or wake_tokens: %.400s", out);
    cJSON_Delete(j);
    cJSON_Delete(st);
}

#define SERIES(name) name "{stage=\"0\",device=\"0\"}"

/* vramctl metrics: stage 0's sleep series, as status has them. */
static void check_metrics(const struct daemon *d, const char *asleep,
                          unsigned long long host, unsigned long long sleeps,
                          unsigned long long wakes)
{
    cJSON *st = daemon_status(d);
    const cJSON *s0 = status_stage(st, 0);
    REQUIRE(s0, "status has no stage 0");
    char want[4][48], got[64];
    snprintf(want[0], sizeof(want[0]), "%llu", host);
    snprintf(want[1], sizeof(want[1]), "%llu", sleeps);
    snprintf(want[2], sizeof(want[2]), "%llu", wakes);
    CHECK(run(d, "metrics") == 0, "metrics: %s", out);
    CHECK(strcmp(sample(out, SERIES("vramd_stage_asleep"), got, sizeof(got)),
                 asleep) == 0,
          "vramd_stage_asleep '%s', want %s:\n%s", got, asleep, out);
    CHECK(strcmp(sample(out, SERIES("vramd_stage_host_bytes"), got, sizeof(got)),
                 want[0]) == 0,
          "vramd_stage_host_bytes '%s', want %s", got, want[0]);
    CHECK(strcmp(sample(out, SERIES("vramd_stage_sleeps_total"), got, sizeof(got)),
                 want[1]) == 0,
          "vramd_stage_sleeps_total '%s', want %s", got, want[1]);
    CHECK(strcmp(sample(out, SERIES("vramd_stage_wakes_total"), got, sizeof(got)),
                 want[2]) == 0,
          "vramd_stage_wakes_total '%s', want %s", got, want[2]);
    /* The engine's microseconds, as seconds. */
    static const char *const times[2][2] = {
        {"sleep_us", SERIES("vramd_stage_sleep_seconds_total")},
        {"wake_us", SERIES("vramd_stage_wake_seconds_total")}};
    for (int k = 0; k < 2; k++) {
        snprintf(want[3], sizeof(want[3]), "%.6f",
                 (double)json_u64(s0, times[k][0]) / 1e6);
        CHECK(strcmp(sample(out, times[k][1], got, sizeof(got)), want[3]) == 0,
              "%s '%s', want %s (%s %llu)", times[k][1], got, want[3], times[k][0],
              (unsigned long long)json_u64(s0, times[k][0]));
    }
    static const char *const heads[] = {
        "# TYPE vramd_stage_asleep gauge\n",
        "# TYPE vramd_stage_host_bytes gauge\n",
        "# TYPE vramd_stage_sleeps_total counter\n",
        "# TYPE vramd_stage_wakes_total counter\n",
        "# TYPE vramd_stage_sleep_seconds_total counter\n",
        "# TYPE vramd_stage_wake_seconds_total counter\n",
        "# HELP vramd_stage_asleep ",
        "# HELP vramd_stage_host_bytes ",
        "# HELP vramd_stage_sleeps_total ",
        "# HELP vramd_stage_wakes_total ",
        "# HELP vramd_stage_sleep_seconds_total ",
        "# HELP vramd_stage_wake_seconds_total ",
    };
    for (size_t k = 0; k < sizeof(heads) / sizeof(heads[0]); k++)
        CHECK(strstr(out, heads[k]) != NULL, "metrics without '%.*s'",
              (int)strcspn(heads[k], "\n"), heads[k]);
    /* promtool accepts it, where it is installed (ctest metrics_promtool
     * requires it). */
    char path[200], cmd[512];
    snprintf(path, sizeof(path), "%s/metrics.prom", d->dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f, "%s", path);
    fputs(out, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "! command -v promtool >/dev/null || "
             "promtool check metrics <%s >%s.check 2>&1", path, path);
    CHECK(system(cmd) == 0, "promtool check metrics failed; see %s.check", path);
    cJSON_Delete(st);
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    check_table(&d, "-", "-", "0 B");
    check_metrics(&d, "0", 0, 0, 0);

    vram_client *c = connect_client(&d, "sleeper");
    struct vram_stage_info in;
    REQUIRE(vram_stage_register(c, 0, 0, &in) == 0, "register: %s",
            vram_client_last_error(c));
    cJSON *st = daemon_status(&d);
    uint64_t kv = json_u64(status_stage(st, 0), "kv_mapped_bytes");
    cJSON_Delete(st);
    CHECK_EQ_U(kv, 4 * MIB); /* the initial window: 2 chunks */
    check_table(&d, "awake", "-", "4 MiB");
    check_json(&d, false);

    REQUIRE(vram_stage_sleep(c, 0, 0) == 0, "sleep: %s", vram_client_last_error(c));
    st = daemon_status(&d);
    const cJSON *s0 = status_stage(st, 0);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(s0, "asleep")), "status: not asleep");
    uint64_t host = json_u64(s0, "host_bytes");
    cJSON_Delete(st);
    CHECK_EQ_U(host, kv); /* what the window mapped is what its owner keeps */
    check_table(&d, "asleep", "4 MiB", "0 B");
    check_json(&d, true);
    check_metrics(&d, "1", host, 1, 0);
    CHECK(run(&d, "top") == 0 &&
              strstr(out, "\n  asleep  4 MiB kept in host memory by its owner"),
          "top does not show the stage asleep:\n%s", out);

    REQUIRE(vram_stage_wake(c, 0, 0) == 0, "wake: %s", vram_client_last_error(c));
    check_table(&d, "awake", "-", "4 MiB");
    check_json(&d, false);
    check_metrics(&d, "0", 0, 1, 1);
    CHECK(run(&d, "top") == 0 && strstr(out, "STAGE 0") && !strstr(out, "asleep"),
          "top after the wake:\n%s", out);

    vram_client_close(c);
    CHECK(wait_dev_value(&d, 0, "granted_bytes", 0, 5000), "the stage's KV left over");
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_vramctl_sleep");
}
