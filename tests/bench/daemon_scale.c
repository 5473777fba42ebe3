/* SPDX-License-Identifier: Apache-2.0 */
/* vram-bench-scale: what a request costs the real vramd (host backend) at
 * the scale of an 8-GPU host, against issue 17's targets: 8 devices of
 * 141 GiB in 2 MiB chunks (577,536 chunks) and 256 memory-holding clients.
 *
 * Host chunks are memfds created when granted and backed by pages only when
 * touched, so every chunk can be granted without the memory behind it (the
 * kernel keeps an inode and a file for each: about 1 KiB). Every client
 * process keeps one fd per chunk it holds, and this machine's limit is
 * 20,000 per process, so the holders are spread over processes (forked
 * workers):
 *  - fillers: 256 clients in 32 processes, each with an ad-hoc stage and a
 *    fixed region on device (client % 8), holding every chunk of the eight
 *    devices (about 2,250 each) but for G's grant on device 0 and what the
 *    two configured stages reserve on device 7;
 *  - G: one grant of 18,000 chunks in one call on device 0 under the fd
 *    limit, then releases of 16 and of 16,384 of them;
 *  - L: configured stage 0 on device 7, lending everything it may (the
 *    unregistered window of stage 1 included) as expert loans;
 *  - R: configured stage 1 on device 7; its KV reserve of its whole window
 *    recalls 16,384 of L's loans (without VRAM_KV_HOLD: the recalls are
 *    sent and -EAGAIN returns), L answers later (the release), R reserves
 *    again (the grant of what came back).
 * Besides: status (idle and with every chunk held), connect + hello +
 * close of an empty client (beside a bare epoll server's floor for the
 * same), vram_client_ping against a bare epoll ping-pong of the same bytes,
 * and the daemon's resident memory.
 *
 * Daemon CPU is the daemon's run time from /proc/PID/task/TID/schedstat
 * (nanoseconds, every thread: the looks for kept memory run on libuv's
 * pool), read when it has gone quiet, and past the pool refill that
 * follows a grant, before and after each measured step; repeated steps
 * come in rounds and give the median round. What a release leaves for
 * later (kept_audit_ms) is measured apart. The daemon runs with its
 * invariant checks off (they stay on in the tests) unless --checks. One
 * JSON object per line: bench, what, value, unit, target, met, and figures
 * of the step; an environment line first (the machine is shared: its load
 * is part of the figures).
 *
 * --quick: 8 devices of 4 GiB, 32 clients, grants and recalls of about
 * 1,000 chunks; the ctest smoke run (bench_scale_smoke) checks only that it
 * runs and prints valid lines. --vramd PATH measures another build (the
 * before/after results); VRAM_BENCH_SCALE_PAUSE=<bench> stops before that
 * step to attach a profiler. Exits non-zero when a step failed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/bench/bench_util.h"
#include "proto/frame.h"
#include "client/include/vram.h"

#define MIB (1ull << 20)
#define CHUNK (2 * MIB)

/* ---- sizes --------------------------------------------------------------- */

struct params {
    uint32_t ndev;
    uint64_t dev_gib;
    uint32_t clients;      /* memory-holding clients (fillers) */
    uint32_t fillers;      /* processes they are spread over */
    uint32_t grant;        /* G's one grant */
    uint32_t release;      /* G's large release */
    uint32_t recall;       /* R's recall of L's loans */
    uint32_t w0;           /* stage 0's own KV window, chunks */
    int status_reps, empty_reps, ping_reps;
};

static struct params P = {
    .ndev = 8, .dev_gib = 141, .clients = 256, .fillers = 32,
    .grant = 18000, .release = 16384, .recall = 16384,
    .w0 = 256, .status_reps = 40, .empty_reps = 2000, .ping_reps = 20000,
};

static const struct params QUICK = {
    .ndev = 8, .dev_gib = 4, .clients = 32, .fillers = 2,
    .grant = 1500, .release = 1024, .recall = 1024,
    .w0 = 64, .status_reps = 10, .empty_reps = 200, .ping_reps = 2000,
};

static uint64_t dev_chunks(void)
{
    return P.dev_gib * 1024 / 2;
}

/* Stage 1: 16 tokens a chunk, an initial window of 4,096 tokens (256
 * chunks) and a native context of 256 + recall chunks, so a reserve of the
 * whole window needs exactly P.recall more chunks. */
#define S1_BPT 131072u
#define S1_INITIAL 4096u
static uint64_t s1_native(void)
{
    return (uint64_t)S1_INITIAL + 16ull * P.recall;
}
static uint64_t s1_window(void)
{
    return 256 + (uint64_t)P.recall;
}

static bool opt_checks;
static const char *opt_vramd;
static int failures;

/* ---- time ---------------------------------------------------------------- */

static double median(double *v, size_t n)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- the daemon ---------------------------------------------------------- */

static pid_t dpid;
static char dir[128], sock[192], logpath[192], cfgpath[192];

/* A process's CPU time in ns: the sum over its threads' schedstat. */
static uint64_t cpu_ns_of(pid_t pid)
{
    char path[96];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    uint64_t sum = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[400], buf[128];
        snprintf(p, sizeof(p), "%s/%s/schedstat", path, e->d_name);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n > 0) {
            buf[n] = '\0';
            sum += strtoull(buf, NULL, 10);
        }
    }
    closedir(d);
    return sum;
}

static uint64_t dcpu_ns(void)
{
    return cpu_ns_of(dpid);
}

/* Waits until the daemon has used less than 20 us of CPU in 20 ms (its
 * pool refill and idle timers cost a few us), at most max_ms. */
static uint64_t quiet(int max_ms)
{
    uint64_t last = dcpu_ns();
    for (int t = 0; t < max_ms; t += 20) {
        sleep_us(20000);
        uint64_t now = dcpu_ns();
        if (now - last < 20000)
            return now;
        last = now;
    }
    return last;
}

/* Quiet, and past the pool refill that follows a grant by 250 ms
 * (daemon/core/daemon/refill.c): what is measured next is the request alone. */
static uint64_t settle(void)
{
    sleep_us(400000);
    return quiet(20000);
}

static long proc_kib(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long kib = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, kl) == 0) {
            kib = strtol(line + kl, NULL, 10);
            break;
        }
    fclose(f);
    return kib;
}

static int proc_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int find_vramd(char *out, size_t len)
{
    const char *env = getenv("VRAMD_BIN");
    if (opt_vramd)
        env = opt_vramd;
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return access(out, X_OK) == 0 ? 0 : -ENOENT;
    }
    char exe[PATH_MAX - 16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *sl = strrchr(exe, '/');
        if (sl)
            *sl = '\0';
        const char *rel[] = {"/../vramd", "/vramd"};
        for (int i = 0; i < 2; i++) {
            snprintf(out, len, "%s%s", exe, rel[i]);
            if (access(out, X_OK) == 0)
                return 0;
        }
    }
#ifdef VRAM_BENCH_VRAMD
    snprintf(out, len, "%s", VRAM_BENCH_VRAMD);
    if (access(out, X_OK) == 0)
        return 0;
#endif
    return -ENOENT;
}

static void write_config(void)
{
    FILE *f = fopen(cfgpath, "w");
    if (!f)
        return;
    fprintf(f, "{\"devices\": [");
    for (uint32_t i = 0; i < P.ndev; i++)
        fprintf(f, "%s{\"id\": %u, \"capacity\": \"%lluGiB\", \"chunk\": "
                "\"2MiB\"%s}", i ? ", " : "", i,
                (unsigned long long)P.dev_gib,
                i == P.ndev - 1 ? ", \"lend_unreserved\": true" : "");
    uint32_t last = P.ndev - 1;
    /* stage 0: 8 bytes a token a chunk of window; initial 1/16 of it */
    fprintf(f, "], \"stages\": ["
            "{\"id\": 0, \"device\": %u, \"first_layer\": 0, \"last_layer\": 15,"
            " \"kv_lanes\": [%u], \"native_context\": 262144,"
            " \"initial_tokens\": 16384, \"step_tokens\": 8192,"
            " \"expert_slot\": \"2MiB\", \"expert_region\": \"%lluMiB\","
            " \"loan\": {\"enabled\": true, \"headroom\": 0,"
            "  \"recall_deadline_ms\": 600000, \"hold_ms\": 60000}},"
            "{\"id\": 1, \"device\": %u, \"first_layer\": 16, \"last_layer\": 31,"
            " \"kv_lanes\": [%u], \"native_context\": %llu,"
            " \"initial_tokens\": %u, \"step_tokens\": 8192,"
            " \"expert_slot\": \"2MiB\", \"expert_region\": \"64MiB\","
            " \"loan\": {\"enabled\": true, \"headroom\": 0,"
            "  \"recall_deadline_ms\": 600000, \"hold_ms\": 60000}}],",
            last, P.w0 * 8, (unsigned long long)((P.recall + P.w0 + 4096) * 2),
            last, S1_BPT, (unsigned long long)s1_native(), S1_INITIAL);
    fprintf(f, " \"limits\": {\"clients\": %u, \"connections_per_user\": %u,"
            " \"stages_per_user\": %u, \"gone_clients_per_user\": %u,"
            " \"address_space_per_user\": \"16TiB\","
            " \"address_space_per_client\": \"2TiB\"}}\n",
            P.clients + 64, P.clients + 256, P.clients + 64, P.clients + 64);
    fclose(f);
}

static int daemon_start(void)
{
    char bin[PATH_MAX];
    if (find_vramd(bin, sizeof(bin)) < 0) {
        fprintf(stderr, "vram-bench-scale: vramd not found (VRAMD_BIN or "
                "--vramd)\n");
        return -1;
    }
    snprintf(dir, sizeof(dir), "/tmp/vram-bench-scale-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(sock, sizeof(sock), "%s/vramd.sock", dir);
    snprintf(logpath, sizeof(logpath), "%s/vramd.log", dir);
    snprintf(cfgpath, sizeof(cfgpath), "%s/vramd.json", dir);
    write_config();
    fflush(NULL);
    dpid = fork();
    if (dpid < 0)
        return -1;
    if (dpid == 0) {
        int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        setenv("VRAMD_CHECK_INVARIANTS", opt_checks ? "1" : "0", 1);
        setenv("VRAMD_CHECK_REPLIES", opt_checks ? "1" : "0", 1);
        execl(bin, bin, "--socket", sock, "--backend", "host", "--config",
              cfgpath, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 1000; i++) {
        int st;
        if (waitpid(dpid, &st, WNOHANG) == dpid) {
            fprintf(stderr, "vramd exited during start; its log is %s\n",
                    logpath);
            dpid = 0;
            return -1;
        }
        vram_client *c = NULL;
        struct vram_client_options o = {.name = "bench-scale", .ctl = 1};
        if (vram_client_connect(sock, &o, &c) == 0) {
            vram_client_close(c);
            return 0;
        }
        sleep_us(10000);
    }
    return -1;
}

static void daemon_stop(void)
{
    if (dpid <= 0)
        return;
    kill(dpid, SIGTERM);
    for (int i = 0; i < 3000; i++) {
        if (waitpid(dpid, NULL, WNOHANG) == dpid) {
            dpid = 0;
            return;
        }
        sleep_us(10000);
    }
    kill(dpid, SIGKILL);
    waitpid(dpid, NULL, 0);
    dpid = 0;
}

/* ---- JSON lines ---------------------------------------------------------- */

/* One figure: value in unit against target (target <= 0: a figure to
 * watch), then extra key/values (already JSON, or NULL). */
static void line(const char *bench, const char *what, double value,
                 const char *unit, double target, const char *extra, ...)
    __attribute__((format(printf, 6, 7)));
static void line(const char *bench, const char *what, double value,
                 const char *unit, double target, const char *extra, ...)
{
    char more[1024] = "";
    if (extra) {
        va_list ap;
        va_start(ap, extra);
        vsnprintf(more, sizeof(more), extra, ap);
        va_end(ap);
    }
    printf("{\"bench\":\"%s\",\"backend\":\"host\",\"what\":\"%s\","
           "\"value\":%.4f,\"unit\":\"%s\"", bench, what, value, unit);
    if (target > 0)
        printf(",\"target\":%.4f,\"met\":%s", target,
               value <= target ? "true" : "false");
    if (more[0])
        printf(",%s", more);
    printf("}\n");
    fflush(stdout);
}

static void fail_line(const char *bench, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fail_line(const char *bench, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    for (char *p = why; *p; p++)
        if (*p == '"' || *p == '\\' || *p == ';' || (unsigned char)*p < 0x20)
            *p = ' ';
    printf("{\"bench\":\"%s\",\"backend\":\"host\",\"error\":\"%s\"}\n", bench,
           why);
    fflush(stdout);
    failures++;
}

/* ---- workers: forked client processes driven over pipes ----------------- */

enum op {
    OP_QUIT,
    OP_FILL,     /* a: first client index, b: clients */
    OP_GRANT,    /* a: device, b: chunks */
    OP_SHRINK,   /* a: chunks */
    OP_LEND,     /* stage 0 registered, all loans it may take */
    OP_ANSWER,   /* dispatch until a chunks were released (recalls) */
    OP_REGISTER, /* stage 1 */
    OP_RESERVE,  /* stage 1: a prompt tokens, b flags */
    OP_FDS,      /* fds open in the worker */
};

struct cmd {
    int op;
    uint64_t a, b;
};

struct res {
    int64_t rc;
    double us;
    uint64_t v;
    char why[240];
};

struct worker {
    pid_t pid;
    int to, from;
};

/* What a worker holds (one role each). */
static vram_client **wc;
static uint32_t nwc;
static uint32_t w_region;
static uint32_t w_stage;

static vram_client *w_connect(const char *name, char *why, size_t len)
{
    vram_client *c = NULL;
    char err[256] = "";
    struct vram_client_options o = {.name = name, .error = err,
                                    .error_len = sizeof(err),
                                    .timeout_ms = 120000};
    int e = vram_client_connect(sock, &o, &c);
    if (e < 0)
        snprintf(why, len, "connect: %s %s", vram_strerror(e), err);
    return e < 0 ? NULL : c;
}

/* Chunks of filler client i on its device. */
static uint64_t fill_chunks(uint32_t i)
{
    /* Every device full, over its clients, but for a little room, G's grant
     * on device 0 and what the two configured stages reserve on the last */
    uint32_t dev = i % P.ndev, n = P.clients / P.ndev, k = i / P.ndev;
    uint64_t keep = 64;
    if (dev == 0)
        keep += P.grant;
    if (dev == P.ndev - 1)
        keep += P.w0 + s1_window();
    uint64_t fill = dev_chunks() - keep;
    return fill / n + (k == n - 1 ? fill % n : 0);
}

static void do_cmd(const struct cmd *c, struct res *r)
{
    int e = 0;
    uint64_t t0 = now_ns();
    switch (c->op) {
    case OP_FILL:
        wc = calloc(c->b, sizeof(*wc));
        for (uint32_t k = 0; k < c->b && e == 0; k++) {
            uint32_t i = (uint32_t)c->a + k;
            char name[32];
            snprintf(name, sizeof(name), "filler-%u", i);
            vram_client *v = w_connect(name, r->why, sizeof(r->why));
            if (!v) {
                e = -1;
                break;
            }
            wc[nwc++] = v;
            uint32_t st = 0, reg = 0;
            uint64_t n = fill_chunks(i);
            e = vram_stage_register_adhoc(v, i % P.ndev, 0, 0, &st);
            if (e == 0)
                e = vram_region_create(v, st, VRAM_REGION_FIXED, n * CHUNK, 1,
                                       &reg);
            if (e == 0)
                e = vram_region_grow(v, reg, (uint32_t)n);
            if (e < 0)
                snprintf(r->why, sizeof(r->why), "client %u: %s: %s", i,
                         vram_strerror(e), vram_client_last_error(v));
            r->v += n;
        }
        break;
    case OP_GRANT: {
        wc = calloc(1, sizeof(*wc));
        vram_client *v = w_connect("bench-grant", r->why, sizeof(r->why));
        if (!v) {
            e = -1;
            break;
        }
        wc[nwc++] = v;
        e = vram_stage_register_adhoc(v, (uint32_t)c->a, 0, 0, &w_stage);
        if (e == 0)
            e = vram_region_create(v, w_stage, VRAM_REGION_FIXED, c->b * CHUNK,
                                   1, &w_region);
        if (e < 0) {
            snprintf(r->why, sizeof(r->why), "stage or region: %s: %s",
                     vram_strerror(e), vram_client_last_error(v));
            break;
        }
        t0 = now_ns();
        e = vram_region_grow(v, w_region, (uint32_t)c->b);
        if (e < 0)
            snprintf(r->why, sizeof(r->why), "grow by %llu: %s: %s",
                     (unsigned long long)c->b, vram_strerror(e),
                     vram_client_last_error(v));
        r->v = vram_client_chunks_held(v);
        break;
    }
    case OP_SHRINK:
        e = vram_region_shrink(wc[0], w_region, (uint32_t)c->a);
        if (e < 0)
            snprintf(r->why, sizeof(r->why), "shrink by %llu: %s: %s",
                     (unsigned long long)c->a, vram_strerror(e),
                     vram_client_last_error(wc[0]));
        r->v = vram_client_chunks_held(wc[0]);
        break;
    case OP_LEND: {
        wc = calloc(1, sizeof(*wc));
        vram_client *v = w_connect("bench-lender", r->why, sizeof(r->why));
        if (!v) {
            e = -1;
            break;
        }
        wc[nwc++] = v;
        e = vram_stage_register(v, 0, 0, NULL);
        if (e == 0) {
            t0 = now_ns();
            e = vram_expert_request(v, 0, 0);
        }
        if (e < 0)
            snprintf(r->why, sizeof(r->why), "stage 0: %s: %s", vram_strerror(e),
                     vram_client_last_error(v));
        r->v = vram_client_chunks_held(v);
        break;
    }
    case OP_ANSWER: {
        vram_client *v = wc[0];
        size_t before = vram_client_chunks_held(v);
        struct pollfd p = {.fd = vram_client_fd(v), .events = POLLIN};
        while (before - vram_client_chunks_held(v) < c->a) {
            if (now_ns() - t0 > 120000000000ull) {
                e = -ETIMEDOUT;
                snprintf(r->why, sizeof(r->why), "%zu of %llu chunks recalled",
                         before - vram_client_chunks_held(v),
                         (unsigned long long)c->a);
                break;
            }
            if (poll(&p, 1, 100) > 0 && (e = vram_client_dispatch(v)) < 0) {
                snprintf(r->why, sizeof(r->why), "dispatch: %s: %s",
                         vram_strerror(e), vram_client_last_error(v));
                break;
            }
            e = 0;
        }
        r->v = vram_client_chunks_held(v);
        break;
    }
    case OP_REGISTER: {
        wc = calloc(1, sizeof(*wc));
        vram_client *v = w_connect("bench-reserver", r->why, sizeof(r->why));
        if (!v) {
            e = -1;
            break;
        }
        wc[nwc++] = v;
        e = vram_stage_register(v, 1, 0, NULL);
        if (e < 0)
            snprintf(r->why, sizeof(r->why), "stage 1: %s: %s", vram_strerror(e),
                     vram_client_last_error(v));
        r->v = vram_client_chunks_held(v);
        break;
    }
    case OP_RESERVE: {
        struct vram_kv_result kr;
        e = vram_kv_reserve(wc[0], 1, c->a, 0, (unsigned)c->b, &kr);
        if (e < 0)
            snprintf(r->why, sizeof(r->why), "reserve: %s: %s", vram_strerror(e),
                     vram_client_last_error(wc[0]));
        r->v = vram_client_chunks_held(wc[0]);
        break;
    }
    case OP_FDS:
        r->v = (uint64_t)proc_fds(getpid());
        break;
    }
    r->us = (double)(now_ns() - t0) / 1e3;
    r->rc = e;
}

static int worker_start(struct worker *w)
{
    int a[2], b[2];
    if (pipe2(a, O_CLOEXEC) < 0 || pipe2(b, O_CLOEXEC) < 0)
        return -1;
    fflush(NULL);
    w->pid = fork();
    if (w->pid < 0)
        return -1;
    if (w->pid == 0) {
        close(a[1]);
        close(b[0]);
        /* This machine's limit, whatever the shell said: the grant of 18,000
         * chunks must work under 20,000 fds. */
        struct rlimit rl = {20000, 20000};
        setrlimit(RLIMIT_NOFILE, &rl);
        struct cmd c;
        while (full_io(a[0], &c, sizeof(c), false) == 0 && c.op != OP_QUIT) {
            struct res r;
            memset(&r, 0, sizeof(r));
            do_cmd(&c, &r);
            if (full_io(b[1], &r, sizeof(r), true) < 0)
                break;
        }
        for (uint32_t i = 0; i < nwc; i++)
            vram_client_close(wc[i]);
        _exit(0);
    }
    close(a[0]);
    close(b[1]);
    w->to = a[1];
    w->from = b[0];
    return 0;
}

static int worker_send(struct worker *w, int op, uint64_t a, uint64_t b)
{
    struct cmd c = {op, a, b};
    return full_io(w->to, &c, sizeof(c), true);
}

static int worker_wait(struct worker *w, struct res *r)
{
    memset(r, 0, sizeof(*r));
    if (full_io(w->from, r, sizeof(*r), false) < 0) {
        r->rc = -EPIPE;
        snprintf(r->why, sizeof(r->why), "the worker died");
        return -1;
    }
    return r->rc < 0 ? -1 : 0;
}

static int worker_do(struct worker *w, int op, uint64_t a, uint64_t b,
                     struct res *r)
{
    if (worker_send(w, op, a, b) < 0) {
        r->rc = -EPIPE;
        snprintf(r->why, sizeof(r->why), "the worker died");
        return -1;
    }
    return worker_wait(w, r);
}

static void worker_stop(struct worker *w)
{
    if (w->pid <= 0)
        return;
    worker_send(w, OP_QUIT, 0, 0);
    close(w->to);
    close(w->from);
    waitpid(w->pid, NULL, 0);
    w->pid = 0;
}

/* One step in a worker, its daemon CPU (ms) measured from quiet to quiet. */
static double timed(struct worker *w, int op, uint64_t a, uint64_t b,
                    struct res *r)
{
    uint64_t c0 = settle();
    int e = worker_do(w, op, a, b, r);
    uint64_t c1 = quiet(10000);
    return e < 0 && r->rc != -EAGAIN ? -1 : (double)(c1 - c0) / 1e6;
}

/* What the daemon spends after a release, once it is quiet again: its
 * looks for memory the client may have kept, which a large process gets
 * later, off the loop (daemon/core/requests/still_held.h). ms of CPU. */
static double audit_after(void)
{
    uint64_t c0 = dcpu_ns();
    sleep_us(300000);
    return (double)(quiet(20000) - c0) / 1e6;
}

static int send_all(int fd, const void *p, size_t n);
static int recv_all(int fd, void *p, size_t n);
static double measure_floor(int reps);

/* VRAM_BENCH_SCALE_PAUSE=<bench>: before that step, say where the daemon
 * is and wait for a line on stdin (to attach a profiler to it). */
static void pause_at(const char *bench)
{
    const char *p = getenv("VRAM_BENCH_SCALE_PAUSE");
    if (!p || strcmp(p, bench) != 0)
        return;
    fprintf(stderr, "vram-bench-scale: paused before %s: vramd pid %d, socket "
            "%s; a line on stdin goes on\n", bench, (int)dpid, sock);
    char line[16];
    if (!fgets(line, sizeof(line), stdin)) {}
}

/* ---- the measurements ---------------------------------------------------- */

static vram_client *ctl_connect(void)
{
    vram_client *c = NULL;
    struct vram_client_options o = {.name = "bench-scale-ctl", .ctl = 1,
                                    .timeout_ms = 120000};
    return vram_client_connect(sock, &o, &c) == 0 ? c : NULL;
}

/* Repetitions of a measured step come in ROUNDS, each from quiet to quiet:
 * the figure is the median round's (a noisy neighbour on a shared machine
 * spoils a round, not the figure); the spread is reported beside it. */
#define ROUNDS 5

struct rounds {
    double v[ROUNDS];
    int n;
};

static double rounds_median(struct rounds *r, double *lo, double *hi)
{
    double v[ROUNDS];
    memcpy(v, r->v, sizeof(v));
    qsort(v, (size_t)r->n, sizeof(double), cmp_double);
    *lo = r->n ? v[0] : 0;
    *hi = r->n ? v[r->n - 1] : 0;
    return median(v, (size_t)r->n);
}

static void measure_status(const char *when, uint32_t clients)
{
    char name[48];
    snprintf(name, sizeof(name), "status_%s", when);
    pause_at(name);
    vram_client *c = ctl_connect();
    if (!c) {
        fail_line(name, "connect failed");
        return;
    }
    int per = P.status_reps / ROUNDS;
    double *wall = calloc((size_t)(per * ROUNDS), sizeof(double));
    size_t bytes = 0, nw = 0;
    struct rounds r = {0};
    for (int i = 0; i < 3; i++) { /* warm */
        char *js = NULL;
        if (vram_status_json(c, &js) == 0)
            bytes = strlen(js);
        free(js);
    }
    for (int k = 0; k < ROUNDS; k++) {
        uint64_t c0 = settle();
        for (int i = 0; i < per; i++) {
            char *js = NULL;
            uint64_t t0 = now_ns();
            int e = vram_status_json(c, &js);
            wall[nw++] = (double)(now_ns() - t0) / 1e3;
            free(js);
            if (e < 0) {
                fail_line(name, "status: %s", vram_strerror(e));
                goto out;
            }
        }
        r.v[r.n++] = (double)(quiet(5000) - c0) / 1e6 / per;
    }
    double lo, hi, ms = rounds_median(&r, &lo, &hi);
    double w = median(wall, nw);
    line(name, "status request: daemon CPU per call (median of rounds)", ms,
         "ms", 5.0, "\"clients\":%u,\"devices\":%u,\"chunks\":%llu,"
         "\"reply_bytes\":%zu,\"rounds_min\":%.4f,\"rounds_max\":%.4f,"
         "\"wall_median_ms\":%.3f,\"wall\":\"the round trip, with libvram "
         "decoding the reply\",\"reps\":%zu", clients, P.ndev,
         (unsigned long long)(dev_chunks() * P.ndev), bytes, lo, hi, w / 1e3,
         nw);
out:
    free(wall);
    vram_client_close(c);
}

static void measure_empty(uint32_t clients)
{
    pause_at("empty_client");
    int per = P.empty_reps / ROUNDS;
    for (int i = 0; i < 20; i++) { /* warm */
        vram_client *c = ctl_connect();
        vram_client_close(c);
    }
    struct rounds r = {0}, f = {0};
    double wall = 0;
    for (int k = 0; k < ROUNDS; k++) {
        uint64_t c0 = settle();
        uint64_t t0 = now_ns();
        for (int i = 0; i < per; i++) {
            vram_client *c = ctl_connect();
            if (!c) {
                fail_line("empty_client", "connect %d failed", i);
                return;
            }
            vram_client_close(c);
        }
        wall += (double)(now_ns() - t0) / 1e3 / per / ROUNDS;
        r.v[r.n++] = (double)(quiet(5000) - c0) / 1e3 / per;
        /* the floor, alternated with the daemon's rounds */
        f.v[f.n++] = measure_floor(per);
    }
    double lo, hi, us = rounds_median(&r, &lo, &hi);
    double flo, fhi, fl = rounds_median(&f, &flo, &fhi);
    line("empty_client", "connect + hello + close of a client holding "
         "nothing: daemon CPU per client (median of rounds)", us, "us", 50.0,
         "\"clients\":%u,\"chunks\":%llu,\"rounds_min\":%.1f,"
         "\"rounds_max\":%.1f,\"wall_us\":%.1f,\"reps\":%d,"
         "\"floor_us\":%.1f,\"floor_min\":%.1f,\"floor\":\"a bare epoll "
         "server's CPU per connection: accept, SO_PEERCRED, the same bytes in "
         "and out, close\"", clients, (unsigned long long)(dev_chunks() * P.ndev),
         lo, hi, wall, per * ROUNDS, fl, flo);
}

/* The floor of an empty client: a bare epoll server on a Unix socket that
 * accepts, reads the peer's credentials, reads a hello's bytes, writes a
 * reply's and closes at the end, as little as a daemon can do per
 * connection. Its CPU per connection, as the daemon's above. */
static void floor_server(int l, size_t req, size_t rep)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = l};
    epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
    char buf[512] = {0};
    for (;;) {
        struct epoll_event out[16];
        int n = epoll_wait(ep, out, 16, -1);
        for (int i = 0; i < n; i++) {
            int fd = out[i].data.fd;
            if (fd == l) {
                int c = accept4(l, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (c < 0)
                    continue;
                struct ucred cr;
                socklen_t len = sizeof(cr);
                getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &len);
                struct epoll_event ce = {.events = EPOLLIN, .data.fd = c};
                epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
                continue;
            }
            struct iovec io = {buf, sizeof(buf)};
            struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1};
            ssize_t r = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
            if (r > 0) {
                if ((size_t)r >= req)
                    send_all(fd, buf, rep);
            } else if (r == 0) {
                epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
            }
        }
    }
}

static double measure_floor(int reps)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/floor.sock", dir);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(a.sun_path))
        return -1;
    memcpy(a.sun_path, path, strlen(path) + 1);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        listen(l, 128) < 0)
        return -1;
    /* the bytes of libvram's hello and vramd's reply to it */
    size_t req = 116, rep = 137;
    fflush(NULL);
    pid_t srv = fork();
    if (srv == 0)
        floor_server(l, req, rep);
    close(l);
    char buf[512] = {0};
    uint64_t c0 = 0;
    for (int i = -20; i < reps; i++) {
        if (i == 0)
            c0 = cpu_ns_of(srv);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
            send_all(fd, buf, req) < 0 || recv_all(fd, buf, rep) < 0) {
            if (fd >= 0)
                close(fd);
            kill(srv, SIGKILL);
            waitpid(srv, NULL, 0);
            return -1;
        }
        close(fd);
    }
    sleep_us(50000);
    double us = (double)(cpu_ns_of(srv) - c0) / 1e3 / reps;
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    unlink(path);
    return us;
}

/* ---- control round trip against a bare epoll ping-pong ------------------ */

static int send_all(int fd, const void *p, size_t n)
{
    struct iovec io = {(void *)p, n};
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1};
    while (n) {
        ssize_t r = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        io.iov_base = (char *)io.iov_base + r;
        io.iov_len -= (size_t)r;
        n -= (size_t)r;
    }
    return 0;
}

static int recv_all(int fd, void *p, size_t n)
{
    while (n) {
        struct iovec io = {p, n};
        struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1};
        ssize_t r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p = (char *)p + r;
        n -= (size_t)r;
    }
    return 0;
}

/* The echo peer: an epoll loop, as vramd's, that reads a ping frame's bytes
 * (recvmsg, non-blocking) and writes its reply's (sendmsg). */
static void echo_peer(int fd, size_t req, size_t rep)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    char buf[512] = {0};
    size_t have = 0;
    for (;;) {
        struct epoll_event out;
        int n = epoll_wait(ep, &out, 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(1);
        struct iovec io = {buf + have, sizeof(buf) - have};
        struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1};
        ssize_t r = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (r == 0)
            _exit(0);
        if (r < 0)
            continue;
        have += (size_t)r;
        while (have >= req) {
            if (send_all(fd, buf, rep) < 0)
                _exit(0);
            memmove(buf, buf + req, have - req);
            have -= req;
        }
    }
}

static void measure_ping(void)
{
    const char *bn = "control_round_trip";
    pause_at(bn);
    vram_client *c = ctl_connect();
    if (!c) {
        fail_line(bn, "connect failed");
        return;
    }
    int reps = P.ping_reps, warm = 500, block = 100;
    double *ping = calloc((size_t)reps, sizeof(double));
    double *bare = calloc((size_t)reps, sizeof(double));
    /* The bytes libvram and vramd write for a ping, with ids of as many
     * digits as the measured pings' (the ids go on counting). */
    char js[128];
    int id = warm + reps;
    size_t req = VW_FRAME_HEADER_SIZE +
                 (size_t)snprintf(js, sizeof(js), "{\"type\":\"ping\",\"id\":%d}", id);
    size_t rep = VW_FRAME_HEADER_SIZE +
                 (size_t)snprintf(js, sizeof(js),
                                  "{\"type\":\"reply\",\"id\":%d,\"ok\":true}", id);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        fail_line(bn, "socketpair: %s", strerror(errno));
        goto out;
    }
    fflush(NULL);
    pid_t peer = fork();
    if (peer == 0) {
        close(sv[0]);
        echo_peer(sv[1], req, rep);
    }
    close(sv[1]);
    char buf[512] = {0};
    int np = 0, nb = 0;
    bool ok = true;
    for (int i = 0; i < warm && ok; i++)
        ok = vram_client_ping(c) == 0 && send_all(sv[0], buf, req) == 0 &&
             recv_all(sv[0], buf, rep) == 0;
    /* In rounds, each after the daemon went quiet; in a round, blocks of
     * pings and of bare round trips alternate. Per block: the daemon's CPU
     * per ping, the echo peer's per echo. */
    int per = reps / ROUNDS, nblk = reps / block + ROUNDS, kb = 0;
    double *dblk = calloc((size_t)nblk, sizeof(double));
    double *pblk = calloc((size_t)nblk, sizeof(double));
    struct rounds ratio = {0};
    for (int k = 0; ok && k < ROUNDS; k++) {
        int p0 = np, b0 = nb;
        settle();
        while (ok && (np < p0 + per || nb < b0 + per) && kb < nblk) {
            uint64_t d0 = dcpu_ns();
            int n0 = np;
            for (int i = 0; i < block && np < p0 + per && ok; i++) {
                uint64_t t0 = now_ns();
                ok = vram_client_ping(c) == 0;
                ping[np++] = (double)(now_ns() - t0) / 1e3;
            }
            dblk[kb] = np > n0 ? (double)(dcpu_ns() - d0) / 1e3 / (np - n0) : 0;
            uint64_t e0 = cpu_ns_of(peer);
            n0 = nb;
            for (int i = 0; i < block && nb < b0 + per && ok; i++) {
                uint64_t t0 = now_ns();
                ok = send_all(sv[0], buf, req) == 0 &&
                     recv_all(sv[0], buf, rep) == 0;
                bare[nb++] = (double)(now_ns() - t0) / 1e3;
            }
            pblk[kb++] = nb > n0 ? (double)(cpu_ns_of(peer) - e0) / 1e3 / (nb - n0)
                                 : 0;
        }
        double rb = median(bare + b0, (size_t)(nb - b0));
        ratio.v[ratio.n++] = rb > 0 ? median(ping + p0, (size_t)(np - p0)) / rb : 0;
    }
    double dcpu = median(dblk, (size_t)kb), pcpu = median(pblk, (size_t)kb);
    free(dblk);
    free(pblk);
    close(sv[0]);
    waitpid(peer, NULL, 0);
    if (!ok) {
        fail_line(bn, "a round trip failed");
        goto out;
    }
    double lo, hi, rt = rounds_median(&ratio, &lo, &hi);
    double p = median(ping, (size_t)np), q = median(bare, (size_t)nb);
    line(bn, "vram_client_ping against a bare epoll ping-pong of the same "
         "bytes (the median round's ratio of median round trips, blocks of "
         "100 alternate)", rt, "ratio", 1.5,
         "\"rounds_min\":%.3f,\"rounds_max\":%.3f,"
         "\"ping_median_us\":%.2f,\"bare_median_us\":%.2f,"
         "\"ping_p90_us\":%.2f,\"bare_p90_us\":%.2f,"
         "\"daemon_cpu_per_ping_us\":%.2f,\"peer_cpu_per_echo_us\":%.2f,"
         "\"request_bytes\":%zu,\"reply_bytes\":%zu,\"round_trips\":%d",
         lo, hi, p, q, ping[(size_t)(0.9 * (np - 1))],
         bare[(size_t)(0.9 * (nb - 1))], dcpu, pcpu, req, rep, np);
out:
    free(ping);
    free(bare);
    vram_client_close(c);
}

/* ---- the run ------------------------------------------------------------- */

/* Where it ran: the machine is shared, its load is part of the figures. */
static void environment_line(void)
{
    char load[64] = "", kern[128] = "";
    FILE *f = fopen("/proc/loadavg", "re");
    if (f) {
        if (!fgets(load, sizeof(load), f)) {}
        fclose(f);
    }
    f = fopen("/proc/sys/kernel/osrelease", "re");
    if (f) {
        if (!fgets(kern, sizeof(kern), f)) {}
        fclose(f);
    }
    load[strcspn(load, " ")] = '\0';
    kern[strcspn(kern, "\n")] = '\0';
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    printf("{\"bench\":\"environment\",\"backend\":\"host\",\"what\":"
           "\"the machine\",\"value\":%ld,\"unit\":\"cpus\",\"kernel\":\"%s\","
           "\"loadavg_1m\":%s,\"fd_limit\":%llu,\"devices\":%u,"
           "\"device_gib\":%llu,\"chunk_mib\":2,\"clients\":%u,"
           "\"checks\":%s,\"mode\":\"%s\"}\n", sysconf(_SC_NPROCESSORS_ONLN),
           kern, load[0] ? load : "0", (unsigned long long)rl.rlim_cur,
           P.ndev, (unsigned long long)P.dev_gib, P.clients,
           opt_checks ? "true" : "false", P.clients == QUICK.clients ? "quick"
                                                                   : "full");
    fflush(stdout);
}

static void usage(void)
{
    fprintf(stderr, "usage: vram-bench-scale [--quick] [--checks] "
            "[--vramd PATH] [--keep]\n");
}

int main(int argc, char **argv)
{
    bool keep = false;
    struct worker g = {0}, L = {0}, R = {0};
    struct worker *fw = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            P = QUICK;
        else if (strcmp(argv[i], "--checks") == 0)
            opt_checks = true;
        else if (strcmp(argv[i], "--keep") == 0)
            keep = true;
        else if (strcmp(argv[i], "--vramd") == 0 && i + 1 < argc)
            opt_vramd = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl = {20000, 20000};
    setrlimit(RLIMIT_NOFILE, &rl);
    if (daemon_start() < 0) {
        fail_line("setup", "vramd did not start");
        return 1;
    }
    uint64_t nch = dev_chunks() * P.ndev;
    struct res r;
    environment_line();
    long rss_start = proc_kib(dpid, "VmRSS:");
    line("daemon_rss_start", "daemon resident memory after start", rss_start / 1024.0,
         "MiB", 64, "\"devices\":%u,\"chunks\":%llu", P.ndev,
         (unsigned long long)nch);

    /* Empty daemon: status and empty clients with no holder. */
    measure_status("idle", 0);

    /* 256 memory-holding clients. */
    fw = calloc(P.fillers, sizeof(*fw));
    uint64_t held = 0;
    uint32_t per = P.clients / P.fillers;
    for (uint32_t f = 0; f < P.fillers; f++) {
        if (worker_start(&fw[f]) < 0 || worker_send(&fw[f], OP_FILL, f * per,
                                                    f == P.fillers - 1
                                                        ? P.clients - f * per
                                                        : per) < 0) {
            fail_line("setup", "filler %u did not start", f);
            goto end;
        }
    }
    for (uint32_t f = 0; f < P.fillers; f++) {
        if (worker_wait(&fw[f], &r) < 0) {
            fail_line("setup", "filler %u: %s", f, r.why);
            goto end;
        }
        held += r.v;
    }

    line("daemon_rss_filled", "daemon resident memory with every chunk "
         "held by 256 clients", proc_kib(dpid, "VmRSS:") / 1024.0, "MiB", 64,
         "\"chunks_held\":%llu", (unsigned long long)held);

    /* G: one grant of 18,000 chunks under the fd limit. */
    if (worker_start(&g) < 0 || worker_start(&L) < 0 || worker_start(&R) < 0) {
        fail_line("setup", "workers did not start");
        goto end;
    }
    int dfd0 = proc_fds(dpid);
    double ms = timed(&g, OP_GRANT, 0, P.grant, &r);
    bool granted = ms >= 0;
    if (ms < 0) {
        fail_line("grant_one_call", "%s", r.why);
        line("grant_one_call", "one grant of many chunks in one call under "
             "a 20,000 fd limit works (1: yes)", 0, "ok", 0,
             "\"chunks\":%u,\"fd_limit\":20000,\"target\":1,\"met\":false",
             P.grant);
    } else {
        struct res fr;
        worker_do(&g, OP_FDS, 0, 0, &fr);
        line("grant_one_call", "one grant of many chunks in one call under a "
             "20,000 fd limit works (1: yes)", 1, "ok", 0,
             "\"chunks\":%u,\"fd_limit\":20000,\"target\":1,\"met\":true,"
             "\"daemon_cpu_ms\":%.3f,\"wall_ms\":%.3f,\"client_fds\":%llu,"
             "\"daemon_fds_before\":%d,\"daemon_fds_after\":%d",
             P.grant, ms, r.us / 1e3, (unsigned long long)fr.v, dfd0,
             proc_fds(dpid));
        held += P.grant;
    }

    /* L lends; R registers (at once: its initial window is never lent).
     * A step that fails is reported and what depends on it is left out;
     * the rest goes on (a daemon from before the fixes fails some of
     * them). */
    bool lending = worker_do(&L, OP_LEND, 0, 0, &r) == 0;
    uint64_t lent = r.v;
    if (!lending)
        fail_line("lend", "stage 0's expert_request of every chunk it may "
                  "borrow: %s", r.why);
    held += lent;
    if (lending) {
        worker_send(&R, OP_REGISTER, 0, 0);
        if (worker_wait(&R, &r) < 0) {
            fail_line("register", "reserver: %s", r.why);
            lending = false;
        }
    }

    uint32_t clients = P.clients + 3;
    measure_status("loaded", clients);
    measure_empty(clients);
    measure_ping();

    /* The recall: R's reserve of its whole window, without hold. */
    if (lending) {
        ms = timed(&R, OP_RESERVE, s1_native(), 0, &r);
        if (ms < 0 || r.rc != -EAGAIN) {
            fail_line("recall", "the reserve answered %lld (%s), not EAGAIN",
                      (long long)r.rc, r.why);
            lending = false;
        } else {
            line("recall", "kv_reserve recalling pool loans: daemon CPU", ms,
                 "ms", 10.0, "\"chunks\":%u,\"lender_holds\":%llu,"
                 "\"chunks_held\":%llu", P.recall, (unsigned long long)lent,
                 (unsigned long long)held);
        }
    }
    /* ... answered: the release of what it recalled. */
    if (lending) {
        ms = timed(&L, OP_ANSWER, P.recall, 0, &r);
        if (ms < 0)
            fail_line("recall_release", "%s", r.why);
        else
            line("recall_release", "chunk_release answering that recall: "
                 "daemon CPU", ms, "ms", 10.0, "\"chunks\":%u,"
                 "\"lender_holds_after\":%llu,\"kept_audit_ms\":%.3f",
                 P.recall, (unsigned long long)r.v, audit_after());
        /* ... and R's reserve again: a grant of what came back. */
        ms = timed(&R, OP_RESERVE, s1_native(), 0, &r);
        if (ms < 0)
            fail_line("recall_regrant", "%s", r.why);
        else
            line("recall_regrant", "the reserve again, granting what came "
                 "back: daemon CPU", ms, "ms", 0, "\"chunks\":%u,"
                 "\"wall_ms\":%.3f,\"per_chunk_us\":%.3f", P.recall,
                 r.us / 1e3, ms * 1e3 / P.recall);
    }

    /* G's releases: a small one while it holds them all, then a large one. */
    ms = granted ? timed(&g, OP_SHRINK, 16, 0, &r) : -1;
    if (ms < 0)
        fail_line("release_small", "%s", granted ? r.why : "no grant to release");
    else
        line("release_small", "chunk_release of 16 chunks by a client holding "
             "many: daemon CPU", ms, "ms", 0.5, "\"chunks\":16,"
             "\"client_holds\":%u,\"kept_audit_ms\":%.3f", P.grant,
             audit_after());
    ms = granted ? timed(&g, OP_SHRINK, P.release, 0, &r) : -1;
    if (ms < 0)
        fail_line("release", "%s", granted ? r.why : "no grant to release");
    else
        line("release", "chunk_release of many chunks: daemon CPU", ms, "ms",
             10.0, "\"chunks\":%u,\"client_holds_before\":%u,"
             "\"kept_audit_ms\":%.3f", P.release, P.grant - 16, audit_after());

    long rss = proc_kib(dpid, "VmRSS:"), hwm = proc_kib(dpid, "VmHWM:");
    line("daemon_rss", "daemon resident memory at scale (after all steps)",
         rss / 1024.0, "MiB", 64, "\"peak_mib\":%.1f,\"devices\":%u,"
         "\"chunks\":%llu,\"clients\":%u", hwm / 1024.0, P.ndev,
         (unsigned long long)nch, clients);
    line("daemon_rss_peak", "daemon peak resident memory (VmHWM) over the run",
         hwm / 1024.0, "MiB", 64, NULL);
end:
    worker_stop(&g);
    worker_stop(&L);
    worker_stop(&R);
    for (uint32_t f = 0; fw && f < P.fillers; f++)
        worker_stop(&fw[f]);
    free(fw);
    daemon_stop();
    if (!keep && !failures) {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd)) {}
    } else {
        fprintf(stderr, "vram-bench-scale: the daemon's log is %s\n", logpath);
    }
    return failures ? 1 : 0;
}
