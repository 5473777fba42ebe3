/* SPDX-License-Identifier: Apache-2.0 */
#include "tests/integration/fake_vramd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/check.h"
#include "proto/frame.h"

bool under_asan(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return true;
#else
    return false;
#endif
#else
    return false;
#endif
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the fake daemon ---------------------------------------------------- */

struct fake_conn {
    int fd;
    fake_status_fn fn;
    void *ud;
    const char *type; /* of the request fn answers */
};

const char *fake_request_type(const struct fake_conn *c)
{
    return c->type;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *s = p;
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    char *s = p;
    while (n) {
        ssize_t r = recv(fd, s, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        s += r;
        n -= (size_t)r;
    }
    return 0;
}

int fake_send(struct fake_conn *c, const char *payload, size_t len)
{
    struct vw_frame_header h = {.magic = VW_FRAME_MAGIC,
                                  .version = VW_PROTOCOL_OLDEST,
                                  .payload_len = (uint32_t)len};
    uint8_t hdr[VW_FRAME_HEADER_SIZE];
    vw_frame_header_encode(&h, hdr);
    if (write_all(c->fd, hdr, sizeof(hdr)) < 0)
        return -1;
    return write_all(c->fd, payload, len);
}

static void reply(struct fake_conn *c, const char *fmt, uint64_t id)
{
    char text[512];
    int n = snprintf(text, sizeof(text), fmt, (unsigned long long)id);
    fake_send(c, text, (size_t)n);
}

/* One connection: requests in, answers out, until the peer goes. */
static void *serve(void *arg)
{
    struct fake_conn *c = arg;
    for (;;) {
        uint8_t hdr[VW_FRAME_HEADER_SIZE];
        struct vw_frame_header h;
        char why[128];
        if (read_all(c->fd, hdr, sizeof(hdr)) < 0 ||
            vw_frame_header_decode(hdr, &h, why, sizeof(why)) < 0)
            break;
        char *text = malloc((size_t)h.payload_len + 1);
        if (!text || read_all(c->fd, text, h.payload_len) < 0) {
            free(text);
            break;
        }
        cJSON *m = cJSON_ParseWithLength(text, h.payload_len);
        free(text);
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(m, "type"));
        const cJSON *idv = cJSON_GetObjectItem(m, "id");
        uint64_t id = cJSON_IsNumber(idv) ? (uint64_t)idv->valuedouble : 0;
        if (!type) {
        } else if (strcmp(type, "hello") == 0) {
            reply(c, "{\"type\":\"reply\",\"id\":%llu,\"ok\":true,\"version\":1,"
                  "\"capabilities\":[],\"client\":7,\"backend\":\"host\"}", id);
        } else if (strcmp(type, "ping") == 0) {
            reply(c, "{\"type\":\"reply\",\"id\":%llu,\"ok\":true}", id);
        } else if (strcmp(type, "status") == 0 ||
                   strcmp(type, "weights_list") == 0) {
            c->type = type;
            c->fn(c, id, c->ud);
            c->type = NULL;
        } else {
            reply(c, "{\"type\":\"reply\",\"id\":%llu,\"ok\":false,\"error\":"
                  "\"ENOSYS\",\"message\":\"not in this fake\"}", id);
        }
        cJSON_Delete(m);
    }
    close(c->fd);
    free(c);
    return NULL;
}

static void fake_main(int lfd, int ready, fake_status_fn fn, void *ud,
                      pid_t test)
{
    /* A test killed at its timeout takes its fake with it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != test)
        _exit(0);
    signal(SIGPIPE, SIG_IGN);
    char one = 1;
    if (write(ready, &one, 1) != 1)
        _exit(1);
    close(ready);
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            _exit(1);
        }
        struct fake_conn *c = malloc(sizeof(*c));
        pthread_t t;
        if (!c) {
            close(fd);
            continue;
        }
        *c = (struct fake_conn){.fd = fd, .fn = fn, .ud = ud};
        if (pthread_create(&t, NULL, serve, c) != 0) {
            close(fd);
            free(c);
            continue;
        }
        pthread_detach(t);
    }
}

int fake_vramd_start(struct fake_vramd *f, fake_status_fn fn, void *ud)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/vramd-fake-XXXXXX");
    if (!mkdtemp(f->dir))
        return -errno;
    snprintf(f->sock, sizeof(f->sock), "%s/vramd.sock", f->dir);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(f->sock) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, f->sock, strlen(f->sock) + 1);
    int p[2];
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(lfd, 64) < 0 || pipe2(p, O_CLOEXEC) < 0) {
        int e = -errno;
        if (lfd >= 0)
            close(lfd);
        return e;
    }
    fflush(NULL);
    pid_t test = getpid();
    f->pid = fork();
    if (f->pid == 0) {
        close(p[0]);
        fake_main(lfd, p[1], fn, ud, test);
        _exit(0);
    }
    close(lfd);
    close(p[1]);
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    char one = 0;
    bool up = f->pid > 0 && poll(&pf, 1, 30000) == 1 && read(p[0], &one, 1) == 1;
    close(p[0]);
    if (!up) {
        fake_vramd_stop(f);
        return -EIO;
    }
    return 0;
}

void fake_vramd_stop(struct fake_vramd *f)
{
    if (!f)
        return;
    if (f->pid > 0) {
        kill(f->pid, SIGKILL);
        waitpid(f->pid, NULL, 0);
        f->pid = 0;
    }
    if (f->sock[0])
        unlink(f->sock);
    if (f->dir[0])
        rmdir(f->dir);
    f->sock[0] = f->dir[0] = '\0';
}

/* ---- running a tool ----------------------------------------------------- */

static void child_exec(const char *const *argv, size_t as_limit, int out, int err)
{
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        _exit(126);
    if (as_limit) {
        struct rlimit rl = {as_limit, as_limit};
        setrlimit(RLIMIT_AS, &rl);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
}

static int exit_code(int ws)
{
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : -1;
}

/* Reads what fd has into *buf (growing it); false at its end. */
static bool drain(int fd, char **buf, size_t *len, size_t *cap)
{
    if (*cap - *len < 65536) {
        size_t c = *cap ? *cap * 2 : 1u << 20;
        char *p = realloc(*buf, c + 1);
        REQUIRE(p, "out of memory for a tool's output");
        *buf = p;
        *cap = c;
        p[*len] = '\0';
    }
    ssize_t r = read(fd, *buf + *len, *cap - *len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (r <= 0)
        return false;
    *len += (size_t)r;
    (*buf)[*len] = '\0';
    return true;
}

int tool_run(const char *const *argv, int deadline_ms, size_t as_limit,
             struct tool_run *r)
{
    memset(r, 0, sizeof(*r));
    r->status = -1;
    int o[2], e[2];
    REQUIRE(pipe2(o, O_CLOEXEC) == 0 && pipe2(e, O_CLOEXEC) == 0, "pipes");
    int64_t t0 = now_ms();
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0)
        child_exec(argv, as_limit, o[1], e[1]);
    close(o[1]);
    close(e[1]);
    size_t ocap = 0, ecap = 0;
    bool oopen = true, eopen = true;
    while (oopen || eopen) {
        int left = (int)(t0 + deadline_ms - now_ms());
        if (left <= 0) {
            r->killed = true;
            kill(pid, SIGKILL);
            break;
        }
        struct pollfd p[2] = {{.fd = oopen ? o[0] : -1, .events = POLLIN},
                              {.fd = eopen ? e[0] : -1, .events = POLLIN}};
        if (poll(p, 2, left) < 0 && errno != EINTR)
            break;
        if (p[0].revents && !drain(o[0], &r->out, &r->out_len, &ocap))
            oopen = false;
        if (p[1].revents && !drain(e[0], &r->err, &r->err_len, &ecap))
            eopen = false;
    }
    close(o[0]);
    close(e[0]);
    int left = (int)(t0 + deadline_ms - now_ms());
    r->status = tool_wait(pid, left > 0 ? left : 1, &r->maxrss_kib);
    r->seconds = (double)(now_ms() - t0) / 1000.0;
    if (!r->out)
        r->out = calloc(1, 1);
    if (!r->err)
        r->err = calloc(1, 1);
    return r->status;
}

void tool_run_free(struct tool_run *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

pid_t tool_start(const char *const *argv, size_t as_limit, int *out_fd)
{
    int o[2];
    REQUIRE(pipe2(o, O_CLOEXEC) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0)
        child_exec(argv, as_limit, o[1], 2);
    close(o[1]);
    *out_fd = o[0];
    return pid;
}

int tool_wait(pid_t pid, int deadline_ms, long *maxrss_kib)
{
    int64_t end = now_ms() + deadline_ms;
    int ws = 0;
    struct rusage ru;
    for (;;) {
        pid_t w = wait4(pid, &ws, WNOHANG, &ru);
        if (w == pid)
            break;
        if (w < 0)
            return -1;
        if (now_ms() >= end) {
            kill(pid, SIGKILL);
            if (wait4(pid, &ws, 0, &ru) != pid)
                return -1;
            break;
        }
        struct timespec ts = {0, 10 * 1000000L}; /* polling for its end */
        nanosleep(&ts, NULL);
    }
    if (maxrss_kib)
        *maxrss_kib = ru.ru_maxrss; /* KiB on Linux */
    return exit_code(ws);
}

/* ---- HTTP --------------------------------------------------------------- */

int http_get(int port, const char *path, int deadline_ms, char **body,
             size_t *body_len)
{
    *body = NULL;
    *body_len = 0;
    int64_t end = now_ms() + deadline_ms;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Connection: close\r\n\r\n", path);
    if (write_all(fd, req, (size_t)n) < 0) {
        close(fd);
        return 0;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    bool open = true;
    while (open) {
        int left = (int)(end - now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        open = drain(fd, &buf, &len, &cap);
    }
    close(fd);
    int code = 0;
    if (open || !buf || sscanf(buf, "HTTP/1.%*d %d", &code) != 1) {
        free(buf);
        return 0;
    }
    const char *b = strstr(buf, "\r\n\r\n");
    b = b ? b + 4 : buf + len;
    *body_len = len - (size_t)(b - buf);
    *body = malloc(*body_len + 1);
    REQUIRE(*body, "out of memory");
    memcpy(*body, b, *body_len);
    (*body)[*body_len] = '\0';
    free(buf);
    return code;
}
