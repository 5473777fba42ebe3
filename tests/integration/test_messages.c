/* SPDX-License-Identifier: Apache-2.0 */
/* The messages a user meets first: every tool's --version, a failed
 * connect that names the socket (in the library's error text, vramctl's
 * and vram-replay's), re-registering one's own stage, and vram-replay on a
 * scenario that names no stages (the daemon's configured ones are used). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static int run(const char *env, const char *fallback, const char *args,
               char *out, size_t len)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s 2>&1",
             getenv(env) ? getenv(env) : fallback, args);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, len - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char none[] = "/tmp/vramd-test-none/none.sock";

int main(void)
{
    static char out[1 << 16];
    char args[1024];
    /* --version on all three tools: one line with the version. */
    CHECK(run("VRAMD_BIN", "vramd", "--version", out, sizeof(out)) == 0 &&
          strstr(out, VRAM_VERSION), "vramd --version: %s", out);
    CHECK(run("VRAMCTL_BIN", "vramctl", "--version", out, sizeof(out)) == 0 &&
          strstr(out, VRAM_VERSION), "vramctl --version: %s", out);
    CHECK(run("VRAM_REPLAY_BIN", "vram-replay", "--version", out, sizeof(out)) == 0 &&
          strstr(out, VRAM_VERSION), "vram-replay --version: %s", out);

    /* A connect that fails fills opt.error, naming the socket. */
    char err[512] = "";
    struct vram_client_options o = {.name = "x", .error = err,
                                    .error_len = sizeof(err)};
    vram_client *c;
    int e = vram_client_connect(none, &o, &c);
    CHECK(e == -ENOENT, "connect to nothing: %d", e);
    CHECK(strstr(err, none) && strstr(err, "is vramd running"),
          "opt.error: '%s'", err);
    /* vram-replay says where it could not connect. */
    static const char scenario_only[] =
        "{\"scenario\": {\"expert_request_at_start\": true, "
        "\"trim_after_each_step\": true, \"steps\": ["
        "{\"prompt_tokens\": 65536, \"output_tokens\": 1024},"
        "{\"prompt_tokens\": 8192, \"output_tokens\": 1024}]}}";
    char path[256];
    unique_name(path, sizeof(path) - 5, "/tmp/vramd-test-msg");
    strcat(path, ".json");
    FILE *f = fopen(path, "w");
    REQUIRE(f, "scenario file");
    fputs(scenario_only, f);
    fclose(f);
    snprintf(args, sizeof(args), "--socket %s %s", none, path);
    CHECK(run("VRAM_REPLAY_BIN", "vram-replay", args, out, sizeof(out)) == 1 &&
          strstr(out, none), "vram-replay without a daemon: %s", out);

    /* The seed's daemon configuration; the scenario names no stages. */
    char cfgpath[512];
    snprintf(cfgpath, sizeof(cfgpath), "%s/tests/scenarios/seed-pp32-16-1gpu.json",
             getenv("VRAM_SOURCE_DIR") ? getenv("VRAM_SOURCE_DIR") : ".");
    f = fopen(cfgpath, "r");
    REQUIRE(f, "cannot open %s", cfgpath);
    static char cfg[1 << 16];
    cfg[fread(cfg, 1, sizeof(cfg) - 1, f)] = 0;
    fclose(f);
    struct daemon d;
    REQUIRE(daemon_start(&d, cfg, NULL) == 0, "start vramd");
    snprintf(args, sizeof(args), "--socket %s --one-client %s", d.sock, path);
    CHECK(run("VRAM_REPLAY_BIN", "vram-replay", args, out, sizeof(out)) == 0,
          "vram-replay with the daemon's stages: %s", out);
    /* One line per step, both configured stages in each. */
    char *nl = strchr(out, '\n');
    cJSON *step = nl ? (*nl = 0, cJSON_Parse(out)) : NULL;
    CHECK(step && cJSON_GetArraySize(cJSON_GetObjectItem(step, "stages")) == 2,
          "first step: %s", out);
    cJSON_Delete(step);

    /* Re-registering one's own stage says it is one's own. */
    c = connect_client(&d, "msg-test");
    REQUIRE(vram_stage_register(c, 0, 0, NULL) == 0, "register stage 0: %s",
            vram_client_last_error(c));
    e = vram_stage_register(c, 0, 0, NULL);
    CHECK(e == -EEXIST && strstr(vram_client_last_error(c), "already yours"),
          "re-register: %d %s", e, vram_client_last_error(c));
    vram_client *other = connect_client(&d, "msg-other");
    e = vram_stage_register(other, 0, 0, NULL);
    CHECK(e == -EEXIST && strstr(vram_client_last_error(other), "owned by"),
          "someone else's: %d %s", e, vram_client_last_error(other));
    vram_client_close(other);
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    unlink(path);
    return check_report("test_messages");
}
