/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl: table and JSON output, and one clear line when no daemon runs;
 * tables without trailing spaces, with units on counts, reserved bytes per
 * device, quarantined clients (awaiting resume) with their bytes; --help
 * and the man page; exit 4 (not allowed) apart from 3 (no daemon); and
 * vram-replay's table and --help. Parts run vramctl as other users (root
 * is needed, as for test_access). */
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"
#include "proto/units.h"

static const char *vramctl(void)
{
    return getenv("VRAMCTL_BIN") ? getenv("VRAMCTL_BIN") : "vramctl";
}

static const char *replay(void)
{
    return getenv("VRAM_REPLAY_BIN") ? getenv("VRAM_REPLAY_BIN") : "vram-replay";
}

static int run(const char *args, char *out, size_t len)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s %s 2>&1", vramctl(), args);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, len - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* vramctl and libvram copied where any user may run them: the build tree
 * may sit where only root can reach (a clone in /root). Removed at exit. */
static char public_dir[64];

static void public_remove(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", public_dir);
    if (system(cmd)) {}
}

static const char *public_vramctl(void)
{
    static char bin[256];
    if (bin[0])
        return bin;
    snprintf(public_dir, sizeof(public_dir), "/tmp/vramctl-public-XXXXXX");
    REQUIRE(mkdtemp(public_dir), "mkdtemp");
    REQUIRE(chmod(public_dir, 0755) == 0, "chmod");
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
    snprintf(bin, sizeof(bin), "LD_LIBRARY_PATH=%s %s/vramctl", public_dir,
             public_dir);
    return bin;
}

/* vramctl ARGS as uid and gid (no other groups): its exit status (125: the
 * identity could not be taken), its standard output and error in out. */
static int run_as(uid_t uid, gid_t gid, const char *args, char *out, size_t len)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s %s", public_vramctl(), args);
    int p[2];
    REQUIRE(pipe(p) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
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
    while (n + 1 < len && (r = read(p[0], out + n, len - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = 0;
    close(p[0]);
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A line of out ending in a space (table rows are trimmed), or NULL. */
static const char *trailing_space(const char *out)
{
    for (const char *l = out; *l; ) {
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

#define CHECK_TRIMMED(out, what)                                               \
    do {                                                                       \
        const char *ts_ = trailing_space(out);                                 \
        CHECK(ts_ == NULL, "%s: a line ends in a space: '%.*s'", what,         \
              (int)strcspn(ts_ ? ts_ : "", "\n"), ts_ ? ts_ : "");             \
    } while (0)

/* The line of out that begins with start (copied into buf), or NULL. */
static const char *line_starting(const char *out, const char *start, char *buf,
                                 size_t len)
{
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
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
    const char *h = strstr(header, col);
    if (!h)
        return buf;
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

/* A man page's section, from ".SH NAME" to the next ".SH". */
static char *man_section(const char *page, const char *name, char *buf, size_t len)
{
    char head[64];
    snprintf(head, sizeof(head), ".SH %s\n", name);
    const char *s = strstr(page, head);
    if (!s) {
        buf[0] = '\0';
        return buf;
    }
    const char *e = strstr(s + strlen(head), "\n.SH ");
    snprintf(buf, len, "%.*s", (int)(e ? e - s : (long)strlen(s)), s);
    return buf;
}

/* An engine that holds 3 chunks on device 1 of d, then, while vramd is
 * stopped and started again, stays away (quarantined, awaiting its
 * resume) until told to exit. */
static int held_engine(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    check_failures = 0; /* its exit status: its own checks, not the parent's */
    vram_client *c = connect_client(d, "held-engine");
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, 1, 0, 1, &st) == 0, "register: %s",
            vram_client_last_error(c));
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 16 * MIB, 1, &r) == 0,
            "region");
    REQUIRE(vram_region_grow(c, r, 3) == 0, "grow");
    rv_send(rv->to_parent[1], vram_client_id(c));
    rv_recv(rv->to_child[0]);
    return 0; /* gone without a word: its memory is freed with the process */
}

static void second_daemon(void);

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
    CHECK(strstr(out, "vramctl: no vramd at /tmp/vramd-test-none/none.sock (is it "
                      "running? VRAM_SOCKET") != NULL,
          "the error does not ask whether vramd runs: %s", out);
    rc = run("frobnicate", out, sizeof(out));
    CHECK(rc == 2, "unknown command exit %d", rc);
    rc = run("--timeout 0 status", out, sizeof(out));
    CHECK(rc == 2 && strstr(out, "--timeout '0': milliseconds"), "--timeout 0: %d %s",
          rc, out);

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
    /* Rows end where their last value does; counts say what they count;
     * reserved bytes per device; quarantined bytes per client. */
    CHECK_TRIMMED(out, "status");
    {
        char hd[512], rw[512], v[64];
        CHECK(line_starting(out, "DEVICE BACKEND", hd, sizeof(hd)) &&
              strstr(hd, " RESERVED ") && line_starting(out, "1 ", rw, sizeof(rw)),
              "no RESERVED column: %s", out);
        CHECK(strcmp(cell(hd, rw, "RESERVED", v, sizeof(v)), "0 B") == 0,
              "device 1 reserved: '%s'", v);
        CHECK(strcmp(cell(hd, rw, "GRANTED", v, sizeof(v)), "10 MiB") == 0,
              "device 1 granted: '%s'", v);
        /* The pool made ahead (the host backend keeps 16 chunks of 2 MiB;
         * the grant above may have taken some that are not back yet). */
        const char *dn = strstr(out, "\nDEVICE NAME");
        CHECK(dn && line_starting(dn + 1, "DEVICE NAME", hd, sizeof(hd)) &&
              strstr(hd, " POOL "), "no POOL column: %s", out);
        if (dn) {
            const char *row = strchr(dn + 1, '\n');
            snprintf(rw, sizeof(rw), "%.*s", row ? (int)strcspn(row + 1, "\n") : 0,
                     row ? row + 1 : "");
            cell(hd, rw, "POOL", v, sizeof(v));
            bool ok = strcmp(v, "0 B") == 0;
            for (int n = 1; n <= 16 && !ok; n++) {
                char want[32];
                snprintf(want, sizeof(want), "%d MiB", 2 * n);
                ok = strcmp(v, want) == 0;
            }
            CHECK(ok, "device 0's pool: '%s' in '%s'", v, rw);
        }
        CHECK(line_starting(out, "STAGE ", hd, sizeof(hd)) &&
              strstr(hd, " BACKED-SLOTS ") && strstr(hd, " RECALLING-CHUNKS"),
              "stage counts without their unit: %s", hd);
        CHECK(strstr(out, " SLOTS ") == NULL && strstr(out, " RECALLS") == NULL,
              "a bare count column: %s", out);
        CHECK(line_starting(out, "CLIENT ", hd, sizeof(hd)) &&
              strstr(hd, " QUARANTINED "), "no QUARANTINED column for clients: %s", out);
        /* ctl-test's row, from the beginning of its line. */
        const char *at = strstr(out, "ctl-test");
        while (at && at > out && at[-1] != '\n')
            at--;
        snprintf(rw, sizeof(rw), "%.*s", at ? (int)strcspn(at, "\n") : 0, at ? at : "");
        CHECK(strcmp(cell(hd, rw, "NAME", v, sizeof(v)), "ctl-test") == 0 &&
              strcmp(cell(hd, rw, "HELD", v, sizeof(v)), "10 MiB") == 0 &&
              strcmp(cell(hd, rw, "QUARANTINED", v, sizeof(v)), "0 B") == 0,
              "client row: '%s' under '%s'", rw, hd);
    }

    snprintf(args, sizeof(args), "--socket %s status --no-legend", d.sock);
    run(args, out, sizeof(out));
    CHECK(strstr(out, "DEVICE") == NULL, "legend printed with --no-legend");
    CHECK_TRIMMED(out, "status --no-legend");

    snprintf(args, sizeof(args), "--socket %s status --json", d.sock);
    rc = run(args, out, sizeof(out));
    cJSON *j = cJSON_Parse(out);
    CHECK(rc == 0 && j, "json status: %d %.100s", rc, out);
    CHECK_EQ_U(status_dev(j, 1, "granted_bytes"), 10 * MIB);
    /* The JSON keeps the catalogue's keys (no table names in it). */
    CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "devices"), 1),
                              "reserved_bytes") &&
          !strstr(out, "RESERVED") && !strstr(out, "BACKED-SLOTS"),
          "status --json changed: %.200s", out);
    cJSON_Delete(j);
    /* The other views. */
    snprintf(args, sizeof(args), "--socket %s clients", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0 && strstr(out, "ctl-test"),
          "clients: %s", out);
    CHECK_TRIMMED(out, "clients");
    snprintf(args, sizeof(args), "--socket %s clients --json", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "clients --json");
    j = cJSON_Parse(out);
    CHECK(json_u64(j, "schema") == 1, "clients --json has no schema 1: %.100s", out);
    {
        const cJSON *cl, *mine = NULL;
        cJSON_ArrayForEach(cl, cJSON_GetObjectItem(j, "clients")) {
            const char *n = cJSON_GetStringValue(cJSON_GetObjectItem(cl, "name"));
            if (n && strcmp(n, "ctl-test") == 0)
                mine = cl;
        }
        CHECK(mine && cJSON_GetObjectItem(mine, "quarantined_bytes") &&
              json_u64(mine, "held_bytes") == 10 * MIB &&
              !cJSON_GetObjectItem(mine, "QUARANTINED"),
              "clients --json: %.300s", out);
    }
    cJSON_Delete(j);
    snprintf(args, sizeof(args), "--socket %s stages", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0 && strstr(out, "32-47"), "stages: %s", out);
    CHECK_TRIMMED(out, "stages");
    snprintf(args, sizeof(args), "--socket %s stages --json", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "stages --json");
    j = cJSON_Parse(out);
    CHECK(json_u64(j, "schema") == 1 &&
              cJSON_IsArray(cJSON_GetObjectItem(j, "stages")) &&
              cJSON_GetArraySize(cJSON_GetObjectItem(j, "stages")) == 1,
          "stages --json: %s", out);
    cJSON_Delete(j);
    snprintf(args, sizeof(args), "--socket %s loans", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0 && strstr(out, "EXPERT-LOANS") &&
          strstr(out, " SLOT-SIZE ") && strstr(out, " BACKED-SLOTS ") &&
          strstr(out, " RECALLING-CHUNKS "), "loans: %s", out);
    CHECK_TRIMMED(out, "loans");
    snprintf(args, sizeof(args), "--socket %s watch --count 2 --interval 50", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "watch");
    CHECK(strstr(out, "DEVICE") && strstr(strstr(out, "DEVICE") + 1, "DEVICE"),
          "watch did not refresh twice: %s", out);
    CHECK_TRIMMED(out, "watch");
    snprintf(args, sizeof(args), "--socket %s watch --count 1 --no-legend", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0 && !strstr(out, "DEVICE") &&
          strstr(out, "ctl-test"), "watch --no-legend: %s", out);
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
    snprintf(args, sizeof(args), "--socket %s --timeout 30000 status", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "status with --timeout: %s", out);
    snprintf(args, sizeof(args), "--socket %s set-capacity 1 lots", d.sock);
    CHECK(run(args, out, sizeof(out)) == 2, "bad size accepted");
    /* A decimal unit is refused, never read as GiB. */
    snprintf(args, sizeof(args), "--socket %s set-capacity 1 8GB", d.sock);
    CHECK(run(args, out, sizeof(out)) == 2 && strstr(out, "did you mean 8GiB?"),
          "8GB: %s", out);
    snprintf(args, sizeof(args), "--socket %s set-capacity 1 16GiB", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "back to 16 GiB: %s", out);
    /* A size in two words, global options after the command, --json
     * before it. */
    snprintf(args, sizeof(args), "set-capacity 1 16 GiB --socket %s", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "'16 GiB' with the socket after: %s", out);
    snprintf(args, sizeof(args), "--socket %s set-capacity 1 16 GB", d.sock);
    CHECK(run(args, out, sizeof(out)) == 2 && strstr(out, "'16 GB'") &&
              strstr(out, "did you mean 16GiB?"), "'16 GB': %s", out);
    snprintf(args, sizeof(args), "--json --socket %s status", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0 && out[0] == '{', "--json before the "
          "command: %.200s", out);
    snprintf(args, sizeof(args), "--json --socket %s evict 5", d.sock);
    CHECK(run(args, out, sizeof(out)) == 2 && strstr(out, "evict: no --json option"),
          "--json before a command without it: %s", out);
    snprintf(args, sizeof(args), "status --timeout 30000 --socket=%s --no-legend", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "--timeout and --socket= after the "
          "command: %s", out);
    /* Every command has --help; unknown options are refused. */
    const char *cmds[] = {"status", "clients", "stages", "loans", "watch", "weights",
                          "metrics", "set-capacity", "evict", "weights drop"};
    for (size_t i = 0; i < 10; i++) {
        snprintf(args, sizeof(args), "%s --help", cmds[i]);
        CHECK(run(args, out, sizeof(out)) == 0 && strstr(out, "Usage: vramctl"),
              "%s --help: %s", cmds[i], out);
        /* --no-legend is explained where it applies (the tables). */
        bool tables = i < 6;
        const char *opts = strstr(out, "Options:");
        CHECK(tables == (opts && strstr(opts, "--no-legend") &&
                         strstr(opts, "header lines")),
              "%s --help and --no-legend: %s", cmds[i], out);
        CHECK(strstr(out, "\n  4 not allowed: ") && strstr(out, "\n  5 protocol "),
              "%s --help: no exit statuses 4 and 5: %s", cmds[i], out);
        CHECK_TRIMMED(out, cmds[i]);
    }
    CHECK(run("--help", out, sizeof(out)) == 0, "--help");
    {
        const char *opts = strstr(out, "Options:");
        CHECK(opts && strstr(opts, "--no-legend") && strstr(opts, "--json"),
              "--help does not explain --no-legend and --json: %s", out);
        CHECK(strstr(out, "\n  3 no daemon ") && strstr(out, "\n  4 not allowed: ") &&
                  strstr(out, "\n  5 protocol "),
              "--help: exit statuses: %s", out);
        CHECK_TRIMMED(out, "--help");
    }
    /* The man page says the same. */
    {
        char path[512];
        snprintf(path, sizeof(path), "%s/man/vramctl.1",
                 getenv("VRAM_SOURCE_DIR") ? getenv("VRAM_SOURCE_DIR") : ".");
        FILE *f = fopen(path, "r");
        CHECK(f != NULL, "no %s", path);
        static char page[1 << 15], sec[1 << 14];
        size_t n = f ? fread(page, 1, sizeof(page) - 1, f) : 0;
        page[n] = 0;
        if (f)
            fclose(f);
        man_section(page, "OPTIONS", sec, sizeof(sec));
        CHECK(strstr(sec, "\\-\\-no\\-legend") && strstr(sec, "\\-\\-json"),
              "vramctl.1 OPTIONS without --no-legend and --json:\n%s", sec);
        man_section(page, "EXIT STATUS", sec, sizeof(sec));
        CHECK(strstr(sec, ".B 3\nNo daemon") && strstr(sec, ".B 4\nNot allowed") &&
                  strstr(sec, ".B 5\nProtocol"),
              "vramctl.1 EXIT STATUS without 3, 4 and 5:\n%s", sec);
        /* The weight sets' commands have their entries. */
        man_section(page, "COMMANDS", sec, sizeof(sec));
        CHECK(strstr(sec, "\n.B weights \\fR[\\fB\\-\\-json") &&
                  strstr(sec, "\n.B weights drop \\fINAME"),
              "vramctl.1 without weights and weights drop:\n%s", sec);
    }
    /* vram-replay --help names every option it takes. */
    {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "%s --help 2>&1", replay());
        FILE *p = popen(cmd, "r");
        size_t n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = 0;
        CHECK(pclose(p) == 0, "vram-replay --help");
        const char *want[] = {"--table", "--one-client", "--hold", "--socket",
                              "--version", "--help"};
        const char *opts = strstr(out, "Options:");
        for (size_t i = 0; i < 6; i++) {
            char line[32];
            snprintf(line, sizeof(line), "%s ", want[i]);
            CHECK(opts && strstr(opts, line), "vram-replay --help lacks %s: %s",
                  want[i], out);
        }
        CHECK(strstr(out, "[--table]") != NULL, "vram-replay usage lacks --table: %s",
              out);
        CHECK_TRIMMED(out, "vram-replay --help");
    }
    /* Not allowed is not "no daemon": a user the socket's directory keeps
     * out gets 4 (EACCES at connect), never 3. */
    if (geteuid() == 0) {
        rc = run_as(12345, 65534, "--version", out, sizeof(out));
        CHECK(rc == 0, "vramctl cannot run as uid 12345 from %s: %d %s",
              public_dir, rc, out);
        snprintf(args, sizeof(args), "--socket %s status", d.sock);
        rc = run_as(12345, 65534, args, out, sizeof(out));
        CHECK(rc == 4, "refused by the socket's permissions: exit %d: %s", rc, out);
        CHECK(strstr(out, d.sock) && strchr(out, '\n') == out + strlen(out) - 1,
              "refusal not one line naming the socket: %s", out);
    } else {
        CHECK(0, "this test needs root to run vramctl as other users");
    }
    snprintf(args, sizeof(args), "--socket %s metrics --json", d.sock);
    CHECK(run(args, out, sizeof(out)) == 2, "metrics --json accepted");
    /* Same output through a pipe or not: nothing depends on a terminal. */
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    if (geteuid() == 0)
        second_daemon();
    return check_report("test_vramctl");
}

/* A daemon with access lists and a configured stage: refusals exit 4,
 * reserved bytes, the replay's table, and a client awaiting its resume. */
static void second_daemon(void)
{
    static char out[1 << 16];
    char args[512], hd[512], rw[512], v[64];
    const char *config =
        "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"},"
        "             {\"id\": 1, \"capacity\": \"1GiB\"}],"
        " \"pool\": {\"prefill_chunks\": 2},"
        " \"access\": {\"allow\": {\"uids\": [65534]}, \"socket_group\": \"nogroup\","
        "            \"socket_mode\": \"0660\"},"
        " \"stages\": [{\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 3,"
        "   \"kv_lanes\": [256, 256], \"native_context\": 65536,"
        "   \"initial_tokens\": 8192, \"step_tokens\": 8192, \"expert_slot\": \"2MiB\"}]}";
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start the second vramd");
    chmod(d.dir, 0755); /* other users may reach the socket */
    struct group *ng = getgrnam("nogroup");
    gid_t nogroup = ng ? ng->gr_gid : 65534;

    /* Refused by the daemon (not in access.allow): 4. */
    snprintf(args, sizeof(args), "--socket %s status", d.sock);
    int rc = run_as(12345, nogroup, args, out, sizeof(out));
    CHECK(rc == 4, "refused by access.allow: exit %d: %s", rc, out);
    CHECK(strstr(out, "may not use vramd") != NULL, "refusal unclear: %s", out);
    /* Allowed, but no admin: reading works, admin commands exit 4. */
    rc = run_as(65534, nogroup, args, out, sizeof(out));
    CHECK(rc == 0 && strstr(out, "DEVICE"), "allowed user's status: %d %s", rc, out);
    snprintf(args, sizeof(args), "--socket %s evict 1", d.sock);
    rc = run_as(65534, nogroup, args, out, sizeof(out));
    CHECK(rc == 4 && strstr(out, "access.admin"), "evict by a non-admin: %d %s", rc, out);
    snprintf(args, sizeof(args), "--socket %s set-capacity 0 512MiB", d.sock);
    rc = run_as(65534, nogroup, args, out, sizeof(out));
    CHECK(rc == 4 && strstr(out, "access.admin"), "set-capacity by a non-admin: %d %s",
          rc, out);
    /* A request that fails for another reason stays 1. */
    snprintf(args, sizeof(args), "--socket %s set-capacity 0 64GiB", d.sock);
    CHECK(run(args, out, sizeof(out)) == 1, "over the start size: %s", out);

    /* The configured stage reserves its window on device 0: shown. */
    cJSON *st = daemon_status(&d);
    uint64_t reserved = status_dev(st, 0, "reserved_bytes");
    cJSON_Delete(st);
    char want[32];
    vw_size_format(reserved, want, sizeof(want));
    snprintf(args, sizeof(args), "--socket %s status", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "status: %s", out);
    CHECK(reserved > 0 && line_starting(out, "DEVICE BACKEND", hd, sizeof(hd)) &&
          line_starting(out, "0 ", rw, sizeof(rw)) &&
          strcmp(cell(hd, rw, "RESERVED", v, sizeof(v)), want) == 0,
          "device 0 reserves %s, the table says '%s':\n%s", want, v, out);
    CHECK_TRIMMED(out, "status");
    snprintf(args, sizeof(args), "--socket %s loans", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0 && line_starting(out, "STAGE ", hd, sizeof(hd)) &&
          line_starting(out, "0 ", rw, sizeof(rw)) &&
          strcmp(cell(hd, rw, "SLOT-SIZE", v, sizeof(v)), "2 MiB") == 0,
          "loans: %s", out);
    CHECK_TRIMMED(out, "loans");

    /* vram-replay's table: counts say what they count, no trailing
     * spaces; its JSON lines keep their keys. */
    char scn[256];
    snprintf(scn, sizeof(scn), "%s/scenario.json", d.dir);
    FILE *f = fopen(scn, "w");
    REQUIRE(f, "scenario");
    fputs("{\"scenario\": {\"steps\": [{\"prompt_tokens\": 20000, \"output_tokens\": 1000},"
          " {\"prompt_tokens\": 4000, \"output_tokens\": 100}]}}", f);
    fclose(f);
    for (int table = 0; table < 2; table++) {
        char cmd[768];
        snprintf(cmd, sizeof(cmd), "%s --socket %s %s %s 2>&1", replay(), d.sock,
                 table ? "--table" : "", scn);
        FILE *p = popen(cmd, "r");
        size_t n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = 0;
        CHECK(pclose(p) == 0, "vram-replay: %s", out);
        if (table) {
            CHECK(line_starting(out, "STEP ", hd, sizeof(hd)) &&
                  strstr(hd, " PROMPT-TOKENS ") && strstr(hd, " OUTPUT-TOKENS ") &&
                  strstr(hd, " BACKED-SLOTS ") && strstr(hd, " RECALLED-CHUNKS "),
                  "vram-replay --table header: %s", out);
            CHECK(line_starting(out, "2 ", rw, sizeof(rw)) &&
                  strcmp(cell(hd, rw, "PROMPT-TOKENS", v, sizeof(v)), "4000") == 0 &&
                  strcmp(cell(hd, rw, "RECALLED-CHUNKS", v, sizeof(v)), "0") == 0,
                  "vram-replay --table row: %s", out);
            CHECK_TRIMMED(out, "vram-replay --table");
        } else {
            cJSON *line = cJSON_Parse(out); /* the first step's line */
            const cJSON *s0 = cJSON_GetArrayItem(cJSON_GetObjectItem(line, "stages"), 0);
            CHECK(s0 && cJSON_GetObjectItem(s0, "recalled_chunks") &&
                  cJSON_GetObjectItem(s0, "expert_slots_backed") &&
                  json_u64(s0, "prompt_tokens") == 20000,
                  "vram-replay's JSON changed: %s", out);
            cJSON_Delete(line);
        }
    }

    /* A client whose vramd stopped and started again: quarantined, awaiting
     * its process's resume, its name kept in the state file, its bytes
     * shown. */
    struct rendezvous rv;
    rv_init(&rv);
    pid_t engine = spawn(held_engine, &d, &rv);
    uint64_t id = rv_recv(rv.to_parent[0]);
    CHECK(id > 0, "the engine did not start");
    daemon_stop(&d);
    REQUIRE(daemon_restart(&d, config, NULL) == 0, "start the second vramd again");
    snprintf(args, sizeof(args), "--socket %s clients", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "clients: %s", out);
    CHECK_TRIMMED(out, "clients");
    const char *q = strstr(out, " quarantined ");
    while (q && q > out && q[-1] != '\n')
        q--;
    snprintf(rw, sizeof(rw), "%.*s", q ? (int)strcspn(q, "\n") : 0, q ? q : "");
    char pid[24];
    snprintf(pid, sizeof(pid), "%d", (int)engine);
    CHECK(q && line_starting(out, "CLIENT ", hd, sizeof(hd)) &&
          strcmp(cell(hd, rw, "NAME", v, sizeof(v)), "held-engine") == 0 &&
          strcmp(cell(hd, rw, "PID", v, sizeof(v)), pid) == 0 &&
          strcmp(cell(hd, rw, "QUARANTINED", v, sizeof(v)), "6 MiB") == 0,
          "the quarantined client's row: '%s' in:\n%s", rw, out);
    /* Its JSON is what the daemon said: its name, resumable. */
    snprintf(args, sizeof(args), "--socket %s clients --json", d.sock);
    CHECK(run(args, out, sizeof(out)) == 0, "clients --json");
    cJSON *j = cJSON_Parse(out);
    const cJSON *cl, *gone = NULL;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItem(j, "clients"))
        if (json_u64(cl, "pid") == (uint64_t)engine)
            gone = cl;
    CHECK(gone && cJSON_IsTrue(cJSON_GetObjectItem(gone, "resumable")) &&
          strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(gone, "name")), "held-engine") == 0 &&
          json_u64(gone, "quarantined_bytes") == 6 * MIB,
          "the quarantined client in JSON: %.400s", out);
    cJSON_Delete(j);
    rv_send(rv.to_child[1], 1);
    CHECK(wait_child(engine) == 0, "the held engine");
    CHECK(wait_dev_value(&d, 1, "quarantined_bytes", 0, 3000),
          "still quarantined after the engine exited");
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
}
