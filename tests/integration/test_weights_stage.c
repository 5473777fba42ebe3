/* SPDX-License-Identifier: Apache-2.0 */
/* A configured stage whose fixed reservation a weight set backs (R17,
 * issue 31 item 1), on the host backend:
 *  1. Registration makes no region for the reservation; it opens the set
 *     the configuration names with its key (vram_stage_weights gives it):
 *     none existed, so this client writes it, made in the reservation's
 *     allocation size, in memory promised to the stage, so an ad-hoc
 *     engine that took everything else on the device could take none of
 *     it. Status names the reservation (set, size, key, set id).
 *  2. Another key is refused (ESTALE); a set larger than a reservation
 *     without a key is E2BIG, and vram_stage_weights of that one is
 *     ENODATA (the engine opens it by name).
 *  3. Closed and cached, the set is never evicted for that engine: it
 *     backs memory promised to the stage anyway.
 *  4. After vramd's kill -9, the set is back, still attached to the stage;
 *     the next owner's registration maps it read-only, every byte there,
 *     loading nothing; releasing the stage closes it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* 32 bytes {0x5e, 0x70, 0, ...} in hex, upper case as an operator may
 * write it. */
#define KEY_HEX "5E70000000000000000000000000000000000000000000000000000000000000"

static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"128MiB\", \"chunk\": \"2MiB\"}],"
    " \"pool\": {\"prefill_chunks\": 4},"
    " \"weights\": {\"alloc\": \"2MiB\"},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [64], \"expert_slot\": \"2MiB\","
    "   \"fixed\": [{\"name\": \"scratch\", \"kind\": \"fixed\", \"bytes\": \"4MiB\"},"
    "             {\"name\": \"weights\", \"kind\": \"fixed\", \"bytes\": \"20MiB\","
    "              \"set\": \"model/s0\", \"alloc\": \"8MiB\", \"key\": \"" KEY_HEX "\"},"
    "             {\"name\": \"draft\", \"kind\": \"fixed\", \"bytes\": \"4MiB\","
    "              \"set\": \"model/s0-draft\"}]}]}";

static const char *str(const char *s)
{
    return s ? s : "";
}

static const uint8_t key[VRAM_WEIGHTS_KEY_BYTES] = {0x5e, 0x70};
static const uint8_t other_key[VRAM_WEIGHTS_KEY_BYTES] = {0x5e, 0x71};

/* The stage's status entry for its reservation "weights", or NULL. */
static const cJSON *entry(const cJSON *st)
{
    const cJSON *s = status_stage(st, 0);
    const cJSON *arr = s ? cJSON_GetObjectItem(s, "weights") : NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
        if (strcmp(str(cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"))),
                   "weights") == 0)
            return e;
    return NULL;
}

/* The stage's owner: registers stage 0, makes and seals its set, then on
 * command closes it (cached) and exits. */
static int owner(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    vram_client *c = connect_client(d, "owner");
    REQUIRE(vram_stage_register(c, 0, 0, NULL) == 0, "register: %s",
            vram_client_last_error(c));
    /* Its regions: the KV and "scratch", none for the set's reservation. */
    uint32_t regions[8];
    int n = vram_stage_regions(c, 0, regions, 8);
    int named_weights = 0;
    for (int i = 0; i < n; i++)
        named_weights += strcmp(str(vram_region_name(c, regions[i])), "weights") == 0;
    CHECK(n == 3 && named_weights == 0, "the stage has %d regions, %d named "
          "weights (want 3: kv, expert, scratch)", n, named_weights);
    /* Registration opened the keyed set: nobody had it, so it is ours to
     * write. */
    struct vram_weights_info w, again;
    REQUIRE(vram_stage_weights(c, 0, "weights", &w) == 0 && w.writer && !w.sealed,
            "the stage's set: %s", vram_client_last_error(c));
    rv_send(rv->to_parent[1], 1); /* parent checks the status */
    rv_recv(rv->to_child[0]);

    int e = vram_weights_open(c, "model/s0", 0, 20 * MIB, other_key, 0, &again);
    CHECK(e == -ESTALE, "another key: %d %s", e, vram_client_last_error(c));
    e = vram_weights_open(c, "model/s0-draft", 0, 5 * MIB, other_key, 0, &again);
    CHECK(e == -E2BIG && strstr(vram_client_last_error(c), "reservation 'draft'"),
          "more than reserved: %d %s", e, vram_client_last_error(c));
    e = vram_stage_weights(c, 0, "draft", &again);
    CHECK(e == -ENODATA, "a reservation without a key: %d %s", e,
          vram_client_last_error(c));
    e = vram_stage_weights(c, 0, "scratch", &again);
    CHECK(e == -ENOENT, "a reservation without a set: %d", e);
    /* Opening it by name is the same set. */
    REQUIRE(vram_weights_open(c, "model/s0", 0, 20 * MIB, key, 0, &again) == 0 &&
                again.id == w.id && again.writer,
            "open: %s", vram_client_last_error(c));
    CHECK_EQ_U(w.alloc_bytes, 8 * MIB);
    CHECK_EQ_U(w.allocs, 3);
    fill_pattern((void *)(uintptr_t)w.base, 20 * MIB, 7);
    REQUIRE(vram_weights_seal(c, w.id) == 0, "seal: %s", vram_client_last_error(c));
    rv_send(rv->to_parent[1], w.id);
    rv_recv(rv->to_child[0]);
    CHECK(vram_weights_close(c, w.id) == 0, "close: %s", vram_client_last_error(c));
    CHECK(vram_stage_weights(c, 0, "weights", &again) == -ENOENT,
          "a closed set still given by vram_stage_weights");
    rv_send(rv->to_parent[1], 1);
    rv_recv(rv->to_child[0]);
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

/* An ad-hoc engine that takes every chunk it can; reports how many, then
 * on command tries for one more and reports the result. */
static int greedy(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    vram_client *c = connect_client(d, "greedy");
    uint32_t st, rg;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 0, &st) == 0, "adhoc: %s",
            vram_client_last_error(c));
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 128 * MIB, 1, &rg) == 0,
            "region: %s", vram_client_last_error(c));
    uint64_t got = 0;
    while (vram_region_grow(c, rg, 1) == 0)
        got++;
    rv_send(rv->to_parent[1], got);
    rv_recv(rv->to_child[0]);
    int e = vram_region_grow(c, rg, 1);
    rv_send(rv->to_parent[1], (uint64_t)-e);
    rv_recv(rv->to_child[0]);
    vram_client_close(c);
    return 0;
}

/* The stage's next owner, after the restart: maps the set, sealed, bytes
 * and all. */
static int next_owner(const struct daemon *d, void *arg)
{
    (void)arg;
    vram_client *c = connect_client(d, "next-owner");
    REQUIRE(vram_stage_register(c, 0, 0, NULL) == 0, "register: %s",
            vram_client_last_error(c));
    struct vram_weights_info w;
    int e = vram_stage_weights(c, 0, "weights", &w);
    CHECK(e == 0 && !w.writer && w.sealed, "registration's open after the "
          "restart: %d %s", e, vram_client_last_error(c));
    CHECK(e || check_pattern((void *)(uintptr_t)w.base, 20 * MIB, 7),
          "the set's bytes did not survive");
    CHECK(vram_stage_release(c, 0) == 0, "release: %s", vram_client_last_error(c));
    CHECK(e || vram_weights_info(c, w.id, &w) == -ENOENT,
          "the stage's release left its set open");
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");

    /* ---- 1. registration ---- */
    struct rendezvous orv;
    rv_init(&orv);
    pid_t o = spawn(owner, &d, &orv);
    REQUIRE(rv_recv(orv.to_parent[0]) == 1, "the owner did not register");
    cJSON *st = daemon_status(&d);
    const cJSON *en = entry(st);
    CHECK(en && strcmp(str(cJSON_GetStringValue(cJSON_GetObjectItem(en, "set"))),
                       "model/s0") == 0 &&
              json_u64(en, "bytes") == 20 * MIB &&
              strcasecmp(str(cJSON_GetStringValue(cJSON_GetObjectItem(en, "key"))),
                     KEY_HEX) == 0 &&
              cJSON_GetObjectItem(en, "set_id"),
          "stage 0's status does not name its set's reservation and the set "
          "registration opened");
    CHECK_EQ_U(status_dev(st, 0, "weights_bytes"), 24 * MIB);
    cJSON_Delete(st);

    /* ---- 2. the owner makes the set in the stage's memory ---- */
    struct rendezvous grv;
    rv_init(&grv);
    pid_t g = spawn(greedy, &d, &grv);
    uint64_t took = rv_recv(grv.to_parent[0]);
    st = daemon_status(&d);
    uint64_t fixed0 = status_dev(st, 0, "fixed_bytes");
    cJSON_Delete(st);
    rv_send(orv.to_child[1], 1);
    uint64_t set = rv_recv(orv.to_parent[0]);
    CHECK(set != 0, "the owner made no set");
    st = daemon_status(&d);
    en = entry(st);
    CHECK(en && json_u64(en, "set_id") == set, "status does not attach set %llu "
          "to the stage", (unsigned long long)set);
    CHECK_EQ_U(status_dev(st, 0, "weights_bytes"), 24 * MIB);
    CHECK_EQ_U(status_dev(st, 0, "fixed_bytes"), fixed0);
    cJSON_Delete(st);
    /* The greedy engine had taken all but the stage's promise (the 16 MiB
     * KV window, scratch, the set's 24 MiB and the draft's 4) and the
     * pool's prefill. */
    CHECK(took > 0 && took * 2 * MIB <= 128 * MIB - 16 * MIB - 4 * MIB - 24 * MIB - 4 * MIB,
          "the ad-hoc engine took %llu chunks: the stage's promise for its "
          "set was not kept", (unsigned long long)took);

    /* ---- 3. cached, not evicted ---- */
    rv_send(orv.to_child[1], 1);
    rv_recv(orv.to_parent[0]); /* closed */
    rv_send(grv.to_child[1], 1);
    CHECK_EQ_U(rv_recv(grv.to_parent[0]), ENOSPC);
    CHECK(wait_dev_value(&d, 0, "weights_bytes", 24 * MIB, 100),
          "the stage's cached set was evicted for an ad-hoc grow");
    rv_send(grv.to_child[1], 1);
    CHECK(wait_child(g) == 0, "the greedy engine");
    rv_send(orv.to_child[1], 1);
    CHECK(wait_child(o) == 0, "the owner");

    /* ---- 4. across a kill -9 ---- */
    daemon_kill(&d);
    REQUIRE(daemon_restart(&d, config, NULL) == 0, "start vramd again");
    st = daemon_status(&d);
    en = entry(st);
    CHECK(en && json_u64(en, "set_id") == set, "after the restart the set is "
          "not attached to stage 0");
    CHECK_EQ_U(status_dev(st, 0, "weights_bytes"), 24 * MIB);
    CHECK_EQ_U(status_dev(st, 0, "weights_cached_bytes"), 0);
    cJSON_Delete(st);
    CHECK(wait_child(spawn(next_owner, &d, NULL)) == 0, "the next owner");

    vram_client *admin = connect_client(&d, "admin");
    CHECK(vram_admin_weights_drop(admin, "model/s0") == 0, "drop: %s",
          vram_client_last_error(admin));
    vram_client_close(admin);
    st = daemon_status(&d);
    en = entry(st);
    CHECK(en && !cJSON_GetObjectItem(en, "set_id"), "a dropped set stays attached");
    CHECK_EQ_U(status_dev(st, 0, "weights_bytes"), 0);
    cJSON_Delete(st);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_weights_stage");
}
