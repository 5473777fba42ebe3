/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl and weight sets (issue 31), with the real vramd and real client
 * processes, vramctl run as a process of its own:
 *  1. Three sets: model/a written and sealed by one process and mapped by
 *     a second (sealed, 2 users), model/b sealed and closed by a process
 *     that exited (cached), model/w being written (its writer named).
 *     vramctl weights shows each with its size, allocation size and count,
 *     key prefix, state, users, writer, owner uid, keep and last use; with
 *     --no-legend no header; --json the catalogue's keys and values.
 *  2. vramctl status shows each device's weights and cached weights, top
 *     (one frame) the same in device 0's bar and legend and none for
 *     device 1; vramctl metrics the same bytes and the hit, miss and
 *     eviction counters, and promtool check metrics passes.
 *  3. weights drop: refused while mapped (exit 1, the daemon's message),
 *     refused for a user who is no admin (exit 4), done once nobody maps
 *     the set; an unknown name exits 1, no name 2.
 *  4. A cached set evicted for an engine's grant: the eviction counted in
 *     the metrics, the set gone from the list.
 *  5. vramctl stages (table and --json) names the client a held KV reserve
 *     waits for, a lender that ignores its recall, and no one once the
 *     hold ended.
 * Needs root (to run vramctl as another user). */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* Device 0 for weight sets (in allocations of 8 MiB), device 1 lent to
 * experts out of memory no stage reserves, with two configured stages. */
static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"256MiB\"},"
    "  {\"id\": 1, \"capacity\": \"512MiB\", \"chunk\": \"2MiB\","
    "   \"lend_unreserved\": true}],"
    " \"pool\": {\"prefill_chunks\": 0},"
    " \"weights\": {\"alloc\": \"8MiB\"},"
    " \"access\": {\"allow\": {\"uids\": [0, 65534]}, \"socket_group\": \"nogroup\","
    "            \"socket_mode\": \"0660\"},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 1, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\","
    "   \"loan\": {\"recall_deadline_ms\": 400, \"hold_ms\": 6000}},"
    "  {\"id\": 1, \"device\": 1, \"first_layer\": 16, \"last_layer\": 31,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\","
    "   \"loan\": {\"recall_deadline_ms\": 400, \"hold_ms\": 6000}}]}";

static const uint8_t key_a[VRAM_WEIGHTS_KEY_BYTES] = {1, 2, 3, 4};
static const uint8_t key_b[VRAM_WEIGHTS_KEY_BYTES] = {0xab, 0xcd, 0xef, 0x09, 7};
static const char key_a_hex[] =
    "0102030400000000000000000000000000000000000000000000000000000000";

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

/* vramctl and libvram copied where any user may run them (the build tree
 * may sit where only root can reach); removed at exit. */
static char public_dir[64];

static void public_remove(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", public_dir);
    if (system(cmd)) {}
}

/* vramctl ARGS as uid in group gid (no other groups): as run(). */
static int run_as(const struct daemon *d, uid_t uid, gid_t gid, const char *args)
{
    if (!public_dir[0]) {
        snprintf(public_dir, sizeof(public_dir), "/tmp/vramctl-public-XXXXXX");
        REQUIRE(mkdtemp(public_dir) && chmod(public_dir, 0755) == 0, "mkdtemp");
        atexit(public_remove);
        char cmd[1024], dir[512];
        snprintf(dir, sizeof(dir), "%s", vramctl());
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        snprintf(cmd, sizeof(cmd), "cp '%s' %s/vramctl && cp -L '%s'/libvram.so.0 "
                 "%s/ && chmod 0755 %s/vramctl", vramctl(), public_dir,
                 slash ? dir : ".", public_dir, public_dir);
        REQUIRE(system(cmd) == 0, "copying vramctl: %s", cmd);
    }
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "LD_LIBRARY_PATH=%s %s/vramctl --socket %s %s 2>&1",
             public_dir, public_dir, d->sock, args);
    int p[2];
    REQUIRE(pipe(p) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        if (setgroups(0, NULL) || setgid(gid) || setuid(uid))
            _exit(125);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < sizeof(out) && (r = read(p[0], out + n, sizeof(out) - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = 0;
    close(p[0]);
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
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
    buf[0] = '\0';
    return NULL;
}

/* The value of column col in row, by the header's layout: from where col's
 * name begins to where the next column's begins, trimmed. */
static const char *cell(const char *header, const char *row, const char *col,
                        char *buf, size_t len)
{
    buf[0] = '\0';
    char word[64];
    snprintf(word, sizeof(word), " %s", col); /* a whole column name */
    const char *h = strncmp(header, col, strlen(col)) == 0 ? header : strstr(header, word);
    if (!h)
        return buf;
    if (h != header)
        h++;
    size_t from = (size_t)(h - header), to = from + strlen(col);
    while (header[to] == ' ')
        to++;
    if (!header[to])
        to = strlen(row) > from ? strlen(row) : from;
    if (strlen(row) <= from)
        return buf;
    snprintf(buf, len, "%.*s", (int)(to - from), row + from);
    for (size_t n = strlen(buf); n && buf[n - 1] == ' '; n--)
        buf[n - 1] = '\0';
    return buf;
}

/* ---- the client processes ---------------------------------------------- */

enum role {
    SEAL_AND_HOLD,  /* open as the writer, fill, seal, keep it mapped */
    OPEN_AND_HOLD,  /* open (a sealed set, or a new one left unsealed) */
    SEAL_AND_CLOSE, /* write, seal, close, exit: the set stays cached */
};

struct job {
    struct rendezvous rv;
    const char *name;
    uint64_t bytes;
    const uint8_t *key;
    enum role role;
};

/* Reports its client id, then (holding) waits for a word to exit. */
static int set_client(const struct daemon *d, void *arg)
{
    struct job *j = arg;
    check_failures = 0;
    vram_client *c = connect_client(d, j->name);
    struct vram_weights_info w;
    REQUIRE(vram_weights_open(c, j->name, 0, j->bytes, j->key, 0, &w) == 0,
            "open %s: %s", j->name, vram_client_last_error(c));
    if (j->role != OPEN_AND_HOLD) {
        REQUIRE(w.writer, "%s: not its writer", j->name);
        fill_pattern((void *)(uintptr_t)w.base, j->bytes, 5);
        REQUIRE(vram_weights_seal(c, w.id) == 0, "seal %s: %s", j->name,
                vram_client_last_error(c));
    }
    if (j->role == SEAL_AND_CLOSE)
        REQUIRE(vram_weights_close(c, w.id) == 0, "close %s", j->name);
    rv_send(j->rv.to_parent[1], vram_client_id(c));
    if (j->role != SEAL_AND_CLOSE)
        rv_recv(j->rv.to_child[0]);
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

static pid_t start_job(const struct daemon *d, struct job *j, uint32_t *id)
{
    rv_init(&j->rv);
    pid_t pid = spawn(set_client, d, j);
    *id = (uint32_t)rv_recv(j->rv.to_parent[0]);
    REQUIRE(*id > 0, "%s's client did not start", j->name);
    return pid;
}

/* A lender: stage 0's owner takes every loan of device 1, reports its id,
 * then stops reading its connection (it answers no recall) until told to
 * exit. */
static int lender(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    check_failures = 0;
    vram_client *c = connect_client(d, "lender");
    struct vram_stage_info in;
    REQUIRE(vram_stage_register(c, 0, 0, &in) == 0, "lender register: %s",
            vram_client_last_error(c));
    REQUIRE(vram_expert_request(c, 0, 0) == 0, "lender loans: %s",
            vram_client_last_error(c));
    rv_send(rv->to_parent[1], vram_client_id(c));
    rv_recv(rv->to_child[0]);
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

/* Stage 1's engine: a long prompt that needs the lender's loans back, held
 * until the stage's hold bound. Exits 0 when it timed out so. */
static int borrower(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    check_failures = 0;
    vram_client *c = connect_client(d, "borrower");
    struct vram_stage_info in;
    REQUIRE(vram_stage_register(c, 1, 0, &in) == 0, "borrower register: %s",
            vram_client_last_error(c));
    rv_send(rv->to_parent[1], 1);
    struct vram_kv_result r;
    int e = vram_kv_reserve(c, 1, 100000, 1000, VRAM_KV_HOLD, &r);
    CHECK(e == -ETIMEDOUT, "the held reserve: %d %s", e, vram_client_last_error(c));
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

/* ---- the checks ------------------------------------------------------- */

static const cJSON *set_named(const cJSON *list, const char *name)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, list) {
        const char *n = cJSON_GetStringValue(cJSON_GetObjectItem(s, "name"));
        if (n && strcmp(n, name) == 0)
            return s;
    }
    return NULL;
}

static const char *str_of(const cJSON *o, const char *key)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, key));
    return s ? s : "";
}

/* One set's row of vramctl weights: its cells, by the header. */
static void check_row(const char *table, const char *name, const char *size,
                      const char *alloc, const char *allocs, const char *key,
                      const char *state, const char *users, const char *writer)
{
    char hd[512], rw[512], v[64], start[80];
    snprintf(start, sizeof(start), "%s ", name);
    CHECK(line_starting(table, "NAME ", hd, sizeof(hd)) &&
              line_starting(table, start, rw, sizeof(rw)),
          "no row for %s:\n%s", name, table);
    struct {
        const char *col, *want;
    } c[] = {{"NAME", name},      {"DEVICE", "0"},    {"SIZE", size},
             {"ALLOC-SIZE", alloc}, {"ALLOCATIONS", allocs}, {"KEY", key},
             {"STATE", state},     {"USERS", users},  {"WRITER", writer},
             {"OWNER-UID", "0"},   {"KEEP", "no"}};
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
        CHECK(strcmp(cell(hd, rw, c[i].col, v, sizeof(v)), c[i].want) == 0,
              "%s's %s: '%s', not '%s' in\n%s\n%s", name, c[i].col, v, c[i].want,
              hd, rw);
    /* Used seconds ago: "12s ago" (a minute on a machine very slow). */
    cell(hd, rw, "LAST-USE", v, sizeof(v));
    size_t digits = strspn(v, "0123456789");
    CHECK(digits > 0 && (strcmp(v + digits, "s ago") == 0 ||
                         strcmp(v + digits, "m ago") == 0),
          "%s's last use: '%s'", name, v);
}

/* The sample of a series (its name and labels as the text has them), or
 * -1 when it has none. */
static long long sample(const char *text, const char *series)
{
    char want[256];
    snprintf(want, sizeof(want), "\n%s ", series);
    const char *p = strstr(text, want);
    return p ? atoll(p + strlen(want)) : -1;
}

static void check_metrics(const struct daemon *d, long long weights,
                          long long cached, long long hits, long long misses,
                          long long evictions)
{
    CHECK(run(d, "metrics") == 0, "metrics: %s", out);
    CHECK(sample(out, "vramd_device_weights_bytes{device=\"0\",backend=\"host\"}") ==
              weights, "weights bytes: want %lld in\n%s", weights, out);
    CHECK(sample(out, "vramd_device_weights_cached_bytes{device=\"0\",backend=\"host\"}") ==
              cached, "cached weights: want %lld", cached);
    CHECK(sample(out, "vramd_device_weights_bytes{device=\"1\",backend=\"host\"}") == 0,
          "device 1 has no weight sets");
    CHECK(sample(out, "vramd_weights_hits_total") == hits, "hits: want %lld", hits);
    CHECK(sample(out, "vramd_weights_misses_total") == misses, "misses: want %lld",
          misses);
    CHECK(sample(out, "vramd_weights_evictions_total") == evictions,
          "evictions: want %lld", evictions);
    CHECK(strstr(out, "# TYPE vramd_weights_evictions_total counter\n") &&
              strstr(out, "# TYPE vramd_device_weights_cached_bytes gauge\n") &&
              strstr(out, "# HELP vramd_weights_hits_total "),
          "the weights series without HELP or TYPE");
    /* promtool accepts it (as ctest metrics_promtool does the replay's). */
    char path[200], cmd[512];
    snprintf(path, sizeof(path), "%s/metrics.prom", d->dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f, "%s", path);
    fputs(out, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "command -v promtool >/dev/null && "
             "promtool check metrics <%s >%s.check 2>&1", path, path);
    CHECK(system(cmd) == 0, "promtool check metrics failed (or promtool is not "
          "installed: apt-get install prometheus); see %s.check", path);
}

int main(void)
{
    REQUIRE(geteuid() == 0, "this test needs root to run vramctl as another user");
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    chmod(d.dir, 0755); /* another user may reach the socket */
    struct group *ng = getgrnam("nogroup");
    gid_t nogroup = ng ? ng->gr_gid : 65534;
    char hd[512], rw[512], v[64];

    /* ---- 1. three sets, three states ---- */
    CHECK(run(&d, "weights") == 0 && strstr(out, "NAME ") &&
              !strchr(strchr(out, '\n') + 1, '\n'),
          "weights with no set: a header only: %s", out);
    uint32_t a_writer, a_reader, b_id, w_writer;
    struct job a = {.name = "model/a", .bytes = 20 * MIB, .key = key_a,
                    .role = SEAL_AND_HOLD};
    pid_t pa = start_job(&d, &a, &a_writer);
    struct job ar = {.name = "model/a", .bytes = 20 * MIB, .key = key_a,
                     .role = OPEN_AND_HOLD};
    pid_t par = start_job(&d, &ar, &a_reader);
    struct job b = {.name = "model/b", .bytes = 8 * MIB, .key = key_b,
                    .role = SEAL_AND_CLOSE};
    pid_t pb = start_job(&d, &b, &b_id);
    CHECK(wait_child(pb) == 0, "model/b's writer");
    struct job w = {.name = "model/w", .bytes = 16 * MIB, .key = key_a,
                    .role = OPEN_AND_HOLD};
    pid_t pw = start_job(&d, &w, &w_writer);
    /* model/b's user went with its process: cached. */
    CHECK(wait_dev_value(&d, 0, "weights_cached_bytes", 8 * MIB, 5000),
          "model/b is not cached");

    CHECK(run(&d, "weights") == 0, "weights: %s", out);
    CHECK(trailing_space(out) == NULL, "a line ends in a space:\n%s", out);
    char wid[16];
    snprintf(wid, sizeof(wid), "%u", w_writer);
    check_row(out, "model/a", "20 MiB", "8 MiB", "3", "01020304", "sealed", "2", "-");
    check_row(out, "model/b", "8 MiB", "8 MiB", "1", "abcdef09", "cached", "0", "-");
    check_row(out, "model/w", "16 MiB", "8 MiB", "2", "01020304", "writing", "1", wid);
    CHECK(run(&d, "weights --no-legend") == 0 && !strstr(out, "NAME") &&
              strstr(out, "model/a ") && trailing_space(out) == NULL,
          "weights --no-legend: %s", out);

    CHECK(run(&d, "weights --json") == 0, "weights --json: %s", out);
    cJSON *doc = cJSON_Parse(out);
    const cJSON *j = cJSON_GetObjectItem(doc, "sets");
    CHECK(json_u64(doc, "schema") == 1 && cJSON_IsArray(j) && cJSON_GetArraySize(j) == 3,
          "weights --json: %s", out);
    const cJSON *sa = set_named(j, "model/a"), *sb = set_named(j, "model/b"),
                *sw = set_named(j, "model/w");
    CHECK(sa && json_u64(sa, "bytes") == 20 * MIB && json_u64(sa, "alloc_bytes") == 8 * MIB &&
              json_u64(sa, "allocs") == 3 && json_u64(sa, "device") == 0 &&
              strcmp(str_of(sa, "key"), key_a_hex) == 0 &&
              strcmp(str_of(sa, "state"), "sealed") == 0 && json_u64(sa, "users") == 2 &&
              json_u64(sa, "owner") == 0 && cJSON_IsFalse(cJSON_GetObjectItem(sa, "keep")) &&
              !cJSON_GetObjectItem(sa, "writer") && json_u64(sa, "sealed_ms") > 0 &&
              json_u64(sa, "last_use_ms") >= json_u64(sa, "sealed_ms") &&
              json_u64(sa, "sealed_ms") >= json_u64(sa, "created_ms") &&
              json_u64(sa, "id") > 0,
          "model/a in JSON: %s", out);
    CHECK(sb && strcmp(str_of(sb, "state"), "cached") == 0 && json_u64(sb, "users") == 0 &&
              strncmp(str_of(sb, "key"), "abcdef0907", 10) == 0 &&
              json_u64(sb, "bytes") == 8 * MIB && json_u64(sb, "allocs") == 1,
          "model/b in JSON: %s", out);
    CHECK(sw && strcmp(str_of(sw, "state"), "writing") == 0 &&
              json_u64(sw, "writer") == w_writer && json_u64(sw, "users") == 1 &&
              !cJSON_GetObjectItem(sw, "sealed_ms"),
          "model/w in JSON: %s", out);
    /* The catalogue's keys, none of the table's. */
    CHECK(!strstr(out, "ALLOC-SIZE") && !strstr(out, "LAST-USE"), "table names in JSON");
    cJSON_Delete(doc);

    /* ---- 2. status and metrics ---- */
    CHECK(run(&d, "status") == 0, "status: %s", out);
    CHECK(line_starting(out, "DEVICE BACKEND", hd, sizeof(hd)) &&
              line_starting(out, "0 ", rw, sizeof(rw)),
          "no device table: %s", out);
    /* 24 + 8 + 16 MiB charged, model/b's 8 cached. */
    CHECK(strcmp(cell(hd, rw, "WEIGHTS", v, sizeof(v)), "48 MiB") == 0,
          "device 0's weights: '%s' in\n%s\n%s", v, hd, rw);
    CHECK(strcmp(cell(hd, rw, "WEIGHTS-CACHED", v, sizeof(v)), "8 MiB") == 0,
          "device 0's cached weights: '%s'", v);
    CHECK(line_starting(out, "1 ", rw, sizeof(rw)) &&
              strcmp(cell(hd, rw, "WEIGHTS", v, sizeof(v)), "0 B") == 0,
          "device 1's weights: '%s'", v);
    CHECK(trailing_space(out) == NULL, "status: a line ends in a space");
    CHECK(run(&d, "top") == 0, "top: %s", out);
    {
        /* 48 of 256 MiB: that share of the bar's cells (its width is the
         * frame's, $COLUMNS or 80), the larger remainder rounding up. */
        const char *d0 = strstr(out, "DEVICE 0 "), *d1 = strstr(out, "DEVICE 1 ");
        CHECK(d0 && d1 && strstr(d0, "  w weights 48 MiB (8 MiB cached)  + loaned") &&
                  strstr(d0, "  w weights") < d1 && !strstr(d1, "w weights"),
              "top's weights:\n%s", out);
        const char *bar = d0 ? strstr(d0, "\n  [") : NULL;
        size_t cells = 0, all = 0;
        for (const char *p = bar ? bar + 4 : ""; *p == 'w' || *p == '.'; p++, all++)
            cells += *p == 'w';
        size_t want = all * 48 / 256 + (all * 48 % 256 * 2 >= 256);
        CHECK(all >= 10 && cells == want, "device 0's bar has %zu of %zu cells of "
              "weights, not %zu:\n%s", cells, all, want, out);
    }
    /* Three sets made (misses), one opened as it was (a hit). */
    check_metrics(&d, 48 * MIB, 8 * MIB, 1, 3, 0);

    /* ---- 3. weights drop ---- */
    CHECK(run(&d, "weights drop model/a") == 1 && strstr(out, "mapped by 2 clients"),
          "dropping a mapped set: %s", out);
    CHECK(run_as(&d, 65534, nogroup, "weights drop model/b") == 4 &&
              strstr(out, "access.admin"),
          "a drop by a user who is no admin: %s", out);
    CHECK(run_as(&d, 65534, nogroup, "weights") == 0 && strstr(out, "model/b "),
          "another user's list: %s", out);
    CHECK(run(&d, "weights drop no/such") == 1 && strstr(out, "no weight set 'no/such'"),
          "an unknown set: %s", out);
    CHECK(run(&d, "weights drop") == 2, "no name: %s", out);
    CHECK(run(&d, "weights drop --help") == 0 && strstr(out, "weights drop NAME") &&
              strstr(out, "4 not allowed"),
          "weights drop --help: %s", out);
    CHECK(run(&d, "weights --help") == 0 && strstr(out, "--no-legend"),
          "weights --help: %s", out);
    rv_send(a.rv.to_child[1], 1);
    rv_send(ar.rv.to_child[1], 1);
    CHECK(wait_child(pa) == 0 && wait_child(par) == 0, "model/a's clients");
    CHECK(wait_dev_value(&d, 0, "weights_cached_bytes", 32 * MIB, 5000),
          "model/a is not cached after its users left");
    CHECK(run(&d, "weights drop model/a") == 0 && strstr(out, "weight set model/a dropped"),
          "dropping a set nobody maps: %s", out);
    CHECK(run(&d, "weights") == 0 && !strstr(out, "model/a") && strstr(out, "model/b "),
          "model/a still listed: %s", out);

    /* ---- 4. an eviction: an engine's grant takes model/b's room ---- */
    /* 256 MiB less 24 of sets leaves 232 (116 chunks); 120 need b's 8. */
    vram_client *e = connect_client(&d, "engine");
    uint32_t st, rg;
    REQUIRE(vram_stage_register_adhoc(e, 0, 0, 1, &st) == 0, "stage");
    REQUIRE(vram_region_create(e, st, VRAM_REGION_FIXED, 256 * MIB, 1, &rg) == 0,
            "region: %s", vram_client_last_error(e));
    CHECK(vram_region_grow(e, rg, 120) == 0, "a grant that needs room: %s",
          vram_client_last_error(e));
    check_metrics(&d, 16 * MIB, 0, 1, 3, 1);
    CHECK(run(&d, "weights") == 0 && !strstr(out, "model/b") && strstr(out, "model/w "),
          "the evicted set still listed: %s", out);
    CHECK(vram_region_release(e, rg) == 0, "release");
    vram_client_close(e);
    rv_send(w.rv.to_child[1], 1);
    CHECK(wait_child(pw) == 0, "model/w's writer");
    CHECK(wait_dev_value(&d, 0, "weights_bytes", 0, 5000),
          "model/w, never sealed, outlived its writer");

    /* ---- 5. a stage blocked by a lender that ignores its recall ---- */
    struct rendezvous lr, br;
    rv_init(&lr);
    rv_init(&br);
    pid_t pl = spawn(lender, &d, &lr);
    uint32_t lender_id = (uint32_t)rv_recv(lr.to_parent[0]);
    REQUIRE(lender_id > 0, "the lender did not start");
    pid_t pbw = spawn(borrower, &d, &br);
    rv_recv(br.to_parent[0]);
    char want[32];
    snprintf(want, sizeof(want), "client %u", lender_id);
    bool table = false, json = false, ended = false;
    int bst = 0;
    /* While the borrower's reserve is held (6 s): polled, no fixed wait. */
    while (!(table && json) && !ended) {
        if (!table && run(&d, "stages") == 0 &&
            line_starting(out, "STAGE ", hd, sizeof(hd)) &&
            line_starting(out, "1 ", rw, sizeof(rw)))
            table = strcmp(cell(hd, rw, "BLOCKED-BY", v, sizeof(v)), want) == 0;
        if (!json && run(&d, "stages --json") == 0) {
            cJSON *sj = cJSON_Parse(out);
            const cJSON *s1;
            cJSON_ArrayForEach(s1, cJSON_GetObjectItem(sj, "stages"))
                if (json_u64(s1, "id") == 1 && cJSON_GetObjectItem(s1, "blocked_by"))
                    json = json_u64(s1, "blocked_by") == lender_id;
            cJSON_Delete(sj);
        }
        ended = waitpid(pbw, &bst, WNOHANG) == pbw;
        if (!(table && json) && !ended)
            poll(NULL, 0, 20);
    }
    CHECK(table, "vramctl stages never showed stage 1 blocked by %s:\n%s", want, out);
    CHECK(json, "vramctl stages --json never showed blocked_by %u", lender_id);
    CHECK(ended ? WIFEXITED(bst) && WEXITSTATUS(bst) == 0 : wait_child(pbw) == 0,
          "the borrower");
    CHECK(run(&d, "stages") == 0 && line_starting(out, "STAGE ", hd, sizeof(hd)) &&
              line_starting(out, "1 ", rw, sizeof(rw)) &&
              strcmp(cell(hd, rw, "BLOCKED-BY", v, sizeof(v)), "-") == 0 &&
              line_starting(out, "0 ", rw, sizeof(rw)) &&
              strcmp(cell(hd, rw, "BLOCKED-BY", v, sizeof(v)), "-") == 0,
          "blocked-by once the hold ended: %s", out);
    CHECK(trailing_space(out) == NULL, "stages: a line ends in a space");
    rv_send(lr.to_child[1], 1);
    CHECK(wait_child(pl) == 0, "the lender");

    CHECK(wait_dev_value(&d, 1, "loaned_bytes", 0, 5000), "loans left over");
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_vramctl_weights");
}
