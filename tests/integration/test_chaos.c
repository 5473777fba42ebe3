/* SPDX-License-Identifier: Apache-2.0 */
/* Chaos: client processes doing random grows, shrinks, KV reserves (some
 * held), trims, expert loans and recall answers on configured and ad-hoc
 * stages of two devices, while the parent kills some with SIGKILL at random
 * moments and starts new ones, and eight times kills vramd itself (SIGKILL,
 * then SIGTERM, then SIGKILL six times, once also a client while vramd is
 * down) and starts it again over the state file it left, which it must
 * always accept (format 5's checksums and journal, a kill at any moment of
 * a change): the clients reconnect and resume, losing nothing. The daemon checks the ledger's invariants
 * after every operation (and aborts on a violation). Each client stamps the
 * chunks of its ad-hoc region with its own pattern: a newly granted chunk
 * must be fresh (zero), and a chunk must still carry its holder's stamp when
 * it is given back, so one chunk held by two clients at once shows up. At
 * the end the pool is whole, no fd leaked, and the figures are printed.
 * Bounded by VRAM_CHAOS_SECONDS (default 15). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

#define WORKERS 6
#define SLOTS 24
#define RESTARTS 8

static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"256MiB\", \"lend_unreserved\": true},"
    "               {\"id\": 1, \"capacity\": \"256MiB\", \"lend_unreserved\": true}],"
    " \"pool\": {\"prefill_chunks\": 4},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 7,"
    "   \"kv_lanes\": [128, 128], \"initial_tokens\": 8192, \"step_tokens\": 4096,"
    "   \"expert_slot\": \"2MiB\", \"loan\": {\"recall_deadline_ms\": 300, \"hold_ms\": 500}},"
    "  {\"id\": 1, \"device\": 0, \"first_layer\": 8, \"last_layer\": 15,"
    "   \"kv_lanes\": [128], \"initial_tokens\": 8192, \"step_tokens\": 4096,"
    "   \"expert_slot\": \"2MiB\", \"loan\": {\"recall_deadline_ms\": 300, \"hold_ms\": 500}},"
    "  {\"id\": 2, \"device\": 1, \"first_layer\": 0, \"last_layer\": 7,"
    "   \"kv_lanes\": [256], \"initial_tokens\": 8192, \"step_tokens\": 4096,"
    "   \"expert_slot\": \"2MiB\", \"loan\": {\"recall_deadline_ms\": 300, \"hold_ms\": 500}}]}";

struct figures {
    unsigned long ops, refused, violations, grants_checked, releases_checked,
        reconnects;
};
static struct figures *fig;

#define ADD(field, n) __atomic_fetch_add(&fig->field, (n), __ATOMIC_RELAXED)

static uint64_t stamp(uint32_t worker, uint32_t slot)
{
    return 0x5AFE000000000000ull | ((uint64_t)worker << 24) | slot;
}

/* A reconnect must keep everything: no chunk or stage lost. */
static void on_event(void *u, const struct vram_event *ev)
{
    uint32_t me = (uint32_t)(uintptr_t)u;
    if (ev->type == VRAM_EVENT_RECONNECTED) {
        ADD(reconnects, 1);
        if (ev->lost_chunks) {
            fprintf(stderr, "chaos-%u: %u chunks lost in a reconnect\n", me,
                    ev->lost_chunks);
            ADD(violations, 1);
        }
    } else if (ev->type == VRAM_EVENT_STAGE_LOST) {
        fprintf(stderr, "chaos-%u: stage %u lost in a reconnect\n", me,
                ev->stage);
        ADD(violations, 1);
    }
}

static int worker(const struct daemon *d, void *arg)
{
    uint32_t me = (uint32_t)(uintptr_t)arg;
    srand(me * 7919u + (unsigned)getpid());
    char name[32];
    snprintf(name, sizeof(name), "chaos-%u", me);
    /* vramd may be between two lives when a worker starts (the main loop
     * restarts it on the same socket): connecting again until it is back,
     * as an engine started then would. Once connected, libvram reconnects
     * by itself. */
    vram_client *c = NULL;
    char err[256] = "";
    struct vram_client_options o = {.name = name, .error = err, .error_len = sizeof(err)};
    int e0 = -1;
    for (int t = 0; t < 60000; t += 50) {
        e0 = vram_client_connect(d->sock, &o, &c);
        if (e0 != -ENOENT && e0 != -ECONNREFUSED && e0 != -ECONNRESET && e0 != -EPIPE &&
            e0 != -ENOTCONN)
            break; /* connected, or refused for a reason of its own */
        usleep(50000);
    }
    REQUIRE(e0 == 0, "connect as %s: %s %s", name, vram_strerror(e0), err);
    vram_client_set_event_callback(c, on_event, arg);
    uint32_t adhoc, region, n = 0, dev = me % 2;
    REQUIRE(vram_stage_register_adhoc(c, dev, 0, 3, &adhoc) == 0, "stage");
    REQUIRE(vram_region_create(c, adhoc, VRAM_REGION_FIXED, SLOTS * 2 * MIB, 1,
                               &region) == 0, "region");
    int stage = -1;
    uint32_t pick = (uint32_t)rand() % 3;
    if (vram_stage_register(c, pick, 0, NULL) == 0)
        stage = (int)pick;
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    const char *env = getenv("VRAM_CHAOS_SECONDS");
    end.tv_sec += env ? atoi(env) : 15;
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > end.tv_sec ||
            (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
            break;
        vram_client_dispatch(c); /* answer recalls */
        int op = rand() % 7, e = 0;
        uint32_t k = 1 + (uint32_t)rand() % 4;
        switch (op) {
        case 0:
        case 1: /* grow: new chunks are fresh memory, then ours */
            if (n + k > SLOTS)
                k = SLOTS - n;
            if (!k)
                break;
            e = vram_region_grow(c, region, k);
            if (e == 0) {
                for (uint32_t i = n; i < n + k; i++) {
                    uint64_t *p = vram_region_slot(c, region, 0, i);
                    if (p[0] != 0 || p[262143] != 0)
                        ADD(violations, 1);
                    p[0] = p[262143] = stamp(me, i);
                    ADD(grants_checked, 1);
                }
                n += k;
            }
            break;
        case 2: /* shrink: what we give back still carries our stamp */
            if (k > n)
                k = n;
            if (!k)
                break;
            for (uint32_t i = n - k; i < n; i++) {
                uint64_t *p = vram_region_slot(c, region, 0, i);
                if (p[0] != stamp(me, i) || p[262143] != stamp(me, i))
                    ADD(violations, 1);
                ADD(releases_checked, 1);
            }
            e = vram_region_shrink(c, region, k);
            if (e == 0)
                n -= k;
            break;
        case 3:
            if (stage >= 0)
                e = vram_kv_reserve(c, (uint32_t)stage,
                                    (uint64_t)(rand() % 200000), 1024,
                                    rand() % 2 ? VRAM_KV_HOLD : 0, NULL);
            break;
        case 4:
            if (stage >= 0)
                e = vram_kv_trim(c, (uint32_t)stage, 0);
            break;
        case 5:
            if (stage >= 0)
                e = vram_expert_request(c, (uint32_t)stage,
                                        (uint64_t)(1 + rand() % 16) * 2 * MIB);
            break;
        default:
            e = vram_client_ping(c);
        }
        ADD(ops, 1);
        if (e < 0) {
            ADD(refused, 1);
            /* Refusals are fine (no memory, holds expiring, delinquency);
             * a broken connection is not. */
            if (e == -ECONNRESET || e == -ENOTCONN || e == -EPROTO) {
                fprintf(stderr, "chaos-%u: %s\n", me, vram_client_last_error(c));
                ADD(violations, 1);
                break;
            }
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t *p = vram_region_slot(c, region, 0, i);
        if (p[0] != stamp(me, i))
            ADD(violations, 1);
    }
    vram_client_close(c);
    return 0;
}

int main(void)
{
    fig = mmap(NULL, sizeof(*fig), PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(fig != MAP_FAILED, "mmap");
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    const char *env = getenv("VRAM_CHAOS_SECONDS");
    int secs = env ? atoi(env) : 15;
    pid_t pids[WORKERS];
    uint32_t next = 0;
    for (int i = 0; i < WORKERS; i++)
        pids[i] = spawn(worker, &d, (void *)(uintptr_t)next++);
    unsigned kills = 0, finished = 0, failed = 0, restarts = 0;
    srand(12345);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        usleep(100000 + (useconds_t)(rand() % 300000));
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= secs)
            break;
        /* vramd itself goes down RESTARTS times, evenly over the run, and
         * comes back on the same socket. */
        double t = (double)(now.tv_sec - t0.tv_sec) +
                   (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
        if (restarts < RESTARTS && t >= secs * (restarts + 1) / (RESTARTS + 1.0)) {
            if (restarts == 1) {
                CHECK(daemon_stop(&d) == 0, "vramd did not stop cleanly");
            } else {
                daemon_kill(&d);
            }
            if (restarts == 2) { /* a holder dies while vramd is down */
                int v = rand() % WORKERS;
                kill(pids[v], SIGKILL);
                waitpid(pids[v], NULL, 0);
                kills++;
                pids[v] = 0;
            }
            usleep(50000);
            REQUIRE(daemon_restart(&d, config, NULL) == 0,
                    "restart %u of vramd (over the file it left)", restarts + 1);
            restarts++;
            for (int i = 0; i < WORKERS; i++)
                if (!pids[i])
                    pids[i] = spawn(worker, &d, (void *)(uintptr_t)next++);
            continue;
        }
        /* Kill one at random and start another in its place. */
        int v = rand() % WORKERS;
        if (rand() % 2 == 0 && kill(pids[v], SIGKILL) == 0) {
            waitpid(pids[v], NULL, 0);
            kills++;
            pids[v] = spawn(worker, &d, (void *)(uintptr_t)next++);
        }
        CHECK(kill(d.pid, 0) == 0, "vramd died (an invariant broke?)");
        if (kill(d.pid, 0) != 0)
            break;
    }
    for (int i = 0; i < WORKERS; i++) {
        int rc = wait_child(pids[i]);
        finished++;
        failed += rc != 0;
    }
    CHECK(kill(d.pid, 0) == 0, "vramd died");
    printf("{\"chaos\":{\"seconds\":%d,\"workers\":%u,\"ops\":%lu,\"refused\":%lu,"
           "\"kills\":%u,\"restarts\":%u,\"reconnects\":%lu,"
           "\"grants_checked\":%lu,\"releases_checked\":%lu,"
           "\"violations\":%lu}}\n",
           secs, next, fig->ops, fig->refused, kills, restarts, fig->reconnects,
           fig->grants_checked, fig->releases_checked, fig->violations);
    CHECK(fig->violations == 0, "%lu violations", fig->violations);
    CHECK(failed == 0, "%u workers failed", failed);
    CHECK(fig->ops > 100, "only %lu operations", fig->ops);
    CHECK(kills > 0, "nobody was killed");
    CHECK(restarts == RESTARTS, "vramd restarted %u times, not %d", restarts,
          RESTARTS);
    CHECK(fig->reconnects > 0, "no client reconnected");
    CHECK(!daemon_log_contains(&d, "invariant broken"), "ledger invariant broken");
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_chaos");
}
