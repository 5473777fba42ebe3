/* SPDX-License-Identifier: Apache-2.0 */
/* A rolling upgrade (issue 26, item 3), for one old release: its vramd
 * serves engines of its own libvram and of the current one, and is
 * replaced by the current vramd over the same state file and socket while
 * they keep running. Twice: stopped with SIGTERM (as systemd stops it for
 * an upgrade), and killed with SIGKILL (a crash).
 *  1. Under the old vramd: engine A (old libvram) owns configured stage 0,
 *     whose reservation's weight set it writes and seals (R17), an ad-hoc
 *     stage, and set compat/mapped, which it writes and seals; engine B
 *     (current libvram) owns stage 1, an ad-hoc stage, and maps
 *     compat/mapped; a writer of the old libvram seals compat/cached and
 *     exits, so only the old vramd's holder keeps that set. Every chunk and
 *     set has known bytes (compat_engine.c).
 *  2. The current vramd starts over it: both engines' chunks quarantined,
 *     the three sets back from the old holder, speaking the current
 *     protocol.
 *  3. compat/cached is read, sealed, bytes intact, by an old and a current
 *     libvram; then a greedy newcomer takes all the memory it can, and gets
 *     no chunk either engine holds.
 *  4. Each engine's next call reconnects and resumes: the same stages,
 *     regions at their addresses, the same chunk in every slot, every byte
 *     (the greedy one's writes were elsewhere); A at the release's
 *     protocol version, B at the current one.
 *  5. The engines get new memory; a newcomer too, none of theirs.
 *  6. After SIGTERM, a rollback: the current vramd stopped, the old one
 *     started over its state file refuses it when its format is newer
 *     than it reads (exit status 65, naming the format), else serves the
 *     engines, which resume; then the current vramd takes them back.
 *     Once they exit and the sets are dropped, the old holder exits.
 * Usage: vram-compat-upgrade OLD_BUILD_DIR OLD_PROTOCOL_VERSION (the
 * newest the release speaks; VRAMD_BIN: the current vramd;
 * VRAM_COMPAT_ENGINE: the current libvram's engine). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto/frame.h"
#include "tests/integration/harness.h"
#include "tests/integration/holders.h"

/* 256 chunks. Stage 0: two KV lanes of 256 bytes per token (32 chunks
 * each), 4 MiB of scratch, 8 MiB of weights backed by a keyed set; stage
 * 1: one lane. The sets take 8 MiB allocations. */
#define KEY_HEX "5E70000000000000000000000000000000000000000000000000000000000000"
static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"512MiB\", \"chunk\": \"2MiB\"}],"
    " \"pool\": {\"prefill_chunks\": 4},"
    " \"weights\": {\"alloc\": \"8MiB\"},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256, 256], \"expert_slot\": \"2MiB\","
    "   \"fixed\": [{\"name\": \"scratch\", \"kind\": \"fixed\", \"bytes\": \"4MiB\"},"
    "             {\"name\": \"weights\", \"kind\": \"fixed\", \"bytes\": \"8MiB\","
    "              \"set\": \"compat/stage0\", \"key\": \"" KEY_HEX "\"}]},"
    "  {\"id\": 1, \"device\": 0, \"first_layer\": 16, \"last_layer\": 31,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\"}]}";

static char old_vramd[PATH_MAX + 32], old_engine[PATH_MAX + 32];
static unsigned old_proto; /* the newest protocol version of the release */
static char old_src[PATH_MAX + 32];
static const char *new_src;
static const char *new_vramd, *new_engine;

struct engine {
    const char *name;
    pid_t pid;
    int in, out;   /* its stdin, its stdout */
    char buf[1 << 16];
    size_t len;
    uint64_t chunks[1024];
    int nchunks;
};

static int holders(const struct daemon *d, pid_t *pid, bool *old);

/* The engines running, and the daemon: killed when this program exits, a
 * REQUIRE's failure included (else each engine would wait its
 * reconnect_ms for a vramd the harness no longer starts, holding the
 * test's output open), with the holder a failure leaves keeping sets. */
static pid_t running[8];
static struct daemon *serving;

static void kill_running(void)
{
    for (int i = 0; i < 8; i++)
        if (running[i] > 0)
            kill(running[i], SIGKILL);
    if (!serving)
        return;
    daemon_kill(serving);
    pid_t holder;
    bool old;
    for (int i = 0; i < 4 && holders(serving, &holder, &old); i++) {
        kill(holder, SIGKILL);
        usleep(50000);
    }
}

static void track(pid_t pid, pid_t gone)
{
    for (int i = 0; i < 8; i++)
        if (running[i] == gone) {
            running[i] = pid;
            return;
        }
}

/* One line from the engine (60 s at most); "ok ..." parsed into chunks. */
static bool engine_answer(struct engine *e)
{
    for (;;) {
        char *nl = memchr(e->buf, '\n', e->len);
        if (nl) {
            *nl = 0;
            bool ok = strncmp(e->buf, "ok ", 3) == 0;
            if (!ok)
                fprintf(stderr, "engine %s: %s\n", e->name, e->buf);
            const char *p = ok ? strstr(e->buf, "chunks=") : NULL;
            e->nchunks = 0;
            for (p = p ? p + 7 : NULL; p && *p && e->nchunks < 1024;) {
                char *end;
                e->chunks[e->nchunks++] = strtoull(p, &end, 10);
                p = *end == ',' ? end + 1 : NULL;
            }
            size_t used = (size_t)(nl + 1 - e->buf);
            memmove(e->buf, nl + 1, e->len - used);
            e->len -= used;
            return ok;
        }
        struct pollfd p = {.fd = e->out, .events = POLLIN};
        if (e->len == sizeof(e->buf) || poll(&p, 1, 60000) <= 0) {
            fprintf(stderr, "engine %s: no answer within 60 s\n", e->name);
            return false;
        }
        ssize_t n = read(e->out, e->buf + e->len, sizeof(e->buf) - e->len);
        if (n <= 0) {
            fprintf(stderr, "engine %s: exited without an answer\n", e->name);
            return false;
        }
        e->len += (size_t)n;
    }
}

/* Starts bin SOCKET NAME args... and reads its setup's answer. */
static bool engine_start(struct engine *e, const char *bin,
                         const struct daemon *d, const char *name,
                         const char *const *args)
{
    int in[2], out[2];
    REQUIRE(pipe(in) == 0 && pipe(out) == 0, "pipe");
    memset(e, 0, sizeof(*e));
    e->name = name;
    e->pid = fork();
    REQUIRE(e->pid >= 0, "fork");
    if (e->pid == 0) {
        signal(SIGPIPE, SIG_DFL); /* as an engine runs */
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        const char *argv[16] = {bin, d->sock, name};
        int n = 3;
        for (int i = 0; args && args[i] && n < 15; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    track(e->pid, 0);
    close(in[0]);
    close(out[1]);
    e->in = in[1];
    e->out = out[0];
    return engine_answer(e);
}

static bool engine_say(struct engine *e, const char *cmd)
{
    size_t n = strlen(cmd);
    if (write(e->in, cmd, n) != (ssize_t)n || write(e->in, "\n", 1) != 1)
        return false;
    return engine_answer(e);
}

/* Tells it to exit (unless it did: once) and waits for it. */
static int engine_end(struct engine *e, bool once)
{
    if (!once && write(e->in, "exit\n", 5) != 5) {}
    close(e->in);
    int rc = wait_child(e->pid);
    track(0, e->pid);
    close(e->out);
    return rc;
}

/* A writer or reader that does its setup and exits. */
static bool engine_once(const char *bin, const struct daemon *d, const char *name,
                        const char *set)
{
    struct engine e;
    const char *args[] = {"--set", set, "--once", NULL};
    bool ok = engine_start(&e, bin, d, name, args);
    return engine_end(&e, true) == 0 && ok;
}

static bool shares(const struct engine *e, const uint64_t *ids, int n)
{
    for (int i = 0; i < e->nchunks; i++)
        for (int k = 0; k < n; k++)
            if (e->chunks[i] == ids[k]) {
                fprintf(stderr, "chunk %llu is engine %s's\n",
                        (unsigned long long)ids[k], e->name);
                return true;
            }
    return false;
}

/* The version in the last "said hello" line of client name, 0 if it has
 * none (an old vramd's line names none), -1 without a line. */
static int hello_version(const struct daemon *d, const char *name)
{
    char who[96], line[2048];
    snprintf(who, sizeof(who), "(%s, pid ", name);
    FILE *f = fopen(d->log, "r");
    int v = -1;
    while (f && fgets(line, sizeof(line), f)) {
        if (!strstr(line, who) || !strstr(line, "said hello as"))
            continue;
        const char *p = strstr(line, "protocol version ");
        v = p ? atoi(p + 17) : 0;
    }
    if (f)
        fclose(f);
    return v;
}

/* vramd-holder processes serving this daemon's directory, the first one's
 * pid in *pid and whether its program is the old release's. */
static int holders(const struct daemon *d, pid_t *pid, bool *old)
{
    int n = daemon_holders(d, pid);
    if (n) {
        char path[64], exe[PATH_MAX];
        snprintf(path, sizeof(path), "/proc/%d/exe", (int)*pid);
        ssize_t k = readlink(path, exe, sizeof(exe) - 1);
        exe[k > 0 ? k : 0] = 0;
        char want[PATH_MAX + 64];
        snprintf(want, sizeof(want), "%.*s-holder", (int)strlen(old_vramd),
                 old_vramd);
        *old = strcmp(exe, want) == 0;
    }
    return n;
}

/* The format of the state file the tree at src writes (the newest it
 * reads), from its daemon/state/format.h; 0 when not found. */
static unsigned state_format(const char *src)
{
    char path[PATH_MAX + 32], line[256];
    snprintf(path, sizeof(path), "%s/daemon/state/format.h", src);
    FILE *f = fopen(path, "r");
    unsigned v = 0;
    while (f && fgets(line, sizeof(line), f) && !v)
        if (sscanf(line, "#define VD_STATE_VERSION %uu", &v) != 1)
            v = 0;
    if (f)
        fclose(f);
    return v;
}

/* The old vramd started over what the current one leaves (a rollback)
 * while the engines run: it refuses a format newer than it reads, exit
 * status 65 and its reason, or serves them, which resume; either way the
 * current vramd then takes them back. The harness's start would print
 * the whole log on the refusal: the old vramd runs here by hand. */
static void roll_back(struct daemon *d, struct engine *a, struct engine *b)
{
    unsigned now = state_format(new_src), then = state_format(old_src);
    CHECK(now && then, "no VD_STATE_VERSION in %s or %s", new_src, old_src);
    CHECK(daemon_stop(d) == 0, "rollback: the current vramd did not stop");
    int checks = 2;
    if (now > then) {
        pid_t pid = fork();
        REQUIRE(pid >= 0, "fork");
        if (pid == 0) {
            int fd = open(d->log, O_WRONLY | O_APPEND);
            dup2(fd, 1);
            dup2(fd, 2);
            execl(old_vramd, old_vramd, "--socket", d->sock, "--backend", "host",
                  "--log-level", "debug", "--config", d->config, (char *)NULL);
            _exit(127);
        }
        int ws = 0, i = 0;
        while (waitpid(pid, &ws, WNOHANG) == 0 && i++ < 1000)
            usleep(10000);
        if (i > 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
        }
        char why[160];
        snprintf(why, sizeof(why), "format version %u, this vramd reads", now);
        CHECK(i <= 1000 && WIFEXITED(ws) && WEXITSTATUS(ws) == 65 &&
                  daemon_log_contains(d, why),
              "rollback: the old vramd did not refuse the state file of format "
              "%u (it reads up to %u) with exit status 65 and '%s'", now, then, why);
        fprintf(stderr, "rollback: the old vramd refused the state file of "
                "format %u (it reads up to %u), exit status 65\n", now, then);
    } else {
        setenv("VRAMD_BIN", old_vramd, 1);
        REQUIRE(daemon_restart(d, config, NULL) == 0,
                "rollback: the old vramd did not start over format %u", now);
        CHECK(engine_say(a, "check 2") && engine_say(b, "check 2"),
              "rollback: the engines did not resume with the old vramd");
        CHECK(daemon_stop(d) == 0, "rollback: the old vramd did not stop");
        checks = 3;
        fprintf(stderr, "rollback: the old vramd served the engines over the "
                "state file of format %u\n", now);
    }
    setenv("VRAMD_BIN", new_vramd, 1);
    REQUIRE(daemon_restart(d, config, NULL) == 0,
            "rollback: the current vramd did not start again");
    char cmd[16];
    snprintf(cmd, sizeof(cmd), "check %d", checks);
    CHECK(engine_say(a, cmd) && engine_say(b, cmd),
          "rollback: the engines did not resume with the current vramd again");
}

static void upgrade(bool crash)
{
    const char *how = crash ? "SIGKILL" : "SIGTERM";
    fprintf(stderr, "---- the old vramd stopped with %s ----\n", how);
    struct daemon d;
    setenv("VRAMD_BIN", old_vramd, 1);
    serving = &d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start the old vramd");

    /* 1. */
    CHECK(engine_once(old_engine, &d, "old-writer", "compat/cached"),
          "%s: the old writer of compat/cached", how);
    struct engine a, b;
    const char *args_a[] = {"--stage", "0", "--adhoc", "64", "--set",
                            "compat/mapped", NULL};
    const char *args_b[] = {"--stage", "1", "--adhoc", "80", "--set",
                            "compat/mapped", NULL};
    REQUIRE(engine_start(&a, old_engine, &d, "old-engine-a", args_a),
            "%s: engine A's setup", how);
    REQUIRE(engine_start(&b, new_engine, &d, "new-engine-b", args_b),
            "%s: engine B's setup", how);
    CHECK(a.nchunks > 0 && b.nchunks > 0, "engines hold %d and %d chunks",
          a.nchunks, b.nchunks);
    /* Both at the release's version (0.1.0's vramd names none). */
    int logged = old_proto == 1 ? 0 : (int)old_proto;
    CHECK(hello_version(&d, "old-engine-a") == logged &&
              hello_version(&d, "new-engine-b") == logged,
          "%s: the old vramd's hellos: %d and %d, not %d", how,
          hello_version(&d, "old-engine-a"), hello_version(&d, "new-engine-b"),
          logged);
    cJSON *st = daemon_status(&d);
    CHECK_EQ_U(json_u64(st, "protocol_version"), old_proto);
    uint64_t sets_bytes = status_dev(st, 0, "weights_bytes");
    CHECK_EQ_U(sets_bytes, 24 * MIB);
    cJSON_Delete(st);
    pid_t holder = 0, holder_after = 0;
    bool holder_old = false, still_old = false;
    CHECK(holders(&d, &holder, &holder_old) == 1 && holder_old,
          "%s: not one holder of the old release", how);

    /* 2. */
    if (crash)
        daemon_kill(&d);
    else
        CHECK(daemon_stop(&d) == 0, "the old vramd did not stop cleanly");
    setenv("VRAMD_BIN", new_vramd, 1);
    REQUIRE(daemon_restart(&d, config, NULL) == 0,
            "%s: the current vramd did not start over the old one's state", how);
    CHECK(daemon_log_contains(&d, "restart: 2 processes still hold"),
          "%s: the current vramd does not find both engines", how);
    CHECK(daemon_log_contains(&d, "restart: 3 of 3 weight sets came back"),
          "%s: the sets did not all come back", how);
    st = daemon_status(&d);
    CHECK_EQ_U(json_u64(st, "protocol_version"), VW_PROTOCOL_VERSION);
    CHECK_EQ_U(status_dev(st, 0, "quarantined_bytes"),
               (uint64_t)(a.nchunks + b.nchunks) * 2 * MIB);
    CHECK_EQ_U(status_dev(st, 0, "weights_bytes"), sets_bytes);
    cJSON_Delete(st);
    CHECK(holders(&d, &holder_after, &still_old) == 1 && holder_after == holder,
          "%s: the old holder does not serve the current vramd", how);

    /* 3. */
    CHECK(engine_once(old_engine, &d, "old-reader", "compat/cached"),
          "%s: an old reader of compat/cached", how);
    CHECK(engine_once(new_engine, &d, "new-reader", "compat/cached"),
          "%s: a current reader of compat/cached", how);
    vram_client *greedy = connect_client(&d, "greedy");
    uint32_t gs, gr;
    REQUIRE(vram_stage_register_adhoc(greedy, 0, 200, 215, &gs) == 0 &&
                vram_region_create(greedy, gs, VRAM_REGION_FIXED, 512 * MIB, 1,
                                   &gr) == 0,
            "greedy's region: %s", vram_client_last_error(greedy));
    int e, got = 0;
    while ((e = vram_region_grow(greedy, gr, 1)) == 0)
        got++;
    /* Of the 256 chunks, 102 are promised to the stages (stage 0: 2 x 32
     * of KV, 2 of scratch, 4 of its set; stage 1: 32), 4 are the mapped
     * set's and 8 the engines' ad-hoc regions': 142 are left, compat/cached's
     * 4 among them (evicted for it: it is only cached). */
    CHECK(e == -ENOSPC && got == 142, "%s: greedy got %d chunks, not 142, then %s",
          how, got, vram_client_last_error(greedy));
    uint64_t ids[256];
    int nids = 0;
    for (uint32_t i = 0; i < (uint32_t)got && nids < 256; i++)
        if (vram_region_chunk(greedy, gr, 0, i, &ids[nids]) == 0) {
            fill_pattern(vram_region_slot(greedy, gr, 0, i), 2 * MIB, 7000 + i);
            nids++;
        }
    CHECK(!shares(&a, ids, nids) && !shares(&b, ids, nids),
          "%s: greedy was granted a chunk a gone engine holds", how);
    st = daemon_status(&d);
    uint64_t free_after = status_dev(st, 0, "free_bytes");
    CHECK_EQ_U(status_dev(st, 0, "quarantined_bytes"),
               (uint64_t)(a.nchunks + b.nchunks) * 2 * MIB);
    cJSON_Delete(st);
    CHECK_EQ_U(free_after, 156 * MIB); /* the stages' KV not mapped yet */

    /* 4. */
    CHECK(engine_say(&a, "check 1"), "%s: engine A did not resume intact", how);
    CHECK(engine_say(&b, "check 1"), "%s: engine B did not resume intact", how);
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 0, 3000),
          "%s: memory still quarantined after both resumed", how);
    CHECK_EQ_U(hello_version(&d, "old-engine-a"), old_proto);
    CHECK_EQ_U(hello_version(&d, "new-engine-b"), VW_PROTOCOL_VERSION);
    bool mine = true;
    for (int i = 0; i < nids; i++)
        mine = mine && check_pattern(vram_region_slot(greedy, gr, 0, (uint32_t)i),
                                     2 * MIB, 7000 + (uint64_t)i);
    CHECK(mine, "%s: greedy's chunks changed", how);
    vram_client_close(greedy);

    /* 5. */
    CHECK(engine_say(&a, "grow"), "%s: engine A got no new memory", how);
    CHECK(engine_say(&b, "grow"), "%s: engine B got no new memory", how);
    vram_client *late = connect_client(&d, "newcomer");
    uint32_t ls, lr;
    CHECK(vram_stage_register_adhoc(late, 0, 200, 215, &ls) == 0 &&
              vram_region_create(late, ls, VRAM_REGION_FIXED, 16 * MIB, 1, &lr) == 0 &&
              vram_region_grow(late, lr, 8) == 0,
          "%s: a newcomer was granted nothing: %s", how, vram_client_last_error(late));
    nids = 0;
    for (uint32_t i = 0; i < 8; i++)
        if (vram_region_chunk(late, lr, 0, i, &ids[nids]) == 0)
            nids++;
    CHECK(nids == 8 && !shares(&a, ids, nids) && !shares(&b, ids, nids),
          "%s: the newcomer's chunks", how);
    vram_client_close(late);

    /* 6. */
    if (!crash)
        roll_back(&d, &a, &b);
    CHECK(engine_end(&a, false) == 0, "%s: engine A", how);
    CHECK(engine_end(&b, false) == 0, "%s: engine B", how);
    vram_client *admin = connect_client(&d, "admin");
    CHECK(vram_admin_weights_drop(admin, "compat/mapped") == 0 &&
              vram_admin_weights_drop(admin, "compat/stage0") == 0,
          "%s: drop: %s", how, vram_client_last_error(admin));
    /* The greedy one may have had the cached set evicted. */
    e = vram_admin_weights_drop(admin, "compat/cached");
    CHECK(e == 0 || e == -ENOENT, "%s: drop compat/cached: %s", how,
          vram_client_last_error(admin));
    vram_client_close(admin);
    CHECK(wait_dev_value(&d, 0, "weights_bytes", 0, 3000), "%s: sets left", how);
    int left = 1;
    for (int i = 0; i < 300 && left; i++)
        if ((left = holders(&d, &holder_after, &still_old)))
            usleep(20000);
    CHECK(left == 0, "%s: the old holder still runs with nothing to keep", how);
    CHECK(wait_dev_value(&d, 0, "granted_bytes", 0, 3000),
          "%s: memory still granted", how);
    CHECK(daemon_stop(&d) == 0, "%s: the current vramd did not stop cleanly", how);
    if (check_failures)
        kill_running();
    serving = NULL;
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 3 && atoi(argv[2]) > 0,
            "usage: vram-compat-upgrade OLD_BUILD_DIR OLD_PROTOCOL_VERSION");
    old_proto = (unsigned)atoi(argv[2]);
    new_vramd = getenv("VRAMD_BIN");
    new_engine = getenv("VRAM_COMPAT_ENGINE");
    REQUIRE(new_vramd && new_engine, "VRAMD_BIN and VRAM_COMPAT_ENGINE are needed");
    char dir[PATH_MAX];
    REQUIRE(realpath(argv[1], dir), "%s: %s", argv[1], strerror(errno));
    snprintf(old_vramd, sizeof(old_vramd), "%s/vramd", dir);
    snprintf(old_engine, sizeof(old_engine), "%s/vram-compat-engine", dir);
    snprintf(old_src, sizeof(old_src), "%s/../src", dir);
    new_src = getenv("VRAM_SOURCE_DIR");
    REQUIRE(new_src, "VRAM_SOURCE_DIR is needed");
    REQUIRE(access(old_vramd, X_OK) == 0 && access(old_engine, X_OK) == 0,
            "no %s or %s: build_releases.sh builds them", old_vramd, old_engine);
    /* An engine that died is a failed check, not this program's death
     * by SIGPIPE (which would leave vramd and its holder running). */
    signal(SIGPIPE, SIG_IGN);
    atexit(kill_running);
    upgrade(false);
    upgrade(true);
    return check_report("test_upgrade");
}
