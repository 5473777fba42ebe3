/* SPDX-License-Identifier: Apache-2.0 */
/* The engine API contract (vram.h): events say what changes and come
 * after the state they announce is in place, every call returns with the
 * library's figures current (equal to the daemon's), a trim keeps pool
 * loans, a registration maps its initial window (recalling pool loans in
 * it), discovery calls, documented error codes with vramd's meaning, and
 * two clients in one process where one blocks in a call while the other's
 * recalls are answered by its event thread. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/harness.h"

/* 128 chunks of 2 MiB. Stage 0: lanes of 256 and 128 bytes per token
 * (windows 32 + 16 chunks, initial 2 + 1), 3 MiB expert slots (not a
 * multiple of a chunk), 8 MiB of weights. Stage 1: one lane (32 chunks,
 * initial 2), 56 MiB of headroom kept unlent. Reserved 84, unreserved 44. */
static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"256MiB\", \"chunk\": \"2MiB\","
    "                \"lend_unreserved\": true}],"
    " \"pool\": {\"prefill_chunks\": 0},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256, 128], \"expert_slot\": \"3MiB\","
    "   \"fixed\": [{\"name\": \"weights\", \"kind\": \"fixed\", \"bytes\": \"8MiB\"}],"
    "   \"loan\": {\"recall_deadline_ms\": 2000, \"hold_ms\": 3000}},"
    "  {\"id\": 1, \"device\": 0, \"first_layer\": 16, \"last_layer\": 31,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\","
    "   \"loan\": {\"headroom\": \"56MiB\", \"recall_deadline_ms\": 2000,"
    "             \"hold_ms\": 3000}}]}";

/* What a callback saw: the event, and the library's state inside it. */
struct seen {
    struct vram_event ev;
    struct vram_residency res;
    struct vram_stage_info info;
    bool returned;    /* the call that caused it had returned already */
    bool main_thread; /* it ran on the test's own thread */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t main_tid;
static struct seen seen[64];
static int nseen;
static bool call_returned;

static void on_event(void *user, const struct vram_event *ev)
{
    vram_client *c = user;
    struct seen s = {.ev = *ev, .returned = call_returned,
                     .main_thread = pthread_equal(pthread_self(), main_tid)};
    s.ev.chunks = NULL;
    vram_expert_residency(c, ev->stage, &s.res);
    vram_stage_info(c, ev->stage, &s.info);
    pthread_mutex_lock(&mu);
    if (nseen < 64)
        seen[nseen++] = s;
    pthread_mutex_unlock(&mu);
}

static void reset_seen(void)
{
    pthread_mutex_lock(&mu);
    nseen = 0;
    call_returned = false;
    pthread_mutex_unlock(&mu);
}

static void returned(void)
{
    pthread_mutex_lock(&mu);
    call_returned = true;
    pthread_mutex_unlock(&mu);
}

/* The i-th event seen of a type for a stage, or NULL. */
static const struct seen *nth(enum vram_event_type type, uint32_t stage, int i)
{
    const struct seen *r = NULL;
    pthread_mutex_lock(&mu);
    for (int k = 0; k < nseen && !r; k++)
        if (seen[k].ev.type == type && seen[k].ev.stage == stage && i-- == 0)
            r = &seen[k];
    pthread_mutex_unlock(&mu);
    return r;
}

static int count(enum vram_event_type type, uint32_t stage)
{
    int n = 0;
    while (nth(type, stage, n))
        n++;
    return n;
}

/* The library's figures agree with the daemon's. */
static void agree(const struct daemon *d, vram_client *c, uint32_t stage,
                  const char *when)
{
    struct vram_stage_info in;
    struct vram_residency res;
    REQUIRE(vram_stage_info(c, stage, &in) == 0, "stage_info");
    vram_expert_residency(c, stage, &res);
    cJSON *st = daemon_status(d);
    const cJSON *s = status_stage(st, stage);
    CHECK(in.kv_mapped_bytes == json_u64(s, "kv_mapped_bytes"),
          "%s: stage %u kv mapped %llu here, %llu in vramd", when, stage,
          (unsigned long long)in.kv_mapped_bytes,
          (unsigned long long)json_u64(s, "kv_mapped_bytes"));
    CHECK(in.expert_loaned_bytes == json_u64(s, "expert_loaned_bytes"),
          "%s: stage %u loans %llu here, %llu in vramd", when, stage,
          (unsigned long long)in.expert_loaned_bytes,
          (unsigned long long)json_u64(s, "expert_loaned_bytes"));
    CHECK(res.expert_slots_backed == json_u64(s, "expert_slots_backed") &&
              in.expert_slots_backed == res.expert_slots_backed,
          "%s: stage %u slots %u/%u here, %llu in vramd", when, stage,
          res.expert_slots_backed, in.expert_slots_backed,
          (unsigned long long)json_u64(s, "expert_slots_backed"));
    cJSON_Delete(st);
}

int main(void)
{
    main_tid = pthread_self();
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    vram_client *a = connect_client(&d, "engine-a");
    vram_client_set_event_callback(a, on_event, a);
    struct vram_stage_info ai;
    REQUIRE(vram_stage_register(a, 0, 0, &ai) == 0, "register 0: %s",
            vram_client_last_error(a));
    CHECK_EQ_U(ai.kv_mapped_bytes, 3 * 2 * MIB);

    /* ---- discovery ---- */
    struct vram_device_info dev[4];
    CHECK(vram_devices(a, dev, 4) == 1, "one device");
    CHECK_EQ_U(dev[0].id, 0);
    CHECK_EQ_U(dev[0].capacity_bytes, 256 * MIB);
    CHECK_EQ_U(dev[0].chunk_bytes, 2 * MIB);
    CHECK(strcmp(dev[0].backend, vram_client_backend(a)) == 0, "backend %s",
          dev[0].backend);
    CHECK(vram_devices(a, NULL, 0) == 1, "count only");
    uint32_t ids[8];
    int nr = vram_stage_regions(a, 0, ids, 8);
    CHECK(nr == 3, "stage 0 has %d regions", nr);
    bool have_weights = false;
    for (int i = 0; i < nr && i < 8; i++) {
        struct vram_region_info ri;
        REQUIRE(vram_region_info(a, ids[i], &ri) == 0, "region info");
        const char *name = vram_region_name(a, ids[i]);
        if (ri.kind == VRAM_REGION_FIXED)
            have_weights = name && strcmp(name, "weights") == 0;
        if (ri.kind == VRAM_REGION_KV) {
            CHECK(ri.id == ai.kv_region && strcmp(name, "kv") == 0, "kv: %s",
                  name);
            CHECK_EQ_U(vram_region_lane_slots(a, ri.id, 0), 32);
            CHECK_EQ_U(vram_region_lane_slots(a, ri.id, 1), 16);
            CHECK(vram_region_lane_slots(a, ri.id, 2) == -ENOENT, "lane 2");
        }
    }
    CHECK(have_weights, "the fixed region is not named 'weights'");
    CHECK(vram_stage_regions(a, 7, ids, 8) == -ENOENT, "stage 7 is not ours");
    /* Expert slots: 256 MiB of region / 3 MiB; slot j at base + j x 3 MiB. */
    CHECK_EQ_U(vram_expert_slots(a, 0), 85);
    struct vram_region_info ex;
    REQUIRE(vram_region_info(a, ai.expert_region, &ex) == 0, "expert region");
    CHECK((char *)vram_expert_slot(a, 0, 7) == (char *)ex.base + 7 * 3 * MIB,
          "slot 7's address");
    CHECK(vram_expert_slot(a, 0, 85) == NULL, "slot 85 is past the region");

    /* ---- loans: BUDGET_CHANGED after the reply, before the call returns,
     * once ---- */
    reset_seen();
    REQUIRE(vram_expert_request(a, 0, 0) == 0, "loans: %s",
            vram_client_last_error(a));
    returned();
    /* 45 of its window + 44 unreserved + stage 1's idle window beyond its
     * initial one (32 - 2, kept for its registration): 119 chunks, 79 slots
     * of 3 MiB. */
    struct vram_residency res;
    vram_expert_residency(a, 0, &res);
    CHECK_EQ_U(res.expert_slots_backed, 79);
    CHECK_EQ_U(res.expert_loaned_bytes, 119 * 2 * MIB);
    const struct seen *s = nth(VRAM_EVENT_BUDGET_CHANGED, 0, 0);
    CHECK(s && !s->returned, "BUDGET_CHANGED not told before the call returned");
    CHECK(s && s->ev.expert_slots_backed == 79 && s->res.expert_slots_backed == 79,
          "BUDGET_CHANGED: %u slots, residency %u", s ? s->ev.expert_slots_backed : 0,
          s ? s->res.expert_slots_backed : 0);
    CHECK(vram_client_ping(a) == 0, "ping");
    CHECK(count(VRAM_EVENT_BUDGET_CHANGED, 0) == 1, "the change told %d times",
          count(VRAM_EVENT_BUDGET_CHANGED, 0));
    agree(&d, a, 0, "after the loans");
    /* Claims: backed slots only, EINVAL beyond. */
    uint32_t last = 78, past = 79;
    CHECK(vram_expert_claim(a, 0, 3, &last, 1) == 0, "claim 78: %s",
          vram_client_last_error(a));
    CHECK(vram_expert_claim(a, 0, 3, &past, 1) == -EINVAL, "claim 79");

    /* ---- EXPERT_SHRINK: a long prompt takes the stage's own loans ---- */
    reset_seen();
    struct vram_kv_result kr;
    REQUIRE(vram_kv_reserve(a, 0, 65536, 1024, 0, &kr) == 0, "reserve: %s",
            vram_client_last_error(a));
    returned();
    /* 73,728 tokens: 9 + 5 chunks, 11 more, moved from the top loans. */
    CHECK_EQ_U(kr.recalled_chunks, 11);
    s = nth(VRAM_EVENT_EXPERT_SHRINK, 0, 0);
    REQUIRE(s, "no EXPERT_SHRINK");
    CHECK_EQ_U(s->ev.nchunks, 11);
    CHECK_EQ_U(s->ev.slot_end, 79);
    CHECK_EQ_U(s->ev.slot_first, 72); /* 108 chunks x 2 / 3 */
    CHECK_EQ_U(s->ev.expert_slots_backed, 72);
    CHECK_EQ_U(s->res.expert_slots_backed, 72); /* the state after, inside */
    CHECK_EQ_U(s->info.expert_slots_backed, 72);
    CHECK_EQ_U(s->info.kv_mapped_bytes, 14 * 2 * MIB);
    CHECK_EQ_U(s->res.expert_loaned_bytes, 108 * 2 * MIB);
    s = nth(VRAM_EVENT_BUDGET_CHANGED, 0, 0);
    CHECK(s && !s->returned && s->ev.expert_slots_backed == 72,
          "BUDGET_CHANGED after the shrink");
    agree(&d, a, 0, "after the reserve");

    /* ---- a trim keeps pool loans: all 11 go back to loans ---- */
    REQUIRE(vram_kv_trim(a, 0, 0) == 0, "trim: %s", vram_client_last_error(a));
    vram_expert_residency(a, 0, &res);
    CHECK_EQ_U(res.expert_loaned_bytes, 119 * 2 * MIB);
    cJSON *st = daemon_status(&d);
    /* Free: stage 0's weights not grown yet, and stage 1's initial window. */
    CHECK_EQ_U(status_dev(st, 0, "free_bytes"), (4 + 2) * 2 * MIB);
    cJSON_Delete(st);
    agree(&d, a, 0, "after the trim");

    /* ---- two clients in one process: B registers at once (its initial
     * window was kept free), and its long prompt needs A's pool loans back
     * while this thread blocks in the reserve; A's event thread answers
     * the recall ---- */
    REQUIRE(vram_client_start_event_thread(a) == 0, "event thread");
    CHECK(vram_client_start_event_thread(a) == -EALREADY, "started twice");
    vram_client *b = connect_client(&d, "engine-b");
    vram_client_set_event_callback(b, on_event, b);
    reset_seen();
    struct vram_stage_info bi;
    int e = vram_stage_register(b, 1, 0, &bi);
    CHECK(e == 0, "register 1 while stage 0 holds its window: %d %s", e,
          vram_client_last_error(b));
    CHECK_EQ_U(bi.kv_mapped_bytes, 2 * 2 * MIB); /* its initial window */
    CHECK(nth(VRAM_EVENT_RECALL, 0, 0) == NULL, "the registration recalled");
    /* 73,728 tokens: 9 chunks, 7 more than its initial window, recalled
     * from the top of A's loans (with hold). */
    REQUIRE(vram_kv_reserve(b, 1, 65536, 1024, VRAM_KV_HOLD, &kr) == 0,
            "B reserve: %s", vram_client_last_error(b));
    CHECK_EQ_U(kr.kv_mapped_bytes, 9 * 2 * MIB);
    s = nth(VRAM_EVENT_RECALL, 0, 0);
    REQUIRE(s, "A saw no recall");
    CHECK(!s->main_thread, "A's recall was handled on the test's thread");
    CHECK_EQ_U(s->ev.nchunks, 7);
    CHECK_EQ_U(s->ev.slot_end, 79);
    CHECK_EQ_U(s->ev.slot_first, 74); /* 112 x 2 / 3 */
    CHECK_EQ_U(s->res.expert_slots_backed, 74);
    CHECK_EQ_U(s->info.expert_slots_backed, 74);
    CHECK(s->ev.deadline_ms > 0 && s->ev.deadline_ms <= 2000, "deadline %u",
          s->ev.deadline_ms);
    CHECK(vram_client_ping(a) == 0, "ping A");
    agree(&d, a, 0, "after the recall");

    /* B's trim lends 2 (its headroom keeps 28 of 32 unlent) and unmaps 5. */
    REQUIRE(vram_kv_trim(b, 1, 0) == 0, "B trim: %s", vram_client_last_error(b));
    REQUIRE(vram_stage_info(b, 1, &bi) == 0, "B info");
    CHECK_EQ_U(bi.kv_mapped_bytes, 2 * 2 * MIB);
    CHECK_EQ_U(bi.expert_loaned_bytes, 2 * 2 * MIB);
    agree(&d, b, 1, "after B's trim with unmaps");
    CHECK(vram_client_ping(a) == 0, "ping A");
    agree(&d, a, 0, "after B's recalls");

    /* ---- errors: documented codes, vramd's words ---- */
    e = vram_kv_reserve(a, 0, 262144, 1, 0, NULL);
    CHECK(e == -E2BIG, "over the native context: %d", e);
    CHECK(strstr(vram_client_last_error(a), "native context") != NULL,
          "unclear: %s", vram_client_last_error(a));
    CHECK(strstr(vram_strerror(-E2BIG), "Argument list") == NULL &&
              strstr(vram_strerror(-E2BIG), "native context") != NULL,
          "E2BIG reads '%s'", vram_strerror(-E2BIG));
    CHECK(strstr(vram_strerror(-EAGAIN), "hold") != NULL, "EAGAIN reads '%s'",
          vram_strerror(-EAGAIN));

    vram_client_close(b);
    vram_client_close(a);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_engine_contract");
}
