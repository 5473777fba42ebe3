/* Attacks with file descriptors: vramd out of fds (connections waiting that
 * it cannot accept, a grant whose handles it cannot make), floods of
 * connections and of unsolicited fds. vramd neither spins nor drops a
 * client for it, and serves again once fds are back. */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "attack.h"
#include "frame.h"

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
        struct vram_frame_header h = {.magic = VRAM_FRAME_MAGIC,
                                      .version = VRAM_PROTOCOL_VERSION,
                                      .payload_len = (uint32_t)strlen(json),
                                      .nfds = 16};
        uint8_t hdr[VRAM_FRAME_HEADER_SIZE];
        vram_frame_header_encode(&h, hdr);
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
    unsolicited();
    connection_flood();
    return check_report("test_attack_fds");
}
