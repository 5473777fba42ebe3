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
    /* Same output through a pipe or not: nothing depends on a terminal. */
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_vramctl");
}
