/* SPDX-License-Identifier: Apache-2.0 */
/* A connection handed to another process: inherited across fork (with the
 * memory mapped) and passed as an fd. vramd notices that the process that
 * connected is gone while its connection lives on, closes the connection,
 * keeps the memory quarantined as "handed-off" while any process holds it
 * (host chunks are looked for in every process), returns it when none does
 * or when an admin evicts the client, and tells it in status and the log.
 * A process that simply exits is not mistaken for one of these. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/attack/attack.h"

/* The clients in a state (the test has one engine at a time). */
static int in_state(const struct daemon *d, const char *want)
{
    int n = 0;
    cJSON *st = daemon_status(d);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(st, "clients")) {
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(c, "state"));
        n += s && strcmp(s, want) == 0;
    }
    cJSON_Delete(st);
    return n;
}

static bool wait_state(const struct daemon *d, const char *want, int ms)
{
    for (int t = 0; t < ms; t += 50) {
        if (in_state(d, want) == 1)
            return true;
        usleep(50000);
    }
    return false;
}

static vram_client *holder(const struct daemon *d, const char *name, uint32_t n)
{
    vram_client *c = connect_client(d, name);
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 1, &st) == 0, "stage");
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 16 * MIB, 1, &r) == 0,
            "region");
    REQUIRE(vram_region_grow(c, r, n) == 0, "grow");
    memcpy(vram_region_slot(c, r, 0, 0), "mine", 5);
    return c;
}

/* Exits holding its memory, connection and all: an ordinary end. */
static int plain(const struct daemon *d, void *p)
{
    (void)p;
    holder(d, "plain", 2);
    _exit(0);
}

/* Forks a child that inherits the connection and the mappings, and exits;
 * the child lives on until the test kills it. */
static int forker(const struct daemon *d, void *p)
{
    struct rendezvous *rv = p;
    holder(d, "forker", 3);
    pid_t kid = fork();
    if (kid == 0) {
        for (;;)
            pause();
    }
    rv_send(rv->to_parent[1], (uint64_t)kid);
    _exit(0);
}

/* Passes its connection to the test over a socketpair, and exits. */
static int passer(const struct daemon *d, void *p)
{
    int *sp = p;
    vram_client *c = holder(d, "passer", 2);
    int fd = vram_client_fd(c);
    char b = 'x';
    struct iovec iov = {&b, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    memset(&u, 0, sizeof(u));
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    REQUIRE(sendmsg(sp[1], &m, 0) == 1, "sendmsg");
    _exit(0);
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    struct attack_base b;
    attack_baseline(&d, &b);

    /* An ordinary end: reaped as gone, never called handed off. */
    CHECK(wait_child(spawn(plain, &d, NULL)) == 0, "plain");
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 0, 3000), "plain not reaped");
    usleep(700000);
    CHECK(daemon_log_count(&d, "handed over") == 0,
          "a process that exited was taken for a hand-over");

    /* Inherited: the child maps the memory, so it stays quarantined. */
    struct rendezvous rv;
    rv_init(&rv);
    pid_t f = spawn(forker, &d, &rv);
    pid_t kid = (pid_t)rv_recv(rv.to_parent[0]);
    wait_child(f);
    CHECK(wait_state(&d, "handed-off", 3000), "not shown handed-off");
    CHECK(daemon_log_contains(&d, "connection lives on in another process"),
          "the hand-over is not logged");
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 3 * 2 * MIB, 2000),
          "the handed-off memory is not quarantined");
    sleep(3); /* a scan or two: the child still maps it */
    CHECK(in_state(&d, "handed-off") == 1, "memory the child maps was returned");
    /* Gone, the child holds nothing: the memory comes back. */
    kill(kid, SIGKILL);
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 0, 6000),
          "the memory did not come back once no process held it");
    CHECK(daemon_log_contains(&d, "no process holds the memory"), "not logged");

    /* Passed as an fd: nobody maps the memory, it comes back at the scan. */
    int sp[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0, "socketpair");
    pid_t ps = spawn(passer, &d, sp);
    char byte;
    char buf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = buf,
                       .msg_controllen = sizeof(buf)};
    REQUIRE(recvmsg(sp[0], &m, 0) == 1, "recvmsg");
    int conn;
    memcpy(&conn, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
    wait_child(ps);
    CHECK(daemon_log_wait(&d, "(passer, pid", 3000) &&
              daemon_log_wait(&d, "connection lives on in another process", 0) &&
              wait_dev_value(&d, 0, "quarantined_bytes", 2 * 2 * MIB, 3000),
          "the passed connection's memory was not kept");
    for (int t = 0; t < 60 && daemon_log_count(&d, "connection lives on") < 2; t++)
        usleep(50000);
    CHECK(daemon_log_count(&d, "connection lives on") == 2,
          "the passed connection was not noticed");
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 0, 6000),
          "memory nobody holds was not returned");
    char c;
    CHECK(recv(conn, &c, 1, MSG_DONTWAIT) == 0, "the passed connection is still "
          "open");
    close(conn);

    /* An admin's word returns what a process still holds. */
    rv_init(&rv);
    f = spawn(forker, &d, &rv);
    kid = (pid_t)rv_recv(rv.to_parent[0]);
    wait_child(f);
    CHECK(wait_state(&d, "handed-off", 3000), "second hand-over");
    uint32_t id = 0;
    cJSON *st = daemon_status(&d);
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItem(st, "clients"))
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cl, "state")),
                   "handed-off") == 0)
            id = (uint32_t)json_u64(cl, "id");
    cJSON_Delete(st);
    vram_client *admin = connect_client(&d, "operator");
    CHECK(vram_admin_evict(admin, id) == 0, "evict the orphan: %s",
          vram_client_last_error(admin));
    vram_client_close(admin);
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 0, 2000),
          "evicted, the memory did not come back");
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    attack_after(&d, &b, "handed-off connections", 4096);
    daemon_stop(&d);
    return check_report("test_attack_handoff");
}
