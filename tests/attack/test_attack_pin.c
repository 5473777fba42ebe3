/* SPDX-License-Identifier: Apache-2.0 */
/* Who a client is, read when it first may get memory: vramd pins a client's
 * process by its connection, reads its start time and records it in the
 * state file at its first request that may give it memory, not at connect
 * (a vramctl that only looks costs no pidfd, no read of /proc and no
 * record). The record must then carry the connecting process's pid and
 * start time, exactly, before the client holds anything; and a connection
 * whose process is gone before that request (inherited by a child) gets
 * nothing: it is closed as handed over, and no record names the dead pid,
 * which another process may have taken by then. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/attack/attack.h"
#include "daemon/state/format.h"

static char state_path[200];

/* The state file's live record for pid, if any. */
static bool record_of(pid_t pid, struct vd_state_holder *out)
{
    FILE *f = fopen(state_path, "r");
    REQUIRE(f, "no state file at %s", state_path);
    static uint8_t buf[8 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    const struct vd_state_hdr *h = (const void *)buf;
    REQUIRE(n >= sizeof(*h) && h->version == VD_STATE_VERSION &&
                h->off_holders + (uint64_t)h->nholders *
                                     sizeof(struct vd_state_holder) <= n,
            "a state file of %zu bytes", n);
    for (uint32_t i = 0; i < h->nholders; i++) {
        struct vd_state_holder r;
        memcpy(&r, buf + h->off_holders + i * sizeof(r), sizeof(r));
        if (r.client && r.pid == pid) {
            *out = r;
            return true;
        }
    }
    return false;
}

/* Field 22 of /proc/PID/stat, read here, apart from vramd's reading. */
static uint64_t start_time_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    REQUIRE(f, "%s", path);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    REQUIRE(p, "%s: no command", path);
    unsigned long long v = 0;
    REQUIRE(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u "
                          "%*u %*d %*d %*d %*d %*d %*d %llu", &v) == 1,
            "%s: no start time", path);
    return v;
}

static vram_client *looker(const struct daemon *d)
{
    vram_client *c = NULL;
    struct vram_client_options o = {.name = "looker", .ctl = 1};
    REQUIRE(vram_client_connect(d->sock, &o, &c) == 0, "connect a ctl client");
    return c;
}

/* Connects and says hello, then hands its connection to a child and exits
 * before asking for anything: the child (its connection's holder now)
 * asks for a stage once this process is gone, and tells through rv
 * whether vramd answered (1) or closed the connection (0). */
static int hands_over(const struct daemon *d, void *p)
{
    struct rendezvous *rv = p;
    int fd = raw_connect(d);
    raw_send(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1,\"name\":\"gone\"}");
    cJSON *r = raw_recv(fd, 5000);
    REQUIRE(r && cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")), "hello");
    cJSON_Delete(r);
    pid_t me = getpid();
    pid_t kid = fork();
    if (kid == 0) {
        while (getppid() == me) /* until the connecting process is gone */
            usleep(10000);
        usleep(100000); /* and reaped, most likely */
        raw_send(fd, "{\"type\":\"stage_register\",\"id\":2,\"device\":0,"
                     "\"first_layer\":0,\"last_layer\":0}");
        r = raw_recv(fd, 5000);
        rv_send(rv->to_parent[1], r ? 1 : 0);
        cJSON_Delete(r);
        _exit(0);
    }
    rv_send(rv->to_parent[1], (uint64_t)me);
    _exit(0);
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    snprintf(state_path, sizeof(state_path), "%s.state", d.sock);
    struct attack_base b;
    attack_baseline(&d, &b);
    pid_t me = getpid();
    struct vd_state_holder rec;

    /* A client that only looks is never recorded. */
    vram_client *ctl = looker(&d);
    char *js = NULL;
    CHECK(vram_status_json(ctl, &js) == 0, "status");
    free(js);
    CHECK(vram_client_ping(ctl) == 0, "ping");
    CHECK(!record_of(me, &rec), "a client that only looked has a record "
          "(client %u)", rec.client);

    /* Its first request that may give it memory records it, with the start
     * time of the process that connected, before it holds anything. */
    vram_client *eng = connect_client(&d, "engine-a");
    CHECK(!record_of(me, &rec), "recorded before its first memory request");
    uint32_t st;
    CHECK(vram_stage_register_adhoc(eng, 0, 0, 1, &st) == 0, "stage: %s",
          vram_client_last_error(eng));
    REQUIRE(record_of(me, &rec), "no record after the first memory request");
    CHECK_EQ_U(rec.starttime, start_time_of(me));
    CHECK(rec.uid == (uint32_t)getuid(), "uid %u", rec.uid);
    CHECK(strcmp(rec.name, "engine-a") == 0, "recorded as '%.48s'", rec.name);
    struct vd_state_holder again;
    CHECK(vram_client_ping(eng) == 0 && record_of(me, &again) &&
              again.client == rec.client && again.starttime == rec.starttime,
          "one record, kept as it was");
    /* Holding no memory, it is reaped as it goes, its record with it. */
    vram_client_close(eng);
    for (int t = 0; t < 40 && record_of(me, &rec); t++)
        usleep(50000);
    CHECK(!record_of(me, &rec), "a reaped client keeps its record");
    vram_client_close(ctl);
    CHECK(!record_of(me, &rec), "a record after the ctl client went");

    /* Connected, then gone before its first memory request, its connection
     * held by a child: the child gets nothing, the dead pid no record. */
    struct rendezvous rv;
    rv_init(&rv);
    pid_t a = spawn(hands_over, &d, &rv);
    pid_t gone = (pid_t)rv_recv(rv.to_parent[0]);
    CHECK(wait_child(a) == 0, "the connecting process");
    CHECK(rv_recv(rv.to_parent[0]) == 0, "a connection whose process is gone "
          "was answered");
    CHECK(daemon_log_wait(&d, "connection lives on in another process", 3000),
          "the hand-over is not logged");
    CHECK(!record_of(gone, &rec), "the gone process was recorded (start time "
          "%llu)", (unsigned long long)rec.starttime);

    attack_after(&d, &b, "clients pinned at their first memory request", 4096);
    daemon_stop(&d);
    return check_report("test_attack_pin");
}
