/* vramctl: table and JSON output, and one clear line when no daemon runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"

static int run(const char *args, char *out, size_t len)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s %s 2>&1",
             getenv("VRAMCTL_BIN") ? getenv("VRAMCTL_BIN") : "vramctl", args);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, len - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void)
{
    static char out[1 << 16];
    char args[256];
    /* No daemon: exit 3 and one line naming the socket. */
    int rc = run("--socket /tmp/vramd-test-none/none.sock status", out, sizeof(out));
    CHECK(rc == 3, "exit %d without a daemon", rc);
    CHECK(strstr(out, "/tmp/vramd-test-none/none.sock") != NULL,
          "error does not name the socket: %s", out);
    CHECK(strchr(out, '\n') == out + strlen(out) - 1, "more than one line: %s", out);
    rc = run("frobnicate", out, sizeof(out));
    CHECK(rc == 2, "unknown command exit %d", rc);

    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    vram_client *c = connect_client(&d, "ctl-test");
    uint32_t stage, region;
    REQUIRE(vram_stage_register_adhoc(c, 1, 32, 47, &stage) == 0, "register");
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_KV, 64 * MIB, 1, &region) == 0, "create");
    REQUIRE(vram_region_grow(c, region, 5) == 0, "grow");

    snprintf(args, sizeof(args), "--socket %s status", d.sock);
    rc = run(args, out, sizeof(out));
    CHECK(rc == 0, "status exit %d: %s", rc, out);
    CHECK(strstr(out, "DEVICE") && strstr(out, "CAPACITY") && strstr(out, "LOANED"),
          "no device table: %s", out);
    CHECK(strstr(out, "16 GiB") != NULL, "capacity not in human units: %s", out);
    CHECK(strstr(out, "ctl-test") != NULL, "client not listed: %s", out);
    CHECK(strstr(out, "32-47") != NULL, "stage layers not listed: %s", out);
    CHECK(strstr(out, "10 MiB") != NULL, "held bytes not shown: %s", out);

    snprintf(args, sizeof(args), "--socket %s status --no-legend", d.sock);
    run(args, out, sizeof(out));
    CHECK(strstr(out, "DEVICE") == NULL, "legend printed with --no-legend");

    snprintf(args, sizeof(args), "--socket %s status --json", d.sock);
    rc = run(args, out, sizeof(out));
    cJSON *j = cJSON_Parse(out);
    CHECK(rc == 0 && j, "json status: %d %.100s", rc, out);
    CHECK_EQ_U(status_dev(j, 1, "granted_bytes"), 10 * MIB);
    cJSON_Delete(j);
    /* The other views. */
    snprintf(args, sizeof(args), "--socket %s clients", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0 && strstr(out, "ctl-test"),
          "clients: %s", out);
    snprintf(args, sizeof(args), "--socket %s stages --json", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "stages --json");
    j = cJSON_Parse(out);
    CHECK(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 1, "stages --json: %s", out);
    cJSON_Delete(j);
    snprintf(args, sizeof(args), "--socket %s loans", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0 && strstr(out, "EXPERT-LOANS"),
          "loans: %s", out);
    snprintf(args, sizeof(args), "--socket %s watch --count 2 --interval 50", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "watch");
    CHECK(strstr(out, "DEVICE") && strstr(strstr(out, "DEVICE") + 1, "DEVICE"),
          "watch did not refresh twice: %s", out);
    /* Metrics: every sample belongs to a metric with HELP and TYPE, and
     * carries a number. */
    snprintf(args, sizeof(args), "--socket %s metrics", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "metrics");
    CHECK(strstr(out, "vramd_device_granted_bytes{device=\"1\",backend=\"host\"} 10485760\n"),
          "granted bytes of device 1 missing: %s", out);
    CHECK(strstr(out, "# TYPE vramd_grants_total counter"), "no counter");
    char *save = NULL, *copy = strdup(out);
    int samples = 0;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#')
            continue;
        samples++;
        char name[128];
        size_t n = strcspn(line, "{ ");
        snprintf(name, sizeof(name), "# TYPE %.*s ", (int)n, line);
        CHECK(strstr(out, name) != NULL, "sample without TYPE: %s", line);
        const char *v = strrchr(line, ' ');
        char *end;
        CHECK(v && (strtod(v + 1, &end), *end == '\0'), "no value: %s", line);
    }
    CHECK(samples > 20, "only %d samples", samples);
    free(copy);
    /* Capacity at run time (root is an admin). */
    snprintf(args, sizeof(args), "--socket %s set-capacity 1 8GiB", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0 && strstr(out, "capacity 8 GiB"),
          "set-capacity: %s", out);
    j = daemon_status(&d);
    CHECK_EQ_U(status_dev(j, 1, "capacity_bytes"), 8 * GIB);
    CHECK_EQ_U(status_dev(j, 1, "free_bytes"), 8 * GIB - 10 * MIB);
    cJSON_Delete(j);
    snprintf(args, sizeof(args), "--socket %s set-capacity 1 32GiB", d.sock);
    CHECK(run(args, out, sizeof(out)) == 1 && strstr(out, "at most 16384 MiB"),
          "over the start size: %s", out);
    snprintf(args, sizeof(args), "--socket %s set-capacity 1 4MiB", d.sock);
    CHECK(run(args, out, sizeof(out)) == 1 && strstr(out, "10 MiB are in use"),
          "under what is in use: %s", out);
    snprintf(args, sizeof(args), "--socket %s set-capacity 1 lots", d.sock);
    CHECK(run(args, out, sizeof(out)) == 2, "bad size accepted");
    /* A decimal unit is refused, never read as GiB. */
    snprintf(args, sizeof(args), "--socket %s set-capacity 1 8GB", d.sock);
    CHECK(run(args, out, sizeof(out)) == 2 && strstr(out, "did you mean GiB"),
          "8GB: %s", out);
    snprintf(args, sizeof(args), "--socket %s set-capacity 1 16GiB", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "back to 16 GiB: %s", out);
    /* Every command has --help; unknown options are refused. */
    const char *cmds[] = {"status", "clients", "stages", "loans", "watch", "metrics",
                          "set-capacity", "evict"};
    for (size_t i = 0; i < 8; i++) {
        snprintf(args, sizeof(args), "%s --help", cmds[i]);
        CHECK(run(args, out, sizeof(out)) == 0 && strstr(out, "Usage: vramctl"),
              "%s --help: %s", cmds[i], out);
    }
    snprintf(args, sizeof(args), "--socket %s metrics --json", d.sock);
    CHECK(run(args, out, sizeof(out)) == 2, "metrics --json accepted");
    /* Same output through a pipe or not: nothing depends on a terminal. */
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_vramctl");
}
