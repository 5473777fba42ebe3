/* SPDX-License-Identifier: Apache-2.0 */
/* Attacks with file descriptors: vramd out of fds (connections waiting that
 * it cannot accept, a grant whose handles it cannot make), floods of
 * connections and of unsolicited fds. vramd neither spins nor drops a
 * client for it, and serves again once fds are back. */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/attack/attack.h"
#include "proto/frame.h"

static void set_nofile(const struct daemon *d, rlim_t soft)
{
    struct rlimit old, lim;
    REQUIRE(prlimit(d->pid, RLIMIT_NOFILE, NULL, &old) == 0, "prlimit get");
    lim.rlim_cur = soft;
    lim.rlim_max = old.rlim_max;
    REQUIRE(prlimit(d->pid, RLIMIT_NOFILE, &lim, NULL) == 0, "prlimit set");
}

static rlim_t nofile(const struct daemon *d)
{
    struct rlimit lim;
    REQUIRE(prlimit(d->pid, RLIMIT_NOFILE, NULL, &lim) == 0, "prlimit get");
    return lim.rlim_cur;
}

/* The limit that leaves vramd exactly one fd: the number of its second
 * free fd (fd numbers below the soft limit are what it may open; the
 * table may have holes). */
static rlim_t one_fd_left(const struct daemon *d)
{
    static bool open_fd[65536];
    memset(open_fd, 0, sizeof(open_fd));
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
    DIR *dir = opendir(path);
    REQUIRE(dir, "opendir %s", path);
    struct dirent *de;
    while ((de = readdir(dir)))
        if (de->d_name[0] != '.') {
            long fd = strtol(de->d_name, NULL, 10);
            if (fd >= 0 && fd < 65536)
                open_fd[fd] = true;
        }
    closedir(dir);
    int seen = 0;
    for (int fd = 0; fd < 65536; fd++)
        if (!open_fd[fd] && ++seen == 2)
            return (rlim_t)fd;
    REQUIRE(0, "vramd has no two free fds below 65536");
    return 0;
}

/* What vramd's fd n is (its /proc link), "" when none. */
static void fd_target(const struct daemon *d, int n, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)d->pid, n);
    ssize_t r = readlink(path, buf, len - 1);
    buf[r > 0 ? r : 0] = 0;
}

/* Connections it cannot accept: it pauses accepting instead of spinning,
 * says so a bounded number of times, and accepts again when it can. */
static void accept_exhausted(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    struct attack_base b;
    attack_baseline(&d, &b);
    rlim_t was = nofile(&d);
    set_nofile(&d, (rlim_t)daemon_fd_count(&d) + 4);
    int fds[40];
    int n = raw_connect_many(&d, fds, 40);
    CHECK(n == 40, "only %d connections queued", n);
    long cpu0 = daemon_cpu_ms(&d);
    sleep(2);
    long cpu = daemon_cpu_ms(&d) - cpu0;
    CHECK(cpu >= 0 && cpu < 300, "vramd used %ld ms of CPU in 2 s out of fds",
          cpu);
    int lines = daemon_log_count(&d, "cannot accept connections");
    CHECK(lines >= 1 && lines <= 2, "%d lines about accepting", lines);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    set_nofile(&d, was);
    attack_after(&d, &b, "accept out of fds", 4096);
    daemon_stop(&d);
}

/* A grant whose handles vramd cannot make: an error reply (EMFILE) with
 * what it could map, the rest back in the pool, and the connection stays. */
static void grant_exhausted(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}],"
                             " \"pool\": {\"prefill_chunks\": 0}}", NULL) == 0,
            "start vramd");
    struct attack_base b;
    attack_baseline(&d, &b);
    vram_client *c = connect_client(&d, "starved");
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 1, &st) == 0, "stage");
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 128 * MIB, 1, &r) == 0,
            "region");
    rlim_t was = nofile(&d);
    set_nofile(&d, (rlim_t)daemon_fd_count(&d) + 5);
    int e = vram_region_grow(c, r, 32);
    CHECK(e == -EMFILE, "grow out of fds: %d %s", e, vram_client_last_error(c));
    struct vram_region_info in;
    vram_region_info(c, r, &in);
    CHECK(in.mapped > 0 && in.mapped < 32, "%u chunks mapped", in.mapped);
    CHECK(vram_client_ping(c) == 0, "the connection did not stay");
    cJSON *s = daemon_status(&d);
    CHECK_EQ_U(status_dev(s, 0, "fixed_bytes"), (uint64_t)in.mapped * 2 * MIB);
    cJSON_Delete(s);
    set_nofile(&d, was);
    CHECK(vram_region_grow(c, r, 32 - in.mapped) == 0, "grow with fds back: %s",
          vram_client_last_error(c));
    vram_region_info(c, r, &in);
    CHECK_EQ_U(in.mapped, 32);
    vram_client_close(c);
    attack_after(&d, &b, "a grant out of fds", 8192);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
}

/* A client whose process is pinned (at its first request that may give it
 * memory) with one fd left to vramd: the pin takes it, the copy of the pin
 * that watches for a handed-off connection cannot be made. That costs the
 * watch, and nothing else: vramd's other fds stay as they were. (It used
 * to close fd 0 then, from a zeroed handle: once fd 0 was a client's
 * connection, that connection was closed under its watch, and the next
 * connection, given fd 0, was refused: "cannot watch its connection: File
 * exists".) Twice, with a client between the two that holds fd 0 once it
 * was freed. */
static void pin_exhausted(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    struct attack_base b;
    attack_baseline(&d, &b);
    char fd0[256], now[256];
    fd_target(&d, 0, fd0, sizeof(fd0));
    rlim_t was = nofile(&d);
    vram_client *bystander = NULL;
    for (int round = 0; round < 2; round++) {
        vram_client *c = connect_client(&d, round ? "pinned-last-2" : "pinned-last");
        set_nofile(&d, one_fd_left(&d));
        uint32_t st;
        int e = vram_stage_register_adhoc(c, 0, 0, 1, &st);
        set_nofile(&d, was);
        CHECK(e == 0, "round %d: a stage with one fd left: %d %s", round, e,
              vram_client_last_error(c));
        fd_target(&d, 0, now, sizeof(now));
        CHECK(strcmp(now, fd0) == 0, "round %d: vramd's fd 0 was '%s', is '%s'",
              round, fd0, now);
        CHECK(vram_client_ping(c) == 0, "round %d: ping: %s", round,
              vram_client_last_error(c));
        if (bystander)
            CHECK(vram_client_ping(bystander) == 0, "the client connected between "
                  "the rounds lost its connection: %s",
                  vram_client_last_error(bystander));
        vram_client_close(c);
        if (!bystander)
            bystander = connect_client(&d, "bystander");
    }
    CHECK(vram_client_ping(bystander) == 0, "bystander: %s",
          vram_client_last_error(bystander));
    vram_client_close(bystander);
    attack_after(&d, &b, "a pin with one fd left", 4096);
    daemon_stop(&d);
}

/* Frames with fds nobody asked for, many of them: each refused, every fd
 * closed by vramd. */
static void unsolicited(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    struct attack_base b;
    attack_baseline(&d, &b);
    int fd = raw_connect(&d);
    raw_send(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1,\"name\":\"fds\"}");
    cJSON_Delete(raw_recv(fd, 2000));
    int pipefd[2];
    REQUIRE(pipe(pipefd) == 0, "pipe");
    for (int k = 0; k < 200; k++) {
        const char *json = "{\"type\":\"ping\",\"id\":2}";
        struct vw_frame_header h = {.magic = VW_FRAME_MAGIC,
                                      .version = VW_PROTOCOL_OLDEST,
                                      .payload_len = (uint32_t)strlen(json),
                                      .nfds = 16};
        uint8_t hdr[VW_FRAME_HEADER_SIZE];
        vw_frame_header_encode(&h, hdr);
        struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)json, strlen(json)}};
        union {
            struct cmsghdr c;
            char buf[CMSG_SPACE(16 * sizeof(int))];
        } u;
        memset(&u, 0, sizeof(u));
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2,
                           .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(16 * sizeof(int));
        int *p = (int *)CMSG_DATA(cm);
        for (int i = 0; i < 16; i++)
            p[i] = pipefd[i % 2];
        REQUIRE(sendmsg(fd, &m, MSG_NOSIGNAL) > 0, "sendmsg");
        cJSON *rep = raw_recv(fd, 2000);
        const char *err = cJSON_GetStringValue(cJSON_GetObjectItem(rep, "error"));
        CHECK(err && strcmp(err, "EINVAL") == 0, "frame %d with fds: %s", k,
              err ? err : "no reply");
        cJSON_Delete(rep);
        if (check_failures)
            break;
    }
    close(fd);
    close(pipefd[0]);
    /* vramd closed every fd it was sent: the pipe's write end is ours only. */
    close(pipefd[1]);
    attack_after(&d, &b, "unsolicited fds", 4096);
    daemon_stop(&d);
}

/* Many connections at once, then gone: all served or refused, none kept. */
static void connection_flood(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    struct attack_base b;
    attack_baseline(&d, &b);
    static int fds[600];
    int n = raw_connect_many(&d, fds, 600);
    CHECK(n > 100, "only %d connections", n);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    attack_after(&d, &b, "a connection flood", 8192);
    daemon_stop(&d);
}

int main(void)
{
    accept_exhausted();
    grant_exhausted();
    pin_exhausted();
    unsolicited();
    connection_flood();
    return check_report("test_attack_fds");
}
