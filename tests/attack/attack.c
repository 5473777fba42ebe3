/* SPDX-License-Identifier: Apache-2.0 */
#include "tests/attack/attack.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long status_field(const struct daemon *d, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, kl) == 0) {
            v = strtol(line + kl, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

long daemon_rss_kib(const struct daemon *d)
{
    return status_field(d, "VmRSS:");
}

long daemon_cpu_ms(const struct daemon *d)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)d->pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    /* Fields after the command (which may hold spaces): state is the 3rd,
     * utime the 14th, stime the 15th. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
               &ut, &st) != 2)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    return (long)((ut + st) * 1000 / (unsigned long)hz);
}

int daemon_log_count(const struct daemon *d, const char *needle)
{
    FILE *f = fopen(d->log, "r");
    if (!f)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

void attack_baseline(const struct daemon *d, struct attack_base *b)
{
    b->fds = daemon_fd_count(d);
    b->rss_kib = daemon_rss_kib(d);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void attack_after(const struct daemon *d, const struct attack_base *b,
                  const char *what, long rss_slack_kib)
{
    REQUIRE(kill(d->pid, 0) == 0, "%s: vramd is gone", what);
    char err[256] = "";
    struct vram_client_options o = {.name = "after-attack", .error = err,
                                    .error_len = sizeof(err),
                                    .timeout_ms = ATTACK_ASAN ? 60000 : 10000};
    vram_client *c = NULL;
    int e;
    /* The attacker's connections may still be closing: a few tries. */
    for (int i = 0; (e = vram_client_connect(d->sock, &o, &c)) == -E2BIG && i < 30;
         i++)
        sleep_ms(100);
    CHECK(e == 0, "%s: a newcomer cannot connect: %s %s", what, vram_strerror(e),
          err);
    if (c) {
        CHECK(vram_client_ping(c) == 0, "%s: ping: %s", what,
              vram_client_last_error(c));
        uint32_t st, r;
        e = vram_stage_register_adhoc(c, 0, 0, 1, &st);
        if (e == 0)
            e = vram_region_create(c, st, VRAM_REGION_FIXED, 8 * MIB, 1, &r);
        if (e == 0)
            e = vram_region_grow(c, r, 2);
        if (e == 0)
            e = vram_stage_release(c, st);
        CHECK(e == 0, "%s: a newcomer's grow: %s", what, vram_client_last_error(c));
        vram_client_close(c);
    }
    int fds = -1;
    for (int i = 0; i < 60; i++) {
        fds = daemon_fd_count(d);
        if (fds <= b->fds + 4)
            break;
        sleep_ms(50);
    }
    CHECK(fds <= b->fds + 4, "%s: vramd holds %d fds, %d before", what, fds,
          b->fds);
    long rss = daemon_rss_kib(d);
    CHECK(ATTACK_ASAN || (rss >= 0 && rss <= b->rss_kib + rss_slack_kib),
          "%s: vramd's RSS is %ld KiB, %ld before", what, rss, b->rss_kib);
    cJSON *st = daemon_status(d);
    REQUIRE(st, "%s: no status", what);
    const cJSON *dev;
    cJSON_ArrayForEach(dev, cJSON_GetObjectItem(st, "devices")) {
        uint64_t sum = json_u64(dev, "free_bytes") + json_u64(dev, "fixed_bytes") +
                       json_u64(dev, "kv_bytes") + json_u64(dev, "loaned_bytes") +
                       json_u64(dev, "quarantined_bytes");
        CHECK(sum == json_u64(dev, "capacity_bytes"),
              "%s: device %llu: free+fixed+kv+loaned+quarantined = %llu, "
              "capacity %llu", what, (unsigned long long)json_u64(dev, "id"),
              (unsigned long long)sum,
              (unsigned long long)json_u64(dev, "capacity_bytes"));
    }
    cJSON_Delete(st);
}

int raw_connect_many(const struct daemon *d, int *fds, int n)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    REQUIRE(strlen(d->sock) < sizeof(sa.sun_path), "socket path too long");
    memcpy(sa.sun_path, d->sock, strlen(d->sock) + 1);
    int k = 0;
    for (; k < n; k++) {
        fds[k] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[k] < 0 ||
            connect(fds[k], (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            if (fds[k] >= 0)
                close(fds[k]);
            break;
        }
    }
    return k;
}

int vramd_run(const char *const *args, char *out, size_t len, int ms)
{
    const char *bin = getenv("VRAMD_BIN") ? getenv("VRAMD_BIN") : "vramd";
    int p[2];
    REQUIRE(pipe(p) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        const char *argv[32] = {bin};
        int n = 1;
        for (int i = 0; args[i] && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    size_t got = 0;
    int status = -1;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 > ms)
            break;
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        ssize_t r = 0;
        if (poll(&pf, 1, 20) > 0 && got + 1 < len &&
            (r = read(p[0], out + got, len - 1 - got)) > 0)
            got += (size_t)r;
        if (r <= 0)
            sleep_ms(10); /* at the pipe's end poll returns at once */
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid) {
            status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            break;
        }
    }
    if (status < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    ssize_t r;
    while (got + 1 < len && (r = read(p[0], out + got, len - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(p[0]);
    return status;
}
