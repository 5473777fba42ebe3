/* SPDX-License-Identifier: Apache-2.0 */
/* vramd dies after committing a call and before its reply, for every call
 * that changes what an engine holds (the fault injection
 * VRAMD_TEST_CRASH_BEFORE_REPLY puts the crash exactly there). vramd's
 * state file has the call's outcome; the engine never heard it. The engine
 * runs one of each call in turn; vramd kills itself inside each, and the
 * test starts it again, armed for the next. Each time the library must
 * reconnect, resume with what the engine maps, send the call again and
 * succeed, and the engine must lose nothing: no stage, no chunk, no byte
 * (each chunk carries a pattern made from its id, so a chunk that came back
 * elsewhere or without its data is caught). Among them:
 *  - stage_register: vramd gave the stage, the engine declares none;
 *  - kv_reserve: vramd moved loans into KV, the engine maps them as loans;
 *  - kv_trim: the reverse;
 *  - chunk_release, region_release, stage_release: vramd freed what the
 *    engine had already let go of. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"512MiB\", \"chunk\": \"2MiB\"}],"
    " \"pool\": {\"prefill_chunks\": 4},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256, 256], \"expert_slot\": \"2MiB\"}]}";

/* Stage 0: a window of 262144 tokens x 256 B = 32 chunks per lane, 64 in
 * all; 16384 initial tokens = 2 chunks per lane. */

/* The requests of the engine's calls, in order; vramd dies inside each
 * (the fifth is an ad-hoc stage's). */
static const char *const steps[] = {
    "stage_register", "expert_request", "kv_reserve", "kv_trim",
    "expert_claim", "stage_register", "region_create", "region_grow",
    "chunk_move", "chunk_release", "region_release", "stage_release"};
#define NSTEPS (sizeof(steps) / sizeof(steps[0]))

static int reconnects, lost_stages;
static uint32_t lost_chunks;

static void on_event(void *u, const struct vram_event *ev)
{
    (void)u;
    if (ev->type == VRAM_EVENT_RECONNECTED) {
        reconnects++;
        lost_chunks += ev->lost_chunks;
    } else if (ev->type == VRAM_EVENT_STAGE_LOST) {
        lost_stages++;
    }
}

/* The chunks held before a call, and what each held chunk must contain
 * after it: the pattern of its id if it was held before, zeros if the call
 * granted it. */
struct seen {
    uint64_t id[512];
    size_t n;
};

static bool seen_has(const struct seen *s, uint64_t id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->id[i] == id)
            return true;
    return false;
}

static bool all_zero(const void *p, size_t n)
{
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        if (w[i])
            return false;
    return true;
}

/* For each mapped chunk of the region: fill (and note it in *s) or check
 * against *s. *n counts them; returns the chunks that fail the check. */
static uint32_t stamp(vram_client *c, uint32_t region, bool fill,
                      struct seen *s, uint32_t *n)
{
    struct vram_region_info ri;
    if (!region || vram_region_info(c, region, &ri) < 0)
        return 0;
    uint32_t bad = 0;
    for (uint32_t l = 0; l < ri.lanes; l++)
        for (uint32_t i = 0; i < ri.lane_slots; i++) {
            uint64_t id;
            if (vram_region_chunk(c, region, l, i, &id) < 0)
                continue;
            void *p = vram_region_slot(c, region, l, i);
            (*n)++;
            if (fill) {
                fill_pattern(p, ri.chunk_bytes, id);
                if (s->n < sizeof(s->id) / sizeof(s->id[0]))
                    s->id[s->n++] = id;
            } else if (seen_has(s, id)) {
                bad += !check_pattern(p, ri.chunk_bytes, id);
            } else {
                bad += !all_zero(p, ri.chunk_bytes);
            }
        }
    return bad;
}

static uint32_t count_in(vram_client *c, uint32_t region)
{
    struct seen none = {.n = 0};
    uint32_t n = 0;
    stamp(c, region, false, &none, &n);
    return n;
}

struct engine {
    vram_client *c;
    struct vram_stage_info si;
    uint32_t adhoc, r1, r2;
};

/* Step i: its call, and what must hold after it. */
static int run_step(struct engine *e, size_t i)
{
    vram_client *c = e->c;
    int r = 0;
    uint32_t before_kv = count_in(c, e->si.kv_region);
    switch (i) {
    case 0:
        r = vram_stage_register(c, 0, 0, &e->si);
        if (r == 0 && count_in(c, e->si.kv_region) != 4)
            r = -EBADE;
        break;
    case 1:
        r = vram_expert_request(c, 0, 120 * MIB); /* the window, lent */
        if (r == 0 && count_in(c, e->si.expert_region) != 60)
            r = -EBADE;
        break;
    case 2: /* 22 more KV chunks: all of them loans moved */
        r = vram_kv_reserve(c, 0, 100000, 0, 0, NULL);
        if (r == 0 && count_in(c, e->si.kv_region) != before_kv + 22)
            r = -EBADE;
        break;
    case 3: /* back to 16384 tokens: 22 KV chunks lent */
        r = vram_kv_trim(c, 0, 0);
        if (r == 0 && count_in(c, e->si.kv_region) != 4)
            r = -EBADE;
        break;
    case 4: {
        uint32_t slots[2] = {0, 1};
        r = vram_expert_claim(c, 0, 3, slots, 2);
        if (r == 0 && vram_expert_claim(c, 0, 4, slots, 1) != -EBUSY)
            r = -EBADE; /* the claim is not there */
        break;
    }
    case 5:
        r = vram_stage_register_adhoc(c, 0, 16, 31, &e->adhoc);
        break;
    case 6:
        r = vram_region_create(c, e->adhoc, VRAM_REGION_FIXED, 32 * MIB, 1,
                               &e->r1);
        if (r == 0)
            r = vram_region_create(c, e->adhoc, VRAM_REGION_FIXED, 32 * MIB, 1,
                                   &e->r2);
        break;
    case 7:
        r = vram_region_grow(c, e->r1, 8);
        if (r == 0 && count_in(c, e->r1) != 8)
            r = -EBADE;
        break;
    case 8:
        r = vram_region_move_chunk(c, e->r1, 0, 7, e->r2, 0, 0);
        if (r == 0 && (count_in(c, e->r1) != 7 || count_in(c, e->r2) != 1))
            r = -EBADE;
        break;
    case 9:
        r = vram_region_shrink(c, e->r1, 3);
        if (r == 0 && count_in(c, e->r1) != 4)
            r = -EBADE;
        break;
    case 10:
        r = vram_region_release(c, e->r2);
        break;
    case 11:
        r = vram_stage_release(c, e->adhoc);
        break;
    }
    return r;
}

static int engine(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    struct engine e = {.c = connect_client(d, "engine")};
    vram_client_set_event_callback(e.c, on_event, NULL);
    int failures = 0;
    static struct seen held;
    for (size_t i = 0; i < NSTEPS; i++) {
        int r = run_step(&e, i);
        uint32_t n = 0, bad = 0;
        uint32_t regions[] = {e.si.kv_region, e.si.expert_region, e.r1, e.r2};
        for (size_t k = 0; k < 4; k++)
            bad += stamp(e.c, regions[k], false, &held, &n);
        if (r != 0 || reconnects != (int)i + 1 || lost_stages || lost_chunks ||
            bad || n != vram_client_chunks_held(e.c)) {
            fprintf(stderr, "%s across a crash: %s (%d); %d reconnects, %d "
                    "stages and %u chunks lost, %u chunks without their data, "
                    "%u mapped of %zu held\n", steps[i],
                    r == 0 ? "done" : r == -EBADE ? "not done"
                                                  : vram_client_last_error(e.c),
                    r,
                    reconnects, lost_stages, lost_chunks, bad, n,
                    vram_client_chunks_held(e.c));
            failures++;
        }
        n = 0;
        held.n = 0;
        for (size_t k = 0; k < 4; k++)
            stamp(e.c, regions[k], true, &held, &n);
        /* The next call waits until the test has seen vramd up again:
         * otherwise vramd could die inside it while still starting. */
        rv_send(rv->to_parent[1], i);
        if (rv_recv(rv->to_child[0]) != i)
            return 100;
    }
    vram_client_close(e.c);
    return failures;
}

/* Waits for vramd to kill itself inside the call, then starts it again,
 * armed for the next call (or not, for NULL). */
static void await_crash_and_restart(struct daemon *d, const char *next)
{
    int st = 0;
    bool died = false;
    for (int i = 0; i < 1000 && !died; i++) {
        died = waitpid(d->pid, &st, WNOHANG) == d->pid;
        if (!died)
            usleep(10000);
    }
    REQUIRE(died, "vramd did not die inside the call");
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
          "vramd ended otherwise (status %d)", st);
    d->pid = 0;
    if (next)
        setenv("VRAMD_TEST_CRASH_BEFORE_REPLY", next, 1);
    REQUIRE(daemon_restart(d, config, NULL) == 0, "restart vramd");
    unsetenv("VRAMD_TEST_CRASH_BEFORE_REPLY");
}

int main(void)
{
    struct daemon d;
    /* A misspelt request type would never fire: refused at start. */
    setenv("VRAMD_TEST_CRASH_BEFORE_REPLY", "kv_reserv", 1);
    CHECK(daemon_start(&d, config, NULL) < 0 &&
              daemon_log_contains(&d, "'kv_reserv' is not a request type"),
          "vramd started with a fault injection that names no request");
    setenv("VRAMD_TEST_CRASH_BEFORE_REPLY", steps[0], 1);
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    unsetenv("VRAMD_TEST_CRASH_BEFORE_REPLY");
    struct rendezvous rv;
    rv_init(&rv);
    pid_t pe = spawn(engine, &d, &rv);
    close(rv.to_parent[1]); /* an engine that gives up is seen at once */
    close(rv.to_child[0]);
    for (size_t i = 0; i < NSTEPS; i++) {
        await_crash_and_restart(&d, i + 1 < NSTEPS ? steps[i + 1] : NULL);
        CHECK_EQ_U(rv_recv(rv.to_parent[0]), i);
        rv_send(rv.to_child[1], i);
        char line[96];
        snprintf(line, sizeof(line), "killed before replying to %s", steps[i]);
        CHECK(daemon_log_contains(&d, line), "vramd did not die inside %s",
              steps[i]);
    }
    CHECK(wait_child(pe) == 0, "the engine lost something across a crash");
    CHECK(!daemon_log_contains(&d, "not taken back"),
          "a resume left something behind");
    CHECK(wait_dev_value(&d, 0, "granted_bytes", 0, 3000) &&
              wait_dev_value(&d, 0, "quarantined_bytes", 0, 3000),
          "memory not back after the engine left");
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_crash_reply");
}
