/* SPDX-License-Identifier: Apache-2.0 */
/* vramd restarts without loss (rule 13).
 *  1. Two engines hold memory (a configured stage with KV, loans and a slot
 *     claim; an ad-hoc stage) and a third holds memory and exits while
 *     vramd is down. vramd is killed with SIGKILL and started again.
 *  2. The restarted vramd keeps the engines' chunks quarantined (the dead
 *     one's are free): a greedy newcomer gets none of them.
 *  3. Each engine's next call reconnects, resumes and succeeds: same ids,
 *     same addresses, data intact, a RECONNECTED event, nothing quarantined
 *     afterwards, and the daemon's invariants hold throughout.
 *  4. The same across an orderly stop (SIGTERM) and start.
 *  5. Another process cannot resume an engine's client; an evicted engine
 *     cannot either: its memory stays quarantined until it exits.
 *  6. Malformed resumes (wrong types, bad triples, undeclared regions, a
 *     second resume, a resume after other requests) are refused with clear
 *     errors, change nothing, and a correct one then succeeds. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"
#include "proto/message.h"

static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"512MiB\", \"chunk\": \"2MiB\"},"
    "               {\"id\": 1, \"capacity\": \"256MiB\", \"chunk\": \"2MiB\"}],"
    " \"pool\": {\"prefill_chunks\": 4},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256, 256], \"expert_slot\": \"2MiB\","
    "   \"fixed\": [{\"name\": \"weights\", \"kind\": \"fixed\", \"bytes\": \"16MiB\"}]}]}";

/* Stage 0: a window of 262144 tokens x 256 B = 64 MiB = 32 chunks per lane;
 * initial 16384 tokens = 2 chunks per lane. */

struct engine_ctl {
    struct rendezvous rv;
};

static int reconnects, lost_stages;
static uint32_t kept_on_reconnect;

static void on_event(void *u, const struct vram_event *ev)
{
    (void)u;
    if (ev->type == VRAM_EVENT_RECONNECTED) {
        reconnects++;
        kept_on_reconnect = ev->nchunks;
    } else if (ev->type == VRAM_EVENT_STAGE_LOST) {
        lost_stages++;
    }
}

/* Writes a pattern into every mapped chunk of a region: tag = region base +
 * slot, so a chunk that moved or changed is caught. */
static void fill_region(vram_client *c, uint32_t region)
{
    struct vram_region_info ri;
    REQUIRE(vram_region_info(c, region, &ri) == 0, "region info");
    for (uint32_t l = 0; l < ri.lanes; l++)
        for (uint32_t i = 0; i < ri.lane_slots; i++) {
            void *p = vram_region_slot(c, region, l, i);
            if (vram_region_chunk(c, region, l, i, NULL) == 0)
                fill_pattern(p, ri.chunk_bytes, (uintptr_t)p);
        }
}

static uint32_t check_region(vram_client *c, uint32_t region, uint32_t *n)
{
    struct vram_region_info ri;
    if (vram_region_info(c, region, &ri) < 0)
        return 1;
    uint32_t bad = 0;
    *n = 0;
    for (uint32_t l = 0; l < ri.lanes; l++)
        for (uint32_t i = 0; i < ri.lane_slots; i++) {
            void *p = vram_region_slot(c, region, l, i);
            if (vram_region_chunk(c, region, l, i, NULL) < 0)
                continue;
            (*n)++;
            bad += !check_pattern(p, ri.chunk_bytes, (uintptr_t)p);
        }
    return bad;
}

/* Engine A: configured stage 0 (KV grown, loans, a claim). Each round:
 * report ready, wait for the parent's word, then make a call (which finds
 * vramd restarted), and check everything. */
static int engine_a(const struct daemon *d, void *arg)
{
    struct engine_ctl *x = arg;
    vram_client *c = connect_client(d, "engine-a");
    vram_client_set_event_callback(c, on_event, NULL);
    struct vram_stage_info si;
    REQUIRE(vram_stage_register(c, 0, 0, &si) == 0, "register: %s",
            vram_client_last_error(c));
    struct vram_kv_result kr;
    REQUIRE(vram_kv_reserve(c, 0, 40000, 1000, 0, &kr) == 0, "reserve: %s",
            vram_client_last_error(c));
    REQUIRE(vram_kv_trim(c, 0, 30000) == 0, "trim");
    REQUIRE(vram_expert_request(c, 0, 8 * MIB) == 0, "expert: %s",
            vram_client_last_error(c));
    struct vram_residency res;
    REQUIRE(vram_expert_residency(c, 0, &res) == 0 && res.expert_slots_backed >= 2,
            "expert slots backed");
    uint32_t slots[2] = {0, 1};
    REQUIRE(vram_expert_claim(c, 0, 3, slots, 2) == 0, "claim");
    struct vram_region_info kv0, ex0;
    REQUIRE(vram_region_info(c, si.kv_region, &kv0) == 0 &&
            vram_region_info(c, si.expert_region, &ex0) == 0, "regions");
    fill_region(c, si.kv_region);
    fill_region(c, si.expert_region);
    uint32_t id0 = vram_client_id(c);
    size_t held0 = vram_client_chunks_held(c);
    int failures = 0;
    for (int round = 0; round < 2; round++) {
        rv_send(x->rv.to_parent[1], held0);
        if (rv_recv(x->rv.to_child[0]) != 1)
            return 10;
        /* vramd was restarted meanwhile: this call reconnects first. */
        if (vram_client_ping(c) != 0) {
            fprintf(stderr, "engine A: ping after restart: %s\n",
                    vram_client_last_error(c));
            failures++;
        }
        struct vram_region_info kv1, ex1;
        uint32_t n = 0;
        if (vram_region_info(c, si.kv_region, &kv1) < 0 ||
            vram_region_info(c, si.expert_region, &ex1) < 0 ||
            kv1.base != kv0.base || ex1.base != ex0.base) {
            fprintf(stderr, "engine A: regions moved or vanished\n");
            failures++;
        }
        uint32_t bad = check_region(c, si.kv_region, &n);
        bad += check_region(c, si.expert_region, &n);
        if (bad) {
            fprintf(stderr, "engine A: %u chunks lost their data\n", bad);
            failures++;
        }
        if (reconnects != round + 1 || lost_stages) {
            fprintf(stderr, "engine A: %d reconnects, %d stages lost\n",
                    reconnects, lost_stages);
            failures++;
        }
        if (vram_client_id(c) == id0) {
            fprintf(stderr, "engine A: same client id after a reconnect\n");
            failures++;
        }
        /* Claims came back: the same layer may claim them again, another
         * layer may not. */
        if (vram_expert_claim(c, 0, 3, slots, 2) != 0 ||
            vram_expert_claim(c, 0, 4, slots, 1) != -EBUSY) {
            fprintf(stderr, "engine A: slot claims were not kept\n");
            failures++;
        }
        /* The stage grows again (its own loans move into KV). */
        if (vram_kv_reserve(c, 0, 60000 + 20000 * (uint64_t)round, 1000, 0,
                            &kr) != 0) {
            fprintf(stderr, "engine A: reserve after resume: %s\n",
                    vram_client_last_error(c));
            failures++;
        }
        fill_region(c, si.kv_region);
        fill_region(c, si.expert_region);
        held0 = vram_client_chunks_held(c);
    }
    rv_send(x->rv.to_parent[1], failures ? 1000 + (uint64_t)failures : 0);
    rv_recv(x->rv.to_child[0]);
    vram_client_close(c);
    return failures;
}

/* Engine B: an ad-hoc stage on device 1 with a fixed region. */
static int engine_b(const struct daemon *d, void *arg)
{
    struct engine_ctl *x = arg;
    vram_client *c = connect_client(d, "engine-b");
    vram_client_set_event_callback(c, on_event, NULL);
    uint32_t stage, region;
    REQUIRE(vram_stage_register_adhoc(c, 1, 16, 47, &stage) == 0, "register");
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_FIXED, 64 * MIB, 1,
                               &region) == 0, "create");
    REQUIRE(vram_region_grow(c, region, 20) == 0, "grow");
    fill_region(c, region);
    /* A KV-kind region too: an ad-hoc stage stays ad-hoc however its
     * regions are called, across two resumes. */
    uint32_t kvr;
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_KV, 4 * MIB, 1, &kvr) == 0,
            "create kv");
    REQUIRE(vram_region_grow(c, kvr, 2) == 0, "grow kv");
    fill_region(c, kvr);
    struct vram_region_info r0;
    vram_region_info(c, region, &r0);
    int failures = 0;
    for (int round = 0; round < 2; round++) {
        rv_send(x->rv.to_parent[1], vram_client_chunks_held(c));
        if (rv_recv(x->rv.to_child[0]) != 1)
            return 10;
        if (vram_client_ping(c) != 0) {
            fprintf(stderr, "engine B: ping after restart: %s\n",
                    vram_client_last_error(c));
            failures++;
        }
        struct vram_region_info r1;
        uint32_t n = 0;
        if (vram_region_info(c, region, &r1) < 0 || r1.base != r0.base ||
            r1.mapped != 20 || check_region(c, region, &n) || n != 20 ||
            check_region(c, kvr, &n) || n != 2) {
            fprintf(stderr, "engine B: region or data not kept\n");
            failures++;
        }
        if (reconnects != round + 1 || kept_on_reconnect != 22 || lost_stages) {
            fprintf(stderr, "engine B: %d reconnects, %u kept\n", reconnects,
                    kept_on_reconnect);
            failures++;
        }
    }
    /* The stage id and region id are the ones the engine knows: a grow
     * and a release on them work. */
    if (vram_region_grow(c, region, 2) != 0 || vram_region_shrink(c, region, 2) != 0) {
        fprintf(stderr, "engine B: grow/shrink after resume: %s\n",
                vram_client_last_error(c));
        failures++;
    }
    rv_send(x->rv.to_parent[1], failures ? 1000 + (uint64_t)failures : 0);
    /* Last: evicted, it may not take its memory back. */
    rv_recv(x->rv.to_child[0]);
    reconnects = 0;
    int e = vram_client_ping(c);
    int r = vram_region_info(c, region, &r0);
    rv_send(x->rv.to_parent[1], (e == 0 && r == -ENOENT && lost_stages == 1 &&
                                 vram_client_chunks_held(c) == 0)
                                    ? 0
                                    : 2000 + (uint64_t)(-e));
    rv_recv(x->rv.to_child[0]);
    vram_client_close(c);
    return failures;
}

/* Engine C holds memory and exits while vramd is down. */
static int engine_c(const struct daemon *d, void *arg)
{
    struct engine_ctl *x = arg;
    vram_client *c = connect_client(d, "engine-c");
    uint32_t stage, region;
    REQUIRE(vram_stage_register_adhoc(c, 1, 48, 63, &stage) == 0, "register");
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_FIXED, 32 * MIB, 1,
                               &region) == 0, "create");
    REQUIRE(vram_region_grow(c, region, 10) == 0, "grow");
    rv_send(x->rv.to_parent[1], 10);
    rv_recv(x->rv.to_child[0]);
    _exit(0); /* without a word to vramd, which is down anyway */
}

static cJSON *raw_call(int fd, const char *json)
{
    raw_send(fd, json);
    return raw_recv(fd, 5000);
}

static uint64_t quarantined(const struct daemon *d);

static bool refused_with(cJSON *r, const char *err, const char *what)
{
    bool ok = r && !cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")) &&
              !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(r, "error")), err);
    if (!ok) {
        char *t = r ? cJSON_PrintUnformatted(r) : NULL;
        fprintf(stderr, "%s: expected %s, got %s\n", what, err, t ? t : "nothing");
        free(t);
    }
    cJSON_Delete(r);
    return ok;
}

/* This process holds 4 chunks as a raw client, drops the connection, and
 * tries to take them back with declarations good and bad. */
static void malformed_resumes(const struct daemon *d)
{
    int fd = raw_connect(d);
    cJSON_Delete(raw_call(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1}"));
    cJSON *r = raw_call(fd, "{\"type\":\"stage_register\",\"id\":2,"
                            "\"device\":1,\"first_layer\":0,\"last_layer\":3}");
    uint32_t stage = (uint32_t)json_u64(cJSON_GetObjectItem(r, "stage"), "id");
    cJSON_Delete(r);
    char buf[1024];
    snprintf(buf, sizeof(buf), "{\"type\":\"region_create\",\"id\":3,"
             "\"stage\":%u,\"kind\":\"fixed\",\"bytes\":8388608}", stage);
    r = raw_call(fd, buf);
    const cJSON *rg = cJSON_GetObjectItem(r, "region");
    uint32_t region = (uint32_t)json_u64(rg, "id");
    uint64_t base = json_u64(rg, "base"), stride = json_u64(rg, "lane_stride"),
             va = json_u64(rg, "va_bytes");
    cJSON_Delete(r);
    snprintf(buf, sizeof(buf), "{\"type\":\"region_grow\",\"id\":4,"
             "\"region\":%u,\"chunks\":4}", region);
    r = raw_call(fd, buf); /* the fds are dropped by a plain recv */
    uint64_t chunks[4];
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(r, "map"))
        if (n < 4)
            chunks[n++] = json_u64(e, "chunk");
    cJSON_Delete(r);
    REQUIRE(n == 4, "raw grow mapped %d chunks", n);
    r = raw_call(fd, "{\"type\":\"status\",\"id\":5}");
    uint32_t me = 0;
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItem(r, "clients"))
        if (json_u64(cl, "held_bytes") == 4 * 2 * MIB)
            me = (uint32_t)json_u64(cl, "id");
    cJSON_Delete(r);
    close(fd);
    REQUIRE(me != 0, "raw client not found");
    CHECK(daemon_log_wait(d, "4 chunks quarantined until pid", 2000),
          "the raw client's chunks were not quarantined");

    fd = raw_connect(d);
    snprintf(buf, sizeof(buf), "{\"type\":\"resume\",\"id\":1,\"client\":%u}", me);
    CHECK(refused_with(raw_call(fd, buf), "EPROTO", "resume before hello"),
          "resume before hello");
    cJSON_Delete(raw_call(fd, "{\"type\":\"hello\",\"id\":2,\"version\":1}"));
    snprintf(buf, sizeof(buf), "{\"type\":\"resume\",\"id\":3,\"client\":%u,"
             "\"stages\":5}", me);
    CHECK(refused_with(raw_call(fd, buf), "EINVAL", "stages not an array"),
          "stages of the wrong type");
    snprintf(buf, sizeof(buf), "{\"type\":\"resume\",\"id\":4,\"client\":%u,"
             "\"stages\":[{\"id\":%u,\"device\":1,\"first_layer\":0,"
             "\"last_layer\":3}],\"chunks\":[[1,2]]}", me, stage);
    CHECK(refused_with(raw_call(fd, buf), "EINVAL", "a chunk pair"),
          "a chunk entry that is not a triple");
    snprintf(buf, sizeof(buf), "{\"type\":\"resume\",\"id\":5,\"client\":%u,"
             "\"stages\":[{\"id\":%u,\"device\":1,\"first_layer\":0,"
             "\"last_layer\":3}],\"regions\":[{\"id\":%u}]}", me, stage, region);
    CHECK(refused_with(raw_call(fd, buf), "EINVAL", "a region without fields"),
          "a region without its fields");
    snprintf(buf, sizeof(buf), "{\"type\":\"resume\",\"id\":6,\"client\":%u,"
             "\"stages\":[{\"id\":%u,\"device\":1,\"first_layer\":0,"
             "\"last_layer\":3}],\"chunks\":[[%llu,%u,0]]}", me, stage,
             (unsigned long long)chunks[0], region);
    CHECK(refused_with(raw_call(fd, buf), "EINVAL", "an undeclared region"),
          "a chunk in an undeclared region");
    CHECK_EQ_U(quarantined(d), 4 * 2 * MIB); /* nothing changed */
    /* Correct, leaving one chunk out (freed) and naming one it never had
     * (lost): three kept. */
    int len = snprintf(buf, sizeof(buf),
             "{\"type\":\"resume\",\"id\":7,\"client\":%u,"
             "\"stages\":[{\"id\":%u,\"device\":1,\"first_layer\":0,"
             "\"last_layer\":3}],\"regions\":[{\"id\":%u,\"stage\":%u,"
             "\"kind\":\"fixed\",\"base\":%llu,\"lane_stride\":%llu,"
             "\"va_bytes\":%llu,\"lane_slots\":[4]}],\"chunks\":[",
             me, stage, region, stage, (unsigned long long)base,
             (unsigned long long)stride, (unsigned long long)va);
    for (int i = 0; i < 3; i++)
        len += snprintf(buf + len, sizeof(buf) - (size_t)len, "[%llu,%u,%d],",
                        (unsigned long long)chunks[i], region, i);
    snprintf(buf + len, sizeof(buf) - (size_t)len, "[%llu,%u,3]]}",
             (unsigned long long)(chunks[0] + 100), region);
    r = raw_call(fd, buf);
    CHECK(r && cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")) &&
          json_u64(r, "kept_chunks") == 3 && json_u64(r, "freed_chunks") == 1 &&
          cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "lost"),
                                                 "chunks")) == 1,
          "a correct resume did not keep 3, free 1 and lose 1");
    cJSON_Delete(r);
    CHECK_EQ_U(quarantined(d), 0);
    CHECK(refused_with(raw_call(fd, buf), "EALREADY", "resume twice"),
          "a second resume on one connection");
    close(fd);
    /* After other requests, a resume is refused. */
    CHECK(daemon_log_wait(d, "3 chunks quarantined until pid", 2000),
          "the resumed chunks were not quarantined at the disconnect");
    fd = raw_connect(d);
    cJSON_Delete(raw_call(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1}"));
    cJSON_Delete(raw_call(fd, "{\"type\":\"stage_register\",\"id\":2,"
                              "\"device\":0,\"first_layer\":0,\"last_layer\":3}"));
    r = raw_call(fd, "{\"type\":\"status\",\"id\":3}");
    uint32_t gone = 0;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItem(r, "clients"))
        if (json_u64(cl, "quarantined_bytes") == 3 * 2 * MIB)
            gone = (uint32_t)json_u64(cl, "id");
    cJSON_Delete(r);
    snprintf(buf, sizeof(buf), "{\"type\":\"resume\",\"id\":4,\"client\":%u}", gone);
    CHECK(refused_with(raw_call(fd, buf), "EBUSY", "resume after a register"),
          "a resume after other requests");
    r = raw_call(fd, "{\"type\":\"ping\",\"id\":5}");
    CHECK(r && cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")), "daemon not serving");
    cJSON_Delete(r);
    close(fd);
}

static uint64_t quarantined(const struct daemon *d)
{
    cJSON *st = daemon_status(d);
    uint64_t q = status_dev(st, 0, "quarantined_bytes") +
                 status_dev(st, 1, "quarantined_bytes");
    cJSON_Delete(st);
    return q;
}

static uint32_t gone_client_of(const struct daemon *d, const char *name)
{
    (void)name;
    cJSON *st = daemon_status(d);
    uint32_t id = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(st, "clients")) {
        const char *state = cJSON_GetStringValue(cJSON_GetObjectItem(c, "state"));
        if (state && !strcmp(state, "quarantined") &&
            json_u64(c, "quarantined_bytes") == 22 * 2 * MIB)
            id = (uint32_t)json_u64(c, "id");
    }
    cJSON_Delete(st);
    return id;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    struct engine_ctl a, b, cc;
    rv_init(&a.rv);
    rv_init(&b.rv);
    rv_init(&cc.rv);
    pid_t pa = spawn(engine_a, &d, &a), pb = spawn(engine_b, &d, &b),
          pc = spawn(engine_c, &d, &cc);
    uint64_t held_a = rv_recv(a.rv.to_parent[0]);
    uint64_t held_b = rv_recv(b.rv.to_parent[0]);
    CHECK_EQ_U(rv_recv(cc.rv.to_parent[0]), 10);
    CHECK(held_a > 0 && held_b == 22, "engines hold %llu and %llu chunks",
          (unsigned long long)held_a, (unsigned long long)held_b);
    cJSON *st = daemon_status(&d);
    uint64_t granted0 = status_dev(st, 0, "granted_bytes");
    cJSON_Delete(st);

    /* 1. SIGKILL; engine C exits while vramd is down; vramd comes back. */
    daemon_kill(&d);
    rv_send(cc.rv.to_child[1], 1);
    CHECK(wait_child(pc) == 0, "engine C");
    REQUIRE(daemon_restart(&d, config, NULL) == 0, "restart vramd");
    CHECK(daemon_log_contains(&d, "restart: 2 processes still hold"),
          "no restart line in the log");

    /* 2. What the engines hold stays theirs; C's is free again. */
    CHECK_EQ_U(quarantined(&d), (held_a + held_b) * 2 * MIB);
    vram_client *greedy = connect_client(&d, "greedy");
    uint32_t gs, gr;
    CHECK(vram_stage_register_adhoc(greedy, 1, 0, 1, &gs) == 0, "greedy register");
    CHECK(vram_region_create(greedy, gs, VRAM_REGION_FIXED, 256 * MIB, 1, &gr) == 0,
          "greedy region");
    /* Device 1 has 128 chunks: 22 are B's, so 106 at most; C's 10 are free. */
    CHECK(vram_region_grow(greedy, gr, 107) == -ENOSPC, "greedy got B's memory");
    CHECK(vram_region_grow(greedy, gr, 106) == 0, "greedy could not get the "
          "free memory (C's included): %s", vram_client_last_error(greedy));
    vram_client_close(greedy);
    /* Stage 0 may not be registered by anyone else meanwhile. */
    vram_client *thief = connect_client(&d, "thief");
    CHECK(vram_stage_register(thief, 0, 0, NULL) == -EAGAIN,
          "stage 0 registered by another client while its owner was away");
    vram_client_close(thief);

    /* 3. The engines' next calls reconnect and resume. */
    rv_send(a.rv.to_child[1], 1);
    rv_send(b.rv.to_child[1], 1);
    held_a = rv_recv(a.rv.to_parent[0]);
    held_b = rv_recv(b.rv.to_parent[0]);
    CHECK(held_b == 22, "engine B holds %llu chunks after resuming",
          (unsigned long long)held_b);
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 0, 3000) &&
          wait_dev_value(&d, 1, "quarantined_bytes", 0, 3000),
          "memory still quarantined after both resumed");
    st = daemon_status(&d);
    CHECK(status_dev(st, 0, "granted_bytes") >= granted0,
          "device 0 granted %llu < %llu before the restart",
          (unsigned long long)status_dev(st, 0, "granted_bytes"),
          (unsigned long long)granted0);
    CHECK(json_u64(status_stage(st, 0), "kv_mapped_bytes") > 0,
          "stage 0 is not back");
    cJSON_Delete(st);
    CHECK(daemon_log_contains(&d, "resumed client"), "no resume in the log");

    /* 4. An orderly stop and start with the engines connected. A start
     * under another device layout is refused while they hold memory: here
     * device 1 at 16 MiB, 8 chunks, where engine B holds 22. (A smaller
     * capacity that still holds every held chunk is accepted: a reload
     * changes capacities at once; test_win_service_daemon restarts after
     * one.) */
    CHECK(daemon_stop(&d) == 0, "vramd did not stop cleanly");
    char other[1024];
    snprintf(other, sizeof(other), "%s", config);
    char *cap = strstr(other, "\"256MiB\"");
    REQUIRE(cap, "config layout");
    memcpy(cap, "\"16MiB\"", 7);
    memmove(cap + 7, cap + 8, strlen(cap + 8) + 1);
    CHECK(daemon_restart(&d, other, NULL) < 0,
          "vramd started under another device layout with memory held");
    CHECK(daemon_log_contains(&d, "under another device layout"),
          "no reason logged for the refused start");
    REQUIRE(daemon_restart(&d, config, NULL) == 0, "start vramd again");
    CHECK_EQ_U(quarantined(&d), (held_a + held_b) * 2 * MIB);
    rv_send(a.rv.to_child[1], 1);
    rv_send(b.rv.to_child[1], 1);
    CHECK_EQ_U(rv_recv(a.rv.to_parent[0]), 0);
    CHECK_EQ_U(rv_recv(b.rv.to_parent[0]), 0);
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 0, 3000),
          "quarantined after the second resume");

    /* 5a. Another process may not take a client that is not its own. */
    uint32_t b_id = 0;
    st = daemon_status(&d);
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItem(st, "clients"))
        if (json_u64(cl, "held_bytes") == 22 * 2 * MIB)
            b_id = (uint32_t)json_u64(cl, "id");
    cJSON_Delete(st);
    CHECK(b_id != 0, "engine B's client not found");
    int fd = raw_connect(&d);
    cJSON *r = raw_call(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1}");
    cJSON_Delete(r);
    char req[128];
    snprintf(req, sizeof(req), "{\"type\":\"resume\",\"id\":2,\"client\":%u}", b_id);
    r = raw_call(fd, req);
    CHECK(r && !cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")) &&
          !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(r, "error")), "ENOENT"),
          "a resume of another process's (connected) client was not refused");
    cJSON_Delete(r);
    close(fd);

    /* 5b. Evicted, engine B may not take its memory back. */
    vram_client *admin = connect_client(&d, "admin");
    CHECK(vram_admin_evict(admin, b_id) == 0, "evict: %s",
          vram_client_last_error(admin));
    vram_client_close(admin);
    uint32_t gone_b = gone_client_of(&d, "engine-b");
    CHECK(gone_b == b_id, "evicted B is not a quarantined client");
    /* A process other than B asking for B's gone client is refused too. */
    fd = raw_connect(&d);
    cJSON_Delete(raw_call(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1}"));
    r = raw_call(fd, req);
    CHECK(r && !cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")),
          "a stranger resumed engine B's client");
    cJSON_Delete(r);
    close(fd);
    rv_send(b.rv.to_child[1], 1);
    CHECK_EQ_U(rv_recv(b.rv.to_parent[0]), 0);
    CHECK(daemon_log_contains(&d, "was evicted"), "no refusal in the log");
    CHECK_EQ_U(quarantined(&d), 22 * 2 * MIB); /* until B exits */
    rv_send(b.rv.to_child[1], 1);
    CHECK(wait_child(pb) == 0, "engine B failed");
    CHECK(wait_dev_value(&d, 1, "quarantined_bytes", 0, 3000),
          "B's memory not freed after it exited");

    rv_send(a.rv.to_child[1], 1);
    CHECK(wait_child(pa) == 0, "engine A failed");
    CHECK(wait_dev_value(&d, 0, "granted_bytes", 0, 3000), "A's memory not back");

    /* 6. */
    malformed_resumes(&d);
    daemon_stop(&d);
    return check_report("test_restart");
}
