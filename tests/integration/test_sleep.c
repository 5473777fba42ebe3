/* SPDX-License-Identifier: Apache-2.0 */
/* Stages that sleep and wake (R18), on the host backend, bytes checked.
 *  1. A configured stage with KV beyond its initial window, fixed weights
 *     and expert loans sleeps: vramd gets every chunk back, status shows it
 *     asleep with the host bytes; calls that move its memory are EBUSY, a
 *     second sleep EALREADY. The wake maps the same addresses again, every
 *     byte is back; a second wake is EALREADY. With both discard flags only
 *     the fixed bytes are kept, and the memory still comes back.
 *  2. A model swap of two ad-hoc engines that together need more than the
 *     device: B gets its memory only once A sleeps; A's wake while B holds
 *     it fails with ENOSPC and A sleeps on, bytes kept; B sleeps, A wakes
 *     whole, and back.
 *  3. A sleep while a recall is pending: a lender's pool loans are recalled
 *     by a held reserve; it sleeps instead of answering. The reserve
 *     completes, no recall deadline is missed.
 *  4. A configured wake that cannot get its memory: the sleeping stage's
 *     window was lent as pool loans to a lender that does not answer; the
 *     wake times out at the hold bound, the stage sleeps on with its bytes,
 *     and wakes once the lender answers.
 *  5. A client that exits asleep leaves nothing: the stage is free for the
 *     next owner at once.
 *  6. vramd killed and started again while a stage sleeps: the engine
 *     resumes it asleep, then wakes it with every byte. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* 512 MiB = 256 chunks. Stage 0: a window of 262144 tokens x 256 B = 64 MiB
 * = 32 chunks (initial 16384 tokens: 2), 8 MiB of fixed weights. Stage 1:
 * a lender with the same window. Reserved: 32 + 4 + 32 = 68 chunks. */
static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"512MiB\", \"chunk\": \"2MiB\","
    "                \"lend_unreserved\": true}],"
    " \"pool\": {\"prefill_chunks\": 0},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\","
    "   \"fixed\": [{\"name\": \"weights\", \"kind\": \"fixed\", \"bytes\": \"8MiB\"}],"
    "   \"loan\": {\"recall_deadline_ms\": 8000, \"hold_ms\": 6000}},"
    "  {\"id\": 1, \"device\": 0, \"first_layer\": 16, \"last_layer\": 31,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\","
    "   \"loan\": {\"recall_deadline_ms\": 8000, \"hold_ms\": 10000}}]}";

#define CB (2 * MIB)

static uint32_t region_named(vram_client *c, uint32_t stage, const char *name)
{
    uint32_t ids[16];
    int n = vram_stage_regions(c, stage, ids, 16);
    for (int i = 0; i < n; i++)
        if (!strcmp(vram_region_name(c, ids[i]), name))
            return ids[i];
    return 0;
}

/* Tags every mapped slot of a region (lane 0): tag = base + slot. */
static uint32_t fill_region(vram_client *c, uint32_t region, uint32_t slots)
{
    struct vram_region_info ri;
    vram_region_info(c, region, &ri);
    uint32_t n = 0;
    for (uint32_t i = 0; i < slots; i++) {
        uint64_t id;
        if (vram_region_chunk(c, region, 0, i, &id) < 0)
            continue;
        fill_pattern(vram_region_slot(c, region, 0, i), CB,
                     (uint64_t)(uintptr_t)ri.base + i);
        n++;
    }
    return n;
}

/* Slots [0, slots) mapped and tagged as fill_region left them. */
static bool region_intact(vram_client *c, uint32_t region, uint32_t slots)
{
    struct vram_region_info ri;
    vram_region_info(c, region, &ri);
    for (uint32_t i = 0; i < slots; i++) {
        uint64_t id;
        if (vram_region_chunk(c, region, 0, i, &id) < 0)
            return false;
        if (!check_pattern(vram_region_slot(c, region, 0, i), CB,
                           (uint64_t)(uintptr_t)ri.base + i))
            return false;
    }
    return true;
}

static bool stage_asleep_in_status(const struct daemon *d, uint32_t stage)
{
    cJSON *st = daemon_status(d);
    bool a = cJSON_IsTrue(cJSON_GetObjectItem(status_stage(st, stage), "asleep"));
    cJSON_Delete(st);
    return a;
}

static uint64_t stage_field(const struct daemon *d, uint32_t stage,
                            const char *key)
{
    cJSON *st = daemon_status(d);
    uint64_t v = json_u64(status_stage(st, stage), key);
    cJSON_Delete(st);
    return v;
}

static uint64_t dev_field(const struct daemon *d, const char *key)
{
    cJSON *st = daemon_status(d);
    uint64_t v = status_dev(st, 0, key);
    cJSON_Delete(st);
    return v;
}

/* ---- 1 ---------------------------------------------------------------- */

static void part_configured(const struct daemon *d)
{
    vram_client *c = connect_client(d, "sleeper");
    struct vram_stage_info in;
    REQUIRE(vram_stage_register(c, 0, 0, &in) == 0, "register: %s",
            vram_client_last_error(c));
    struct vram_kv_result kr;
    /* 100000 tokens: 12.5 chunks, a target of 13 or more chunks. */
    REQUIRE(vram_kv_reserve(c, 0, 90000, 10000, 0, &kr) == 0, "reserve: %s",
            vram_client_last_error(c));
    uint32_t kv_slots = (uint32_t)(kr.kv_mapped_bytes / CB);
    uint32_t w = region_named(c, 0, "weights");
    REQUIRE(w != 0, "no weights region");
    REQUIRE(vram_region_grow(c, w, 4) == 0, "weights: %s",
            vram_client_last_error(c));
    REQUIRE(vram_expert_request(c, 0, 6 * CB) == 0, "loans: %s",
            vram_client_last_error(c));
    struct vram_residency res;
    vram_expert_residency(c, 0, &res);
    CHECK_EQ_U(res.expert_slots_backed, 6);
    CHECK_EQ_U(fill_region(c, in.kv_region, kv_slots), kv_slots);
    CHECK_EQ_U(fill_region(c, w, 4), 4);
    CHECK_EQ_U(fill_region(c, in.expert_region, 6), 6);
    void *kv0 = vram_region_slot(c, in.kv_region, 0, 0);
    void *w0 = vram_region_slot(c, w, 0, 0);
    uint64_t free_before = dev_field(d, "free_bytes");

    REQUIRE(vram_stage_sleep(c, 0, 0) == 0, "sleep: %s",
            vram_client_last_error(c));
    CHECK(vram_stage_asleep(c, 0) == 1, "not asleep here");
    CHECK(stage_asleep_in_status(d, 0), "status does not show stage 0 asleep");
    CHECK_EQ_U(stage_field(d, 0, "host_bytes"), (uint64_t)(kv_slots + 10) * CB);
    CHECK_EQ_U(stage_field(d, 0, "kv_mapped_bytes"), 0);
    CHECK_EQ_U(stage_field(d, 0, "fixed_bytes"), 0);
    CHECK_EQ_U(dev_field(d, "free_bytes"),
               free_before + (uint64_t)(kv_slots + 10) * CB);
    CHECK_EQ_U(dev_field(d, "granted_bytes"), 0);
    uint64_t id;
    CHECK(vram_region_chunk(c, in.kv_region, 0, 0, &id) == -ENOENT,
          "a chunk is still mapped while asleep");
    CHECK(vram_kv_reserve(c, 0, 100, 0, 0, NULL) == -EBUSY,
          "kv_reserve while asleep");
    CHECK(strstr(vram_client_last_error(c), "asleep") != NULL, "unclear: %s",
          vram_client_last_error(c));
    CHECK(vram_region_grow(c, w, 1) == -EBUSY, "grow while asleep");
    CHECK(vram_expert_request(c, 0, 0) == -EBUSY, "loans while asleep");
    CHECK(vram_stage_sleep(c, 0, 0) == -EALREADY, "a second sleep");

    REQUIRE(vram_stage_wake(c, 0, 0) == 0, "wake: %s",
            vram_client_last_error(c));
    CHECK(vram_stage_asleep(c, 0) == 0, "still asleep");
    CHECK(vram_stage_wake(c, 0, 0) == -EALREADY, "a second wake");
    CHECK(vram_region_slot(c, in.kv_region, 0, 0) == kv0 &&
          vram_region_slot(c, w, 0, 0) == w0, "addresses moved");
    CHECK(region_intact(c, in.kv_region, kv_slots), "KV bytes lost");
    CHECK(region_intact(c, w, 4), "weights lost");
    vram_expert_residency(c, 0, &res);
    CHECK_EQ_U(res.expert_slots_backed, 6);
    CHECK(region_intact(c, in.expert_region, 6), "expert bytes lost");
    CHECK(!stage_asleep_in_status(d, 0), "status still shows it asleep");
    CHECK_EQ_U(stage_field(d, 0, "sleeps"), 1);
    CHECK_EQ_U(stage_field(d, 0, "wakes"), 1);
    CHECK_EQ_U(stage_field(d, 0, "kv_mapped_bytes"), (uint64_t)kv_slots * CB);

    /* Discarding: only the weights are kept; the memory comes back. */
    REQUIRE(vram_stage_sleep(c, 0, VRAM_SLEEP_DISCARD_KV |
                                       VRAM_SLEEP_DISCARD_EXPERTS) == 0,
            "sleep, discarding: %s", vram_client_last_error(c));
    CHECK_EQ_U(stage_field(d, 0, "host_bytes"), 4 * CB);
    REQUIRE(vram_stage_wake(c, 0, 0) == 0, "wake: %s",
            vram_client_last_error(c));
    CHECK(region_intact(c, w, 4), "weights lost after a discarding sleep");
    CHECK_EQ_U(stage_field(d, 0, "kv_mapped_bytes"), (uint64_t)kv_slots * CB);
    CHECK(vram_stage_sleep(c, 0, 0x80) == -EINVAL, "unknown flags");
    vram_client_close(c);
    CHECK_EQ_U(dev_field(d, "granted_bytes"), 0);
}

/* ---- 2 ---------------------------------------------------------------- */

struct adhoc {
    vram_client *c;
    uint32_t stage, region;
};

static void adhoc_open(const struct daemon *d, struct adhoc *a, const char *name,
                       uint64_t bytes)
{
    a->c = connect_client(d, name);
    REQUIRE(vram_stage_register_adhoc(a->c, 0, 0, 7, &a->stage) == 0,
            "%s: %s", name, vram_client_last_error(a->c));
    REQUIRE(vram_region_create(a->c, a->stage, VRAM_REGION_FIXED, bytes, 1,
                               &a->region) == 0,
            "%s region: %s", name, vram_client_last_error(a->c));
}

static void part_swap(const struct daemon *d)
{
    /* 188 chunks are no stage's; A and B want 120 each. */
    struct adhoc a, b;
    adhoc_open(d, &a, "model-a", 120 * CB);
    adhoc_open(d, &b, "model-b", 120 * CB);
    REQUIRE(vram_region_grow(a.c, a.region, 120) == 0, "A: %s",
            vram_client_last_error(a.c));
    CHECK_EQ_U(fill_region(a.c, a.region, 120), 120);
    CHECK(vram_region_grow(b.c, b.region, 120) == -ENOSPC, "both fit?");
    REQUIRE(vram_stage_sleep(a.c, a.stage, 0) == 0, "A sleeps: %s",
            vram_client_last_error(a.c));
    REQUIRE(vram_region_grow(b.c, b.region, 120) == 0, "B after A slept: %s",
            vram_client_last_error(b.c));
    CHECK_EQ_U(fill_region(b.c, b.region, 120), 120);
    CHECK(vram_stage_wake(a.c, a.stage, 0) == -ENOSPC, "A woke over B");
    CHECK(strstr(vram_client_last_error(a.c), "sleeps on") != NULL,
          "unclear: %s", vram_client_last_error(a.c));
    CHECK(vram_stage_asleep(a.c, a.stage) == 1, "A is not asleep after it");
    for (int round = 0; round < 2; round++) {
        REQUIRE(vram_stage_sleep(b.c, b.stage, 0) == 0, "B sleeps: %s",
                vram_client_last_error(b.c));
        REQUIRE(vram_stage_wake(a.c, a.stage, 0) == 0, "A wakes: %s",
                vram_client_last_error(a.c));
        CHECK(region_intact(a.c, a.region, 120), "A's bytes, round %d", round);
        REQUIRE(vram_stage_sleep(a.c, a.stage, 0) == 0, "A sleeps: %s",
                vram_client_last_error(a.c));
        REQUIRE(vram_stage_wake(b.c, b.stage, 0) == 0, "B wakes: %s",
                vram_client_last_error(b.c));
        CHECK(region_intact(b.c, b.region, 120), "B's bytes, round %d", round);
    }
    vram_client_close(a.c); /* exits asleep */
    vram_client_close(b.c);
    CHECK_EQ_U(dev_field(d, "granted_bytes"), 0);
}

/* ---- 3 and 4: a lender in a process of its own ------------------------- */

struct lender_ctl {
    struct rendezvous rv;
};

/* Registers stage 1 and takes every pool loan; then 'd' dispatch (answer
 * recalls), 'i' ignore the socket, 's' sleep stage 1, 'w' wake it, 'q'. */
static int lender(const struct daemon *d, void *p)
{
    struct lender_ctl *x = p;
    vram_client *c = connect_client(d, "lender");
    REQUIRE(vram_stage_register(c, 1, 0, NULL) == 0, "lender: %s",
            vram_client_last_error(c));
    REQUIRE(vram_expert_request(c, 1, 0) == 0, "loans: %s",
            vram_client_last_error(c));
    struct vram_residency res;
    vram_expert_residency(c, 1, &res);
    rv_send(x->rv.to_parent[1], res.expert_slots_backed);
    bool dispatching = false;
    for (;;) {
        struct pollfd pf[2] = {{.fd = x->rv.to_child[0], .events = POLLIN},
                               {.fd = vram_client_fd(c), .events = POLLIN}};
        poll(pf, dispatching ? 2 : 1, -1);
        if (dispatching && pf[1].revents)
            vram_client_dispatch(c);
        if (!pf[0].revents)
            continue;
        uint64_t cmd = rv_recv(x->rv.to_child[0]), r = 0;
        if (cmd == 'd') {
            dispatching = true;
            vram_client_dispatch(c);
        } else if (cmd == 'i') {
            dispatching = false;
        } else if (cmd == 's') {
            /* Its experts are a cache: dropped, not copied. */
            r = (uint64_t)-vram_stage_sleep(c, 1, VRAM_SLEEP_DISCARD_EXPERTS);
        } else if (cmd == 'w') {
            r = (uint64_t)-vram_stage_wake(c, 1, 0);
        } else {
            break;
        }
        rv_send(x->rv.to_parent[1], r);
    }
    vram_client_close(c);
    return 0;
}

struct reserver_ctl {
    struct rendezvous rv;
};

/* Stage 0, held reserve of the whole window: its result. */
static int reserver(const struct daemon *d, void *p)
{
    struct reserver_ctl *x = p;
    vram_client *c = connect_client(d, "reserver");
    REQUIRE(vram_stage_register(c, 0, 0, NULL) == 0, "reserver: %s",
            vram_client_last_error(c));
    rv_send(x->rv.to_parent[1], 1);
    rv_recv(x->rv.to_child[0]);
    int e = vram_kv_reserve(c, 0, 200000, 0, VRAM_KV_HOLD, NULL);
    if (e < 0)
        fprintf(stderr, "reserver: %s\n", vram_client_last_error(c));
    rv_send(x->rv.to_parent[1], (uint64_t)-e);
    vram_client_close(c);
    return 0;
}

static void part_recall_pending(const struct daemon *d)
{
    struct lender_ctl l;
    rv_init(&l.rv);
    pid_t pl = spawn(lender, d, &l);
    uint64_t backed = rv_recv(l.rv.to_parent[0]);
    CHECK(backed > 32, "the lender got %llu slots", (unsigned long long)backed);
    struct reserver_ctl r;
    rv_init(&r.rv);
    pid_t pr = spawn(reserver, d, &r);
    rv_recv(r.rv.to_parent[0]);
    rv_send(r.rv.to_child[1], 1); /* reserve, held: recalls the lender */
    bool recalled = false;
    for (int i = 0; i < 200 && !recalled; i++) {
        recalled = stage_field(d, 1, "recalls_pending") > 0;
        if (!recalled)
            usleep(20000);
    }
    CHECK(recalled, "no recall pending on the lender's stage");
    rv_send(l.rv.to_child[1], 's'); /* it sleeps instead of answering */
    CHECK_EQ_U(rv_recv(l.rv.to_parent[0]), 0);
    CHECK_EQ_U(rv_recv(r.rv.to_parent[0]), 0); /* the reserve completed */
    CHECK(wait_child(pr) == 0, "reserver");
    CHECK(!daemon_log_contains(d, "missed the"), "a recall deadline was missed "
          "by a stage that slept");
    CHECK(stage_asleep_in_status(d, 1), "stage 1 is not asleep");
    rv_send(l.rv.to_child[1], 'w');
    CHECK_EQ_U(rv_recv(l.rv.to_parent[0]), 0);
    rv_send(l.rv.to_child[1], 'q');
    CHECK(wait_child(pl) == 0, "lender");
}

static void part_wake_blocked(const struct daemon *d)
{
    vram_client *c = connect_client(d, "sleeper2");
    struct vram_stage_info in;
    REQUIRE(vram_stage_register(c, 0, 0, &in) == 0, "register: %s",
            vram_client_last_error(c));
    struct vram_kv_result kr;
    REQUIRE(vram_kv_reserve(c, 0, 200000, 0, 0, &kr) == 0, "reserve: %s",
            vram_client_last_error(c));
    uint32_t kv_slots = (uint32_t)(kr.kv_mapped_bytes / CB);
    CHECK_EQ_U(fill_region(c, in.kv_region, kv_slots), kv_slots);
    REQUIRE(vram_stage_sleep(c, 0, 0) == 0, "sleep: %s",
            vram_client_last_error(c));
    /* The lender takes every pool loan, stage 0's window among them (R5:
     * a sleeping stage's window lends as an unregistered one's), and does
     * not answer recalls. */
    struct lender_ctl l;
    rv_init(&l.rv);
    pid_t pl = spawn(lender, d, &l);
    uint64_t backed = rv_recv(l.rv.to_parent[0]);
    CHECK(backed > 188 + 32, "the lender got %llu slots, not stage 0's window",
          (unsigned long long)backed);
    int e = vram_stage_wake(c, 0, 0);
    CHECK(e == -ETIMEDOUT, "wake against a lender that does not answer: %d (%s)",
          e, vram_client_last_error(c));
    CHECK(vram_stage_asleep(c, 0) == 1, "not asleep after the failed wake");
    CHECK(stage_asleep_in_status(d, 0), "status: not asleep after it");
    rv_send(l.rv.to_child[1], 'd'); /* now it answers */
    CHECK_EQ_U(rv_recv(l.rv.to_parent[0]), 0);
    REQUIRE(vram_stage_wake(c, 0, 0) == 0, "wake: %s",
            vram_client_last_error(c));
    CHECK(region_intact(c, in.kv_region, kv_slots), "KV bytes lost");
    rv_send(l.rv.to_child[1], 'q');
    CHECK(wait_child(pl) == 0, "lender");
    vram_client_close(c);
}

/* ---- 5 and 6 ------------------------------------------------------------ */

struct engine_ctl {
    struct rendezvous rv;
    bool close;
};

/* Registers stage 0 with KV and weights, sleeps; on 'w' wakes and reports
 * whether every byte came back; on 'x' exits asleep. */
static int engine(const struct daemon *d, void *p)
{
    struct engine_ctl *x = p;
    vram_client *c = connect_client(d, "engine");
    struct vram_stage_info in;
    REQUIRE(vram_stage_register(c, 0, 0, &in) == 0, "engine: %s",
            vram_client_last_error(c));
    struct vram_kv_result kr;
    REQUIRE(vram_kv_reserve(c, 0, 60000, 0, 0, &kr) == 0, "reserve: %s",
            vram_client_last_error(c));
    uint32_t kv_slots = (uint32_t)(kr.kv_mapped_bytes / CB);
    uint32_t w = region_named(c, 0, "weights");
    REQUIRE(vram_region_grow(c, w, 4) == 0, "weights: %s",
            vram_client_last_error(c));
    fill_region(c, in.kv_region, kv_slots);
    fill_region(c, w, 4);
    REQUIRE(vram_stage_sleep(c, 0, 0) == 0, "sleep: %s",
            vram_client_last_error(c));
    rv_send(x->rv.to_parent[1], 1);
    for (;;) {
        uint64_t cmd = rv_recv(x->rv.to_child[0]);
        if (cmd == 'p') { /* a round trip: a reconnect resumes */
            rv_send(x->rv.to_parent[1], (uint64_t)-vram_client_ping(c));
        } else if (cmd == 'w') {
            int e = vram_stage_wake(c, 0, 0);
            if (e < 0)
                fprintf(stderr, "engine wake: %s\n", vram_client_last_error(c));
            rv_send(x->rv.to_parent[1], e == 0 &&
                                            region_intact(c, in.kv_region, kv_slots) &&
                                            region_intact(c, w, 4));
        } else {
            break;
        }
    }
    if (x->close)
        vram_client_close(c);
    return 0; /* 'x' without close: the process exits asleep */
}

static void part_exit_asleep(struct daemon *d)
{
    struct engine_ctl x = {.close = false};
    rv_init(&x.rv);
    pid_t pe = spawn(engine, d, &x);
    rv_recv(x.rv.to_parent[0]);
    CHECK(stage_asleep_in_status(d, 0), "stage 0 not asleep");
    rv_send(x.rv.to_child[1], 'x');
    CHECK(wait_child(pe) == 0, "engine");
    /* It held nothing: nothing to quarantine, the stage is free at once. */
    vram_client *c = connect_client(d, "next");
    int e = -EAGAIN;
    for (int i = 0; i < 100 && e == -EAGAIN; i++) {
        e = vram_stage_register(c, 0, 0, NULL);
        if (e == -EEXIST || e == -EAGAIN) { /* its disconnect, on its way */
            e = -EAGAIN;
            usleep(20000);
        }
    }
    CHECK(e == 0, "stage 0 after its owner exited asleep: %s",
          vram_client_last_error(c));
    CHECK(!stage_asleep_in_status(d, 0), "the new owner's stage is asleep");
    CHECK_EQ_U(dev_field(d, "quarantined_bytes"), 0);
    vram_client_close(c);
}

static void part_restart(struct daemon *d)
{
    struct engine_ctl x = {.close = true};
    rv_init(&x.rv);
    pid_t pe = spawn(engine, d, &x);
    rv_recv(x.rv.to_parent[0]);
    daemon_kill(d);
    REQUIRE(daemon_restart(d, config, NULL) == 0, "restart vramd");
    rv_send(x.rv.to_child[1], 'p');
    CHECK_EQ_U(rv_recv(x.rv.to_parent[0]), 0);
    CHECK(stage_asleep_in_status(d, 0), "stage 0 is not asleep after the "
          "restart");
    CHECK(stage_field(d, 0, "host_bytes") > 0, "host bytes lost in the resume");
    rv_send(x.rv.to_child[1], 'w');
    CHECK_EQ_U(rv_recv(x.rv.to_parent[0]), 1);
    rv_send(x.rv.to_child[1], 'q');
    CHECK(wait_child(pe) == 0, "engine");
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    part_configured(&d);
    part_swap(&d);
    part_recall_pending(&d);
    part_wake_blocked(&d);
    part_exit_asleep(&d);
    part_restart(&d);
    CHECK_EQ_U(dev_field(&d, "granted_bytes"), 0);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_sleep");
}
