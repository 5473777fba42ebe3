/* SPDX-License-Identifier: Apache-2.0 */
/* Configuration errors: vramd --check-config and vramd --config name the
 * offending key path for every error, and refuse to start. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* The configuration file run() wrote last (removed once it ran). */
static char last_path[64];

static int run(const char *args, const char *config, char *out, size_t len)
{
    char path[] = "/tmp/vramd-config-XXXXXX";
    int fd = mkstemp(path);
    snprintf(last_path, sizeof(last_path), "%s", path);
    REQUIRE(fd >= 0, "mkstemp");
    REQUIRE(write(fd, config, strlen(config)) == (ssize_t)strlen(config), "write");
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s %s --socket /tmp/vramd-config-unused.sock 2>&1",
             getenv("VRAMD_BIN") ? getenv("VRAMD_BIN") : "vramd", args, path);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, len - 1, p);
    out[n] = 0;
    int st = pclose(p);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void bad(const char *config, const char *const *needles)
{
    static char out[8192];
    int rc = run("--check-config", config, out, sizeof(out));
    CHECK(rc != 0, "accepted: %s", config);
    for (int i = 0; needles[i]; i++)
        CHECK(strstr(out, needles[i]) != NULL, "no '%s' in:\n%s", needles[i], out);
    rc = run("--backend host --config", config, out, sizeof(out));
    CHECK(rc != 0, "vramd started with: %s", config);
    CHECK(strstr(out, needles[0]) != NULL, "start: no '%s' in:\n%s", needles[0], out);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* A JSON syntax error: one line, naming the file once, with the line and
 * column where the text stops being JSON; the same when vramd starts. */
static void syntax(const char *config, const char *where)
{
    static char out[8192];
    const char *modes[] = {"--check-config", "--backend host --config"};
    for (int m = 0; m < 2; m++) {
        int rc = run(modes[m], config, out, sizeof(out));
        CHECK(rc != 0, "%s accepted: %s", modes[m], config);
        CHECK(strstr(out, where) != NULL, "%s: no '%s' in:\n%s", modes[m], where, out);
        CHECK(strstr(out, "not valid JSON") != NULL, "%s: not said to be JSON:\n%s",
              modes[m], out);
        CHECK(count(out, last_path) == 1, "%s: the file %s is not named once:\n%s",
              modes[m], last_path, out);
        if (m == 0)
            CHECK(strchr(out, '\n') == out + strlen(out) - 1, "more than one line:\n%s",
                  out);
    }
}

int main(void)
{
    static char out[8192];
    char scenario[512];
    snprintf(scenario, sizeof(scenario), "--check-config %s/tests/scenarios/seed-pp32-16.json",
             getenv("VRAM_SOURCE_DIR") ? getenv("VRAM_SOURCE_DIR") : ".");
    int rc = run(scenario, "", out, sizeof(out));
    CHECK(rc == 0 && strstr(out, "valid (2 devices, 2 stages)"),
          "the seed scenario does not validate: %s", out);

    bad("{\"devices\": [{\"id\": 0, \"capacity\": \"16 parsecs\"}]}",
        (const char *[]){"devices[0].capacity", NULL});
    bad("{\"devices\": [{\"id\": 0, \"chunk\": \"3MiB\"}]}",
        (const char *[]){"devices[0].chunk", "multiple of 2 MiB", NULL});
    bad("{\"pool\": {\"standby\": \"2 furlongs\"}}",
        (const char *[]){"pool.standby", NULL});
    bad("{\"pool\": {\"standby\": \"8MiB\", \"prefill_chunks\": 4}}",
        (const char *[]){"prefill_chunks and standby", NULL});
    bad("{\"weights\": {\"alloc\": \"3MiB\"}}",
        (const char *[]){"weights.alloc", NULL});
    bad("{\"limits\": {\"weight_sets_per_user\": -1}}",
        (const char *[]){"limits.weight_sets_per_user", NULL});
    bad("{\"access\": {\"weights\": {\"users\": [\"no-such-user-x\"]}}}",
        (const char *[]){"access.weights.users[0]", NULL});
    bad("{\"devices\": [{\"id\": 0}, {\"id\": 0}]}",
        (const char *[]){"devices[1].id", "defined twice", NULL});
    bad("{\"devcies\": []}", (const char *[]){"devcies: unknown key", NULL});
    bad("{\"cuda\": {\"peer_access\": \"never\"}}",
        (const char *[]){"cuda.peer_access", "\"off\"", NULL});
    bad("{\"cuda\": {\"peer_access\": false}}",
        (const char *[]){"cuda.peer_access", NULL});
    rc = run("--check-config", "{\"cuda\": {\"peer_access\": \"off\"}}", out,
             sizeof(out));
    CHECK(rc == 0, "cuda.peer_access \"off\" is refused: %s", out);
    /* Numbers are checked before they are converted: huge, negative and
     * fractional ones are errors (the sanitizer build would report a cast
     * of an out-of-range double). */
    bad("{\"devices\": [{\"id\": 0, \"capacity\": 1e300}]}",
        (const char *[]){"devices[0].capacity", NULL});
    bad("{\"devices\": [{\"id\": 0, \"capacity\": \"16GB\"}]}",
        (const char *[]){"devices[0].capacity", "did you mean GiB", NULL});
    bad("{\"devices\": [{\"id\": 0, \"capacity\": -5}]}",
        (const char *[]){"devices[0].capacity", NULL});
    bad("{\"limits\": {\"clients\": 1e300}}",
        (const char *[]){"limits.clients", NULL});
    bad("{\"access\": {\"allow\": {\"uids\": [1e300]}}}",
        (const char *[]){"access.allow.uids[0]", NULL});
    bad("{\"stages\": [{\"id\": 0, \"device\": 0, \"first_layer\": 0,"
        " \"last_layer\": 3, \"kv_lanes\": [{\"bytes_per_token\": 0}],"
        " \"expert_slot\": \"1MiB\"}]}",
        (const char *[]){"stages[0].kv_lanes[0]", NULL});
    bad("{\"stages\": [{\"id\": 0, \"device\": 5, \"first_layer\": 4,"
        " \"last_layer\": 3, \"kv_lanes\": [528]}]}",
        (const char *[]){"stages[0].device", "stages[0].last_layer",
                         "stages[0].expert_slot", NULL});
    bad("{\"stages\": [{\"id\": 0, \"device\": 0, \"first_layer\": 0,"
        " \"last_layer\": 1, \"kv_lanes\": [528], \"expert_slot\": 1048576,"
        " \"loan\": {\"enabled\": \"yes\", \"hold\": 5}}]}",
        (const char *[]){"stages[0].loan.enabled", "stages[0].loan.hold: unknown key", NULL});
    /* Admission: two windows of 16 lanes x 132 MiB plus 15 GiB of weights
     * do not fit a 16 GiB device. */
    bad("{\"devices\": [{\"id\": 0, \"capacity\": \"16GiB\"}],"
        " \"stages\": [{\"id\": 0, \"device\": 0, \"first_layer\": 0,"
        " \"last_layer\": 1, \"kv_lanes\": [{\"bytes_per_token\": 528, \"count\": 16}],"
        " \"expert_slot\": \"1MiB\", \"fixed\": [{\"name\": \"w\", \"bytes\": \"15GiB\"}]}]}",
        (const char *[]){"stages[0]", "does not fit device 0", NULL});
    /* R17: reservations that weight sets back. */
#define SET_STAGE(fixed)                                                      \
    "{\"stages\": [{\"id\": 0, \"device\": 0, \"first_layer\": 0,"              \
    " \"last_layer\": 1, \"kv_lanes\": [528], \"expert_slot\": \"1MiB\","       \
    " \"fixed\": [" fixed "]}]}"
    bad(SET_STAGE("{\"name\": \"w\", \"bytes\": \"8MiB\", \"set\": \"has space\"},"
                  "{\"name\": \"v\", \"bytes\": \"8MiB\", \"alloc\": \"4MiB\"}"),
        (const char *[]){"stages[0].fixed[0].set: a weight set's name",
                         "stages[0].fixed[1].alloc: only for a reservation that names a set",
                         NULL});
    bad(SET_STAGE("{\"name\": \"w\", \"bytes\": \"8MiB\", \"set\": \"m\","
                  " \"alloc\": \"3MiB\", \"key\": \"abc\"}"),
        (const char *[]){"stages[0].fixed[0].alloc: a multiple of 2 MiB",
                         "stages[0].fixed[0].key: 64 hex digits", NULL});
    bad(SET_STAGE("{\"name\": \"a\", \"bytes\": \"8MiB\", \"set\": \"m\"},"
                  "{\"name\": \"b\", \"bytes\": \"8MiB\", \"set\": \"m\"},"
                  "{\"name\": \"c\", \"bytes\": \"8MiB\", \"set\": \"n\"},"
                  "{\"name\": \"d\", \"bytes\": \"8MiB\", \"set\": \"o\"}"),
        (const char *[]){"stages[0].fixed[1].set: 'm' backs another reservation",
                         "stages[0].fixed[2].set: at most 2 reservations", NULL});
    rc = run("--check-config",
             SET_STAGE("{\"name\": \"w\", \"bytes\": \"20MiB\", \"set\": \"model/s0\","
                       " \"alloc\": \"8MiB\", \"key\": \"" 
                       "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF\"}"),
             out, sizeof(out));
    CHECK(rc == 0, "a reservation that names a set is refused: %s", out);
#undef SET_STAGE
    bad("{\"backend\": \"tpu\"}", (const char *[]){"backend", NULL});
    bad("{\"devices\": [", (const char *[]){"not valid JSON", NULL});
    /* Syntax errors: where, by line and column (in characters). */
    syntax("{\"devices\": [", "line 1, column 14: not valid JSON (the text ends there)");
    syntax("{\n  \"devices\": [\n    {\"id\": 0 \"capacity\": \"16GiB\"}\n  ]\n}\n",
           "line 3, column 14: not valid JSON (at '\"capacity\": \"16GiB\"}')");
    syntax("{\n\t\"backend\": hoste\n}\n", "line 2, column 13: not valid JSON (at 'hoste')");
    syntax("{\"d\xc3\xa9vices\": x}", "line 1, column 13: not valid JSON (at 'x}')");
    syntax("", "line 1, column 1: not valid JSON");
    /* A file that cannot be read is named once too. */
    snprintf(scenario, sizeof(scenario), "%s --check-config /nonexistent/vramd.json 2>&1",
             getenv("VRAMD_BIN") ? getenv("VRAMD_BIN") : "vramd");
    FILE *p = popen(scenario, "r");
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    CHECK(pclose(p) != 0, "a missing file passed");
    CHECK(count(out, "/nonexistent/vramd.json") == 1 && strstr(out, "No such file"),
          "missing file: %s", out);
    bad("{\"address_window\": {\"base\": \"0x123\", \"size\": \"1TiB\"}}",
        (const char *[]){"address_window", NULL});
    return check_report("test_config");
}
