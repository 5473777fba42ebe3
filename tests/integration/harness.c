/* SPDX-License-Identifier: Apache-2.0 */
#include "tests/integration/harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/message.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int daemon_spawn(struct daemon *d, const char *config,
                        const char *const *args, bool again);

/* The directories of the daemons a test started: removed when the test
 * process ends without a failed check (a failure keeps them, logs and
 * all), never by the processes it forks. */
static char made[64][128];
static int nmade;
static pid_t maker;

static void cleanup(void)
{
    if (getpid() != maker || check_failures)
        return;
    for (int i = 0; i < nmade; i++) {
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "rm -rf '%.127s'", made[i]);
        if (system(cmd)) {}
    }
}

static void keep_for_cleanup(const char *dir)
{
    if (nmade == 0) {
        maker = getpid();
        atexit(cleanup);
    }
    if (nmade < 64 && !strchr(dir, '\''))
        snprintf(made[nmade++], sizeof(made[0]), "%s", dir);
}

void unique_name(char *buf, size_t len, const char *prefix)
{
    uint64_t v = 0;
    ssize_t n;
    do {
        n = getrandom(&v, sizeof(v), 0);
    } while (n < 0 && errno == EINTR);
    REQUIRE(n == (ssize_t)sizeof(v), "getrandom: %s", strerror(errno));
    snprintf(buf, len, "%s-%016llx", prefix, (unsigned long long)v);
}

int daemon_start(struct daemon *d, const char *config, const char *const *args)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "/tmp/vramd-test-XXXXXX");
    if (mkdtemp(d->dir))
        keep_for_cleanup(d->dir);
    else
        return -errno;
    snprintf(d->sock, sizeof(d->sock), "%s/vramd.sock", d->dir);
    snprintf(d->log, sizeof(d->log), "%s/vramd.log", d->dir);
    return daemon_spawn(d, config, args, false);
}

int daemon_restart(struct daemon *d, const char *config, const char *const *args)
{
    return daemon_spawn(d, config, args, true);
}

static int daemon_spawn(struct daemon *d, const char *config,
                        const char *const *args, bool again)
{
    if (config) {
        snprintf(d->config, sizeof(d->config), "%s/vramd.json", d->dir);
        FILE *f = fopen(d->config, "w");
        if (!f)
            return -errno;
        fputs(config, f);
        fclose(f);
    }
    const char *bin = getenv("VRAMD_BIN");
    if (!bin)
        bin = "vramd";
    d->pid = fork();
    if (d->pid == 0) {
        const char *argv[32];
        int n = 0;
        argv[n++] = bin;
        argv[n++] = "--socket";
        argv[n++] = d->sock;
        /* VRAM_TEST_BACKEND picks the daemon's backend (the GPU suite and
         * the benchmark set it to cuda); host by default. */
        const char *backend = getenv("VRAM_TEST_BACKEND");
        argv[n++] = "--backend";
        argv[n++] = backend && *backend ? backend : "host";
        argv[n++] = "--log-level";
        argv[n++] = "debug";
        if (config) {
            argv[n++] = "--config";
            argv[n++] = d->config;
        }
        for (int i = 0; args && args[i] && n < 30; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        int fd = open(d->log, O_WRONLY | O_CREAT | (again ? O_APPEND : O_TRUNC),
                      0644);
        dup2(fd, 2);
        dup2(fd, 1);
        close(fd);
        setenv("VRAMD_CHECK_INVARIANTS", "1", 0); /* the benchmark says 0 */
        setenv("VRAMD_CHECK_REPLIES", "1", 0); /* unless the benchmark said 0 */
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) {
        int ws;
        if (waitpid(d->pid, &ws, WNOHANG) == d->pid) {
            d->exit_status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            if (WIFSIGNALED(ws))
                fprintf(stderr, "vramd was killed by signal %d during start; "
                        "its log:\n", WTERMSIG(ws));
            else
                fprintf(stderr, "vramd exited with %d during start; its log:\n",
                        WEXITSTATUS(ws));
            char cmd[256];
            snprintf(cmd, sizeof(cmd), "cat %s >&2", d->log);
            if (system(cmd)) {}
            d->pid = 0;
            return -ECHILD;
        }
        vram_client *c = NULL;
        struct vram_client_options o = {.name = "harness", .ctl = 1};
        if (vram_client_connect(d->sock, &o, &c) == 0) {
            vram_client_close(c);
            /* Started again: the same configuration, the same fds once the
             * processes it watches are gone; the first baseline stands. */
            if (again)
                return 0;
            /* The pool fills in the background (and a GPU driver opens its
             * own fds as it starts): the baseline is taken once the daemon's
             * fds and ready chunks stop changing. */
            int last = -1;
            for (int k = 0; k < 100; k++) {
                sleep_ms(50);
                cJSON *st = daemon_status(d);
                uint64_t ready = 0;
                const cJSON *dev;
                cJSON_ArrayForEach(dev, cJSON_GetObjectItem(st, "devices"))
                    ready += json_u64(dev, "pool_ready_chunks");
                int chunk_fds = (int)json_u64(cJSON_GetObjectItem(st, "daemon"),
                                              "chunk_fds");
                cJSON_Delete(st);
                sleep_ms(20); /* the status connection's fds must be gone */
                d->base_fds = daemon_fd_count(d) - chunk_fds;
                int now = d->base_fds + (int)(ready << 16);
                if (now == last)
                    break;
                last = now;
            }
            return 0;
        }
        sleep_ms(10);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
    return -ETIMEDOUT;
}

int daemon_stop(struct daemon *d)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    int st = 0;
    for (int i = 0; i < 1000; i++) {
        if (waitpid(d->pid, &st, WNOHANG) == d->pid)
            break;
        if (i == 999) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &st, 0);
            CHECK(0, "vramd did not stop within 10 s of SIGTERM");
        }
        sleep_ms(10);
    }
    d->pid = 0;
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    CHECK(rc == 0, "vramd exited with %d (log %s)", rc, d->log);
    CHECK(access(d->sock, F_OK) != 0, "socket %s left behind", d->sock);
    if (rc != 0 || check_failures) {
        /* What went wrong is usually a warning far above the tail. */
        fprintf(stderr, "---- vramd warnings and notices (%s) ----\n", d->log);
        char cmd[512];
        snprintf(cmd, sizeof(cmd),
                 "grep -E ' (warning|error|notice|crit):' %s | tail -n 80 >&2",
                 d->log);
        if (system(cmd)) {}
        fprintf(stderr, "---- vramd log, the end (%s) ----\n", d->log);
        snprintf(cmd, sizeof(cmd), "tail -n 40 %s >&2", d->log);
        if (system(cmd)) {}
    }
    return rc;
}

void daemon_kill(struct daemon *d)
{
    if (d->pid > 0) {
        kill(d->pid, SIGKILL);
        waitpid(d->pid, NULL, 0);
        d->pid = 0;
    }
}

int daemon_fd_count(const struct daemon *d)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
    DIR *dir = opendir(path);
    if (!dir)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)))
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

vram_client *connect_client(const struct daemon *d, const char *name)
{
    vram_client *c = NULL;
    char err[256] = "";
    struct vram_client_options o = {.name = name, .error = err,
                                    .error_len = sizeof(err)};
    int e = vram_client_connect(d->sock, &o, &c);
    REQUIRE(e == 0, "connect as %s: %s %s", name, vram_strerror(e), err);
    return c;
}

cJSON *daemon_status(const struct daemon *d)
{
    vram_client *c = NULL;
    struct vram_client_options o = {.name = "harness-status", .ctl = 1};
    if (vram_client_connect(d->sock, &o, &c) < 0)
        return NULL;
    char *text = NULL;
    cJSON *st = NULL;
    if (vram_status_json(c, &text) == 0)
        st = cJSON_Parse(text);
    vram_free(text);
    vram_client_close(c);
    return st;
}

bool daemon_log_contains(const struct daemon *d, const char *needle)
{
    FILE *f = fopen(d->log, "r");
    if (!f)
        return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

bool daemon_log_wait(const struct daemon *d, const char *needle, int ms)
{
    for (int t = 0; t < ms; t += 20) {
        if (daemon_log_contains(d, needle))
            return true;
        sleep_ms(20);
    }
    return daemon_log_contains(d, needle);
}

void daemon_check_no_leaks(const struct daemon *d)
{
    /* Disconnects are processed asynchronously: give them a moment. */
    int fds = 0, chunk_fds = 0;
    for (int i = 0; i < 100; i++) {
        cJSON *st = daemon_status(d);
        chunk_fds = (int)json_u64(cJSON_GetObjectItem(st, "daemon"), "chunk_fds");
        int clients = cJSON_GetArraySize(cJSON_GetObjectItem(st, "clients"));
        cJSON_Delete(st);
        sleep_ms(20); /* the status connection's own fds must be gone */
        fds = daemon_fd_count(d) - chunk_fds;
        if (fds == d->base_fds && clients <= 1) /* ourselves */
            break;
        sleep_ms(20);
    }
    CHECK(fds == d->base_fds, "daemon holds %d non-chunk fds, %d at start",
          fds, d->base_fds);
    if (fds != d->base_fds) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd | grep -v memfd >&2",
                 (int)d->pid);
        if (system(cmd)) {}
        cJSON *cs = daemon_status(d);
        const cJSON *cl;
        cJSON_ArrayForEach(cl, cJSON_GetObjectItem(cs, "clients"))
            fprintf(stderr, "  client %llu %s (%s)\n",
                    (unsigned long long)json_u64(cl, "id"),
                    cJSON_GetStringValue(cJSON_GetObjectItem(cl, "name")),
                    cJSON_GetStringValue(cJSON_GetObjectItem(cl, "state")));
        cJSON_Delete(cs);
    }
    cJSON *st = daemon_status(d);
    const cJSON *dev;
    cJSON_ArrayForEach(dev, cJSON_GetObjectItem(st, "devices")) {
        CHECK(json_u64(dev, "free_bytes") == json_u64(dev, "capacity_bytes"),
              "device %llu: %llu of %llu bytes free with no client",
              (unsigned long long)json_u64(dev, "id"),
              (unsigned long long)json_u64(dev, "free_bytes"),
              (unsigned long long)json_u64(dev, "capacity_bytes"));
    }
    cJSON_Delete(st);
}

pid_t spawn(int (*fn)(const struct daemon *, void *), const struct daemon *d,
            void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int rc = fn(d, arg);
        fflush(NULL);
        _exit(rc | (check_failures ? 1 : 0));
    }
    return pid;
}

int wait_child(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

uint64_t json_u64(const cJSON *o, const char *key)
{
    uint64_t v = 0;
    vw_json_u64(o, key, &v);
    return v;
}

uint64_t status_dev(const cJSON *st, int dev, const char *key)
{
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItem(st, "devices"))
        if ((int)json_u64(d, "id") == dev)
            return json_u64(d, key);
    return UINT64_MAX;
}

const cJSON *status_stage(const cJSON *st, uint32_t stage)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(st, "stages"))
        if (json_u64(s, "id") == stage)
            return s;
    return NULL;
}

bool wait_dev_value(const struct daemon *d, int dev, const char *key,
                    uint64_t want, int ms)
{
    for (int t = 0; t <= ms; t += 20) {
        cJSON *st = daemon_status(d);
        uint64_t v = status_dev(st, dev, key);
        cJSON_Delete(st);
        if (v == want)
            return true;
        sleep_ms(20);
    }
    return false;
}

void rv_init(struct rendezvous *r)
{
    /* Close-on-exec: a vramd started later must not hold them. */
    if (pipe2(r->to_child, O_CLOEXEC) || pipe2(r->to_parent, O_CLOEXEC))
        abort();
}

void rv_send(int fd, uint64_t v)
{
    if (write(fd, &v, sizeof(v)) != sizeof(v))
        abort();
}

uint64_t rv_recv(int fd)
{
    uint64_t v = 0;
    if (read(fd, &v, sizeof(v)) != sizeof(v))
        return UINT64_MAX;
    return v;
}

void fill_pattern(void *p, size_t n, uint64_t tag)
{
    uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i += 512) /* one word per 4 KiB page */
        w[i] = tag * 0x9e3779b97f4a7c15ull + i;
    w[n / 8 - 1] = ~tag;
}

bool check_pattern(const void *p, size_t n, uint64_t tag)
{
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i += 512)
        if (w[i] != tag * 0x9e3779b97f4a7c15ull + i)
            return false;
    return w[n / 8 - 1] == ~tag;
}

/* ---- raw frames, for tests that speak the protocol by hand ------------- */

int raw_connect(const struct daemon *d)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    REQUIRE(strlen(d->sock) < sizeof(sa.sun_path), "socket path too long");
    memcpy(sa.sun_path, d->sock, strlen(d->sock) + 1);
    REQUIRE(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect");
    return fd;
}

void raw_send(int fd, const char *json)
{
    struct vw_frame_header h = {.magic = VW_FRAME_MAGIC,
                                  .version = VW_PROTOCOL_OLDEST,
                                  .payload_len = (uint32_t)strlen(json)};
    uint8_t hdr[VW_FRAME_HEADER_SIZE];
    vw_frame_header_encode(&h, hdr);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)json, strlen(json)}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
    CHECK(sendmsg(fd, &m, MSG_NOSIGNAL) > 0, "sendmsg");
}

/* Next reply or event, or NULL on EOF / timeout. */
cJSON *raw_recv(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
        return NULL;
    uint8_t hdr[VW_FRAME_HEADER_SIZE];
    if (recv(fd, hdr, sizeof(hdr), MSG_WAITALL) != sizeof(hdr))
        return NULL;
    struct vw_frame_header h;
    char why[128];
    if (vw_frame_header_decode(hdr, &h, why, sizeof(why)) < 0)
        return NULL;
    char *buf = calloc(1, h.payload_len + 1);
    if (recv(fd, buf, h.payload_len, MSG_WAITALL) != (ssize_t)h.payload_len) {
        free(buf);
        return NULL;
    }
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    return j;
}

