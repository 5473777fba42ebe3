/* SPDX-License-Identifier: Apache-2.0 */
/* A background grow returns before vramd answers (VRAM_PENDING), and the
 * library's thread reads the reply. Proved with vramd stopped (SIGSTOP)
 * while the call is made: it returns, nothing of it is in the tables yet,
 * and once vramd runs again vram_client_wait has every chunk mapped at its
 * slot, fresh and each its own memory. A call made before the wait waits
 * for the reply first; a grow vramd refuses is reported by the wait and
 * once by the next request, the tables as before; a vramd killed while the
 * reply is on its way is reported too, and the client connects again; a
 * RECALL that comes before the reply is handled, in its order, before the
 * reply is applied, and answered; a client that exits (or closes) with a
 * reply pending costs vramd nothing, and others are served. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"
#include "tests/integration/regions_named.h"

/* 64 chunks of 2 MiB, 4 made ahead: a grow of more makes them when asked. */
static const char *adhoc_config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"128MiB\", \"chunk\": \"2MiB\"}],"
    " \"pool\": {\"standby\": \"8MiB\"}}";

/* vramd's state letter from /proc (T: stopped). */
static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return '?';
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

/* Stops vramd and waits until it is stopped (bounded: a failure to stop
 * fails the test, the time decides nothing else). */
static void stop_vramd(const struct daemon *d)
{
    REQUIRE(kill(d->pid, SIGSTOP) == 0, "SIGSTOP vramd");
    for (int i = 0; i < 1000 && proc_state(d->pid) != 'T'; i++)
        usleep(10000);
    REQUIRE(proc_state(d->pid) == 'T', "vramd did not stop");
}

static void cont_vramd(const struct daemon *d)
{
    REQUIRE(kill(d->pid, SIGCONT) == 0, "SIGCONT vramd");
}

static uint64_t granted_chunks(const struct daemon *d)
{
    cJSON *st = daemon_status(d);
    uint64_t g = status_dev(st, 0, "granted_bytes") / (2 * MIB);
    cJSON_Delete(st);
    return g;
}

static uint32_t mapped_of(vram_client *c, uint32_t region)
{
    struct vram_region_info ri;
    REQUIRE(vram_region_info(c, region, &ri) == 0, "region_info: %s",
            vram_client_last_error(c));
    return ri.mapped;
}

static bool is_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 4096)
        if (p[i] || p[i + 4095])
            return false;
    return true;
}

/* Slots [from, to) hold memory, fresh (zero), each its own: a pattern
 * written into every one reads back from every one. */
static void check_fresh(vram_client *c, uint32_t region, uint32_t from,
                        uint32_t to, const char *when)
{
    uint32_t bad = 0;
    for (uint32_t i = from; i < to; i++) {
        uint64_t chunk;
        unsigned char *p = vram_region_slot(c, region, 0, i);
        if (vram_region_chunk(c, region, 0, i, &chunk) < 0 || !p ||
            !is_zero(p, 2 * MIB))
            bad++;
        else
            fill_pattern(p, 2 * MIB, 1000 + i);
    }
    CHECK(bad == 0, "%s: %u of %u slots not mapped or not fresh", when, bad,
          to - from);
    bad = 0;
    for (uint32_t i = from; bad == 0 && i < to; i++)
        if (!check_pattern(vram_region_slot(c, region, 0, i), 2 * MIB, 1000 + i))
            bad++;
    CHECK(bad == 0, "%s: a slot does not keep what was written there", when);
}

/* ---- a client that leaves with a reply pending ---------------------------- */

struct leaver {
    struct rendezvous rv;
    bool close; /* vram_client_close, else _exit without it */
};

static int leave_pending(const struct daemon *d, void *arg)
{
    struct leaver *l = arg;
    vram_client *c = connect_client(d, l->close ? "closer" : "leaver");
    uint32_t st, rg;
    if (vram_client_set_background_map(c, 1) < 0 ||
        vram_stage_register_adhoc(c, 0, 0, 1, &st) < 0 ||
        vram_region_create(c, st, VRAM_REGION_FIXED, 32 * 2 * MIB, 1, &rg) < 0)
        return 2;
    stop_vramd(d);
    int e = vram_region_grow(c, rg, 16);
    rv_send(l->rv.to_parent[1], (uint64_t)(e == VRAM_PENDING));
    if (!l->close)
        _exit(0); /* the reply pending, the memory granted on its way */
    vram_client_close(c); /* waits for the reply (vramd runs on) */
    return 0;
}

static void adhoc_cases(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, adhoc_config, NULL) == 0, "start vramd");
    vram_client *a = connect_client(&d, "engine-a");
    REQUIRE(vram_client_set_background_map(a, 1) == 0, "background on");
    uint32_t st, rg;
    REQUIRE(vram_stage_register_adhoc(a, 0, 0, 1, &st) == 0, "stage: %s",
            vram_client_last_error(a));
    REQUIRE(vram_region_create(a, st, VRAM_REGION_FIXED, 64 * 2 * MIB, 1,
                               &rg) == 0, "region: %s", vram_client_last_error(a));
    REQUIRE(wait_dev_value(&d, 0, "pool_ready_chunks", 4, 5000), "standby");

    /* ---- the grow returns while vramd is stopped ---- */
    stop_vramd(&d);
    int e = vram_region_grow(a, rg, 24); /* 20 beyond the standby */
    CHECK(e == VRAM_PENDING, "grow: %d (%s), expected VRAM_PENDING", e,
          vram_client_last_error(a));
    CHECK(proc_state(d.pid) == 'T', "vramd ran during the call");
    /* A probe that takes no lock and waits for nothing: the reply is not
     * applied (vramd has not even read the request). */
    CHECK_EQ_U(vram_client_chunks_held(a), 0);
    cont_vramd(&d);
    int n = vram_client_wait(a);
    CHECK(n == 24, "wait: %d (%s), expected 24 chunks", n,
          n < 0 ? vram_client_last_error(a) : "");
    CHECK_EQ_U(mapped_of(a, rg), 24);
    CHECK_EQ_U(vram_client_chunks_held(a), 24);
    check_fresh(a, rg, 0, 24, "after the wait");
    CHECK_EQ_U(granted_chunks(&d), 24);
    CHECK(vram_client_wait(a) == 0, "a second wait: nothing more");

    /* ---- a call made before the wait waits for the reply first ---- */
    stop_vramd(&d);
    e = vram_region_grow(a, rg, 4);
    CHECK(e == VRAM_PENDING, "grow of 4: %d", e);
    CHECK_EQ_U(vram_client_chunks_held(a), 24);
    cont_vramd(&d);
    CHECK_EQ_U(mapped_of(a, rg), 28); /* it waited, and mapped */
    check_fresh(a, rg, 24, 28, "before the wait");
    n = vram_client_wait(a);
    CHECK(n == 4, "wait after the call: %d", n);
    for (uint32_t i = 0; i < 24; i++)
        CHECK(check_pattern(vram_region_slot(a, rg, 0, i), 2 * MIB, 1000 + i),
              "slot %u lost its bytes", i);

    /* ---- refused in vramd after the call returned: over capacity ---- */
    vram_client *other = connect_client(&d, "engine-c");
    uint32_t cst, crg;
    REQUIRE(vram_stage_register_adhoc(other, 0, 2, 3, &cst) == 0, "stage C");
    REQUIRE(vram_region_create(other, cst, VRAM_REGION_FIXED, 30 * 2 * MIB, 1,
                               &crg) == 0, "region C: %s",
            vram_client_last_error(other));
    REQUIRE(vram_region_grow(other, crg, 30) == 0, "C takes 30: %s",
            vram_client_last_error(other));
    e = vram_region_grow(a, rg, 20); /* 28 + 30 + 20 > 64 */
    CHECK(e == VRAM_PENDING, "grow over capacity: %d (sent)", e);
    e = vram_client_ping(a); /* the next request reports it, once */
    CHECK(e == -ENOSPC, "the next call: %d (%s), expected -ENOSPC", e,
          vram_client_last_error(a));
    CHECK(strstr(vram_client_last_error(a), "vram_region_grow") != NULL,
          "the message does not name the call: %s", vram_client_last_error(a));
    CHECK(vram_client_ping(a) == 0, "the call after that: %s",
          vram_client_last_error(a));
    e = vram_client_wait(a);
    CHECK(e == -ENOSPC, "wait: %d, expected -ENOSPC", e);
    CHECK(vram_client_wait(a) == 0, "reported once by the wait");
    CHECK_EQ_U(mapped_of(a, rg), 28);
    CHECK_EQ_U(vram_client_chunks_held(a), 28);
    CHECK_EQ_U(granted_chunks(&d), 58);
    /* And reported by the wait alone when no call came between. */
    CHECK(vram_region_grow(a, rg, 20) == VRAM_PENDING, "grow over capacity");
    CHECK(vram_client_wait(a) == -ENOSPC, "wait alone");
    CHECK(vram_client_ping(a) == 0, "said by the wait: not again");
    CHECK_EQ_U(mapped_of(a, rg), 28);
    vram_client_close(other);
    CHECK(wait_dev_value(&d, 0, "granted_bytes", 28 * 2 * MIB, 10000),
          "C's memory back");

    /* ---- clients that leave with a reply pending ---- */
    for (int k = 0; k < 2; k++) {
        struct leaver l = {.close = k == 1};
        rv_init(&l.rv);
        pid_t p = spawn(leave_pending, &d, &l);
        CHECK(rv_recv(l.rv.to_parent[0]) == 1, "%s: the grow did not return "
              "VRAM_PENDING", k ? "closer" : "leaver");
        cont_vramd(&d);
        CHECK(wait_child(p) == 0, "%s exited badly", k ? "closer" : "leaver");
        CHECK(wait_dev_value(&d, 0, "granted_bytes", 28 * 2 * MIB, 10000),
              "%s: its grant not given back", k ? "closer" : "leaver");
        CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 0, 10000),
              "%s: still quarantined", k ? "closer" : "leaver");
    }
    /* Others are served. */
    CHECK(vram_region_grow(a, rg, 8) == VRAM_PENDING, "grow after the leavers");
    CHECK(vram_client_wait(a) == 8, "wait after the leavers");
    check_fresh(a, rg, 28, 36, "after the leavers");

    /* ---- vramd killed with the reply on its way ---- */
    stop_vramd(&d);
    CHECK(vram_region_grow(a, rg, 4) == VRAM_PENDING, "grow before the kill");
    daemon_kill(&d);
    e = vram_client_wait(a);
    CHECK(e == -ECONNRESET || e == -ENOTCONN || e == -EPIPE,
          "wait after the kill: %d (%s)", e, vram_client_last_error(a));
    CHECK_EQ_U(vram_client_chunks_held(a), 36);
    REQUIRE(daemon_restart(&d, adhoc_config, NULL) == 0, "restart vramd");
    e = vram_client_ping(a); /* said by the wait: this one connects again */
    CHECK(e == 0, "ping after the restart: %d (%s)", e, vram_client_last_error(a));
    CHECK_EQ_U(mapped_of(a, rg), 36);
    CHECK_EQ_U(granted_chunks(&d), 36);
    for (uint32_t i = 28; i < 36; i++)
        CHECK(check_pattern(vram_region_slot(a, rg, 0, i), 2 * MIB, 1000 + i),
              "slot %u lost its bytes across the restart", i);

    vram_client_close(a);
    CHECK(wait_dev_value(&d, 0, "granted_bytes", 0, 10000), "granted after close");
    daemon_check_no_leaks(&d);
    CHECK(daemon_stop(&d) == 0, "vramd stops cleanly");
}

/* ---- a RECALL that comes before the reply --------------------------------- */

/* 128 chunks. Stage 0: a 64 MiB weights region, one KV lane (initial 2),
 * expert slots. Stage 1: one lane of 32 chunks, initial 2, lent to stage 0
 * while idle: its reserve recalls them. */
static const char *loan_config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"256MiB\", \"chunk\": \"2MiB\","
    "                \"lend_unreserved\": true}],"
    " \"pool\": {\"standby\": \"8MiB\"},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256], \"native_context\": 131072,"
    "   \"initial_tokens\": 16384, \"step_tokens\": 8192,"
    "   \"expert_slot\": \"2MiB\","
    "   \"fixed\": [{\"name\": \"weights\", \"kind\": \"fixed\", \"bytes\": \"64MiB\"}],"
    "   \"loan\": {\"recall_deadline_ms\": 5000, \"hold_ms\": 8000}},"
    "  {\"id\": 1, \"device\": 0, \"first_layer\": 16, \"last_layer\": 31,"
    "   \"kv_lanes\": [256], \"native_context\": 262144,"
    "   \"initial_tokens\": 16384, \"step_tokens\": 8192,"
    "   \"expert_slot\": \"2MiB\", \"loan\": {\"hold_ms\": 8000}}]}";

struct seen {
    int recalls, budgets;
    int order_bad; /* a BUDGET_CHANGED of stage 0 told before the recall */
    uint32_t recalled;
};

static void on_event(void *u, const struct vram_event *ev)
{
    struct seen *s = u;
    if (ev->type == VRAM_EVENT_RECALL) {
        s->recalls++;
        s->recalled += (uint32_t)ev->nchunks;
    } else if (ev->type == VRAM_EVENT_BUDGET_CHANGED && ev->stage == 0 &&
               s->recalls == 0) {
        s->budgets++;
    }
}

static int reserver(const struct daemon *d, void *arg)
{
    (void)arg;
    vram_client *b = connect_client(d, "engine-b");
    struct vram_stage_info bi;
    if (vram_stage_register(b, 1, 0, &bi) < 0)
        return 2;
    struct vram_kv_result r;
    int e = vram_kv_reserve(b, 1, 250000, 12144, VRAM_KV_HOLD, &r);
    if (e < 0) {
        fprintf(stderr, "reserve: %s (%s)\n", vram_strerror(e),
                vram_client_last_error(b));
        return 3;
    }
    int ok = r.kv_mapped_bytes == 32 * 2 * MIB;
    vram_client_close(b);
    return ok ? 0 : 4;
}

static void recall_case(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, loan_config, NULL) == 0, "start vramd (loans)");
    vram_client *a = connect_client(&d, "engine-a");
    struct seen s = {0};
    vram_client_set_event_callback(a, on_event, &s);
    struct vram_stage_info ai;
    REQUIRE(vram_stage_register(a, 0, 0, &ai) == 0, "register: %s",
            vram_client_last_error(a));
    uint32_t w = weights_of(a, 0);
    REQUIRE(w != 0, "no weights region");
    REQUIRE(vram_region_grow(a, w, 16) == 0, "weights: %s",
            vram_client_last_error(a));
    for (uint32_t i = 0; i < 16; i++)
        fill_pattern(vram_region_slot(a, w, 0, i), 2 * MIB, 500 + i);
    REQUIRE(vram_expert_request(a, 0, 0) == 0, "loans: %s",
            vram_client_last_error(a));
    struct vram_residency before;
    REQUIRE(vram_expert_residency(a, 0, &before) == 0, "residency");
    REQUIRE(before.expert_slots_backed >= 30, "only %u loans",
            before.expert_slots_backed);

    /* B's reserve recalls A's loans in stage 1's window; A reads nothing
     * until the recall is waiting on its connection. */
    REQUIRE(vram_client_dispatch(a) >= 0, "dispatch"); /* nothing before */
    pid_t p = spawn(reserver, &d, NULL);
    /* vramd says so as it sends the recall, before it reads A's grow. */
    REQUIRE(daemon_log_wait(&d, "recalling 30 chunks of stage 0", 20000),
            "no recall was sent");
    struct pollfd pf = {.fd = (int)vram_client_fd(a), .events = POLLIN};
    REQUIRE(poll(&pf, 1, 20000) == 1, "no recall came");

    /* The grow is sent behind it: the thread reads the recall first and
     * keeps it, then the reply. */
    REQUIRE(vram_client_set_background_map(a, 1) == 0, "background on");
    s.budgets = 0;
    int e = vram_region_grow(a, w, 16);
    CHECK(e == VRAM_PENDING, "grow: %d (%s)", e, vram_client_last_error(a));
    CHECK(s.recalls == 0, "the recall was told before the wait");
    int n = vram_client_wait(a);
    CHECK(n == 16, "wait: %d (%s), expected the 16 weights' chunks", n,
          n < 0 ? vram_client_last_error(a) : "");
    CHECK(s.recalls == 1, "the recall was told %d times", s.recalls);
    CHECK(s.recalled >= 30, "the recall named %u chunks", s.recalled);
    CHECK(s.budgets == 0, "a budget change was told before the recall");
    CHECK(wait_child(p) == 0, "B's reserve over A's recalled loans failed");
    CHECK_EQ_U(mapped_of(a, w), 32);
    for (uint32_t i = 0; i < 16; i++)
        CHECK(check_pattern(vram_region_slot(a, w, 0, i), 2 * MIB, 500 + i),
              "weights slot %u lost its bytes", i);
    check_fresh(a, w, 16, 32, "the weights grown behind the recall");
    struct vram_residency res;
    REQUIRE(vram_expert_residency(a, 0, &res) == 0, "residency");
    cJSON *st = daemon_status(&d);
    const cJSON *s0 = status_stage(st, 0);
    CHECK_EQ_U(res.expert_loaned_bytes, json_u64(s0, "expert_loaned_bytes"));
    CHECK(res.expert_slots_backed + s.recalled == before.expert_slots_backed,
          "loans: %u now, %u recalled, %u before", res.expert_slots_backed,
          s.recalled, before.expert_slots_backed);
    cJSON_Delete(st);

    vram_client_close(a);
    CHECK(wait_dev_value(&d, 0, "granted_bytes", 0, 10000), "granted after close");
    daemon_check_no_leaks(&d);
    CHECK(daemon_stop(&d) == 0, "vramd stops cleanly");
}

/* vram_kv_reserve_result: what a background reserve did, once it came. */
static void kv_result_case(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, loan_config, NULL) == 0, "start vramd (loans)");
    vram_client *a = connect_client(&d, "engine-a");
    struct vram_stage_info si;
    REQUIRE(vram_stage_register(a, 1, 0, &si) == 0, "register: %s",
            vram_client_last_error(a));
    struct vram_kv_result r, out, blk;
    CHECK(vram_kv_reserve_result(a, 1, &r) == -ENOENT,
          "a result before any background reserve");
    CHECK(vram_kv_reserve_result(a, 7, &r) == -ENOENT, "a stage not registered");
    CHECK(vram_kv_reserve_result(a, 1, NULL) == -EINVAL, "out NULL");

    REQUIRE(vram_client_set_background_map(a, 1) == 0, "background on");
    memset(&out, 0xab, sizeof(out));
    int e = vram_kv_reserve(a, 1, 100000, 1000, VRAM_KV_HOLD, &out);
    CHECK(e == VRAM_PENDING, "reserve: %d (%s)", e, vram_client_last_error(a));
    CHECK(out.kv_needed_bytes == 0xababababababababull,
          "out was written before the reply came");
    int n = vram_client_wait(a);
    CHECK(n > 0, "wait: %d (%s)", n, n < 0 ? vram_client_last_error(a) : "");
    memset(&r, 0, sizeof(r));
    e = vram_kv_reserve_result(a, 1, &r);
    CHECK(e == 0, "result: %d (%s)", e, vram_client_last_error(a));
    CHECK_EQ_U(r.kv_needed_bytes, 101000ull * 256);
    REQUIRE(vram_stage_info(a, 1, &si) == 0, "stage info");
    CHECK_EQ_U(r.kv_mapped_bytes, si.kv_mapped_bytes);
    CHECK(r.kv_mapped_bytes >= r.kv_needed_bytes, "mapped %llu < needed %llu",
          (unsigned long long)r.kv_mapped_bytes,
          (unsigned long long)r.kv_needed_bytes);

    /* The same reserve blocking says the same, and leaves the background
     * one's result as it was. */
    REQUIRE(vram_client_set_background_map(a, 0) == 0, "background off");
    REQUIRE(vram_kv_reserve(a, 1, 100000, 1000, VRAM_KV_HOLD, &blk) == 0,
            "blocking reserve: %s", vram_client_last_error(a));
    CHECK_EQ_U(blk.kv_needed_bytes, r.kv_needed_bytes);
    CHECK_EQ_U(blk.kv_mapped_bytes, r.kv_mapped_bytes);
    CHECK_EQ_U(blk.expert_slots_backed, r.expert_slots_backed);
    struct vram_kv_result again;
    CHECK(vram_kv_reserve_result(a, 1, &again) == 0 &&
              again.kv_mapped_bytes == r.kv_mapped_bytes,
          "a blocking reserve changed the background result");

    /* Refused after the call returned (past the native context): the
     * wait and the result both say so, and out is left alone. */
    REQUIRE(vram_client_set_background_map(a, 1) == 0, "background on");
    e = vram_kv_reserve(a, 1, 300000, 0, 0, &out);
    CHECK(e == VRAM_PENDING, "reserve past the context: %d", e);
    n = vram_client_wait(a);
    CHECK(n == -E2BIG, "wait: %d (%s)", n, vram_client_last_error(a));
    memcpy(&again, &r, sizeof(again));
    e = vram_kv_reserve_result(a, 1, &again);
    CHECK(e == -E2BIG, "result after the refusal: %d", e);
    CHECK(strstr(vram_client_last_error(a), "stage 1") != NULL, "why: %s",
          vram_client_last_error(a));
    CHECK(memcmp(&again, &r, sizeof(r)) == 0, "out written on a failure");
    REQUIRE(vram_stage_info(a, 1, &si) == 0, "stage info");
    CHECK_EQ_U(si.kv_mapped_bytes, r.kv_mapped_bytes);

    vram_client_close(a);
    CHECK(wait_dev_value(&d, 0, "granted_bytes", 0, 10000), "granted after close");
    daemon_check_no_leaks(&d);
    CHECK(daemon_stop(&d) == 0, "vramd stops cleanly");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    adhoc_cases();
    recall_case();
    kv_result_case();
    return check_report("background_reply");
}
