/* SPDX-License-Identifier: Apache-2.0 */
/* Silent and slow peers, and peers that take every slot: a connection that
 * says no hello, or leaves a frame half-sent, is closed after its deadline
 * (with the fds that came with the frame's first part); one user cannot
 * take more than its share of connections; and slots above limits.clients
 * stay for admins, so root can always look and evict. Needs root (to
 * become other users). */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/attack/attack.h"
#include "proto/frame.h"

/* The deadlines are what deadlines() waits out: 3 s, long enough that
 * this process, starved on a loaded machine, still says its own hellos in
 * time. slots() keeps them out of its way (60 s). */
#define CONFIG(deadline_ms)                                                      \
    "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}],"                    \
    " \"limits\": {\"clients\": 8, \"connections_per_user\": 4,"               \
    "              \"admin_connections\": 2, \"hello_timeout_ms\": " deadline_ms \
    ",              \"frame_timeout_ms\": " deadline_ms "},"                     \
    " \"access\": {\"allow\": {\"gids\": [65534]}, \"socket_group\": \"nogroup\","  \
    "            \"socket_mode\": \"0660\"}}"
static const char *config = CONFIG("3000");
static const char *config_slots = CONFIG("60000");

/* As uid, opens n connections that say hello (or not) and keeps them until
 * the parent says; reports how many the daemon admitted. */
struct hog {
    uid_t uid;
    int n;
    bool hello;
    struct rendezvous rv;
};

static bool admitted(int fd, bool hello)
{
    if (!hello) {
        /* A refused connection gets an error frame at once and is closed. */
        cJSON *r = raw_recv(fd, 200);
        bool refused = r != NULL;
        cJSON_Delete(r);
        return !refused;
    }
    /* Hello at once; the first frame back says which: the hello's reply,
     * or the refusal vramd sent before it closed (still there to read when
     * the hello found the connection closed, which is no failure here). */
    const char *json = "{\"type\":\"hello\",\"id\":1,\"version\":1,\"name\":\"hog\"}";
    struct vw_frame_header h = {.magic = VW_FRAME_MAGIC,
                                  .version = VW_PROTOCOL_OLDEST,
                                  .payload_len = (uint32_t)strlen(json)};
    uint8_t hdr[VW_FRAME_HEADER_SIZE];
    vw_frame_header_encode(&h, hdr);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)json, strlen(json)}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
    if (sendmsg(fd, &m, MSG_NOSIGNAL) < 0 && errno != EPIPE && errno != ECONNRESET)
        CHECK(0, "sendmsg: %s", strerror(errno));
    cJSON *r = raw_recv(fd, 30000);
    bool ok = r && cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")) &&
              json_u64(r, "id") == 1;
    cJSON_Delete(r);
    return ok;
}

static int hog_run(const struct daemon *d, void *p)
{
    struct hog *h = p;
    REQUIRE(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(h->uid) == 0,
            "become uid %u", (unsigned)h->uid);
    int fds[64], n = 0, ok = 0;
    /* One at a time: each says hello well within its deadline. */
    for (; n < h->n && raw_connect_many(d, &fds[n], 1) == 1; n++)
        ok += admitted(fds[n], h->hello);
    rv_send(h->rv.to_parent[1], (uint64_t)ok);
    rv_recv(h->rv.to_child[0]);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return 0;
}

static pid_t hog_start(const struct daemon *d, struct hog *h, uid_t uid, int n,
                       bool hello, uint64_t *ok)
{
    h->uid = uid;
    h->n = n;
    h->hello = hello;
    rv_init(&h->rv);
    pid_t p = spawn(hog_run, d, h);
    *ok = rv_recv(h->rv.to_parent[0]);
    return p;
}

static void hog_stop(struct hog *h, pid_t p)
{
    rv_send(h->rv.to_child[1], 1);
    CHECK(wait_child(p) == 0, "hog %u failed", (unsigned)h->uid);
}

static void slots(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, config_slots, NULL) == 0, "start vramd");
    chmod(d.dir, 0755);
    struct attack_base b;
    attack_baseline(&d, &b);
    /* One user: 4 connections, no more. */
    struct hog h1, h2, h3;
    uint64_t ok;
    pid_t p1 = hog_start(&d, &h1, 20001, 10, true, &ok);
    CHECK_EQ_U(ok, 4);
    CHECK(daemon_log_wait(&d, "limits.connections_per_user", 2000),
          "the per-user refusal is not logged");
    /* Two users fill the 8 slots; a third is turned away. */
    pid_t p2 = hog_start(&d, &h2, 20002, 4, true, &ok);
    CHECK_EQ_U(ok, 4);
    pid_t p3 = hog_start(&d, &h3, 20003, 2, true, &ok);
    CHECK_EQ_U(ok, 0);
    /* Root still gets in (an admin slot), sees them all, and evicts one. */
    vram_client *root = connect_client(&d, "operator");
    char *st = NULL;
    CHECK(vram_status_json(root, &st) == 0, "status: %s", vram_client_last_error(root));
    cJSON *s = cJSON_Parse(st);
    free(st);
    int hogs = 0;
    uint32_t victim = 0;
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItem(s, "clients")) {
        const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(cl, "name"));
        if (nm && strcmp(nm, "hog") == 0) {
            hogs++;
            victim = (uint32_t)json_u64(cl, "id");
        }
    }
    cJSON_Delete(s);
    CHECK_EQ_U(hogs, 8);
    CHECK(vram_admin_evict(root, victim) == 0, "evict: %s",
          vram_client_last_error(root));
    vram_client_close(root);
    hog_stop(&h1, p1);
    hog_stop(&h2, p2);
    hog_stop(&h3, p3);
    attack_after(&d, &b, "slots taken", 4096);
    daemon_stop(&d);
}

static bool closed_within(int fd, int ms)
{
    for (int t = 0; t < ms; t += 50) {
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return true;
        usleep(50000);
    }
    return false;
}

static void deadlines(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    struct attack_base b;
    attack_baseline(&d, &b);
    /* Silent: no hello. */
    int silent[6];
    CHECK(raw_connect_many(&d, silent, 6) == 6, "connect");
    /* Half a frame, with fds parked in the daemon. */
    int half = raw_connect(&d);
    raw_send(half, "{\"type\":\"hello\",\"id\":1,\"version\":1,\"name\":\"half\"}");
    cJSON_Delete(raw_recv(half, 2000));
    {
        const char *json = "{\"type\":\"ping\",\"id\":2}";
        struct vw_frame_header h = {.magic = VW_FRAME_MAGIC,
                                      .version = VW_PROTOCOL_OLDEST,
                                      .payload_len = (uint32_t)strlen(json),
                                      .nfds = 8};
        uint8_t hdr[VW_FRAME_HEADER_SIZE];
        vw_frame_header_encode(&h, hdr);
        int pfd[2];
        REQUIRE(pipe(pfd) == 0, "pipe");
        struct iovec iov = {hdr, sizeof(hdr)};
        union {
            struct cmsghdr c;
            char buf[CMSG_SPACE(8 * sizeof(int))];
        } u;
        memset(&u, 0, sizeof(u));
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                           .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(8 * sizeof(int));
        for (int i = 0; i < 8; i++)
            ((int *)CMSG_DATA(cm))[i] = pfd[i % 2];
        REQUIRE(sendmsg(half, &m, MSG_NOSIGNAL) > 0, "sendmsg");
        close(pfd[0]);
        close(pfd[1]);
    }
    /* Slow: a byte every 150 ms of a frame that never ends in time. */
    int slow = raw_connect(&d);
    raw_send(slow, "{\"type\":\"hello\",\"id\":1,\"version\":1,\"name\":\"slow\"}");
    cJSON_Delete(raw_recv(slow, 2000));
    const char *json = "{\"type\":\"ping\",\"id\":3}";
    struct vw_frame_header h = {.magic = VW_FRAME_MAGIC,
                                  .version = VW_PROTOCOL_OLDEST,
                                  .payload_len = (uint32_t)strlen(json)};
    uint8_t hdr[VW_FRAME_HEADER_SIZE];
    vw_frame_header_encode(&h, hdr);
    bool slow_closed = false;
    for (size_t i = 0; i < sizeof(hdr) && !slow_closed; i++) {
        if (send(slow, hdr + i, 1, MSG_NOSIGNAL) != 1)
            slow_closed = true;
        usleep(150000);
        char c;
        ssize_t n = recv(slow, &c, 1, MSG_DONTWAIT);
        slow_closed |= n == 0 || (n < 0 && errno == ECONNRESET);
    }
    slow_closed |= closed_within(slow, 15000);
    CHECK(slow_closed, "a frame sent a byte at a time was not cut off");
    for (int i = 0; i < 6; i++)
        CHECK(closed_within(silent[i], 15000), "silent connection %d not closed", i);
    CHECK(closed_within(half, 15000), "a half-sent frame's connection not closed");
    CHECK(daemon_log_count(&d, "said no hello within 3000 ms") == 6,
          "silent closes not logged");
    CHECK(daemon_log_count(&d, "left a frame half-sent") == 2,
          "half-sent closes not logged");
    for (int i = 0; i < 6; i++)
        close(silent[i]);
    close(half);
    close(slow);
    /* The parked fds went with the connection. */
    attack_after(&d, &b, "silent and slow peers", 4096);
    daemon_stop(&d);
}

int main(void)
{
    REQUIRE(geteuid() == 0, "this test needs root to become other users");
    deadlines();
    slots();
    return check_report("test_attack_slow");
}
