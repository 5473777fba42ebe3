/* SPDX-License-Identifier: Apache-2.0 */
/* A grant of thousands of chunks in one call goes out as the client takes
 * it: vramd makes each frame's handles only when the connection has room,
 * so a client that reads slowly (or not yet) is waited for, not dropped for
 * not reading, and vramd holds about a thousand of the grant's fds at a
 * time, not the whole grant's (issue 17: a grant of 18,000 chunks under a
 * 20,000 fd limit). What comes after the reply (another request's reply)
 * waits behind it; a client gone mid-grant leaves no fd behind. And a
 * client's fd table is grown when it connects, not fd by fd under its first
 * grant (in a process of several threads each doubling of the table waits
 * for an RCU grace period: tens of milliseconds on a first GiB). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/frame.h"
#include "tests/integration/harness.h"

#define GRANT 8000u

/* Frames read from a raw connection: their fds counted and closed. */
struct reader {
    int fd;
    char *buf;
    size_t len, cap;
    size_t fds;
};

/* Reads what is there (waiting up to ms for it); -1 at EOF or error. */
static int read_some(struct reader *r, int ms)
{
    struct pollfd p = {.fd = r->fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
        return 0;
    if (r->cap - r->len < 65536) {
        r->cap = r->cap ? r->cap * 2 : 1 << 20;
        r->buf = realloc(r->buf, r->cap);
        REQUIRE(r->buf, "out of memory");
    }
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * 64)];
    } u;
    struct iovec io = {r->buf + r->len, r->cap - r->len};
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = u.b,
                       .msg_controllen = sizeof(u.b)};
    ssize_t n = recvmsg(r->fd, &m, MSG_CMSG_CLOEXEC);
    if (n <= 0)
        return -1;
    CHECK(!(m.msg_flags & MSG_CTRUNC), "control data cut");
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            int *fds = (int *)(void *)CMSG_DATA(c);
            for (size_t i = 0; i < k; i++)
                close(fds[i]);
            r->fds += k;
        }
    r->len += (size_t)n;
    return 1;
}

/* The next whole frame's payload (caller frees), or NULL: more must come. */
static cJSON *next_frame(struct reader *r)
{
    if (r->len < VW_FRAME_HEADER_SIZE)
        return NULL;
    struct vw_frame_header h;
    char why[128];
    REQUIRE(vw_frame_header_decode((uint8_t *)r->buf, &h, why, sizeof(why)) == 0,
            "bad frame: %s", why);
    size_t total = VW_FRAME_HEADER_SIZE + h.payload_len;
    if (r->len < total)
        return NULL;
    cJSON *j = cJSON_ParseWithLength(r->buf + VW_FRAME_HEADER_SIZE,
                                     h.payload_len);
    memmove(r->buf, r->buf + total, r->len - total);
    r->len -= total;
    REQUIRE(j, "a frame that is not JSON");
    return j;
}

/* The reply to id (its last frame), reading as needed; *frames counts the
 * frames of it. */
static cJSON *reply_to(struct reader *r, uint64_t id, int ms, int *frames)
{
    for (int t = 0; t < ms;) {
        cJSON *j;
        while ((j = next_frame(r))) {
            bool more = cJSON_IsTrue(cJSON_GetObjectItem(j, "more"));
            bool mine = json_u64(j, "id") == id &&
                        strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "type")),
                               "reply") == 0;
            if (mine && frames)
                (*frames)++;
            if (mine && !more)
                return j;
            cJSON_Delete(j);
        }
        if (read_some(r, 100) < 0)
            return NULL;
        t += 100;
    }
    return NULL;
}

static uint32_t u32_of(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItem(o, a);
    return (uint32_t)json_u64(b ? cJSON_GetObjectItem(x, b) : x, "id");
}

/* hello, an ad-hoc stage and a fixed region of n chunks on raw fd. */
static uint32_t setup(struct reader *r, uint32_t n)
{
    char req[256];
    raw_send(r->fd, "{\"type\":\"hello\",\"id\":1,\"version\":1,\"name\":\"flow\"}");
    cJSON *j = reply_to(r, 1, 5000, NULL);
    REQUIRE(j && cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")), "hello");
    cJSON_Delete(j);
    raw_send(r->fd, "{\"type\":\"stage_register\",\"id\":2,\"device\":0,"
                    "\"first_layer\":0,\"last_layer\":0}");
    j = reply_to(r, 2, 5000, NULL);
    REQUIRE(j && cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")), "stage");
    uint32_t stage = u32_of(j, "stage", NULL);
    cJSON_Delete(j);
    snprintf(req, sizeof(req), "{\"type\":\"region_create\",\"id\":3,\"stage\":%u,"
             "\"kind\":\"fixed\",\"bytes\":%llu,\"lanes\":1}", stage,
             (unsigned long long)n * 2 * MIB);
    raw_send(r->fd, req);
    j = reply_to(r, 3, 5000, NULL);
    REQUIRE(j && cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")), "region");
    uint32_t region = u32_of(j, "region", NULL);
    cJSON_Delete(j);
    return region;
}

/* A client that asks for 8,000 chunks and reads nothing for a while:
 * waited for, with about a thousand of its fds made at a time. In a process
 * of its own: what it held comes back when it exits. */
static int slow_reader(const struct daemon *d, void *p)
{
    int base = *(int *)p;
    struct reader r = {.fd = raw_connect(d)};
    uint32_t region = setup(&r, GRANT);
    char req[160];
    snprintf(req, sizeof(req), "{\"type\":\"region_grow\",\"id\":4,"
             "\"region\":%u,\"chunks\":%u}", region, GRANT);
    raw_send(r.fd, req);
    /* A request behind it: its reply comes after the grant's last frame. */
    raw_send(r.fd, "{\"type\":\"ping\",\"id\":5}");
    usleep(700000);
    int held = daemon_fd_count(d) - base;
    CHECK(held > 0 && held < 1200, "vramd holds %d fds for a grant of %u "
          "chunks it is sending (about a thousand expected)", held, GRANT);
    CHECK(!daemon_log_contains(d, "does not read"), "the slow reader was "
          "dropped");
    int frames = 0;
    cJSON *j = reply_to(&r, 4, 30000, &frames);
    REQUIRE(j, "no reply to the grant");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")), "the grant failed: %s",
          cJSON_GetStringValue(cJSON_GetObjectItem(j, "message")));
    cJSON_Delete(j);
    CHECK(frames >= (int)(GRANT / VW_MAX_FDS_PER_FRAME), "%d frames", frames);
    CHECK_EQ_U(r.fds, GRANT);
    j = reply_to(&r, 5, 5000, NULL);
    CHECK(j && cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")),
          "the ping behind the grant got no reply");
    cJSON_Delete(j);
    cJSON *st = daemon_status(d);
    CHECK_EQ_U(status_dev(st, 0, "granted_bytes"), (uint64_t)GRANT * 2 * MIB);
    cJSON_Delete(st);
    close(r.fd);
    free(r.buf);
    return check_failures ? 1 : 0;
}

/* Gone in the middle of a grant: the frames never made are never made. */
static int quitter(const struct daemon *d, void *p)
{
    (void)p;
    struct reader g = {.fd = raw_connect(d)};
    uint32_t region = setup(&g, GRANT);
    char req[160];
    snprintf(req, sizeof(req), "{\"type\":\"region_grow\",\"id\":4,"
             "\"region\":%u,\"chunks\":%u}", region, GRANT);
    raw_send(g.fd, req);
    for (int i = 0; i < 5; i++)
        read_some(&g, 100);
    CHECK(g.fds > 0 && g.fds < GRANT, "%zu fds came before the close", g.fds);
    close(g.fd);
    free(g.buf);
    return check_failures ? 1 : 0;
}

/* The kernel's fd table size of this process (/proc/self/status). */
static long fd_table_size(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long n = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "FDSize: %ld", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

static void *idle_thread(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

/* Connected, the table has room for 16384 handles (or the limit) when the
 * connect returns: before any chunk came, and in a process with a second
 * thread (an engine's: there the kernel's growth waits a grace period,
 * which the connect takes and no grant does). */
static int table_grown(const struct daemon *d, void *p)
{
    (void)p;
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, idle_thread, NULL) == 0, "a second thread");
    long before = fd_table_size();
    struct rlimit rl;
    REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0, "getrlimit");
    long want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 16384 ? 16384
                                                                   : (long)rl.rlim_max;
    REQUIRE(before > 0 && before < want, "the table has %ld slots already "
            "(%ld wanted): nothing to see", before, want);
    vram_client *c = connect_client(d, "table");
    REQUIRE(c, "connect");
    long after = fd_table_size();
    CHECK(after >= want, "the fd table has %ld slots when the connect "
          "returned (%ld before, %ld wanted)", after, before, want);
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

/* A control client (vramctl) holds no chunks: its connect leaves the table
 * as it was (and takes no grace period). */
static int table_left_by_ctl(const struct daemon *d, void *p)
{
    (void)p;
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, idle_thread, NULL) == 0, "a second thread");
    long before = fd_table_size();
    REQUIRE(before > 0 && before < 16384, "the table has %ld slots already", before);
    struct vram_client_options o = {.name = "table-ctl", .ctl = 1};
    vram_client *c = NULL;
    REQUIRE(vram_client_connect(d->sock, &o, &c) == 0, "ctl connect");
    long after = fd_table_size();
    CHECK(after == before, "a control client's connect grew the fd table from "
          "%ld to %ld slots", before, after);
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, "{\"devices\": [{\"id\": 0, \"capacity\": "
                             "\"16GiB\", \"chunk\": \"2MiB\"}]}", NULL) == 0,
            "start vramd");
    int base = daemon_fd_count(&d);
    CHECK(wait_child(spawn(slow_reader, &d, &base)) == 0, "the slow reader");
    CHECK(wait_dev_value(&d, 0, "free_bytes", 16 * GIB, 5000),
          "the grant did not come back");
    CHECK(wait_child(spawn(quitter, &d, NULL)) == 0, "the quitter");
    CHECK(wait_dev_value(&d, 0, "free_bytes", 16 * GIB, 5000),
          "a grant cut short did not come back");
    CHECK(wait_child(spawn(table_grown, &d, NULL)) == 0, "the fd table");
    CHECK(wait_child(spawn(table_left_by_ctl, &d, NULL)) == 0,
          "the fd table of a control client");
    daemon_check_no_leaks(&d);
    CHECK(daemon_stop(&d) == 0, "vramd did not stop cleanly");
    return check_report("test_grant_flow");
}
