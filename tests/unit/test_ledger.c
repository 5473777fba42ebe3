/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the ledger, each with real numbers. A test function is
 * named by the rule it tests, test_r<NN>_... (R1..R18 as in
 * daemon/ledger/README.md); one that touches others names them in a
 * comment. vl_check() runs after every operation (the OP macro). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "daemon/ledger/internal.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define VA_BASE (1ull << 40)
#define VA_SIZE (1ull << 40)

static struct vl_fxlist fx;

/* Runs one ledger call, checks its result and then every invariant. */
#define OP(L, want, call)                                                      \
    do {                                                                       \
        int op_r_ = (call);                                                    \
        CHECK(op_r_ == (want), "%s returned %d, expected %d (%s)", #call,     \
              op_r_, (int)(want), vl_why(L));                                  \
        int op_c_ = vl_check(L);                                               \
        CHECK(op_c_ == 0, "vl_check after %s: %s", #call, vl_why(L));          \
    } while (0)

static size_t fx_count(int kind, uint32_t client)
{
    size_t n = 0;
    for (size_t i = 0; i < fx.n; i++)
        if (fx.v[i].kind == kind && (client == VL_NONE || fx.v[i].client == client))
            n++;
    return n;
}

/* The i-th effect of a kind (for its chunk id). */
static const struct vl_fx *fx_nth(int kind, size_t i)
{
    for (size_t k = 0; k < fx.n; k++)
        if (fx.v[k].kind == kind && i-- == 0)
            return &fx.v[k];
    return NULL;
}

static uint64_t *fx_chunks(int kind, size_t *n_out)
{
    size_t n = fx_count(kind, VL_NONE);
    uint64_t *v = malloc((n ? n : 1) * sizeof(*v));
    REQUIRE(v, "out of memory");
    for (size_t i = 0; i < n; i++)
        v[i] = fx_nth(kind, i)->chunk;
    *n_out = n;
    return v;
}

static struct vl_device_cfg dev_cfg(uint32_t id, uint64_t capacity,
                                    bool lend_unreserved)
{
    return (struct vl_device_cfg){.id = id, .chunk_bytes = 2 * MiB,
                                  .capacity_bytes = capacity,
                                  .lend_unreserved = lend_unreserved};
}

/* A stage with lanes of 528 bytes per token (one K or V pool each). */
static struct vl_stage_cfg stage_cfg(uint32_t id, uint32_t device,
                                     uint32_t first, uint32_t last,
                                     uint32_t lanes)
{
    struct vl_stage_cfg c;
    memset(&c, 0, sizeof(c));
    c.id = id;
    c.device = device;
    c.first_layer = first;
    c.last_layer = last;
    c.lanes = lanes;
    for (uint32_t l = 0; l < lanes; l++)
        c.lane_bytes_per_token[l] = 528;
    c.native_context = 262144;
    c.initial_tokens = 16384;
    c.step_tokens = 8192;
    c.expert_slot_bytes = 1572864;
    c.lend = true;
    c.headroom_bytes = 0;
    c.recall_deadline_ms = 100;
    c.hold_ms = 1000;
    return c;
}

static struct vl_device *dev_of(struct vl_ledger *L, uint32_t id)
{
    for (uint32_t i = 0; i < L->ndev; i++)
        if (L->dev[i].cfg.id == id)
            return &L->dev[i];
    REQUIRE(0, "no device %u", id);
    return NULL;
}

static uint64_t kv_mib(struct vl_ledger *L, uint32_t stage)
{
    struct vl_stage *s = &L->stage[stage];
    return (uint64_t)s->kv_chunks * dev_of(L, s->cfg.device)->cfg.chunk_bytes >> 20;
}

static uint64_t loan_mib(struct vl_ledger *L, uint32_t stage)
{
    struct vl_stage *s = &L->stage[stage];
    return (uint64_t)(s->loan_chunks - s->recalling) *
               dev_of(L, s->cfg.device)->cfg.chunk_bytes >> 20;
}

/* The public counters add up on every device. */
static void check_conservation(struct vl_ledger *L)
{
    for (uint32_t i = 0; i < L->ndev; i++) {
        struct vl_device *d = &L->dev[i];
        CHECK_EQ_U(d->fixed + d->kv + d->loaned + d->count[VL_FREE] +
                       d->count[VL_QUARANTINED],
                   d->nchunks);
    }
}

/* Releases every chunk the effects told client to unmap. */
static void answer_unmaps(struct vl_ledger *L, uint32_t client)
{
    size_t n = 0;
    uint64_t *ids = malloc((fx.n ? fx.n : 1) * sizeof(*ids));
    REQUIRE(ids, "out of memory");
    for (size_t i = 0; i < fx.n; i++)
        if (fx.v[i].kind == VL_FX_UNMAP && fx.v[i].client == client)
            ids[n++] = fx.v[i].chunk;
    vl_fx_clear(&fx);
    OP(L, 0, vl_chunks_release(L, client, ids, n, &fx));
    free(ids);
}

/* ---- R4: the seed's figures (also R3, R5, R8) ----------------------------- */

static void test_r04_seed_replay(void)
{
    struct vl_device_cfg devs[2] = {dev_cfg(0, 16 * GiB, false),
                                    dev_cfg(1, 16 * GiB, false)};
    struct vl_ledger L;
    REQUIRE(vl_init(&L, devs, 2, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    CHECK_EQ_U(L.dev[0].nchunks, 8192);
    /* 8 attention layers x (K, V) on device 0; 4 + 1 drafter on device 1. */
    struct vl_stage_cfg s0 = stage_cfg(0, 0, 0, 31, 16);
    struct vl_stage_cfg s1 = stage_cfg(1, 1, 32, 47, 10);
    OP(&L, 0, vl_stage_configure(&L, &s0));
    OP(&L, 0, vl_stage_configure(&L, &s1));
    CHECK_EQ_U(L.stage[0].window_chunks, 1056); /* 16 x 66 chunks */
    CHECK_EQ_U(L.stage[1].window_chunks, 660);
    CHECK_EQ_U((uint64_t)L.stage[0].window_chunks * 2, 2112);
    CHECK_EQ_U(L.dev[0].reserved, 1056);
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_client_add(&L, 2));

    vl_fx_clear(&fx);
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 80); /* 16 lanes x 5 chunks */
    OP(&L, 0, vl_stage_register(&L, 2, 1, false, &fx));
    CHECK_EQ_U(kv_mib(&L, 0), 160);
    CHECK_EQ_U(kv_mib(&L, 1), 100);

    vl_fx_clear(&fx);
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 976);
    CHECK_EQ_U(fx_count(VL_FX_BUDGET, 1), 1);
    OP(&L, 0, vl_expert_request(&L, 2, 1, 0, &fx));
    CHECK_EQ_U(loan_mib(&L, 0), 1952);
    CHECK_EQ_U(loan_mib(&L, 1), 1220);
    check_conservation(&L);

    static const uint64_t prompts[4] = {65536, 131072, 261000, 8192};
    /* KV after the reserve, per stage, in MiB; loans likewise. */
    static const uint64_t kv_want[4][2] = {
        {608, 380}, {1152, 720}, {2112, 1320}, {160, 100}};
    for (int step = 0; step < 4; step++) {
        for (uint32_t st = 0; st < 2; st++) {
            uint32_t client = st + 1;
            struct vl_stage *s = &L.stage[st];
            uint32_t kv_before = s->kv_chunks;
            uint32_t recalled = 12345;
            vl_fx_clear(&fx);
            OP(&L, 0, vl_kv_reserve(&L, client, st, prompts[step], 1024,
                                    &recalled, &fx));
            uint32_t grew = s->kv_chunks - kv_before;
            /* Every chunk came from the stage's own loans: moved, no fd. */
            CHECK_EQ_U(fx_count(VL_FX_MOVE, client), grew);
            CHECK_EQ_U(fx_count(VL_FX_MAP, VL_NONE), 0);
            CHECK_EQ_U(fx_count(VL_FX_UNMAP, VL_NONE), 0);
            CHECK_EQ_U(recalled, grew);
            for (size_t i = 0; i < fx.n; i++)
                if (fx.v[i].kind == VL_FX_MOVE)
                    CHECK_EQ_U(fx.v[i].region, s->kv_region);
            CHECK_EQ_U(kv_mib(&L, st), kv_want[step][st]);
            CHECK_EQ_U(loan_mib(&L, st),
                       (uint64_t)s->window_chunks * 2 - kv_want[step][st]);
            CHECK_EQ_U(s->kv_needed_bytes,
                       (prompts[step] + 1024) * 528 * s->cfg.lanes);
        }
        if (step == 0) {
            CHECK_EQ_U(kv_mib(&L, 0), 608);
            CHECK_EQ_U(L.stage[0].kv_chunks, 16 * 19);
        }
        if (step == 2) {
            CHECK_EQ_U(kv_mib(&L, 0), 2112);
            CHECK_EQ_U(kv_mib(&L, 1), 1320);
            CHECK_EQ_U(loan_mib(&L, 0), 0);
            CHECK_EQ_U(loan_mib(&L, 1), 0);
            CHECK_EQ_U(vl_expert_slots_backed(&L, 0), 0);
        }
        if (step == 3) {
            CHECK_EQ_U(kv_mib(&L, 0), 160);
            CHECK_EQ_U(kv_mib(&L, 1), 100);
            CHECK_EQ_U(loan_mib(&L, 0), 1952);
            CHECK_EQ_U(loan_mib(&L, 1), 1220);
            /* 976 chunks x 2 MiB / 1.5 MiB slots */
            CHECK_EQ_U(vl_expert_slots_backed(&L, 0), 1301);
            CHECK_EQ_U(vl_expert_slots_backed(&L, 1), 813);
        }
        /* Trim: the surplus goes back to loans, moved, nothing released. */
        for (uint32_t st = 0; st < 2; st++) {
            struct vl_stage *s = &L.stage[st];
            uint32_t kv_before = s->kv_chunks;
            vl_fx_clear(&fx);
            OP(&L, 0, vl_kv_trim(&L, st + 1, st, 0, &fx));
            CHECK_EQ_U(fx_count(VL_FX_MOVE, st + 1), kv_before - s->kv_chunks);
            CHECK_EQ_U(fx_count(VL_FX_UNMAP, VL_NONE), 0);
            CHECK_EQ_U(fx_count(VL_FX_MAP, VL_NONE), 0);
            CHECK_EQ_U(kv_mib(&L, st), st ? 100 : 160);
        }
        check_conservation(&L);
    }
    CHECK_EQ_U(L.dev[0].kv, 80);
    CHECK_EQ_U(L.dev[0].loaned, 976);
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 8192 - 1056);
    vl_fini(&L);
}

/* ---- R3: the KV target ---------------------------------------------------- */

static void test_r03_target_tokens(void)
{
    struct vl_stage_cfg c = stage_cfg(0, 0, 0, 31, 16);
    CHECK_EQ_U(vl_kv_target_tokens(&c, 0), 16384);
    CHECK_EQ_U(vl_kv_target_tokens(&c, 9216), 16384);
    CHECK_EQ_U(vl_kv_target_tokens(&c, 16384), 16384);
    CHECK_EQ_U(vl_kv_target_tokens(&c, 16385), 24576);
    CHECK_EQ_U(vl_kv_target_tokens(&c, 24576), 24576);
    CHECK_EQ_U(vl_kv_target_tokens(&c, 66560), 73728);
    CHECK_EQ_U(vl_kv_target_tokens(&c, 132096), 139264);
    CHECK_EQ_U(vl_kv_target_tokens(&c, 262024), 262144);
    CHECK_EQ_U(vl_kv_target_tokens(&c, 262144), 262144);
    CHECK_EQ_U(vl_kv_target_tokens(&c, 1000000), 262144);
    /* Huge counts clamp; they must not wrap around to a small window. */
    CHECK_EQ_U(vl_kv_target_tokens(&c, UINT64_MAX), 262144);
    CHECK_EQ_U(vl_kv_target_tokens(&c, UINT64_MAX - 5000), 262144);
    /* Step 0 means "exactly what is asked". */
    c.step_tokens = 0;
    CHECK_EQ_U(vl_kv_target_tokens(&c, 20000), 20000);
    /* An initial window beyond the native context is clamped. */
    c.step_tokens = 8192;
    c.initial_tokens = 300000;
    CHECK_EQ_U(vl_kv_target_tokens(&c, 0), 262144);

    c = stage_cfg(0, 0, 0, 31, 16);
    CHECK_EQ_U(vl_lane_chunks(&c, 0, 0, 2 * MiB), 0);
    CHECK_EQ_U(vl_lane_chunks(&c, 0, 16384, 2 * MiB), 5);  /* 4.125 */
    CHECK_EQ_U(vl_lane_chunks(&c, 0, 73728, 2 * MiB), 19); /* 18.56 */
    CHECK_EQ_U(vl_lane_chunks(&c, 0, 262144, 2 * MiB), 66);
    CHECK_EQ_U(vl_lane_chunks(&c, 0, 3971, 2 * MiB), 1);   /* 2096688 bytes */
    CHECK_EQ_U(vl_lane_chunks(&c, 0, 3972, 2 * MiB), 2);   /* 2097216 bytes */

    /* Requests beyond the native context, or absurd counts, are refused. */
    struct vl_device_cfg d = dev_cfg(0, 4 * GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    OP(&L, 0, vl_stage_configure(&L, &c));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, -E2BIG, vl_kv_reserve(&L, 1, 0, 262144, 1, NULL, &fx));
    OP(&L, -E2BIG, vl_kv_reserve(&L, 1, 0, 1ull << 33, 0, NULL, &fx));
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 262143, 1, NULL, &fx));
    CHECK_EQ_U(L.stage[0].kv_chunks, 1056);
    /* A trim to an absurd count keeps everything. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_trim(&L, 1, 0, UINT64_MAX, &fx));
    CHECK_EQ_U(L.stage[0].kv_chunks, 1056);
    CHECK_EQ_U(fx.n, 0);
    /* Step by step: 24576 tokens = 7 chunks per lane. */
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 20000, &fx));
    CHECK_EQ_U(L.stage[0].kv_chunks, 16 * 7);
    vl_fini(&L);
}

/* ---- R2: admission -------------------------------------------------------- */

static void test_r02_admission(void)
{
    struct vl_device_cfg devs[2] = {dev_cfg(0, 16 * GiB, false),
                                    dev_cfg(1, 16 * GiB, false)};
    struct vl_ledger L;
    REQUIRE(vl_init(&L, devs, 2, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));

    /* 1056 chunks of window + 14 GiB (7168 chunks) of weights > 8192. */
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 16);
    a.nfixed = 1;
    a.fixed[0] = (struct vl_fixed_cfg){.name = "weights", .kind = VL_FIXED,
                                       .bytes = 14 * GiB};
    OP(&L, -ENOSPC, vl_stage_configure(&L, &a));
    CHECK_EQ_U(L.dev[0].reserved, 0);
    CHECK(!L.stage[0].used, "a refused stage is not defined");

    /* 13 GiB of weights + 64 MiB of drafter KV fits: 1056 + 6656 + 32. */
    a.nfixed = 2;
    a.fixed[0].bytes = 13 * GiB;
    a.fixed[1] = (struct vl_fixed_cfg){.name = "draft", .kind = VL_DRAFT_KV,
                                       .bytes = 64 * MiB};
    OP(&L, 0, vl_stage_configure(&L, &a));
    CHECK_EQ_U(L.dev[0].reserved, 1056 + 6656 + 32);
    CHECK_EQ_U(L.stage[0].fixed_reserved, 6688);

    /* A second full stage on the same device no longer fits ... */
    struct vl_stage_cfg b = stage_cfg(1, 0, 32, 47, 16);
    OP(&L, -ENOSPC, vl_stage_configure(&L, &b));
    /* ... nor 4 lanes (264 chunks) + 400 MiB of weights (200): 448 left. */
    b.lanes = 4;
    b.nfixed = 1;
    b.fixed[0] = (struct vl_fixed_cfg){.name = "w", .kind = VL_FIXED,
                                       .bytes = 400 * MiB};
    OP(&L, -ENOSPC, vl_stage_configure(&L, &b));
    b.nfixed = 0;
    OP(&L, 0, vl_stage_configure(&L, &b)); /* 7744 + 264 = 8008 */
    CHECK_EQ_U(L.dev[0].reserved, 8008);
    /* On the other device the same stage fits easily. */
    struct vl_stage_cfg c = stage_cfg(2, 1, 0, 3, 16);
    OP(&L, 0, vl_stage_configure(&L, &c));
    CHECK_EQ_U(L.dev[1].reserved, 1056);

    /* Malformed stages. */
    struct vl_stage_cfg bad = stage_cfg(3, 1, 0, 3, 1);
    bad.device = 9;
    OP(&L, -ENODEV, vl_stage_configure(&L, &bad));
    bad = stage_cfg(0, 1, 0, 3, 1);
    OP(&L, -EEXIST, vl_stage_configure(&L, &bad)); /* duplicate id */
    bad = stage_cfg(3, 1, 0, 3, 0);
    OP(&L, -EINVAL, vl_stage_configure(&L, &bad)); /* no lanes */
    bad = stage_cfg(3, 1, 5, 3, 1);
    OP(&L, -EINVAL, vl_stage_configure(&L, &bad)); /* layers reversed */
    bad = stage_cfg(3, 1, 0, 3, 1);
    bad.lane_bytes_per_token[0] = 0;
    OP(&L, -EINVAL, vl_stage_configure(&L, &bad));
    bad = stage_cfg(3, 1, 0, 3, 1);
    bad.nfixed = VL_MAX_FIXED + 1; /* would read past fixed[] */
    OP(&L, -EINVAL, vl_stage_configure(&L, &bad));
    bad = stage_cfg(3, 1, 0, 3, 1);
    bad.nfixed = 1;
    bad.fixed[0] = (struct vl_fixed_cfg){.name = "x", .kind = VL_KV,
                                         .bytes = 2 * MiB};
    OP(&L, -EINVAL, vl_stage_configure(&L, &bad)); /* fixed of kind kv */
    bad.fixed[0].kind = VL_FIXED;
    bad.fixed[0].bytes = 0;
    OP(&L, -EINVAL, vl_stage_configure(&L, &bad)); /* empty reservation */
    bad = stage_cfg(3, 1, 0, 3, 1);
    bad.lane_bytes_per_token[0] = UINT64_MAX / 1000; /* overflows */
    OP(&L, -EINVAL, vl_stage_configure(&L, &bad));
    bad = stage_cfg(VL_CONFIG_STAGES, 1, 0, 3, 1);
    OP(&L, -EINVAL, vl_stage_configure(&L, &bad));
    CHECK_EQ_U(L.dev[1].reserved, 1056);

    /* Fixed regions draw on their reservation, never beyond it. */
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    struct vl_region *w = vli_region_find(&L, L.stage[0].fixed_region[0]);
    struct vl_region *dr = vli_region_find(&L, L.stage[0].fixed_region[1]);
    REQUIRE(w && dr, "fixed regions made at registration");
    CHECK_EQ_U(w->kind, VL_FIXED);
    CHECK_EQ_U(dr->kind, VL_DRAFT_KV);
    CHECK_EQ_U(w->lane_slots[0], 6656);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_region_grow(&L, 1, w->id, 6656, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 6656);
    OP(&L, 0, vl_region_grow(&L, 1, dr->id, 32, &fx));
    OP(&L, -E2BIG, vl_region_grow(&L, 1, dr->id, 1, &fx));
    CHECK_EQ_U(L.dev[0].fixed, 6688);
    CHECK_EQ_U(L.stage[0].fixed_chunks, 6688);
    OP(&L, -EPERM, vl_region_grow(&L, 1, L.stage[0].kv_region, 1, &fx));
    OP(&L, -EPERM, vl_region_grow(&L, 1, L.stage[0].expert_region, 1, &fx));
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 8192 - 6688 - 80);
    check_conservation(&L);
    vl_fini(&L);

    /* Devices: duplicate ids, capacity below one chunk. */
    struct vl_device_cfg dup[2] = {dev_cfg(3, GiB, false), dev_cfg(3, GiB, false)};
    CHECK(vl_init(&L, dup, 2, VA_BASE, VA_SIZE) == -EEXIST, "duplicate device id");
    struct vl_device_cfg tiny = dev_cfg(0, MiB, false);
    CHECK(vl_init(&L, &tiny, 1, VA_BASE, VA_SIZE) == -EINVAL, "below one chunk");
}

/* ---- R7: no-loan safety --------------------------------------------------- */

static void test_r07_no_loan_safety(void)
{
    struct vl_device_cfg d = dev_cfg(0, 4 * GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    OP(&L, 0, vl_client_add(&L, 1));

    /* lend = false: the whole 1056-chunk window at registration. */
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 16);
    a.lend = false;
    OP(&L, 0, vl_stage_configure(&L, &a));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 1056);
    CHECK_EQ_U(kv_mib(&L, 0), 2112);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(L.stage[0].loan_chunks, 0);
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 8192, 1024, NULL, &fx));
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx.n, 0);
    CHECK_EQ_U(kv_mib(&L, 0), 2112);

    /* lend = true, but the window beyond the initial KV (1 chunk, 2 MiB)
     * cannot back one 3 MiB expert slot: mapped whole, never trimmed. */
    struct vl_stage_cfg b = stage_cfg(1, 0, 0, 3, 1);
    b.lane_bytes_per_token[0] = 16; /* 262144 x 16 = 4 MiB = 2 chunks */
    b.expert_slot_bytes = 3 * MiB;
    OP(&L, 0, vl_stage_configure(&L, &b));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_stage_register(&L, 1, 1, false, &fx));
    CHECK_EQ_U(L.stage[1].kv_chunks, 2);
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 2);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_trim(&L, 1, 1, 0, &fx));
    CHECK_EQ_U(L.stage[1].kv_chunks, 2);
    CHECK_EQ_U(L.stage[1].loan_chunks, 0);
    CHECK_EQ_U(fx.n, 0);
    OP(&L, 0, vl_expert_request(&L, 1, 1, 0, &fx));
    CHECK_EQ_U(L.stage[1].loan_chunks, 0);

    /* The headroom counts too: 1 chunk lendable, 1 chunk kept unlent. */
    struct vl_stage_cfg c = b;
    c.id = 2;
    c.expert_slot_bytes = 1 * MiB;
    c.headroom_bytes = 2 * MiB;
    OP(&L, 0, vl_stage_configure(&L, &c));
    OP(&L, 0, vl_stage_register(&L, 1, 2, false, &fx));
    CHECK_EQ_U(L.stage[2].kv_chunks, 2);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_trim(&L, 1, 2, 0, &fx));
    CHECK_EQ_U(L.stage[2].kv_chunks, 2);
    CHECK_EQ_U(fx.n, 0);

    /* Without headroom the same stage lends: the initial window only. */
    struct vl_stage_cfg e = c;
    e.id = 3;
    e.headroom_bytes = 0;
    OP(&L, 0, vl_stage_configure(&L, &e));
    OP(&L, 0, vl_stage_register(&L, 1, 3, false, &fx));
    CHECK_EQ_U(L.stage[3].kv_chunks, 1);
    check_conservation(&L);
    vl_fini(&L);
}

/* ---- R8: keep_window, nothing trimmed ------------------------------------- */

static void test_r08_keep_window(void)
{
    struct vl_device_cfg d = dev_cfg(0, 4 * GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 16);
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_stage_register(&L, 1, 0, true, &fx));
    CHECK(L.stage[0].keep_window, "keep_window recorded");
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(L.stage[0].loan_chunks, 976);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 131072, 1024, NULL, &fx));
    CHECK_EQ_U(L.stage[0].kv_chunks, 576);
    CHECK_EQ_U(fx_count(VL_FX_MOVE, 1), 496);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx.n, 0);
    CHECK_EQ_U(L.stage[0].kv_chunks, 576);
    CHECK_EQ_U(L.stage[0].loan_chunks, 480);
    /* A shorter request needs nothing new. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 8192, 1024, NULL, &fx));
    CHECK_EQ_U(fx.n, 0);
    CHECK_EQ_U(L.stage[0].kv_chunks, 576);
    /* After releasing the stage, registering without keep_window trims. */
    OP(&L, 0, vl_stage_release(&L, 1, 0, &fx));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 131072, 1024, NULL, &fx));
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(L.stage[0].kv_chunks, 80);
    vl_fini(&L);
}

/* ---- R5: loans keep the headroom unlent ----------------------------------- */

static void test_r05_headroom(void)
{
    struct vl_device_cfg d = dev_cfg(0, 4 * GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 16);
    a.headroom_bytes = 99 * MiB; /* rounds up to 50 chunks */
    OP(&L, 0, vl_stage_configure(&L, &a));
    CHECK_EQ_U(L.stage[0].headroom_chunks, 50);
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(L.stage[0].loan_chunks, 1056 - 80 - 50);
    /* Asking again lends nothing more. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx.n, 0);

    /* Growing to the full window: 50 fresh chunks, 926 moved loans. */
    vl_fx_clear(&fx);
    uint32_t recalled = 0;
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 261000, 1024, &recalled, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 50);
    CHECK_EQ_U(fx_count(VL_FX_MOVE, 1), 926);
    CHECK_EQ_U(recalled, 926);
    CHECK_EQ_U(L.stage[0].kv_chunks, 1056);

    /* Trim: 926 back to loans, the 50 of headroom released (unmapped). */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MOVE, 1), 926);
    CHECK_EQ_U(fx_count(VL_FX_UNMAP, 1), 50);
    CHECK_EQ_U(L.stage[0].loan_chunks, 926);
    CHECK_EQ_U(L.dev[0].count[VL_RECALLING], 50);
    answer_unmaps(&L, 1);
    CHECK_EQ_U(fx_count(VL_FX_DROP, 1), 50);
    CHECK_EQ_U(L.stage[0].kv_chunks, 80);
    CHECK_EQ_U(L.dev[0].count[VL_RECALLING], 0);
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 2048 - 80 - 926);

    /* Partial expert requests honour max_bytes (whole chunks). */
    struct vl_stage_cfg b = stage_cfg(1, 0, 32, 47, 2);
    OP(&L, 0, vl_stage_configure(&L, &b));
    OP(&L, 0, vl_stage_register(&L, 1, 1, false, &fx));
    OP(&L, 0, vl_expert_request(&L, 1, 1, 7 * MiB, &fx));
    CHECK_EQ_U(L.stage[1].loan_chunks, 3);
    OP(&L, 0, vl_expert_request(&L, 1, 1, MiB, &fx));
    CHECK_EQ_U(L.stage[1].loan_chunks, 3);
    vl_fini(&L);
}

/* ---- R9: layer-scoped slot claims ----------------------------------------- */

static void test_r09_layer_claims(void)
{
    struct vl_device_cfg d = dev_cfg(0, 4 * GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 1); /* window 66, init 5 */
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_client_add(&L, 2));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    uint32_t s0 = 0, s1 = 1, s79[2] = {79, 80};
    OP(&L, -EINVAL, vl_expert_claim(&L, 1, 0, 3, &s0, 1)); /* nothing backed */
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(L.stage[0].loan_chunks, 61);
    CHECK_EQ_U(vl_expert_slots_backed(&L, 0), 81); /* 61 x 2 / 1.5 */

    OP(&L, -EPERM, vl_expert_claim(&L, 1, 0, 32, &s0, 1)); /* layer outside */
    OP(&L, -ENOENT, vl_expert_claim(&L, 2, 0, 3, &s0, 1)); /* not its stage */
    uint32_t s81 = 81;
    OP(&L, -EINVAL, vl_expert_claim(&L, 1, 0, 3, &s81, 1)); /* not backed */
    OP(&L, 0, vl_expert_claim(&L, 1, 0, 3, &s0, 1));
    OP(&L, 0, vl_expert_claim(&L, 1, 0, 3, &s0, 1)); /* again: same layer */
    OP(&L, -EBUSY, vl_expert_claim(&L, 1, 0, 4, &s0, 1));
    OP(&L, 0, vl_expert_claim(&L, 1, 0, 31, s79, 2));
    /* All or nothing: slot 1 free but slot 0 belongs to layer 3. */
    uint32_t mix[2] = {1, 0};
    OP(&L, -EBUSY, vl_expert_claim(&L, 1, 0, 4, mix, 2));
    CHECK_EQ_U(L.stage[0].slot_layer[1], 0xffff);
    OP(&L, 0, vl_expert_claim(&L, 1, 0, 4, &s1, 1));
    CHECK_EQ_U(L.stage[0].slot_layer[0], 3);
    CHECK_EQ_U(L.stage[0].slot_layer[80], 31);

    /* KV grows by 2 chunks per lane (5 -> 7), taken from the loans: 59 loans
     * back 78 slots, so the claims on 79 and 80 go. */
    uint64_t ver = L.stage[0].residency_version;
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 20000, 0, NULL, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MOVE, 1), 2);
    CHECK_EQ_U(fx_count(VL_FX_BUDGET, 1), 1);
    CHECK(L.stage[0].residency_version > ver, "residency version bumped");
    CHECK_EQ_U(vl_expert_slots_backed(&L, 0), 78);
    CHECK_EQ_U(L.stage[0].slot_layer[79], 0xffff);
    CHECK_EQ_U(L.stage[0].slot_layer[80], 0xffff);
    CHECK_EQ_U(L.stage[0].slot_layer[0], 3);
    CHECK_EQ_U(L.stage[0].slot_layer[1], 4);
    OP(&L, -EINVAL, vl_expert_claim(&L, 1, 0, 5, s79, 1));
    /* Trimmed back, the loans return and slot 79 is free to claim anew. */
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(vl_expert_slots_backed(&L, 0), 81);
    OP(&L, 0, vl_expert_claim(&L, 1, 0, 5, s79, 1));

    /* Releasing a loaned chunk in the middle leaves a hole: only the prefix
     * is backed (10 chunks -> 13 slots) and the claims beyond it go. */
    struct vl_region *ex = vli_region_find(&L, L.stage[0].expert_region);
    uint64_t tenth = ex->slot_chunk[10];
    vl_fx_clear(&fx);
    OP(&L, 0, vl_chunks_release(&L, 1, &tenth, 1, &fx));
    CHECK_EQ_U(fx_count(VL_FX_DROP, 1), 1);
    CHECK_EQ_U(fx_count(VL_FX_BUDGET, 1), 1);
    CHECK_EQ_U(vl_expert_slots_backed(&L, 0), 13);
    CHECK_EQ_U(L.stage[0].slot_layer[79], 0xffff);
    CHECK_EQ_U(L.stage[0].slot_layer[1], 4);

    /* Ad-hoc stages have no expert slots to claim. */
    uint32_t adhoc;
    OP(&L, 0, vl_stage_register_adhoc(&L, 2, 0, 0, 3, &adhoc));
    OP(&L, -EPERM, vl_expert_claim(&L, 2, adhoc, 1, &s0, 1));
    vl_fini(&L);
}

/* ---- R10: foreign chunks -------------------------------------------------- */

static void test_r10_foreign_chunk(void)
{
    /* Device ids are not their indexes, to catch a mix-up of the two. */
    struct vl_device_cfg devs[2] = {dev_cfg(7, 64 * MiB, false),
                                    dev_cfg(3, 64 * MiB, false)};
    struct vl_ledger L;
    REQUIRE(vl_init(&L, devs, 2, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    OP(&L, 0, vl_client_add(&L, 1));
    uint32_t s7, s3, r7, r3;
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 7, 0, 3, &s7));
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 3, 4, 7, &s3));
    OP(&L, -ENODEV, vl_stage_register_adhoc(&L, 1, 0, 4, 7, &s3));
    OP(&L, 0, vl_region_create(&L, 1, s7, VL_FIXED, 8 * MiB, 1, &r7));
    OP(&L, 0, vl_region_create(&L, 1, s3, VL_FIXED, 8 * MiB, 1, &r3));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_region_grow(&L, 1, r3, 1, &fx));
    REQUIRE(fx_count(VL_FX_MAP, 1) == 1, "one map");
    uint64_t c3 = fx_nth(VL_FX_MAP, 0)->chunk;
    CHECK_EQ_U(c3 >> 32, 1); /* device index 1 = id 3 */
    CHECK_EQ_U(vli_region_find(&L, r3)->device, 3);
    OP(&L, -EXDEV, vl_chunk_check_region(&L, c3, r7));
    OP(&L, 0, vl_chunk_check_region(&L, c3, r3));
    OP(&L, 0, vl_chunk_check_region(&L, vl_chunk_id(0, 5), r7));
    OP(&L, -EXDEV, vl_chunk_check_region(&L, vl_chunk_id(0, 5), r3));
    OP(&L, -ENOENT, vl_chunk_check_region(&L, vl_chunk_id(2, 0), r7));
    OP(&L, -ENOENT, vl_chunk_check_region(&L, vl_chunk_id(0, 32), r7));
    OP(&L, -ENOENT, vl_chunk_check_region(&L, c3, 999));
    vl_fini(&L);
}

/* ---- R1: ad-hoc stages and regions (also R2) ------------------------------ */

static void check_regions_disjoint(struct vl_ledger *L)
{
    for (size_t i = 0; i < L->nregion; i++) {
        struct vl_region *a = L->region[i];
        uint64_t a1 = a->base + a->lanes * a->lane_stride;
        CHECK(a->base % (2 * MiB) == 0, "region %u base aligned", a->id);
        CHECK(a->base >= VA_BASE && a1 <= VA_BASE + VA_SIZE,
              "region %u inside the window", a->id);
        CHECK(a->lane_stride >= (uint64_t)a->stride_slots * 2 * MiB,
              "region %u lanes hold their slots", a->id);
        for (size_t j = i + 1; j < L->nregion; j++) {
            struct vl_region *b = L->region[j];
            uint64_t b1 = b->base + b->lanes * b->lane_stride;
            CHECK(a1 <= b->base || b1 <= a->base, "regions %u and %u overlap",
                  a->id, b->id);
            CHECK(a->id != b->id, "two regions with id %u", a->id);
        }
    }
}

static void test_r01_adhoc(void)
{
    struct vl_device_cfg d = dev_cfg(0, 64 * MiB, false); /* 32 chunks */
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_client_add(&L, 2));
    OP(&L, -EEXIST, vl_client_add(&L, 1)); /* duplicate client id */
    uint32_t st, st2;
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 0, 0, 3, &st));
    /* Ad-hoc ids are a pool of their own above the configured ones, the
     * lowest free first. */
    CHECK_EQ_U(st, VL_CONFIG_STAGES);
    OP(&L, 0, vl_stage_register_adhoc(&L, 2, 0, 4, 7, &st2));
    CHECK_EQ_U(st2, VL_CONFIG_STAGES + 1);
    OP(&L, -EINVAL, vl_stage_register_adhoc(&L, 1, 0, 5, 4, &st2));

    uint32_t ra, rb, rc, rx;
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 7 * MiB, 2, &ra));
    struct vl_region *a = vli_region_find(&L, ra);
    CHECK_EQ_U(a->lane_slots[0], 4);
    CHECK_EQ_U(a->lanes, 2);
    OP(&L, -E2BIG, vl_region_create(&L, 1, st, VL_FIXED, 0, 1, &rx));
    OP(&L, -E2BIG, vl_region_create(&L, 1, st, VL_FIXED, 65 * MiB, 1, &rx));
    OP(&L, -E2BIG, vl_region_create(&L, 1, st, VL_FIXED, MiB, 0, &rx));
    OP(&L, -ENOENT, vl_region_create(&L, 1, st2, VL_FIXED, MiB, 1, &rx));
    OP(&L, -EINVAL, vl_region_create(&L, 1, st, 9, MiB, 1, &rx));

    vl_fx_clear(&fx);
    OP(&L, 0, vl_region_grow(&L, 1, ra, 3, &fx)); /* per lane */
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 6);
    CHECK_EQ_U(a->used, 6);
    OP(&L, -E2BIG, vl_region_grow(&L, 1, ra, 2, &fx)); /* 1 left per lane */
    CHECK_EQ_U(a->used, 6);
    OP(&L, -ENOENT, vl_region_grow(&L, 2, ra, 1, &fx)); /* not its region */
    /* Slot addresses: lane l, slot i at base + l*stride + i*chunk. */
    for (size_t i = 0; i < fx.n; i++) {
        const struct vl_fx *e = &fx.v[i];
        if (e->kind != VL_FX_MAP)
            continue;
        CHECK(e->slot / a->stride_slots < 2 && e->slot % a->stride_slots < 3,
              "slot %u inside the first 3 of its lane", e->slot);
    }
    OP(&L, 0, vl_region_grow(&L, 1, ra, 1, &fx));
    CHECK_EQ_U(a->used, 8);
    /* Ad-hoc regions count by their kind (status shows them so). */
    OP(&L, 0, vl_region_create(&L, 2, st2, VL_KV, 40 * MiB, 1, &rb));
    OP(&L, 0, vl_region_grow(&L, 2, rb, 20, &fx));
    CHECK_EQ_U(L.dev[0].fixed, 8);
    CHECK_EQ_U(L.dev[0].kv, 20);
    CHECK_EQ_U(L.dev[0].loaned, 0);
    check_conservation(&L);

    /* 4 chunks left on the device: asking 5 fails, nothing granted. */
    OP(&L, 0, vl_region_create(&L, 2, st2, VL_EXPERT, 16 * MiB, 1, &rc));
    vl_fx_clear(&fx);
    OP(&L, -ENOSPC, vl_region_grow(&L, 2, rc, 5, &fx));
    CHECK_EQ_U(fx.n, 0);
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 4);
    OP(&L, 0, vl_region_grow(&L, 2, rc, 4, &fx));
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 0);
    CHECK_EQ_U(L.dev[0].loaned, 4);
    CHECK_EQ_U(L.dev[0].count[VL_LOANED], 0); /* granted, not lent */
    check_regions_disjoint(&L);

    /* Releases are all or nothing. */
    struct vl_region *b = vli_region_find(&L, rb);
    uint64_t mine[3] = {a->slot_chunk[0], a->slot_chunk[a->stride_slots],
                        b->slot_chunk[0]};
    vl_fx_clear(&fx);
    OP(&L, -ENOENT, vl_chunks_release(&L, 1, mine, 3, &fx)); /* 3rd: client 2's */
    CHECK_EQ_U(fx.n, 0);
    CHECK_EQ_U(a->used, 8);
    uint64_t twice[2] = {a->slot_chunk[0], a->slot_chunk[0]};
    OP(&L, -EINVAL, vl_chunks_release(&L, 1, twice, 2, &fx));
    uint64_t bogus[2] = {a->slot_chunk[0], vl_chunk_id(0, 999)};
    OP(&L, -ENOENT, vl_chunks_release(&L, 1, bogus, 2, &fx));
    CHECK_EQ_U(a->used, 8);
    OP(&L, 0, vl_chunks_release(&L, 1, mine, 2, &fx));
    CHECK_EQ_U(fx_count(VL_FX_DROP, 1), 2);
    CHECK_EQ_U(a->used, 6);
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 2);
    /* Freed chunks can't be released again, by anyone. */
    vl_fx_clear(&fx);
    OP(&L, -ENOENT, vl_chunks_release(&L, 1, mine, 1, &fx));
    OP(&L, -ENOENT, vl_chunks_release(&L, 2, mine, 1, &fx));
    /* The hole is filled first on the next grow. */
    OP(&L, 0, vl_region_grow(&L, 1, ra, 1, &fx));
    CHECK(a->slot_chunk[0] != VL_CHUNK_NONE &&
              a->slot_chunk[a->stride_slots] != VL_CHUNK_NONE,
          "holes refilled");
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 0);

    /* Region release: every chunk dropped, the address range reused. */
    uint64_t base_a = a->base;
    vl_fx_clear(&fx);
    OP(&L, -ENOENT, vl_region_release(&L, 2, ra, &fx));
    OP(&L, 0, vl_region_release(&L, 1, ra, &fx));
    CHECK_EQ_U(fx_count(VL_FX_DROP, 1), 8);
    CHECK(vli_region_find(&L, ra) == NULL, "region gone");
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 8);
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 8 * MiB, 2, &rx));
    CHECK(rx != ra, "region ids are not reused");
    CHECK_EQ_U(vli_region_find(&L, rx)->base, base_a);
    check_regions_disjoint(&L);

    /* Many regions of odd sizes never overlap. */
    for (int i = 0; i < 40; i++) {
        uint32_t r;
        OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, (uint64_t)(i % 7 + 1) * 3 * MiB,
                                   (uint32_t)(i % 3 + 1), &r));
        if (i % 4 == 1)
            OP(&L, 0, vl_region_release(&L, 1, r, &fx));
    }
    check_regions_disjoint(&L);

    /* Stage release drops its regions; the other client's are untouched. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_stage_release(&L, 2, st2, &fx));
    CHECK_EQ_U(fx_count(VL_FX_DROP, 2), 24);
    CHECK(vli_region_find(&L, rb) == NULL && vli_region_find(&L, rc) == NULL,
          "regions of the stage gone");
    OP(&L, -ENOENT, vl_stage_release(&L, 2, st2, &fx));
    check_conservation(&L);
    vl_fini(&L);

    /* Ad-hoc regions use only memory no configured stage is promised. */
    struct vl_device_cfg d2 = dev_cfg(0, 256 * MiB, false); /* 128 chunks */
    REQUIRE(vl_init(&L, &d2, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    struct vl_stage_cfg c = stage_cfg(0, 0, 0, 3, 1); /* window 66 */
    c.nfixed = 1;
    c.fixed[0] = (struct vl_fixed_cfg){.name = "w", .kind = VL_FIXED,
                                       .bytes = 20 * MiB};
    OP(&L, 0, vl_stage_configure(&L, &c));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 0, 0, 3, &st));
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 128 * MiB, 1, &ra));
    OP(&L, -ENOSPC, vl_region_grow(&L, 1, ra, 53, &fx)); /* 128-66-10 = 52 */
    OP(&L, 0, vl_region_grow(&L, 1, ra, 52, &fx));
    OP(&L, -EPERM, vl_region_create(&L, 1, 0, VL_FIXED, MiB, 1, &rx));
    vl_fini(&L);
}

/* ---- R11: quarantine (also R13) ------------------------------------------- */

static void test_r11_quarantine(void)
{
    struct vl_device_cfg d = dev_cfg(0, 64 * MiB, false); /* 32 chunks */
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_client_add(&L, 2));
    uint32_t st, st2, r, r2;
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 0, 0, 3, &st));
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 64 * MiB, 1, &r));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_region_grow(&L, 1, r, 32, &fx));
    size_t nmap;
    uint64_t *held = fx_chunks(VL_FX_MAP, &nmap);
    CHECK_EQ_U(nmap, 32);

    OP(&L, -EBUSY, vl_client_reap(&L, 1, &fx)); /* still connected */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_client_disconnect(&L, 1, &fx));
    CHECK_EQ_U(fx_count(VL_FX_DROP, VL_NONE), 0); /* nothing freed yet */
    CHECK_EQ_U(L.dev[0].count[VL_QUARANTINED], 32);
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 0);
    CHECK_EQ_U(L.dev[0].fixed, 0);
    CHECK(vli_client_find(&L, 1)->gone, "client 1 gone");
    CHECK(vli_region_find(&L, r) == NULL, "its regions dropped");
    CHECK(L.stage[st].used && !L.stage[st].owner && L.stage[st].held_by == 1,
          "its ad-hoc stage id held for its process (rule 13)");
    check_conservation(&L);
    /* A quarantined chunk can't be released or offered by anyone. */
    OP(&L, -ENOENT, vl_chunks_release(&L, 1, held, 1, &fx));
    OP(&L, -ENOENT, vl_chunks_release(&L, 2, held, 1, &fx));

    /* Client 2 can't get any of it. */
    OP(&L, 0, vl_stage_register_adhoc(&L, 2, 0, 0, 3, &st2));
    OP(&L, 0, vl_region_create(&L, 2, st2, VL_FIXED, 64 * MiB, 1, &r2));
    vl_fx_clear(&fx);
    OP(&L, -ENOSPC, vl_region_grow(&L, 2, r2, 1, &fx));
    CHECK_EQ_U(fx.n, 0);

    vl_fx_clear(&fx);
    OP(&L, 0, vl_client_reap(&L, 1, &fx));
    CHECK_EQ_U(fx_count(VL_FX_DROP, 1), 32);
    CHECK_EQ_U(L.dev[0].count[VL_QUARANTINED], 0);
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 32);
    CHECK(vli_client_find(&L, 1) == NULL, "client 1 forgotten");
    OP(&L, -ENOENT, vl_client_reap(&L, 1, &fx));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_region_grow(&L, 2, r2, 32, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 2), 32);
    free(held);
    vl_fini(&L);

    /* A configured stage: its window comes back only after the reap, and a
     * new owner can't take memory promised to another stage meanwhile. */
    struct vl_device_cfg d2 = dev_cfg(0, 272 * MiB, false); /* 136 chunks */
    REQUIRE(vl_init(&L, &d2, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 3, 1);  /* window 66 */
    struct vl_stage_cfg b = stage_cfg(1, 0, 4, 7, 1);  /* window 66 */
    b.nfixed = 1;
    b.fixed[0] = (struct vl_fixed_cfg){.name = "w", .kind = VL_FIXED,
                                       .bytes = 8 * MiB}; /* 4 chunks */
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_stage_configure(&L, &b));
    for (uint32_t c = 1; c <= 3; c++)
        OP(&L, 0, vl_client_add(&L, c));
    OP(&L, 0, vl_stage_register(&L, 2, 1, false, &fx));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 261000, 1024, NULL, &fx));
    CHECK_EQ_U(L.stage[0].kv_chunks, 66);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_client_disconnect(&L, 1, &fx));
    CHECK_EQ_U(L.dev[0].count[VL_QUARANTINED], 66);
    CHECK_EQ_U(L.stage[0].owner, 0);
    CHECK_EQ_U(L.stage[0].kv_chunks, 0);
    /* Client 3 can't register stage 0 while its old chunks are quarantined:
     * the 65 free chunks are stage 1's (61 window + 4 fixed). */
    OP(&L, -EAGAIN, vl_stage_register(&L, 3, 0, false, &fx));
    CHECK_EQ_U(L.stage[0].owner, 0);
    /* Stage 1 gets its whole window and its fixed reservation. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_reserve(&L, 2, 1, 261000, 1024, NULL, &fx));
    CHECK_EQ_U(L.stage[1].kv_chunks, 66);
    struct vl_region *w = vli_region_find(&L, L.stage[1].fixed_region[0]);
    OP(&L, 0, vl_region_grow(&L, 2, w->id, 4, &fx));
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 0);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_client_reap(&L, 1, &fx));
    CHECK_EQ_U(fx_count(VL_FX_DROP, 1), 66);
    OP(&L, 0, vl_stage_register(&L, 3, 0, false, &fx));
    OP(&L, 0, vl_kv_reserve(&L, 3, 0, 261000, 1024, NULL, &fx));
    CHECK_EQ_U(L.stage[0].kv_chunks, 66);
    check_conservation(&L);
    vl_fini(&L);

    /* The same on a device where stage 1 registered first and grows its
     * fixed region last: it must never be handed chunks that aren't free. */
    REQUIRE(vl_init(&L, &d2, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_stage_configure(&L, &b));
    for (uint32_t c = 1; c <= 3; c++)
        OP(&L, 0, vl_client_add(&L, c));
    OP(&L, 0, vl_stage_register(&L, 2, 1, false, &fx));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 261000, 1024, NULL, &fx));
    OP(&L, 0, vl_client_disconnect(&L, 1, &fx));
    int e = vl_stage_register(&L, 3, 0, false, &fx);
    CHECK(vl_check(&L) == 0, "%s", vl_why(&L));
    if (e == 0) /* the old ledger let it steal; make it take all it can */
        vl_kv_reserve(&L, 3, 0, 16384 + 29 * 8192, 0, NULL, &fx);
    w = vli_region_find(&L, L.stage[1].fixed_region[0]);
    uint32_t before = L.dev[0].count[VL_FREE];
    e = vl_region_grow(&L, 2, w->id, 4, &fx);
    CHECK((e == 0) == (before >= 4), "fixed grow: %d with %u free", e, before);
    CHECK(L.dev[0].nfree <= L.dev[0].nchunks, "free stack underflowed");
    CHECK(vl_check(&L) == 0, "%s", vl_why(&L));
    vl_fini(&L);
}

/* One 1 GiB device (512 chunks, id 0) with stages a and b on it, and
 * clients 1..nclients. */
static void two_stages(struct vl_ledger *L, bool lend_unreserved,
                       const struct vl_stage_cfg *a,
                       const struct vl_stage_cfg *b, uint32_t nclients)
{
    struct vl_device_cfg d = dev_cfg(0, GiB, lend_unreserved);
    REQUIRE(vl_init(L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(L));
    OP(L, 0, vl_stage_configure(L, a));
    OP(L, 0, vl_stage_configure(L, b));
    for (uint32_t c = 1; c <= nclients; c++)
        OP(L, 0, vl_client_add(L, c));
}

/* ---- R6: two clients on one device: recall, hold (also R5, R11) ----------- */

static void test_r06_two_clients_recall(void)
{
    /* 1 GiB = 512 chunks. Stage 0 (client A = 1): window 66, initial 5.
     * Stage 1 (client B = 2): window 264 (4 lanes), initial 20. Unreserved:
     * 512 - 330 = 182 chunks. */
    struct vl_device_cfg d = dev_cfg(0, GiB, true);
    struct vl_ledger L;
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 1);
    struct vl_stage_cfg b = stage_cfg(1, 0, 32, 47, 4);
    two_stages(&L, true, &a, &b, 2);
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));

    /* A asks for every loan it can get while stage 1 has no owner: its own
     * window (61) + unreserved memory (182) + stage 1's idle window beyond
     * its initial window (264 - 20): R5 keeps the initial window free. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(L.stage[0].loan_chunks, 61 + 182 + 244);
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 487);
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 20);
    /* Asked again: the initial window is still not lent. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx.n, 0);

    /* B registers at once, with its initial window mapped: a registration
     * never waits on another client's recall (a lender that does not
     * answer would keep the stage from starting at all). */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_stage_register(&L, 2, 1, false, &fx));
    CHECK_EQ_U(fx_count(VL_FX_UNMAP, VL_NONE), 0);
    CHECK_EQ_U(fx_count(VL_FX_MAP, 2), 20);
    CHECK_EQ_U(L.stage[1].kv_chunks, 20);
    CHECK_EQ_U(L.stage[1].owner, 2);
    /* Nothing more for A now that stage 1 is owned. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx.n, 0);

    /* B's KV must grow to 65536 + 1024 tokens: 19 chunks per lane, 76, 56
     * more. Recalls go to A (UNMAP), B hears VL_PENDING, nothing is
     * granted. */
    vl_fx_clear(&fx);
    uint32_t recalled = 77;
    OP(&L, VL_PENDING, vl_kv_reserve(&L, 2, 1, 65536, 1024, &recalled, &fx));
    CHECK_EQ_U(recalled, 77); /* out-parameters untouched on failure */
    CHECK_EQ_U(fx_count(VL_FX_UNMAP, 1), 56);
    CHECK_EQ_U(fx_count(VL_FX_UNMAP, 2), 0);
    CHECK_EQ_U(fx_count(VL_FX_MAP, VL_NONE), 0);
    CHECK_EQ_U(fx_count(VL_FX_MOVE, VL_NONE), 0);
    CHECK_EQ_U(fx_count(VL_FX_BUDGET, 1), 1);
    CHECK_EQ_U(L.stage[1].kv_chunks, 20);
    CHECK_EQ_U(L.stage[0].recalling, 56);
    CHECK_EQ_U(L.dev[0].count[VL_RECALLING], 56);
    /* What B waits for: A, its 56 chunks of stage 0, and A's policy. */
    struct vl_blocker bl;
    CHECK(vl_stage_blocker(&L, 1, &bl) && bl.client == 1 && bl.stage == 0 &&
              bl.chunks == 56 && !bl.quarantined && !bl.kill_on_missed_recall,
          "blocker: client %u, stage %u, %u chunks", bl.client, bl.stage,
          bl.chunks);
    /* The highest-numbered loans go first: A keeps a backed prefix. */
    CHECK_EQ_U(vl_expert_slots_backed(&L, 0), 574); /* 431 x 2 / 1.5 */
    size_t nrec;
    uint64_t *rec = fx_chunks(VL_FX_UNMAP, &nrec);
    /* Every recalled chunk is still A's, and only A's. */
    for (size_t i = 0; i < nrec; i++) {
        struct vl_chunk *c = &L.dev[0].chunks[(uint32_t)rec[i]];
        CHECK_EQ_U(c->state, VL_RECALLING);
        CHECK_EQ_U(c->holder, 1);
    }
    /* Asking again while A still holds them: no second round of recalls,
     * still nothing for B. */
    vl_fx_clear(&fx);
    OP(&L, VL_PENDING, vl_kv_reserve(&L, 2, 1, 65536, 1024, NULL, &fx));
    CHECK_EQ_U(fx_count(VL_FX_UNMAP, VL_NONE), 0);
    CHECK_EQ_U(fx_count(VL_FX_MAP, VL_NONE), 0);
    /* B can't release what it doesn't hold. */
    OP(&L, -ENOENT, vl_chunks_release(&L, 2, rec, nrec, &fx));

    /* A releases half: still not enough, and those 28 stay free for B
     * (A can't borrow them back). */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_chunks_release(&L, 1, rec, nrec / 2, &fx));
    CHECK_EQ_U(fx_count(VL_FX_DROP, 1), 28);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx.n, 0);
    vl_fx_clear(&fx);
    OP(&L, VL_PENDING, vl_kv_reserve(&L, 2, 1, 65536, 1024, NULL, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, VL_NONE), 0);
    /* The rest: B's reserve goes through, with the very chunks A gave back
     * now mapped (fresh fds) for B. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_chunks_release(&L, 1, rec + nrec / 2, nrec - nrec / 2, &fx));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_reserve(&L, 2, 1, 65536, 1024, &recalled, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 2), 56);
    CHECK_EQ_U(recalled, 0); /* none of B's own loans moved */
    CHECK_EQ_U(L.stage[1].kv_chunks, 76);
    CHECK_EQ_U(L.stage[0].loan_chunks, 507 - 76);
    for (size_t i = 0; i < fx.n; i++) /* the very chunks A gave back */
        if (fx.v[i].kind == VL_FX_MAP) {
            bool was_recalled = false;
            for (size_t k = 0; k < nrec; k++)
                was_recalled |= rec[k] == fx.v[i].chunk;
            CHECK(was_recalled, "B got chunk %llx, not one A gave back",
                  (unsigned long long)fx.v[i].chunk);
        }
    CHECK_EQ_U(L.stage[0].recalling, 0);
    CHECK(!vl_stage_blocker(&L, 1, &bl), "a blocker with nothing recalled");
    free(rec);

    /* Next B needs 36 chunks per lane (144): 68 more. A ignores the recall
     * and misses its deadline: delinquent, no new loans. */
    vl_fx_clear(&fx);
    OP(&L, VL_PENDING, vl_kv_reserve(&L, 2, 1, 131072, 1024, NULL, &fx));
    CHECK_EQ_U(fx_count(VL_FX_UNMAP, 1), 68);
    CHECK_EQ_U(vl_recall_missed(&L, 1, 0), VL_MISSED_DENY_LOANS);
    CHECK(vli_client_find(&L, 1)->delinquent, "A is delinquent");
    CHECK_EQ_U(vli_client_find(&L, 1)->missed_recalls, 1);
    OP(&L, -EPERM, vl_expert_request(&L, 1, 0, 0, &fx));
    /* Nothing is granted to B while A holds the chunks. */
    vl_fx_clear(&fx);
    OP(&L, VL_PENDING, vl_kv_reserve(&L, 2, 1, 131072, 1024, NULL, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, VL_NONE), 0);
    CHECK_EQ_U(L.dev[0].count[VL_RECALLING], 68);
    /* A delinquent client's trimmed KV is released, not lent. */
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 30000, 0, NULL, &fx));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MOVE, VL_NONE), 0);
    CHECK(fx_count(VL_FX_UNMAP, 1) > 0, "trimmed KV released");

    /* A crashes: its chunks, the recalled ones included, are quarantined;
     * B waits for the reap, then gets its KV. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_client_disconnect(&L, 1, &fx));
    CHECK_EQ_U(L.dev[0].count[VL_RECALLING], 0);
    CHECK(L.dev[0].count[VL_QUARANTINED] >= 68, "recalled chunks quarantined");
    vl_fx_clear(&fx);
    OP(&L, VL_PENDING, vl_kv_reserve(&L, 2, 1, 131072, 1024, NULL, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, VL_NONE), 0);
    OP(&L, 0, vl_client_reap(&L, 1, &fx));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_reserve(&L, 2, 1, 131072, 1024, NULL, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 2), 68);
    CHECK_EQ_U(L.stage[1].kv_chunks, 144);
    check_conservation(&L);
    vl_fini(&L);

    /* Under lend_unreserved, what can't be recalled in time is never lent:
     * an unowned stage's fixed reservation and a no-loan stage's window. */
    d.lend_unreserved = true;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    struct vl_stage_cfg nl = b;
    nl.lend = false;
    nl.nfixed = 1;
    nl.fixed[0] = (struct vl_fixed_cfg){.name = "w", .kind = VL_FIXED,
                                        .bytes = 40 * MiB}; /* 20 chunks */
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_stage_configure(&L, &nl));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_client_add(&L, 2));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(L.stage[0].loan_chunks, 512 - 5 - 264 - 20);
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 284);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_stage_register(&L, 2, 1, false, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 2), 264);
    struct vl_region *w = vli_region_find(&L, L.stage[1].fixed_region[0]);
    OP(&L, 0, vl_region_grow(&L, 2, w->id, 20, &fx));
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 0);
    vl_fini(&L);

    /* Without lend_unreserved A only ever borrows its own window, and B
     * never waits. */
    d.lend_unreserved = false;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_stage_configure(&L, &b));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_client_add(&L, 2));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(L.stage[0].loan_chunks, 61);
    OP(&L, 0, vl_stage_register(&L, 2, 1, false, &fx));
    OP(&L, 0, vl_kv_reserve(&L, 2, 1, 261000, 1024, NULL, &fx));
    CHECK_EQ_U(L.stage[1].kv_chunks, 264);
    vl_fini(&L);
}

/* ---- R8: a trim keeps pool loans (also R5) --------------------------------- */

static void test_r08_trim_keeps_pool_loans(void)
{
    /* Stage 0 (client 1) borrows its own window (61) and, under
     * lend_unreserved, the pool: unreserved memory (182) and stage 1's idle
     * window beyond its initial window (264 - 20): 426 pool loans. */
    struct vl_ledger L;
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 1);
    struct vl_stage_cfg b = stage_cfg(1, 0, 32, 47, 4);
    two_stages(&L, true, &a, &b, 1);
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(L.stage[0].loan_chunks, 487);
    CHECK_EQ_U(vli_pool_loans(&L.stage[0]), 426);
    /* A long prompt: 19 chunks of KV, 14 moved out of its own loans. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 65536, 1024, NULL, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MOVE, 1), 14);
    CHECK_EQ_U(L.stage[0].loan_chunks, 473);
    /* The trim gives the 14 back to loans (its own window has room for
     * them), and the pool loans stay: nothing is unmapped or freed. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MOVE, 1), 14);
    CHECK_EQ_U(fx_count(VL_FX_UNMAP, VL_NONE), 0);
    CHECK_EQ_U(L.stage[0].kv_chunks, 5);
    CHECK_EQ_U(L.stage[0].loan_chunks, 487);
    CHECK_EQ_U(vli_pool_loans(&L.stage[0]), 426);
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 20); /* stage 1's initial window */
    check_conservation(&L);
    vl_fini(&L);
}

/* A trim that keeps tokens says what the stage still needs: those tokens'
 * bytes, as a reserve counts them, not 0. */
static void test_r08_trim_needed_bytes(void)
{
    struct vl_ledger L;
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 1);
    struct vl_stage_cfg b = stage_cfg(1, 0, 32, 47, 4);
    two_stages(&L, false, &a, &b, 1);
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 65536, 1024, NULL, &fx));
    uint64_t per_token = 0;
    for (uint32_t l = 0; l < L.stage[0].cfg.lanes; l++)
        per_token += L.stage[0].cfg.lane_bytes_per_token[l];
    CHECK_EQ_U(L.stage[0].kv_needed_bytes, (65536 + 1024) * per_token);
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 20000, &fx));
    CHECK_EQ_U(L.stage[0].kv_needed_bytes, 20000 * per_token);
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(L.stage[0].kv_needed_bytes, 0);
    check_conservation(&L);
    vl_fini(&L);
}

/* ---- R8: trims and reserves with unmaps outstanding ----------------------- */

static void test_r08_pending_unmaps(void)
{
    /* No expert room beyond 2 chunks: trims mostly release. */
    struct vl_device_cfg d = dev_cfg(0, GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 1); /* window 66, init 5 */
    a.expert_region_bytes = 3 * MiB;                   /* 2 slots, 2 chunks */
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 261000, 1024, NULL, &fx));
    CHECK_EQ_U(L.stage[0].kv_chunks, 66);

    /* Trim to 16384 tokens (5 chunks): 2 moved to loans, 59 to unmap. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MOVE, 1), 2);
    CHECK_EQ_U(fx_count(VL_FX_UNMAP, 1), 59);
    size_t nun;
    uint64_t *un = fx_chunks(VL_FX_UNMAP, &nun);
    /* Trimming again before the client answered must not touch the 5
     * chunks the target still needs. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx_count(VL_FX_UNMAP, VL_NONE), 0);
    struct vl_region *kv = vli_region_find(&L, L.stage[0].kv_region);
    for (uint32_t i = 0; i < 5; i++) {
        struct vl_chunk *c = &L.dev[0].chunks[(uint32_t)kv->slot_chunk[i]];
        CHECK_EQ_U(c->state, VL_GRANTED);
    }
    /* A reserve needing slots still being unmapped must wait for them: it
     * can't report a budget as mapped while those chunks go away. */
    vl_fx_clear(&fx);
    OP(&L, VL_PENDING, vl_kv_reserve(&L, 1, 0, 20000, 0, NULL, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, VL_NONE), 0);
    /* A reserve inside the granted prefix is fine. */
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 10000, 0, NULL, &fx));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_chunks_release(&L, 1, un, nun, &fx));
    CHECK_EQ_U(fx_count(VL_FX_DROP, 1), 59);
    CHECK_EQ_U(L.stage[0].kv_chunks, 5);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 20000, 0, NULL, &fx));
    CHECK_EQ_U(L.stage[0].kv_chunks, 7);
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 2); /* free window first */
    CHECK_EQ_U(fx_count(VL_FX_MOVE, 1), 0);
    free(un);

    /* A KV chunk the client gave back by itself leaves a hole; the next
     * reserve fills it, since the budget is the whole prefix. */
    uint64_t second = kv->slot_chunk[1];
    OP(&L, 0, vl_chunks_release(&L, 1, &second, 1, &fx));
    CHECK_EQ_U(L.stage[0].kv_chunks, 6);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 20000, 0, NULL, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 1);
    CHECK_EQ_U(fx_nth(VL_FX_MAP, 0)->slot, 1);
    CHECK_EQ_U(L.stage[0].kv_chunks, 7);
    vl_fini(&L);
}

/* ---- R1: the address window regions are carved from ----------------------- */

static void test_r01_address_window(void)
{
    /* 64 MiB of address space, a 1 GiB device: the expert region of a stage
     * (sized to the device) can't be reserved. */
    struct vl_device_cfg d = dev_cfg(0, GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, 64 * MiB) == 0, "%s", vl_why(&L));
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 3, 1); /* KV 132 MiB of VA */
    struct vl_stage_cfg b = stage_cfg(1, 0, 4, 7, 1);
    b.lane_bytes_per_token[0] = 16;    /* KV 4 MiB */
    b.expert_region_bytes = 3 * MiB;   /* 2 slots, 4 MiB */
    b.nfixed = 1;
    b.fixed[0] = (struct vl_fixed_cfg){.name = "w", .kind = VL_FIXED,
                                       .bytes = 50 * MiB};
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_stage_configure(&L, &b));
    OP(&L, 0, vl_client_add(&L, 1));
    vl_fx_clear(&fx);
    OP(&L, -ENOSPC, vl_stage_register(&L, 1, 0, false, &fx));
    CHECK_EQ_U(fx.n, 0);
    CHECK_EQ_U(L.stage[0].owner, 0);
    CHECK_EQ_U(L.nregion, 0);
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 512);
    /* The failed attempt left the window whole: 4 + 4 + 50 MiB fit. */
    OP(&L, 0, vl_stage_register(&L, 1, 1, false, &fx));
    CHECK_EQ_U(L.nregion, 3);
    uint32_t st, r1, r2, r3, rx;
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 0, 0, 1, &st));
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 2 * MiB, 1, &r1));
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 2 * MiB, 1, &r2));
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 2 * MiB, 1, &r3));
    OP(&L, -ENOSPC, vl_region_create(&L, 1, st, VL_FIXED, 2 * MiB, 1, &rx));
    /* Freed ranges merge back: three 2 MiB holes make room for 6 MiB. */
    OP(&L, 0, vl_region_release(&L, 1, r2, &fx));
    OP(&L, -ENOSPC, vl_region_create(&L, 1, st, VL_FIXED, 4 * MiB, 1, &rx));
    OP(&L, 0, vl_region_release(&L, 1, r1, &fx));
    OP(&L, 0, vl_region_release(&L, 1, r3, &fx));
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 6 * MiB, 1, &rx));
    OP(&L, 0, vl_stage_release(&L, 1, 1, &fx));
    OP(&L, 0, vl_stage_release(&L, 1, st, &fx));
    CHECK_EQ_U(L.nregion, 0);
    CHECK_EQ_U(L.nva_free, 1);
    CHECK_EQ_U(L.va_free[0].base, VA_BASE);
    CHECK_EQ_U(L.va_free[0].size, 64 * MiB);
    vl_fini(&L);
}

/* ---- R1: vl_check catches corruption (also R9, R10) ----------------------- */

static void corrupt_and_check(const char *what, void (*mutate)(struct vl_ledger *))
{
    struct vl_device_cfg devs[2] = {dev_cfg(0, 256 * MiB, false),
                                    dev_cfg(1, 256 * MiB, false)};
    struct vl_ledger L;
    REQUIRE(vl_init(&L, devs, 2, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 1);
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    uint32_t st, r;
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 1, 0, 1, &st));
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 8 * MiB, 1, &r));
    OP(&L, 0, vl_region_grow(&L, 1, r, 2, &fx));
    mutate(&L);
    int e = vl_check(&L);
    CHECK(e == -EFAULT, "corruption '%s' not caught (%d)", what, e);
    if (e == -EFAULT)
        CHECK(vl_why(&L)[0] != '\0', "no reason given for '%s'", what);
    vl_fini(&L);
}

static void bump_kv(struct vl_ledger *L) { L->dev[0].kv++; }
static void bump_free_count(struct vl_ledger *L) { L->dev[0].count[VL_FREE]++; }
static void bump_stage_loans(struct vl_ledger *L) { L->stage[0].loan_chunks++; }
static void bump_region_used(struct vl_ledger *L) { L->region[0]->used++; }
static void second_holder(struct vl_ledger *L)
{
    struct vl_region *kv = vli_region_find(L, L->stage[0].kv_region);
    L->dev[0].chunks[(uint32_t)kv->slot_chunk[0]].holder = 2;
}
static void free_but_held(struct vl_ledger *L)
{
    /* A held chunk also pushed on the free stack. */
    struct vl_region *kv = vli_region_find(L, L->stage[0].kv_region);
    L->dev[0].free_stack[0] = (uint32_t)kv->slot_chunk[0];
}
static void slot_points_elsewhere(struct vl_ledger *L)
{
    struct vl_region *kv = vli_region_find(L, L->stage[0].kv_region);
    kv->slot_chunk[0] = kv->slot_chunk[1];
}
static void foreign_in_region(struct vl_ledger *L)
{
    /* A device-1 chunk's record claims a device-0 region. */
    struct vl_region *kv = vli_region_find(L, L->stage[0].kv_region);
    for (uint32_t k = 0; k < L->dev[1].nchunks; k++) {
        struct vl_chunk *c = &L->dev[1].chunks[k];
        if (c->state == VL_GRANTED) {
            c->region = kv->id;
            break;
        }
    }
}
static void overlap_regions(struct vl_ledger *L)
{
    L->region[1]->base = L->region[0]->base;
}
static void bad_state(struct vl_ledger *L) { L->dev[1].chunks[0].state = 9; }
static void claim_unbacked(struct vl_ledger *L)
{
    L->stage[0].slot_layer[L->stage[0].nslots - 1] = 3;
}
static void client_count(struct vl_ledger *L) { L->client[0].chunks++; }
static void client_bytes(struct vl_ledger *L) { L->client[0].held_bytes += 2 * MiB; }
static void client_quarantine(struct vl_ledger *L)
{
    L->client[0].quarantined_bytes++;
}
static void client_regions(struct vl_ledger *L) { L->client[0].regions++; }
static void client_stages(struct vl_ledger *L) { L->client[0].stages--; }
/* A chunk dropped from its holder's list (the device holding its chunks). */
static void client_list(struct vl_ledger *L)
{
    for (uint32_t di = 0; di < L->ndev; di++) {
        uint32_t k = L->client[0].hfirst[di];
        if (k != VL_NONE) {
            L->client[0].hfirst[di] = L->dev[di].chunks[k].hnext;
            return;
        }
    }
}

static void test_r01_check_catches_corruption(void)
{
    corrupt_and_check("kv counter bumped", bump_kv);
    corrupt_and_check("free count bumped", bump_free_count);
    corrupt_and_check("stage loans bumped", bump_stage_loans);
    corrupt_and_check("region used bumped", bump_region_used);
    corrupt_and_check("two holders", second_holder);
    corrupt_and_check("held chunk on the free stack", free_but_held);
    corrupt_and_check("slot points at another chunk", slot_points_elsewhere);
    corrupt_and_check("foreign chunk in a region", foreign_in_region);
    corrupt_and_check("regions overlap", overlap_regions);
    corrupt_and_check("bad state", bad_state);
    corrupt_and_check("claim on an unbacked slot", claim_unbacked);
    corrupt_and_check("client chunk count", client_count);
    /* R14: the counters quotas and views read. */
    corrupt_and_check("client bytes held", client_bytes);
    corrupt_and_check("client bytes quarantined", client_quarantine);
    corrupt_and_check("client ad-hoc regions", client_regions);
    corrupt_and_check("client stages", client_stages);
    corrupt_and_check("client chunk list", client_list);
}


/* ---- R13: restart --------------------------------------------------------- */

/* What a state file would hold, kept by the observer of the first ledger. */
static struct {
    uint64_t chunk[1][1024]; /* holder | stage << 32 | cat << 48 */
    struct vl_va_hold va[64];
    bool va_live[64];
    uint32_t stage[VL_MAX_STAGES];
} rec;

static void rec_chunk(void *ctx, uint32_t dev, uint32_t idx, uint32_t holder,
                      uint16_t stage, uint8_t cat)
{
    (void)ctx;
    rec.chunk[dev][idx] = holder ? (uint64_t)holder | (uint64_t)stage << 32 |
                                       (uint64_t)cat << 48
                                 : 0;
}

static uint32_t rec_va_take(void *ctx, uint32_t region, uint32_t client,
                            uint64_t base, uint64_t size)
{
    (void)ctx;
    for (uint32_t i = 0; i < 64; i++)
        if (!rec.va_live[i]) {
            rec.va_live[i] = true;
            rec.va[i] = (struct vl_va_hold){client, region, base, size, 0};
            return i + 1;
        }
    return 0;
}

static void rec_va_give(void *ctx, uint32_t tag)
{
    (void)ctx;
    if (tag)
        rec.va_live[tag - 1] = false;
}

static void rec_stage(void *ctx, uint32_t stage, uint32_t client)
{
    (void)ctx;
    rec.stage[stage] = client;
}

/* A restarted ledger from the records: client 1 gone, as vramd rebuilds it. */
static void restore_from_records(struct vl_ledger *L)
{
    static struct vl_restore_chunk rc[1024];
    static struct vl_va_hold va[64];
    size_t nrc = 0, nva = 0;
    for (uint32_t k = 0; k < L->dev[0].nchunks; k++)
        if (rec.chunk[0][k])
            rc[nrc++] = (struct vl_restore_chunk){
                .chunk = vl_chunk_id(0, k), .client = (uint32_t)rec.chunk[0][k],
                .stage = (uint16_t)(rec.chunk[0][k] >> 32),
                .cat = (uint8_t)(rec.chunk[0][k] >> 48)};
    for (uint32_t i = 0; i < 64; i++)
        if (rec.va_live[i])
            va[nva++] = rec.va[i];
    uint32_t one = 1;
    OP(L, 0, vl_restore(L, &one, 1, rc, nrc, va, nva, rec.stage));
}

/* A ledger with one configured stage whose observer keeps the records (the
 * vramd that dies), and one started from those records (the vramd after
 * it). */
static void recorded_ledger(struct vl_ledger *L, const struct vl_device_cfg *dc,
                            const struct vl_stage_cfg *sc)
{
    memset(&rec, 0, sizeof(rec));
    REQUIRE(vl_init(L, dc, 1, VA_BASE, VA_SIZE) == 0, "init");
    L->region_align = GiB;
    vl_set_observer(L, &(struct vl_observer){.chunk = rec_chunk,
                                             .va_take = rec_va_take,
                                             .va_give = rec_va_give,
                                             .stage = rec_stage});
    OP(L, 0, vl_stage_configure(L, sc));
}

static void restarted_ledger(struct vl_ledger *L, const struct vl_device_cfg *dc,
                             const struct vl_stage_cfg *sc)
{
    REQUIRE(vl_init(L, dc, 1, VA_BASE, VA_SIZE) == 0, "init");
    L->region_align = GiB;
    OP(L, 0, vl_stage_configure(L, sc));
    restore_from_records(L);
}

/* What client 1 declares: everything the first ledger gave it. */
struct declared {
    struct vl_resume_stage st[4];
    struct vl_resume_region rg[16];
    struct vl_resume_chunk ch[1024];
    struct vl_resume rs;
};

static void declare_all(struct vl_ledger *L, uint32_t client, struct declared *d)
{
    memset(d, 0, sizeof(*d));
    for (uint32_t i = 0; i < L->nstage; i++) {
        struct vl_stage *s = &L->stage[i];
        if (s->used && s->owner == client)
            d->st[d->rs.nstages++] = (struct vl_resume_stage){
                .id = i, .configured = s->configured,
                .keep_window = s->keep_window, .device = s->cfg.device,
                .first_layer = s->cfg.first_layer, .last_layer = s->cfg.last_layer};
    }
    for (size_t i = 0; i < L->nregion; i++) {
        struct vl_region *r = L->region[i];
        if (r->client != client)
            continue;
        struct vl_resume_region *x = &d->rg[d->rs.nregions++];
        *x = (struct vl_resume_region){.id = r->id, .stage = r->stage,
                                       .kind = r->kind, .base = r->base,
                                       .lane_stride = r->lane_stride,
                                       .va_bytes = r->va_bytes, .lanes = r->lanes};
        memcpy(x->lane_slots, r->lane_slots, r->lanes * sizeof(uint32_t));
        for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++)
            if (r->slot_chunk[k] != VL_CHUNK_NONE)
                d->ch[d->rs.nchunks++] = (struct vl_resume_chunk){
                    .chunk = r->slot_chunk[k], .region = r->id, .slot = k};
    }
    d->rs.stages = d->st;
    d->rs.regions = d->rg;
    d->rs.chunks = d->ch;
    d->rs.from = client;
}

static void test_r13_restart(void)
{
    struct vl_device_cfg dc = dev_cfg(0, GiB, false); /* 512 chunks */
    struct vl_stage_cfg sc = stage_cfg(0, 0, 0, 15, 2);
    sc.nfixed = 1;
    sc.fixed[0] = (struct vl_fixed_cfg){.name = "w", .kind = VL_FIXED,
                                        .bytes = 8 * MiB};
    struct vl_ledger A, B, C;
    recorded_ledger(&A, &dc, &sc);
    OP(&A, 0, vl_client_add(&A, 1));
    OP(&A, 0, vl_stage_register(&A, 1, 0, false, &fx));
    OP(&A, 0, vl_region_grow(&A, 1, A.stage[0].fixed_region[0], 4, &fx));
    OP(&A, 0, vl_expert_request(&A, 1, 0, 0, &fx));
    uint32_t adhoc, region;
    OP(&A, 0, vl_stage_register_adhoc(&A, 1, 0, 16, 31, &adhoc));
    OP(&A, 0, vl_region_create(&A, 1, adhoc, VL_FIXED, 16 * MiB, 1, &region));
    OP(&A, 0, vl_region_grow(&A, 1, region, 8, &fx));
    uint32_t held = vli_client_find(&A, 1)->chunks;
    struct declared *d = calloc(1, sizeof(*d));
    REQUIRE(d, "out of memory");
    declare_all(&A, 1, d);
    CHECK(d->rs.nchunks == held, "declared %zu of %u", d->rs.nchunks, held);

    /* 1. The same configuration: everything comes back where it was. */
    restarted_ledger(&B, &dc, &sc);
    CHECK_EQ_U(B.dev[0].count[VL_QUARANTINED], held);
    CHECK_EQ_U(B.stage[0].quarantined, held - 8);
    CHECK_EQ_U(B.stage[0].q_fixed, 4);
    CHECK(B.stage[adhoc].used && B.stage[adhoc].held_by == 1, "ad-hoc id held");
    /* Nobody else gets stage 0, its id or its memory meanwhile. */
    OP(&B, 0, vl_client_add(&B, 2));
    OP(&B, -EAGAIN, vl_stage_register(&B, 2, 0, false, &fx));
    uint32_t other;
    OP(&B, 0, vl_stage_register_adhoc(&B, 2, 0, 0, 3, &other));
    CHECK(other != adhoc, "the held ad-hoc id was given out again");
    OP(&B, 0, vl_client_add(&B, 3));
    vl_fx_clear(&fx);
    OP(&B, 0, vl_client_resume(&B, 3, &d->rs, &fx));
    CHECK_EQ_U(d->rs.lost_chunks, 0);
    CHECK_EQ_U(fx_count(VL_FX_DROP, VL_NONE), 0);
    CHECK_EQ_U(vli_client_find(&B, 3)->chunks, held);
    CHECK(B.stage[0].owner == 3 && B.stage[adhoc].owner == 3, "stages back");
    for (size_t i = 0; i < d->rs.nchunks; i++) {
        struct vl_chunk *c = &B.dev[0].chunks[(uint32_t)d->ch[i].chunk];
        CHECK(c->holder == 3 && c->region == d->ch[i].region &&
              c->slot == d->ch[i].slot, "chunk %zu not where it was", i);
    }
    for (size_t i = 0; i < d->rs.nregions; i++) {
        struct vl_region *r = vli_region_find(&B, d->rg[i].id);
        CHECK(r && r->base == d->rg[i].base, "region %u not at its address",
              d->rg[i].id);
    }
    OP(&B, -ENOENT, vl_client_resume(&B, 3, &d->rs, &fx)); /* once only */
    OP(&B, 0, vl_client_reap(&B, 1, &fx));
    /* The stage works on: a reserve of the whole window. */
    OP(&B, 0, vl_kv_reserve(&B, 3, 0, 262144, 0, NULL, &fx));

    /* 2. Stage 0's KV has three lanes now: it is lost (ESTALE), its chunks
     * stay quarantined (and stand for its promise) until the process
     * exits; the ad-hoc stage comes back. */
    struct vl_stage_cfg sc3 = stage_cfg(0, 0, 0, 15, 3);
    sc3.nfixed = 1;
    sc3.fixed[0] = sc.fixed[0];
    restarted_ledger(&C, &dc, &sc3);
    OP(&C, 0, vl_client_add(&C, 2));
    /* Two regions declared on one range: the second is refused. */
    d->rg[d->rs.nregions] = d->rg[d->rs.nregions - 1];
    d->rg[d->rs.nregions].id = 999;
    d->rs.nregions++;
    vl_fx_clear(&fx);
    OP(&C, 0, vl_client_resume(&C, 2, &d->rs, &fx));
    int kv_lost = 0, ad_ok = 0, dup_lost = 0;
    for (size_t i = 0; i < d->rs.nstages; i++) {
        if (d->st[i].id == 0)
            kv_lost = d->st[i].lost == -ESTALE;
        else
            ad_ok = d->st[i].lost == 0;
    }
    for (size_t i = 0; i < d->rs.nregions; i++)
        if (d->rg[i].id == 999)
            dup_lost = d->rg[i].lost == -EADDRINUSE;
    CHECK(kv_lost && ad_ok && dup_lost, "lost: stage 0 %d, ad-hoc ok %d, "
          "duplicate range %d", kv_lost, ad_ok, dup_lost);
    CHECK_EQ_U(d->rs.lost_chunks, held - 8);
    CHECK_EQ_U(vli_client_find(&C, 2)->chunks, 8);
    CHECK_EQ_U(vli_client_find(&C, 1)->chunks, held - 8);
    CHECK_EQ_U(C.dev[0].count[VL_QUARANTINED], held - 8);
    OP(&C, -EAGAIN, vl_stage_register(&C, 2, 0, false, &fx));
    OP(&C, 0, vl_client_reap(&C, 1, &fx)); /* the process exited */
    OP(&C, 0, vl_stage_register(&C, 2, 0, false, &fx));

    /* 3. A resume that broke half-way left the process's chunks under two
     * gone ids (1, and 5 that sent it): one resume takes back both. A region
     * id held for another process (gone client 6) is not given out. */
    d->rs.nregions--; /* the duplicate of part 2 */
    struct vl_ledger D;
    REQUIRE(vl_init(&D, &dc, 1, VA_BASE, VA_SIZE) == 0, "init D");
    D.region_align = GiB;
    OP(&D, 0, vl_stage_configure(&D, &sc));
    static struct vl_restore_chunk rc[1024];
    size_t nrc = 0;
    for (uint32_t k = 0; k < D.dev[0].nchunks; k++)
        if (rec.chunk[0][k])
            rc[nrc++] = (struct vl_restore_chunk){
                .chunk = vl_chunk_id(0, k),
                .client = nrc % 2 ? 5 : (uint32_t)rec.chunk[0][k],
                .stage = (uint16_t)(rec.chunk[0][k] >> 32),
                .cat = (uint8_t)(rec.chunk[0][k] >> 48)};
    struct vl_va_hold va[64];
    size_t nva = 0;
    for (uint32_t i = 0; i < 64; i++)
        if (rec.va_live[i])
            va[nva++] = rec.va[i];
    /* Gone client 6 holds a range far away under the ad-hoc region's id. */
    va[nva++] = (struct vl_va_hold){6, region, VA_BASE + 512 * GiB, GiB, 0};
    uint32_t gone[3] = {1, 5, 6};
    OP(&D, 0, vl_restore(&D, gone, 3, rc, nrc, va, nva, rec.stage));
    OP(&D, 0, vl_client_add(&D, 7));
    uint32_t also = 5;
    d->rs.also = &also;
    d->rs.nalso = 1;
    vl_fx_clear(&fx);
    OP(&D, 0, vl_client_resume(&D, 7, &d->rs, &fx));
    CHECK_EQ_U(fx_count(VL_FX_DROP, VL_NONE), 0);
    CHECK_EQ_U(vli_client_find(&D, 7)->chunks, held - 8);
    CHECK_EQ_U(vli_client_find(&D, 5)->chunks + vli_client_find(&D, 1)->chunks,
               8); /* the ad-hoc region's, lost: its id is gone client 6's */
    for (size_t i = 0; i < d->rs.nregions; i++)
        if (d->rg[i].id == region)
            CHECK(d->rg[i].lost == -EEXIST, "region id of another process "
                  "given out (%d)", d->rg[i].lost);
    free(d);
    vl_fini(&A);
    vl_fini(&B);
    vl_fini(&C);
    vl_fini(&D);
}

/* vramd dies after committing a kv_reserve that moved loans into KV (or a
 * kv_trim that lent KV), before the reply reached the process: the process
 * still maps those chunks where they were, and declares them there. Nothing
 * is lost; the stage comes back as the process sees it, and its promises
 * hold (OP runs vl_check). */
static void check_unseen_move(struct vl_ledger *A, struct declared *d,
                              const struct vl_device_cfg *dc,
                              const struct vl_stage_cfg *sc, const char *what)
{
    struct vl_ledger B;
    restarted_ledger(&B, dc, sc);
    OP(&B, 0, vl_client_add(&B, 2));
    vl_fx_clear(&fx);
    OP(&B, 0, vl_client_resume(&B, 2, &d->rs, &fx));
    CHECK(d->st[0].lost == 0, "%s: stage lost (%d)", what, d->st[0].lost);
    CHECK_EQ_U(d->rs.lost_chunks, 0);
    uint32_t kv = 0, loans = 0;
    for (size_t i = 0; i < d->rs.nchunks; i++) {
        struct vl_chunk *c = &B.dev[0].chunks[(uint32_t)d->ch[i].chunk];
        CHECK(c->holder == 2 && c->region == d->ch[i].region &&
                  c->slot == d->ch[i].slot,
              "%s: chunk %zu not where the process maps it", what, i);
        kv += d->ch[i].region == A->stage[0].kv_region;
        loans += d->ch[i].region == A->stage[0].expert_region;
    }
    CHECK(B.stage[0].kv_chunks == kv && B.stage[0].loan_chunks == loans,
          "%s: KV %u loans %u, the process maps %u and %u", what,
          B.stage[0].kv_chunks, B.stage[0].loan_chunks, kv, loans);
    /* The call is sent again after the resume, and does what it did. */
    OP(&B, 0, vl_kv_reserve(&B, 2, 0, 262144, 0, NULL, &fx));
    vl_fini(&B);
}

static void test_r13_resume_unseen_moves(void)
{
    struct vl_device_cfg dc = dev_cfg(0, GiB, false);
    struct vl_stage_cfg sc = stage_cfg(0, 0, 0, 15, 2);
    struct vl_ledger A;
    recorded_ledger(&A, &dc, &sc);
    OP(&A, 0, vl_client_add(&A, 1));
    OP(&A, 0, vl_stage_register(&A, 1, 0, false, &fx));
    OP(&A, 0, vl_expert_request(&A, 1, 0, 0, &fx)); /* the window, lent */
    CHECK(A.stage[0].loan_chunks > 20, "only %u loans", A.stage[0].loan_chunks);
    struct declared *d = calloc(1, sizeof(*d));
    REQUIRE(d, "out of memory");

    declare_all(&A, 1, d); /* what the process maps */
    vl_fx_clear(&fx);
    OP(&A, 0, vl_kv_reserve(&A, 1, 0, 100000, 0, NULL, &fx));
    CHECK(fx_count(VL_FX_MOVE, 1) > 10, "the reserve moved %zu loans",
          fx_count(VL_FX_MOVE, 1));
    check_unseen_move(&A, d, &dc, &sc, "reserve");

    declare_all(&A, 1, d); /* the reserve's reply applied */
    vl_fx_clear(&fx);
    OP(&A, 0, vl_kv_trim(&A, 1, 0, 0, &fx));
    CHECK(fx_count(VL_FX_MOVE, 1) > 10, "the trim lent %zu chunks",
          fx_count(VL_FX_MOVE, 1));
    check_unseen_move(&A, d, &dc, &sc, "trim");
    free(d);
    vl_fini(&A);
}

/* Declarations a hostile or confused process might send (found by review,
 * each once broke an invariant or memory safety): the ledger refuses or
 * loses the item, and every invariant holds (OP runs vl_check). */
static void test_r13_resume_hostile(void)
{
    struct vl_device_cfg dc = dev_cfg(0, 128 * MiB, false); /* 64 chunks */
    struct vl_stage_cfg sc = stage_cfg(0, 0, 0, 3, 1);
    sc.lane_bytes_per_token[0] = 1024;
    sc.native_context = 32768; /* 16 chunks */
    sc.initial_tokens = 4096;
    sc.step_tokens = 4096;
    sc.nfixed = 1;
    sc.fixed[0] = (struct vl_fixed_cfg){.name = "w", .kind = VL_FIXED,
                                        .bytes = 64 * MiB}; /* 32 */
    sc.expert_slot_bytes = 2 * MiB;
    sc.expert_region_bytes = 16 * MiB;
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &dc, 1, VA_BASE, VA_SIZE) == 0, "init");
    OP(&L, 0, vl_stage_configure(&L, &sc));

    /* 1. Two connections of one process: client 2 holds stage 0's fixed
     * memory; the process resumes from 1 (also 2) declaring stage 0 but
     * none of 2's chunks. The stage cannot come back whole: it stays away,
     * quarantined, its promise covered. */
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_client_add(&L, 2));
    OP(&L, 0, vl_stage_register(&L, 2, 0, false, &fx));
    OP(&L, 0, vl_region_grow(&L, 2, L.stage[0].fixed_region[0], 32, &fx));
    struct declared *d = calloc(1, sizeof(*d));
    REQUIRE(d, "out of memory");
    declare_all(&L, 2, d);
    d->rs.nchunks = 0;
    d->rs.from = 1;
    uint32_t also = 2;
    d->rs.also = &also;
    d->rs.nalso = 1;
    OP(&L, 0, vl_client_disconnect(&L, 1, &fx));
    OP(&L, 0, vl_client_disconnect(&L, 2, &fx));
    OP(&L, 0, vl_client_add(&L, 3));
    OP(&L, 0, vl_client_resume(&L, 3, &d->rs, &fx));
    CHECK(d->st[0].lost == -EBUSY && !L.stage[0].owner,
          "stage 0 came back without its memory (lost %d)", d->st[0].lost);
    OP(&L, 0, vl_client_reap(&L, 2, &fx));
    OP(&L, 0, vl_client_reap(&L, 1, &fx));

    /* 2-4. Region id 2^32-1, a range that wraps past 2^64, too many stages. */
    uint32_t st, rg;
    OP(&L, 0, vl_client_add(&L, 4));
    OP(&L, 0, vl_stage_register_adhoc(&L, 4, 0, 0, 3, &st));
    OP(&L, 0, vl_region_create(&L, 4, st, VL_FIXED, 4 * MiB, 1, &rg));
    OP(&L, 0, vl_region_grow(&L, 4, rg, 1, &fx));
    declare_all(&L, 4, d);
    OP(&L, 0, vl_client_disconnect(&L, 4, &fx));
    OP(&L, 0, vl_client_add(&L, 5));
    d->rg[0].id = UINT32_MAX;
    d->ch[0].region = UINT32_MAX;
    d->rs.from = 4;
    d->rs.nalso = 0;
    OP(&L, 0, vl_client_resume(&L, 5, &d->rs, &fx));
    CHECK(d->rg[0].lost == -EINVAL, "region id 2^32-1 taken (%d)",
          d->rg[0].lost);
    OP(&L, 0, vl_client_add(&L, 6));
    uint32_t st6, r6;
    OP(&L, 0, vl_stage_register_adhoc(&L, 6, 0, 0, 3, &st6));
    OP(&L, 0, vl_region_create(&L, 6, st6, VL_FIXED, 2 * MiB, 1, &r6));
    CHECK(r6 != 0 && r6 < UINT32_MAX, "region ids wrapped: %u", r6);
    OP(&L, 0, vl_client_disconnect(&L, 5, &fx));
    OP(&L, 0, vl_client_reap(&L, 5, &fx));
    OP(&L, 0, vl_client_reap(&L, 4, &fx));

    OP(&L, 0, vl_client_add(&L, 7));
    OP(&L, 0, vl_stage_register_adhoc(&L, 7, 0, 0, 3, &st));
    OP(&L, 0, vl_region_create(&L, 7, st, VL_FIXED, 4 * MiB, 1, &rg));
    declare_all(&L, 7, d);
    OP(&L, 0, vl_client_disconnect(&L, 7, &fx));
    OP(&L, 0, vl_client_add(&L, 8));
    d->rg[0].base = 0 - d->rg[0].va_bytes; /* aligned, and wraps */
    d->rs.from = 7;
    OP(&L, 0, vl_client_resume(&L, 8, &d->rs, &fx));
    CHECK(d->rg[0].lost == -EADDRINUSE, "a range past 2^64 judged free (%d)",
          d->rg[0].lost);

    OP(&L, 0, vl_client_add(&L, 9));
    struct vl_resume_stage *many = calloc(VL_MAX_STAGES + 1, sizeof(*many));
    REQUIRE(many, "out of memory");
    struct vl_resume big = {.from = 8, .stages = many,
                            .nstages = VL_MAX_STAGES + 1};
    OP(&L, 0, vl_client_disconnect(&L, 8, &fx));
    OP(&L, -EINVAL, vl_client_resume(&L, 9, &big, &fx));
    free(many);
    free(d);
    vl_fini(&L);
}

/* ---- R14: limits per client ------------------------------------------------ */

/* What the views show of a client and its device: a refused request must
 * leave all of it as it was. */
struct seen {
    struct vl_client_view c;
    struct vl_device_view d;
    size_t nregion;
};

static struct seen seen_now(struct vl_ledger *L, uint32_t client)
{
    struct seen s;
    memset(&s, 0, sizeof(s));
    REQUIRE(vl_client_view(L, client, &s.c), "no client %u", client);
    vl_device_view(L, 0, &s.d);
    s.nregion = L->nregion;
    return s;
}

static void check_unchanged(struct vl_ledger *L, uint32_t client,
                            const struct seen *a)
{
    struct seen b = seen_now(L, client);
    CHECK_EQ_U(b.c.chunks, a->c.chunks);
    CHECK_EQ_U(b.c.held_bytes, a->c.held_bytes);
    CHECK_EQ_U(b.c.quarantined_bytes, a->c.quarantined_bytes);
    CHECK_EQ_U(b.c.regions, a->c.regions);
    CHECK_EQ_U(b.c.stages, a->c.stages);
    CHECK_EQ_U(b.d.free, a->d.free);
    CHECK_EQ_U(b.d.fixed, a->d.fixed);
    CHECK_EQ_U(b.d.kv, a->d.kv);
    CHECK_EQ_U(b.d.loaned, a->d.loaned);
    CHECK_EQ_U(b.nregion, a->nregion);
    CHECK_EQ_U(fx.n, 0);
}

/* call is refused with err and exactly the message msg, and changes
 * nothing (vl_check, the views, no effects). */
#define REFUSED(L, client, err, msg, call)                                     \
    do {                                                                       \
        struct seen refused_seen_ = seen_now(L, client);                       \
        vl_fx_clear(&fx);                                                      \
        OP(L, err, call);                                                      \
        CHECK(strcmp(vl_why(L), msg) == 0, "why: \"%s\", expected \"%s\"",     \
              vl_why(L), msg);                                                 \
        check_unchanged(L, client, &refused_seen_);                            \
    } while (0)

static uint32_t client_chunks(struct vl_ledger *L, uint32_t client)
{
    struct vl_client_view cv;
    REQUIRE(vl_client_view(L, client, &cv), "no client %u", client);
    CHECK_EQ_U(cv.held_bytes, (uint64_t)cv.chunks * 2 * MiB);
    return cv.chunks;
}

static void test_r14_quotas(void)
{
    /* Stages 0 and 1 each a window of 66 chunks, 5 initial. */
    struct vl_ledger L;
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 1);
    struct vl_stage_cfg b = stage_cfg(1, 0, 32, 47, 1);
    two_stages(&L, false, &a, &b, 2);
    CHECK_EQ_U(L.limits.chunks_per_client, UINT32_MAX); /* unbounded at first */
    vl_set_limits(&L, &(struct vl_limits){.chunks_per_client = 20,
                                          .regions_per_client = 2,
                                          .stages_per_client = 2});
    struct vl_client_view cv;

    /* Stages: two, then both kinds of registration are refused, before
     * anything else is judged (stage 99 does not exist). */
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    CHECK_EQ_U(client_chunks(&L, 1), 5);
    REQUIRE(vl_client_view(&L, 1, &cv), "client 1");
    CHECK_EQ_U(cv.stages, 1);
    CHECK_EQ_U(cv.regions, 0); /* a configured stage's regions don't count */
    uint32_t st, x = 777;
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 0, 0, 1, &st));
    REFUSED(&L, 1, -E2BIG, "limit of 2 stages per client reached",
            vl_stage_register_adhoc(&L, 1, 0, 2, 3, &x));
    CHECK_EQ_U(x, 777);
    REFUSED(&L, 1, -E2BIG, "limit of 2 stages per client reached",
            vl_stage_register(&L, 1, 1, false, &fx));
    CHECK_EQ_U(L.stage[1].owner, 0);
    REFUSED(&L, 1, -E2BIG, "limit of 2 stages per client reached",
            vl_stage_register(&L, 1, 99, false, &fx));
    /* Just below the limit it is allowed again; other clients have their
     * own count. */
    OP(&L, 0, vl_stage_release(&L, 1, st, &fx));
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 0, 0, 1, &st));
    OP(&L, 0, vl_stage_register(&L, 2, 1, false, &fx));

    /* Ad-hoc regions: two. */
    uint32_t ra, rb, rx = 777;
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 16 * MiB, 2, &ra));
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 2 * MiB, 1, &rb));
    REQUIRE(vl_client_view(&L, 1, &cv), "client 1");
    CHECK_EQ_U(cv.regions, 2);
    REFUSED(&L, 1, -E2BIG, "limit of 2 regions per client reached",
            vl_region_create(&L, 1, st, VL_FIXED, 2 * MiB, 1, &rx));
    REFUSED(&L, 1, -E2BIG, "limit of 2 regions per client reached",
            vl_region_create(&L, 1, st, 99, 2 * MiB, 1, &rx));
    CHECK_EQ_U(rx, 777);
    OP(&L, 0, vl_region_release(&L, 1, rb, &fx));
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 2 * MiB, 1, &rb));

    /* Chunks: 20. Holding 5, a grow of 8 a lane over 2 lanes asks 16. */
    REFUSED(&L, 1, -EDQUOT, "quota of 20 chunks per client: holding 5, asked "
            "16 more", vl_region_grow(&L, 1, ra, 8, &fx));
    /* No such region: n alone, judged before the ledger's own refusal. */
    REFUSED(&L, 1, -EDQUOT, "quota of 20 chunks per client: holding 5, asked "
            "16 more", vl_region_grow(&L, 1, 9999, 16, &fx));
    OP(&L, -ENOENT, vl_region_grow(&L, 1, 9999, 1, &fx));
    OP(&L, 0, vl_region_grow(&L, 1, ra, 6, &fx));
    CHECK_EQ_U(client_chunks(&L, 1), 17);
    /* Loans: one chunk asked (less than the 3 left), then all there is,
     * cut to what is left of the quota. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_expert_request(&L, 1, 0, 2 * MiB, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 1);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 1), 2);
    CHECK_EQ_U(L.stage[0].loan_chunks, 3);
    CHECK_EQ_U(client_chunks(&L, 1), 20);
    REFUSED(&L, 1, -EDQUOT, "quota of 20 chunks per client reached",
            vl_expert_request(&L, 1, 0, 0, &fx));
    /* First: even on a stage that is not its own. */
    REFUSED(&L, 1, -EDQUOT, "quota of 20 chunks per client reached",
            vl_expert_request(&L, 1, 1, 0, &fx));
    REFUSED(&L, 1, -EDQUOT, "quota of 20 chunks per client: holding 20, asked "
            "1 more", vl_region_grow(&L, 1, rb, 1, &fx));
    OP(&L, 0, vl_region_grow(&L, 1, rb, 0, &fx)); /* at the quota exactly */
    /* Client 2 has its own quota: 5 held, its loans stop at 15 more. */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_expert_request(&L, 2, 1, 0, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MAP, 2), 15);
    CHECK_EQ_U(client_chunks(&L, 2), 20);
    /* KV reserves are not limited: the window was admitted (R2). */
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 20000, 0, NULL, &fx));
    CHECK_EQ_U(client_chunks(&L, 1), 22);
    vl_fini(&L);
}

/* ---- R15: missed recalls (also R6: the hold bound) ------------------------- */

/* ---- R16: tenants' quotas --------------------------------------------------- */

static void test_r16_tenant_quotas(void)
{
    struct vl_device_cfg d = dev_cfg(0, GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    vl_set_limits(&L, &(struct vl_limits){.chunks_per_client = UINT32_MAX,
                                          .regions_per_client = UINT32_MAX,
                                          .stages_per_client = UINT32_MAX,
                                          .va_bytes_per_client = 3 * GiB,
                                          .va_bytes_per_tenant = 4 * GiB,
                                          .stages_per_tenant = 2,
                                          .gone_per_tenant = 1});
    /* Clients 1 and 2 of uid 1000, 3 of uid 2000, 4 exempt (an admin). */
    OP(&L, 0, vl_client_add_tenant(&L, 1, 1000, false));
    OP(&L, 0, vl_client_add_tenant(&L, 2, 1000, false));
    OP(&L, 0, vl_client_add_tenant(&L, 3, 2000, false));
    OP(&L, 0, vl_client_add_tenant(&L, 4, 1000, true));
    for (uint32_t i = 1; i <= 4; i++) /* their first requests for memory */
        OP(&L, 0, vl_client_admit(&L, i));
    uint32_t s1, s2, s3, s4, r;
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 0, 0, 1, &s1));
    OP(&L, 0, vl_stage_register_adhoc(&L, 2, 0, 0, 1, &s2));
    /* Address space: a client's regions of a GiB each. */
    uint32_t r1;
    OP(&L, 0, vl_region_create(&L, 1, s1, VL_FIXED, GiB, 1, &r1));
    OP(&L, 0, vl_region_create(&L, 1, s1, VL_FIXED, GiB, 1, &r));
    OP(&L, 0, vl_region_create(&L, 1, s1, VL_FIXED, GiB, 1, &r));
    struct vl_client_view cv;
    REQUIRE(vl_client_view(&L, 1, &cv), "client 1");
    CHECK_EQ_U(cv.va_bytes, 3 * GiB);
    CHECK_EQ_U(cv.tenant, 1000);
    REFUSED(&L, 1, -EDQUOT, "client 1 would reserve 4096 MiB of address space, "
            "over its limit of 3072 MiB (limits.address_space_per_client)",
            vl_region_create(&L, 1, s1, VL_FIXED, GiB, 1, &r));
    /* ... and its tenant's: uid 1000 holds 3 GiB, one more is its limit. */
    OP(&L, 0, vl_region_create(&L, 2, s2, VL_FIXED, GiB, 1, &r));
    REFUSED(&L, 2, -EDQUOT, "uid 1000's clients would reserve 5120 MiB of "
            "address space, over their limit of 4096 MiB "
            "(limits.address_space_per_user)",
            vl_region_create(&L, 2, s2, VL_FIXED, GiB, 1, &r));
    /* Another tenant and an exempt client are not held back by uid 1000. */
    OP(&L, 0, vl_stage_register_adhoc(&L, 3, 0, 0, 1, &s3));
    OP(&L, 0, vl_region_create(&L, 3, s3, VL_FIXED, GiB, 1, &r));
    OP(&L, 0, vl_stage_register_adhoc(&L, 4, 0, 0, 1, &s4));
    OP(&L, 0, vl_region_create(&L, 4, s4, VL_FIXED, GiB, 1, &r));
    /* Ad-hoc stages: uid 1000 has two, its limit. */
    uint32_t x = 777;
    REFUSED(&L, 2, -EDQUOT, "uid 1000's clients hold 2 ad-hoc stages, their "
            "limit (limits.stages_per_user)",
            vl_stage_register_adhoc(&L, 2, 0, 2, 3, &x));
    CHECK_EQ_U(x, 777);
    /* A gone client keeps its address space and stage id, and counts: uid
     * 1000 may have one gone client, so no new client until it is reaped. */
    OP(&L, 0, vl_region_grow(&L, 1, r1, 1, &fx)); /* it holds a chunk */
    OP(&L, 0, vl_client_disconnect(&L, 1, &fx));
    REQUIRE(vl_client_view(&L, 1, &cv), "client 1");
    CHECK_EQ_U(cv.va_bytes, 3 * GiB);
    REFUSED(&L, 2, -EDQUOT, "uid 1000's clients hold 2 ad-hoc stages, their "
            "limit (limits.stages_per_user)",
            vl_stage_register_adhoc(&L, 2, 0, 2, 3, &x));
    /* It connects (it might be the gone client's process coming back),
     * but is turned away at its first request for memory. */
    OP(&L, 0, vl_client_add_tenant(&L, 5, 1000, false));
    CHECK(vl_client_admit(&L, 5) == -EDQUOT &&
              strcmp(vl_why(&L), "uid 1000 has 1 gone clients whose processes "
                                 "still hold memory, its limit "
                                 "(limits.gone_clients_per_user)") == 0,
          "a gone client's tenant got a new client: %s", vl_why(&L));
    OP(&L, 0, vl_client_add_tenant(&L, 8, 2000, false));
    OP(&L, 0, vl_client_admit(&L, 8));
    OP(&L, 0, vl_client_add_tenant(&L, 6, 1000, true));
    OP(&L, 0, vl_client_admit(&L, 6));
    /* Client 2 was admitted before client 1 left: it is not counted again. */
    OP(&L, 0, vl_client_admit(&L, 2));
    /* Reaped: everything of it is back. */
    OP(&L, 0, vl_client_reap(&L, 1, &fx));
    OP(&L, 0, vl_client_admit(&L, 5));
    OP(&L, 0, vl_client_add_tenant(&L, 7, 1000, false));
    OP(&L, 0, vl_client_admit(&L, 7));
    OP(&L, 0, vl_stage_register_adhoc(&L, 7, 0, 2, 3, &x));
    OP(&L, 0, vl_region_create(&L, 7, x, VL_FIXED, GiB, 1, &r));
    OP(&L, 0, vl_region_create(&L, 7, x, VL_FIXED, GiB, 1, &r));
    vl_fx_clear(&fx);
    vl_fini(&L);
}

static void test_r15_missed_recall(void)
{
    struct vl_ledger L;
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 1);
    a.kill_on_missed_recall = true; /* recall deadline 100 ms, hold 1000 */
    struct vl_stage_cfg b = stage_cfg(1, 0, 32, 47, 1);
    b.recall_deadline_ms = 0;
    b.hold_ms = 0;
    two_stages(&L, false, &a, &b, 3);

    /* Deadlines, configured or the default. */
    CHECK_EQ_U(vl_recall_deadline_ms(&L, 0), 100);
    CHECK_EQ_U(vl_recall_deadline_ms(&L, 1), VL_RECALL_DEADLINE_MS);
    CHECK_EQ_U(vl_recall_deadline_ms(&L, 7), VL_RECALL_DEADLINE_MS);
    CHECK_EQ_U(vl_recall_deadline_ms(&L, VL_NONE), VL_RECALL_DEADLINE_MS);
    CHECK_EQ_U(VL_RECALL_DEADLINE_MS, 2000);
    /* R6: the hold bound; 0 still gets one last try. */
    CHECK_EQ_U(vl_hold_ms(&L, 0), 1000);
    CHECK_EQ_U(vl_hold_ms(&L, 1), 1);
    CHECK_EQ_U(vl_hold_ms(&L, 7), 1);

    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_stage_register(&L, 2, 1, false, &fx));
    uint32_t st;
    OP(&L, 0, vl_stage_register_adhoc(&L, 3, 0, 0, 1, &st));
    OP(&L, 0, vl_expert_request(&L, 1, 0, 0, &fx));
    OP(&L, 0, vl_expert_request(&L, 2, 1, 4 * MiB, &fx));
    uint32_t loans = L.stage[0].loan_chunks;
    CHECK(loans > 0, "client 1 borrowed");

    /* The policy is the stage's: kill, or only no new loans. */
    struct vl_client_view cv;
    CHECK_EQ_U(vl_recall_missed(&L, 1, 0), VL_MISSED_KILL);
    REQUIRE(vl_client_view(&L, 1, &cv), "client 1");
    CHECK(cv.delinquent, "client 1 delinquent");
    CHECK_EQ_U(cv.missed_recalls, 1);
    CHECK(vl_check(&L) == 0, "%s", vl_why(&L));
    /* Client 2 still borrows until it misses one. */
    OP(&L, 0, vl_expert_request(&L, 2, 1, 4 * MiB, &fx));
    CHECK_EQ_U(vl_recall_missed(&L, 2, 1), VL_MISSED_DENY_LOANS);
    CHECK_EQ_U(vl_recall_missed(&L, 2, 7), VL_MISSED_DENY_LOANS); /* unknown */
    REQUIRE(vl_client_view(&L, 2, &cv), "client 2");
    CHECK(cv.delinquent, "client 2 delinquent");
    CHECK_EQ_U(cv.missed_recalls, 2);
    CHECK_EQ_U(vl_recall_missed(&L, 3, st), VL_MISSED_DENY_LOANS); /* ad-hoc */
    /* An unknown client: the policy still answers, nothing else changes. */
    CHECK_EQ_U(vl_recall_missed(&L, 99, 0), VL_MISSED_KILL);
    CHECK(!vl_client_view(&L, 99, &cv), "no client 99");
    CHECK(vl_check(&L) == 0, "%s", vl_why(&L));

    /* Delinquent: no new loans, but what it holds stays its own. */
    REFUSED(&L, 1, -EPERM, "client 1 missed a recall deadline: no new loans",
            vl_expert_request(&L, 1, 0, 0, &fx));
    REFUSED(&L, 2, -EPERM, "client 2 missed a recall deadline: no new loans",
            vl_expert_request(&L, 2, 1, 0, &fx));
    CHECK_EQ_U(L.stage[0].loan_chunks, loans);
    /* Its trimmed KV is released, not lent (the reserve took some of its
     * loans back into KV). */
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 30000, 0, NULL, &fx));
    loans = L.stage[0].loan_chunks;
    vl_fx_clear(&fx);
    OP(&L, 0, vl_kv_trim(&L, 1, 0, 0, &fx));
    CHECK_EQ_U(fx_count(VL_FX_MOVE, VL_NONE), 0);
    CHECK(fx_count(VL_FX_UNMAP, 1) > 0, "trimmed KV released");
    CHECK_EQ_U(L.stage[0].loan_chunks, loans);
    vl_fini(&L);
}

/* ---- R1: the views agree with the ledger (also R11, R13, R14) ------------- */

struct region_walk {
    struct vl_ledger *L;
    size_t n;
};

static void walk_region(void *ud, const struct vl_region_view *v)
{
    struct region_walk *w = ud;
    struct vl_region *r = vli_region_find(w->L, v->id);
    w->n++;
    REQUIRE(r, "view of region %u, which does not exist", v->id);
    CHECK_EQ_U(v->client, r->client);
    CHECK_EQ_U(v->stage, r->stage);
    CHECK_EQ_U(v->device, r->device);
    CHECK_EQ_U(v->kind, r->kind);
    CHECK_EQ_U(v->base, r->base);
    CHECK_EQ_U(v->lane_stride, r->lane_stride);
    CHECK_EQ_U(v->va_bytes, r->va_bytes);
    CHECK_EQ_U(v->chunk_bytes, vli_dev_get(w->L, r->device)->cfg.chunk_bytes);
    CHECK_EQ_U(v->lanes, r->lanes);
    CHECK_EQ_U(v->stride_slots, r->stride_slots);
    CHECK_EQ_U(v->used, r->used);
    CHECK(memcmp(v->lane_slots, r->lane_slots, r->lanes * sizeof(uint32_t)) == 0,
          "region %u: lane slots differ", v->id);
    CHECK_EQ_U(v->base % GiB, 0); /* vl_new's region_align */
}

struct client_walk {
    struct vl_ledger *L;
    size_t n;
};

/* Recounts what the client holds from the chunks, regions and stages. */
static void walk_client(void *ud, const struct vl_client_view *v)
{
    struct client_walk *w = ud;
    struct vl_ledger *L = w->L;
    struct vl_client *c = vli_client_find(L, v->id);
    w->n++;
    REQUIRE(c, "view of client %u, which does not exist", v->id);
    uint32_t chunks = 0, regions = 0, stages = 0;
    uint64_t held = 0, quarantined = 0;
    for (uint32_t di = 0; di < L->ndev; di++)
        for (uint32_t k = 0; k < L->dev[di].nchunks; k++) {
            const struct vl_chunk *ch = &L->dev[di].chunks[k];
            if (ch->holder != v->id)
                continue;
            chunks++;
            *(ch->state == VL_QUARANTINED ? &quarantined : &held) +=
                L->dev[di].cfg.chunk_bytes;
        }
    for (size_t i = 0; i < L->nregion; i++)
        regions += L->region[i]->client == v->id &&
                   !L->stage[L->region[i]->stage].configured;
    for (uint32_t i = 0; i < L->nstage; i++)
        stages += L->stage[i].used && L->stage[i].owner == v->id;
    CHECK_EQ_U(v->gone, c->gone);
    CHECK_EQ_U(v->resumed, c->resumed);
    CHECK_EQ_U(v->delinquent, c->delinquent);
    CHECK_EQ_U(v->missed_recalls, c->missed_recalls);
    CHECK_EQ_U(v->chunks, chunks);
    CHECK_EQ_U(v->held_bytes, held);
    CHECK_EQ_U(v->quarantined_bytes, quarantined);
    CHECK_EQ_U(v->regions, regions);
    CHECK_EQ_U(v->stages, stages);
    uint32_t ids[VL_MAX_STAGES];
    uint32_t n = vl_client_stages(L, v->id, ids, VL_MAX_STAGES);
    CHECK_EQ_U(n, stages);
    for (uint32_t i = 0; i < n; i++) {
        CHECK_EQ_U(L->stage[ids[i]].owner, v->id);
        CHECK(i == 0 || ids[i - 1] < ids[i], "stages not ascending");
    }
    CHECK_EQ_U(vl_client_stages(L, v->id, ids, 1), stages ? 1 : 0);
}

static void check_views(struct vl_ledger *L)
{
    CHECK_EQ_U(vl_device_count(L), L->ndev);
    for (uint32_t i = 0; i < L->ndev; i++) {
        const struct vl_device *d = &L->dev[i];
        struct vl_device_view v;
        vl_device_view(L, i, &v);
        CHECK_EQ_U(v.id, d->cfg.id);
        CHECK_EQ_U(v.chunk_bytes, d->cfg.chunk_bytes);
        CHECK_EQ_U(v.chunks, d->nchunks);
        CHECK_EQ_U(v.capacity, vl_capacity(d));
        CHECK_EQ_U(v.free, vli_dev_free(d));
        CHECK_EQ_U(v.fixed, d->fixed);
        CHECK_EQ_U(v.kv, d->kv);
        CHECK_EQ_U(v.loaned, d->loaned);
        CHECK_EQ_U(v.recalling, d->count[VL_RECALLING]);
        CHECK_EQ_U(v.quarantined, d->count[VL_QUARANTINED]);
        CHECK_EQ_U(v.reserved, d->reserved);
        CHECK_EQ_U(v.lend_unreserved, d->cfg.lend_unreserved);
        CHECK_EQ_U(vl_device_index(L, d->cfg.id), i);
    }
    struct vl_device_view dv = {.id = 12345};
    vl_device_view(L, L->ndev, &dv);
    CHECK_EQ_U(dv.id, 12345); /* out left alone */
    CHECK(vl_device_index(L, 777) == -ENODEV, "device 777");

    uint32_t nused = 0, seen = 0;
    for (uint32_t i = 0; i < L->nstage; i++)
        nused += L->stage[i].used;
    for (uint32_t id = vl_stage_next(L, 0); id != VL_NONE;
         id = vl_stage_next(L, id + 1)) {
        const struct vl_stage *s = &L->stage[id];
        struct vl_stage_view v;
        seen++;
        REQUIRE(s->used && vl_stage_view(L, id, &v), "stage %u", id);
        CHECK_EQ_U(v.id, id);
        CHECK_EQ_U(v.configured, s->configured);
        CHECK(v.cfg == &s->cfg, "stage %u: its configuration", id);
        CHECK_EQ_U(v.owner, s->owner);
        CHECK_EQ_U(v.keep_window, s->keep_window);
        const struct vl_device *d = vli_dev_get(L, s->cfg.device);
        CHECK_EQ_U(v.chunk_bytes, d ? d->cfg.chunk_bytes : 0);
        CHECK_EQ_U(v.kv_chunks, s->kv_chunks);
        CHECK_EQ_U(v.window_chunks, s->window_chunks);
        CHECK_EQ_U(v.loan_chunks, s->loan_chunks);
        CHECK_EQ_U(v.recalling, s->recalling);
        CHECK_EQ_U(v.fixed_chunks, s->fixed_chunks);
        CHECK_EQ_U(v.fixed_reserved, s->fixed_reserved);
        CHECK_EQ_U(v.headroom_chunks, s->headroom_chunks);
        CHECK_EQ_U(v.kv_needed_bytes, s->kv_needed_bytes);
        CHECK_EQ_U(v.residency_version, s->residency_version);
        CHECK_EQ_U(v.expert_slots_backed, vl_expert_slots_backed(L, id));
        CHECK_EQ_U(v.kv_region, s->kv_region);
        CHECK_EQ_U(v.expert_region, s->expert_region);
        for (uint32_t f = 0; f < VL_MAX_FIXED; f++)
            CHECK_EQ_U(v.fixed_region[f], s->fixed_region[f]);
        struct region_walk rw = {L, 0};
        size_t mine = 0;
        for (size_t i = 0; i < L->nregion; i++)
            mine += L->region[i]->stage == id;
        vl_each_region(L, id, walk_region, &rw);
        CHECK_EQ_U(rw.n, mine);
    }
    CHECK_EQ_U(seen, nused);
    struct vl_stage_view sv;
    CHECK(!vl_stage_view(L, VL_MAX_STAGES, &sv), "stage beyond the table");

    struct region_walk rw = {L, 0};
    vl_each_region(L, VL_NONE, walk_region, &rw);
    CHECK_EQ_U(rw.n, L->nregion);
    struct vl_region_view rv;
    CHECK(!vl_region_view(L, 0, &rv), "region 0");
    for (size_t i = 0; i < L->nregion; i++)
        CHECK(vl_region_view(L, L->region[i]->id, &rv) &&
                  rv.id == L->region[i]->id,
              "region %u", L->region[i]->id);

    struct client_walk cw = {L, 0};
    vl_each_client(L, walk_client, &cw);
    CHECK_EQ_U(cw.n, L->nclient);

    for (uint32_t di = 0; di < L->ndev; di++)
        for (uint32_t k = 0; k < L->dev[di].nchunks; k++) {
            const struct vl_chunk *c = &L->dev[di].chunks[k];
            struct vl_chunk_view v;
            REQUIRE(vl_chunk_view(L, vl_chunk_id(di, k), &v), "chunk");
            CHECK(v.state == c->state && v.holder == c->holder &&
                      v.region == c->region && v.slot == c->slot,
                  "device %u chunk %u: view differs", di, k);
        }
    struct vl_chunk_view chv;
    CHECK(!vl_chunk_view(L, vl_chunk_id(L->ndev, 0), &chv), "no such device");
    CHECK(!vl_chunk_view(L, vl_chunk_id(0, L->dev[0].nchunks), &chv),
          "no such chunk");
}

static unsigned observed;

static void count_chunk(void *ctx, uint32_t dev, uint32_t idx, uint32_t holder,
                        uint16_t stage, uint8_t cat)
{
    (void)ctx, (void)dev, (void)idx, (void)holder, (void)stage, (void)cat;
    observed++;
}

static void test_r01_views(void)
{
    /* Device ids differ from indexes, and so do chunk sizes. */
    struct vl_device_cfg devs[2] = {dev_cfg(0, 16 * GiB, false),
                                    dev_cfg(5, 8 * GiB, true)};
    devs[1].chunk_bytes = 4 * MiB;
    struct vl_ledger *L = (struct vl_ledger *)&fx; /* must stay untouched */
    char why[128] = "";
    CHECK(vl_new(devs, 0, VA_BASE, VA_SIZE, GiB, &L, why, sizeof(why)) == -EINVAL,
          "no devices");
    CHECK(strcmp(why, "between 1 and 64 devices") == 0, "why: %s", why);
    struct vl_device_cfg twice[2] = {devs[0], devs[0]};
    CHECK(vl_new(twice, 2, VA_BASE, VA_SIZE, GiB, &L, why, sizeof(why)) == -EEXIST,
          "a device twice");
    CHECK(strcmp(why, "device 0 defined twice") == 0, "why: %s", why);
    CHECK(L == (struct vl_ledger *)&fx, "out written on failure");
    vl_free(NULL);
    REQUIRE(vl_new(devs, 2, VA_BASE, VA_SIZE, GiB, &L, why, sizeof(why)) == 0,
            "%s", why);
    CHECK_EQ_U(L->limits.stages_per_client, UINT32_MAX);

    /* The seed's split, stage 1 on 4 MiB chunks with a drafter's KV. */
    struct vl_stage_cfg s0 = stage_cfg(0, 0, 0, 31, 16);
    struct vl_stage_cfg s1 = stage_cfg(1, 5, 32, 47, 10);
    s1.nfixed = 1;
    s1.fixed[0] = (struct vl_fixed_cfg){.name = "draft", .kind = VL_DRAFT_KV,
                                        .bytes = 40 * MiB};
    OP(L, 0, vl_stage_configure(L, &s0));
    OP(L, 0, vl_stage_configure(L, &s1));
    check_views(L);
    for (uint32_t c = 1; c <= 3; c++)
        OP(L, 0, vl_client_add(L, c));
    vl_set_observer(L, &(struct vl_observer){.chunk = count_chunk});
    OP(L, 0, vl_stage_register(L, 1, 0, false, &fx));
    CHECK(observed > 0, "the observer saw the grants");
    vl_set_observer(L, NULL);
    unsigned before = observed;
    OP(L, 0, vl_stage_register(L, 2, 1, true, &fx));
    CHECK_EQ_U(observed, before); /* removed */
    struct vl_region_view draft;
    REQUIRE(vl_region_view(L, L->stage[1].fixed_region[0], &draft), "draft");
    OP(L, 0, vl_region_grow(L, 2, draft.id, 10, &fx));
    OP(L, 0, vl_expert_request(L, 1, 0, 0, &fx));
    /* Not every loan there is: client 3 needs free memory on device 5. */
    OP(L, 0, vl_expert_request(L, 2, 1, 400 * MiB, &fx));
    OP(L, 0, vl_kv_reserve(L, 1, 0, 65536, 1024, NULL, &fx));
    /* Client 2 also holds 2 MiB chunks, in an ad-hoc region on device 0;
     * client 3 4 MiB ones on device 5. */
    uint32_t a2, a3, r2, r3;
    OP(L, 0, vl_stage_register_adhoc(L, 2, 0, 0, 3, &a2));
    OP(L, 0, vl_region_create(L, 2, a2, VL_EXPERT, 8 * MiB, 2, &r2));
    OP(L, 0, vl_region_grow(L, 2, r2, 3, &fx));
    OP(L, 0, vl_stage_register_adhoc(L, 3, 5, 0, 3, &a3));
    OP(L, 0, vl_region_create(L, 3, a3, VL_FIXED, 8 * MiB, 1, &r3));
    OP(L, 0, vl_region_grow(L, 3, r3, 2, &fx));
    vl_fx_clear(&fx);
    OP(L, 0, vl_kv_trim(L, 1, 0, 0, &fx));
    check_views(L);

    struct vl_stage_view v1;
    struct vl_client_view cv;
    REQUIRE(vl_stage_view(L, 1, &v1) && vl_client_view(L, 2, &cv), "views");
    CHECK_EQ_U(v1.chunk_bytes, 4 * MiB);
    CHECK_EQ_U(v1.fixed_chunks, 10);
    CHECK_EQ_U(cv.held_bytes,
               (uint64_t)(v1.kv_chunks + v1.loan_chunks + v1.fixed_chunks) *
                       4 * MiB + 6 * 2 * MiB);
    CHECK_EQ_U(cv.regions, 1);
    CHECK_EQ_U(cv.stages, 2);
    uint32_t ids[4];
    CHECK_EQ_U(vl_client_stages(L, 2, ids, 4), 2);
    CHECK(ids[0] == 1 && ids[1] == a2, "client 2 owns 1 and %u", a2);

    /* Client 3 goes: its chunks quarantined, its stage id held (R11, R13). */
    OP(L, 0, vl_client_disconnect(L, 3, &fx));
    check_views(L);
    REQUIRE(vl_client_view(L, 3, &cv), "client 3");
    CHECK(cv.gone, "client 3 gone");
    CHECK_EQ_U(cv.held_bytes, 0);
    CHECK_EQ_U(cv.quarantined_bytes, 2 * 4 * MiB);
    CHECK_EQ_U(cv.regions, 0);
    CHECK_EQ_U(cv.stages, 0);
    CHECK_EQ_U(vl_stage_next(L, a3), a3);
    OP(L, 0, vl_client_reap(L, 3, &fx));
    check_views(L);
    CHECK(!vl_client_view(L, 3, &cv), "client 3 forgotten");
    CHECK(vl_stage_next(L, a3) != a3, "stage %u free again", a3);
    vl_free(L);
}


/* ---- R17: weight sets ------------------------------------------------------ */

static const uint8_t key_a[VL_WSET_KEY] = {0xa1, 0xa2, 0xa3};
static const uint8_t key_b[VL_WSET_KEY] = {0xb1, 0xb2, 0xb3};

static struct vl_wset_req wreq(const char *name, const uint8_t *key,
                               uint64_t bytes)
{
    return (struct vl_wset_req){.name = name, .key = key, .device = 0,
                                .bytes = bytes, .alloc_bytes = 64 * MiB};
}

static uint32_t wdrops(uint32_t set)
{
    uint32_t n = 0;
    for (size_t i = 0; i < fx.n; i++)
        n += fx.v[i].kind == VL_FX_WSET_DROP && fx.v[i].set == set;
    return n;
}

/* Writer, seal, readers; another key; a writer's close and its crash; the
 * device's figures all along. */
static void test_r17_weights_share(void)
{
    /* 1 GiB = 512 chunks; stage 0 reserves 66 + 16 (fixed 32 MiB). */
    struct vl_device_cfg d = dev_cfg(0, GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    L.region_align = GiB;
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 1);
    a.fixed[0] = (struct vl_fixed_cfg){.name = "w", .kind = VL_FIXED,
                                       .bytes = 32 * MiB};
    a.nfixed = 1;
    OP(&L, 0, vl_stage_configure(&L, &a));
    for (uint32_t c = 1; c <= 4; c++)
        OP(&L, 0, vl_client_add(&L, c));
    uint32_t set = 0, again = 0;
    bool writer = false;
    struct vl_wset_req r = wreq("qwen3/stage0", key_a, 100 * MiB);
    /* 100 MiB in 64 MiB allocations: 2 of them, 128 MiB, 64 chunks. */
    OP(&L, 0, vl_weights_open(&L, 1, &r, &set, &writer, &fx));
    CHECK(set != 0 && writer, "client 1 is not the writer of set %u", set);
    struct vl_wset_view v;
    REQUIRE(vl_wset_view(&L, set, &v), "no view");
    CHECK_EQ_U(v.nalloc, 2);
    CHECK_EQ_U(v.units, 64);
    CHECK_EQ_U(v.base % GiB, 0);
    CHECK_EQ_U(v.va_bytes, GiB);
    CHECK(!v.sealed && v.writer == 1 && v.users == 1, "writing");
    struct vl_device_view dv;
    vl_device_view(&L, 0, &dv);
    CHECK_EQ_U(dv.weights, 64);
    CHECK_EQ_U(dv.free, 512 - 64);
    CHECK_EQ_U(vl_wset_find(&L, "qwen3/stage0"), set);
    /* While it is written: others wait, its writer gets it again. */
    REFUSED(&L, 2, -EAGAIN, "weight set 'qwen3/stage0' is being written by "
            "client 1", vl_weights_open(&L, 2, &r, &again, &writer, &fx));
    OP(&L, 0, vl_weights_open(&L, 1, &r, &again, &writer, &fx));
    CHECK(again == set && writer, "the writer's second open");
    /* Only its writer seals it, once. */
    OP(&L, -ENOENT, vl_weights_seal(&L, 2, set, 1000));
    OP(&L, 0, vl_weights_seal(&L, 1, set, 1000));
    OP(&L, -EALREADY, vl_weights_seal(&L, 1, set, 1001));
    /* Readers share the one copy: nothing more is charged. */
    OP(&L, 0, vl_weights_open(&L, 2, &r, &again, &writer, &fx));
    CHECK(again == set && !writer, "client 2 maps it");
    OP(&L, 0, vl_weights_open(&L, 3, &r, &again, &writer, &fx));
    vl_device_view(&L, 0, &dv);
    CHECK_EQ_U(dv.weights, 64);
    vl_wset_view(&L, set, &v);
    CHECK(v.sealed && v.writer == 0 && v.users == 3, "sealed, 3 users");
    /* Another layout is never mapped. */
    struct vl_wset_req other = wreq("qwen3/stage0", key_b, 100 * MiB);
    OP(&L, -ESTALE, vl_weights_open(&L, 4, &other, &again, &writer, &fx));
    CHECK(strstr(vl_why(&L), "100 MiB on device 0, sealed") != NULL,
          "the refusal does not name the set's size: %s", vl_why(&L));
    other = wreq("qwen3/stage0", key_a, 99 * MiB);
    OP(&L, -ESTALE, vl_weights_open(&L, 4, &other, &again, &writer, &fx));
    /* Bad requests. */
    struct vl_wset_req bad = wreq("has space", key_a, MiB);
    OP(&L, -EINVAL, vl_weights_open(&L, 4, &bad, &again, &writer, &fx));
    bad = wreq("", key_a, MiB);
    OP(&L, -EINVAL, vl_weights_open(&L, 4, &bad, &again, &writer, &fx));
    bad = wreq("huge", key_a, 2 * GiB);
    OP(&L, -E2BIG, vl_weights_open(&L, 4, &bad, &again, &writer, &fx));
    /* Nobody maps it: cached, still charged; an admin may drop it only
     * then. */
    OP(&L, 0, vl_weights_close(&L, 1, set, &fx));
    OP(&L, 0, vl_weights_close(&L, 2, set, &fx));
    OP(&L, -EBUSY, vl_weights_drop(&L, set, &fx));
    OP(&L, -ENOENT, vl_weights_close(&L, 2, set, &fx));
    OP(&L, 0, vl_weights_close(&L, 3, set, &fx));
    vl_device_view(&L, 0, &dv);
    CHECK_EQ_U(dv.weights_cached, 64);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_weights_drop(&L, set, &fx));
    CHECK_EQ_U(wdrops(set), 1);
    vl_device_view(&L, 0, &dv);
    CHECK_EQ_U(dv.weights, 0);
    CHECK_EQ_U(dv.free, 512);

    /* A writer that closes before sealing leaves nothing. */
    struct vl_wset_req b = wreq("b", key_b, 64 * MiB);
    OP(&L, 0, vl_weights_open(&L, 1, &b, &set, &writer, &fx));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_weights_close(&L, 1, set, &fx));
    CHECK_EQ_U(wdrops(set), 1);
    CHECK_EQ_U(vl_wset_find(&L, "b"), 0);
    /* One that crashes: its process may still write until the reap. */
    OP(&L, 0, vl_weights_open(&L, 1, &b, &set, &writer, &fx));
    OP(&L, 0, vl_client_disconnect(&L, 1, &fx));
    CHECK_EQ_U(vl_wset_find(&L, "b"), set);
    REFUSED(&L, 2, -EAGAIN, "weight set 'b' is being written by client 1",
            vl_weights_open(&L, 2, &b, &again, &writer, &fx));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_client_reap(&L, 1, &fx));
    CHECK_EQ_U(wdrops(set), 1);
    OP(&L, 0, vl_weights_open(&L, 2, &b, &again, &writer, &fx));
    CHECK(writer && again != set, "client 2 writes a new set");
    /* A reader that is gone maps it until its process is reaped. */
    OP(&L, 0, vl_weights_seal(&L, 2, again, 5));
    OP(&L, 0, vl_weights_open(&L, 3, &b, &set, &writer, &fx));
    OP(&L, 0, vl_weights_close(&L, 2, again, &fx));
    OP(&L, 0, vl_client_disconnect(&L, 3, &fx));
    OP(&L, -EBUSY, vl_weights_drop(&L, again, &fx));
    OP(&L, 0, vl_client_reap(&L, 3, &fx));
    OP(&L, 0, vl_weights_drop(&L, again, &fx));
    vl_fini(&L);
}

/* Sets take only memory no promise needs; cached ones are evicted least
 * recently used first for a live engine's grant or another set, never a
 * kept one nor one that is mapped. */
static void test_r17_weights_evict(void)
{
    struct vl_device_cfg d = dev_cfg(0, GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    /* Stage 0's window (66) and fixed (16) are promised: 430 chunks are
     * not. */
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 1);
    a.fixed[0] = (struct vl_fixed_cfg){.name = "w", .kind = VL_FIXED,
                                       .bytes = 32 * MiB};
    a.nfixed = 1;
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_client_add_tenant(&L, 1, 1000, false));
    OP(&L, 0, vl_client_add(&L, 9)); /* an admin (exempt) */
    uint32_t s1, s2, s3, s4, sk;
    bool w;
    struct vl_wset_req big = wreq("too-big", key_a, 431 * 2 * MiB);
    big.alloc_bytes = 2 * MiB;
    OP(&L, -ENOSPC, vl_weights_open(&L, 1, &big, &s1, &w, &fx));
    CHECK(strstr(vl_why(&L), "862 MiB asked, 860 MiB free") != NULL, "%s",
          vl_why(&L));
    /* Three sets of 128 MiB (64 chunks each), sealed and closed in order:
     * s1 least recently used. A kept one of 128 MiB (admins only). */
    struct vl_wset_req r1 = wreq("s1", key_a, 128 * MiB),
                       r2 = wreq("s2", key_a, 128 * MiB),
                       r3 = wreq("s3", key_a, 128 * MiB),
                       rk = wreq("kept", key_a, 128 * MiB);
    rk.keep = true;
    OP(&L, -EPERM, vl_weights_open(&L, 1, &rk, &sk, &w, &fx));
    OP(&L, 0, vl_weights_open(&L, 9, &rk, &sk, &w, &fx));
    OP(&L, 0, vl_weights_seal(&L, 9, sk, 1));
    OP(&L, 0, vl_weights_close(&L, 9, sk, &fx));
    OP(&L, 0, vl_weights_open(&L, 1, &r1, &s1, &w, &fx));
    OP(&L, 0, vl_weights_seal(&L, 1, s1, 1));
    OP(&L, 0, vl_weights_open(&L, 1, &r2, &s2, &w, &fx));
    OP(&L, 0, vl_weights_seal(&L, 1, s2, 1));
    OP(&L, 0, vl_weights_open(&L, 1, &r3, &s3, &w, &fx));
    OP(&L, 0, vl_weights_seal(&L, 1, s3, 1));
    OP(&L, 0, vl_weights_close(&L, 1, s1, &fx));
    OP(&L, 0, vl_weights_close(&L, 1, s2, &fx));
    /* s3 stays mapped. Free and unpromised: 430 - 4 x 64 = 174. */
    struct vl_device_view dv;
    vl_device_view(&L, 0, &dv);
    CHECK_EQ_U(dv.weights, 256);
    CHECK_EQ_U(dv.weights_cached, 192); /* s1, s2 and the kept one */
    /* A stage's promise is never taken: the stage registers and grows to
     * its whole window and fixed reservation with every set in place. */
    OP(&L, 0, vl_client_add(&L, 2));
    OP(&L, 0, vl_stage_register(&L, 2, 0, false, &fx));
    OP(&L, 0, vl_kv_reserve(&L, 2, 0, 261000, 1024, NULL, &fx));
    OP(&L, 0, vl_region_grow(&L, 2, L.stage[0].fixed_region[0], 16, &fx));
    CHECK_EQ_U(vl_wset_find(&L, "s1"), s1);
    /* A live engine's ad-hoc grant of 200 chunks: s1 goes (LRU), which is
     * enough: s2 stays. */
    uint32_t st, rg;
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 0, 0, 1, &st));
    OP(&L, 0, vl_region_create(&L, 1, st, VL_FIXED, 800 * MiB, 1, &rg));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_region_grow(&L, 1, rg, 200, &fx));
    CHECK_EQ_U(wdrops(s1), 1);
    CHECK_EQ_U(wdrops(s2), 0);
    CHECK_EQ_U(vl_wset_find(&L, "s1"), 0);
    CHECK_EQ_U(vl_wset_find(&L, "s2"), s2);
    /* Another set of 64 chunks: s2 goes too. */
    struct vl_wset_req r4 = wreq("s4", key_b, 128 * MiB);
    vl_fx_clear(&fx);
    OP(&L, 0, vl_weights_open(&L, 1, &r4, &s4, &w, &fx));
    CHECK_EQ_U(wdrops(s2), 1);
    /* 38 chunks are left. Past what eviction could give, nothing is
     * evicted: the grow fails and s4 (being written), s3 (mapped) and the
     * kept set stay. */
    vl_fx_clear(&fx);
    OP(&L, -ENOSPC, vl_region_grow(&L, 1, rg, 39, &fx));
    CHECK_EQ_U(fx.n, 0);
    CHECK(vl_wset_find(&L, "kept") == sk && vl_wset_find(&L, "s3") == s3,
          "a kept or mapped set was evicted");
    vl_fini(&L);
}

/* The tenant's limit; a resume keeps what the process maps; a restarted
 * ledger takes sets back. */
static void test_r17_weights_restart(void)
{
    struct vl_device_cfg d = dev_cfg(0, GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    vl_set_limits(&L, &(struct vl_limits){.chunks_per_client = UINT32_MAX,
                                          .regions_per_client = UINT32_MAX,
                                          .stages_per_client = UINT32_MAX,
                                          .wsets_per_tenant = 2});
    OP(&L, 0, vl_client_add_tenant(&L, 1, 1000, false));
    OP(&L, 0, vl_client_add_tenant(&L, 2, 1000, false));
    uint32_t a, b, c;
    bool w;
    struct vl_wset_req ra = wreq("a", key_a, 64 * MiB),
                       rb = wreq("b", key_a, 64 * MiB),
                       rc = wreq("c", key_a, 64 * MiB);
    OP(&L, 0, vl_weights_open(&L, 1, &ra, &a, &w, &fx));
    OP(&L, 0, vl_weights_seal(&L, 1, a, 7));
    OP(&L, 0, vl_weights_open(&L, 2, &rb, &b, &w, &fx));
    REFUSED(&L, 2, -EDQUOT, "uid 1000's clients made 2 weight sets, their "
            "limit (limits.weight_sets_per_user)",
            vl_weights_open(&L, 2, &rc, &c, &w, &fx));
    OP(&L, 0, vl_weights_seal(&L, 2, b, 8));
    /* Client 2 maps a too; its process comes back as client 3 and still
     * maps both. */
    OP(&L, 0, vl_weights_open(&L, 2, &ra, &a, &w, &fx));
    OP(&L, 0, vl_client_disconnect(&L, 2, &fx));
    OP(&L, 0, vl_client_add_tenant(&L, 3, 1000, false));
    struct vl_resume rs = {.from = 2};
    OP(&L, 0, vl_client_resume(&L, 3, &rs, &fx));
    struct vl_client_view cv;
    REQUIRE(vl_client_view(&L, 3, &cv), "client 3");
    CHECK_EQ_U(cv.wsets, 2);
    OP(&L, -EBUSY, vl_weights_drop(&L, b, &fx));
    OP(&L, 0, vl_weights_close(&L, 3, b, &fx));
    OP(&L, 0, vl_weights_close(&L, 3, a, &fx));
    /* Set a, sealed and mapped by a gone client 5, into a new ledger. */
    struct vl_wset_view va;
    REQUIRE(vl_wset_view(&L, a, &va), "view of a");
    struct vl_ledger R;
    REQUIRE(vl_init(&R, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&R));
    uint32_t gone[1] = {5};
    OP(&R, 0, vl_restore(&R, gone, 1, NULL, 0, NULL, 0, NULL));
    uint32_t users[1] = {5};
    va.users = 1;
    va.user = users;
    OP(&R, 0, vl_weights_restore(&R, &va));
    OP(&R, -EINVAL, vl_weights_restore(&R, &va)); /* twice */
    struct vl_wset_view vb = va;
    vb.id = 99;
    vb.name = "other";
    vb.units = 3; /* not what its allocations take */
    OP(&R, -EINVAL, vl_weights_restore(&R, &vb));
    struct vl_device_view dv;
    vl_device_view(&R, 0, &dv);
    CHECK_EQ_U(dv.weights, 32);
    OP(&R, -EBUSY, vl_weights_drop(&R, a, &fx));
    OP(&R, 0, vl_client_reap(&R, 5, &fx));
    /* A new set gets an id the restored one does not have. */
    OP(&R, 0, vl_client_add(&R, 6));
    OP(&R, 0, vl_weights_open(&R, 6, &rb, &b, &w, &fx));
    CHECK(b != a, "a new set took the restored one's id");
    OP(&R, 0, vl_weights_open(&R, 6, &ra, &c, &w, &fx));
    CHECK(c == a && !w, "the restored set is not shared");
    vl_fini(&R);
    vl_fini(&L);
}


/* A configured stage's fixed reservation that names a set: no region, the
 * set made in the stage's promised memory by its owner, never evicted,
 * taken back by a restarted ledger where it was. */
static void test_r17_weights_stage(void)
{
    struct vl_device_cfg d = dev_cfg(0, GiB, false);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 31, 1);
    a.fixed[0] = (struct vl_fixed_cfg){.name = "weights", .kind = VL_FIXED,
                                       .bytes = 100 * MiB, .set = 1};
    a.sets[0] = (struct vl_set_cfg){.name = "m/s0", .alloc = 64 * MiB};
    memcpy(a.sets[0].key, key_a, VL_WSET_KEY);
    a.sets[0].has_key = true;
    a.nfixed = 1;
    a.nsets = 1;
    OP(&L, 0, vl_stage_configure(&L, &a));
    /* 66 of window, 64 for the set (two allocations of 64 MiB). */
    CHECK_EQ_U(L.stage[0].fixed_reserved, 64);
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_client_add(&L, 2));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    CHECK_EQ_U(L.stage[0].fixed_region[0], 0);
    /* The rest of the device goes to another engine's ad-hoc memory. */
    uint32_t st, rg;
    OP(&L, 0, vl_stage_register_adhoc(&L, 2, 0, 0, 1, &st));
    OP(&L, 0, vl_region_create(&L, 2, st, VL_FIXED, GiB, 1, &rg));
    OP(&L, 0, vl_region_grow(&L, 2, rg, 512 - 66 - 64, &fx));
    OP(&L, -ENOSPC, vl_region_grow(&L, 2, rg, 1, &fx));
    /* Its owner opens the set: in the stage's own memory, in the
     * reservation's allocation size. */
    uint32_t set, other;
    bool w;
    struct vl_wset_req r = {.name = "m/s0", .key = key_a, .device = 0,
                            .bytes = 100 * MiB, .alloc_bytes = 8 * MiB};
    struct vl_wset_req big = r;
    big.bytes = 101 * MiB;
    OP(&L, -E2BIG, vl_weights_open(&L, 1, &big, &set, &w, &fx));
    struct vl_wset_req wrong = r;
    wrong.key = key_b; /* not the configured key */
    OP(&L, -ESTALE, vl_weights_open(&L, 1, &wrong, &set, &w, &fx));
    OP(&L, 0, vl_weights_open(&L, 1, &r, &set, &w, &fx));
    struct vl_wset_view v;
    REQUIRE(vl_wset_view(&L, set, &v), "view");
    CHECK(w && v.stage == 0 && v.fixed == 0 && v.alloc_bytes == 64 * MiB &&
              v.units == 64, "the stage's set: stage %u, alloc %llu, units %u",
          v.stage, (unsigned long long)v.alloc_bytes, v.units);
    CHECK_EQ_U(L.stage[0].set_chunks, 64);
    OP(&L, 0, vl_weights_seal(&L, 1, set, 1));
    OP(&L, 0, vl_weights_close(&L, 1, set, &fx));
    /* Cached, and never evicted: the ad-hoc engine still gets nothing. */
    vl_fx_clear(&fx);
    OP(&L, -ENOSPC, vl_region_grow(&L, 2, rg, 1, &fx));
    CHECK_EQ_U(wdrops(set), 0);
    /* Another client maps it as any set; a second open by the owner is the
     * same set. */
    OP(&L, 0, vl_weights_open(&L, 2, &r, &other, &w, &fx));
    CHECK(other == set && !w, "another client's open");
    OP(&L, 0, vl_weights_close(&L, 2, set, &fx));
    /* Into a restarted ledger, where it was. */
    REQUIRE(vl_wset_view(&L, set, &v), "view");
    struct vl_ledger R;
    REQUIRE(vl_init(&R, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&R));
    OP(&R, 0, vl_stage_configure(&R, &a));
    v.users = 0;
    OP(&R, 0, vl_weights_restore(&R, &v));
    CHECK_EQ_U(R.stage[0].set_chunks, 64);
    CHECK_EQ_U(R.stage[0].fixed_set[0], set);
    vl_fini(&R);
    /* Dropped: the stage's promise for it is back. */
    OP(&L, 0, vl_weights_drop(&L, set, &fx));
    CHECK_EQ_U(L.stage[0].set_chunks, 0);
    OP(&L, -ENOSPC, vl_region_grow(&L, 2, rg, 1, &fx));
    vl_fini(&L);
}

/* ---- R18: sleep and wake ---------------------------------------------------- */

static void test_r18_sleep_wake(void)
{
    /* 256 chunks; stage 0: 2 lanes of 66 chunks (initial 5 each) and 4
     * fixed; stage 1: a lender of one lane. */
    struct vl_device_cfg d = dev_cfg(0, 512 * MiB, true);
    struct vl_ledger L;
    REQUIRE(vl_init(&L, &d, 1, VA_BASE, VA_SIZE) == 0, "%s", vl_why(&L));
    struct vl_stage_cfg a = stage_cfg(0, 0, 0, 15, 2);
    a.fixed[0] = (struct vl_fixed_cfg){.name = "w", .kind = VL_FIXED,
                                       .bytes = 8 * MiB};
    a.nfixed = 1;
    struct vl_stage_cfg b = stage_cfg(1, 0, 16, 31, 1);
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_stage_configure(&L, &b));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_client_add(&L, 2));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, 100000, 0, NULL, &fx));
    uint32_t kv = L.stage[0].kv_chunks;
    CHECK_EQ_U(kv, 2 * 27); /* 106496 tokens x 528 B: 27 chunks a lane */
    OP(&L, 0, vl_region_grow(&L, 1, L.stage[0].fixed_region[0], 4, &fx));
    OP(&L, 0, vl_expert_request(&L, 1, 0, 3 * 2 * MiB, &fx));
    CHECK_EQ_U(L.stage[0].loan_chunks, 3);
    OP(&L, 0, vl_stage_register(&L, 2, 1, false, &fx));
    OP(&L, 0, vl_expert_request(&L, 2, 1, 0, &fx));
    uint32_t lent_awake = L.stage[1].loan_chunks;

    /* Sleep: every chunk back, whatever its state. */
    vl_fx_clear(&fx);
    uint64_t tokens = 0;
    uint32_t freed = 0;
    uint32_t free0 = L.dev[0].count[VL_FREE];
    OP(&L, 0, vl_stage_sleep(&L, 1, 0, 123, 0, &tokens, &freed, &fx));
    CHECK_EQ_U(freed, kv + 4 + 3);
    CHECK_EQ_U(fx_count(VL_FX_DROP, 1), freed);
    CHECK_EQ_U(fx_count(VL_FX_BUDGET, 1), 1); /* its loans went */
    CHECK_EQ_U(L.dev[0].count[VL_FREE], free0 + freed);
    CHECK_EQ_U(tokens, vl_kv_target_tokens(&a, 100000));
    CHECK(L.stage[0].asleep && L.stage[0].kv_chunks == 0 &&
          L.stage[0].loan_chunks == 0 && L.stage[0].fixed_chunks == 0,
          "stage 0 holds memory asleep");
    struct vl_stage_view sv;
    CHECK(vl_stage_view(&L, 0, &sv) && sv.asleep && sv.host_bytes == 123 &&
          sv.sleeps == 1, "the view does not show the sleep");
    /* Asleep: nothing moves its memory; no second sleep. */
    OP(&L, -EBUSY, vl_kv_reserve(&L, 1, 0, 100, 0, NULL, &fx));
    OP(&L, -EBUSY, vl_kv_trim(&L, 1, 0, 0, &fx));
    OP(&L, -EBUSY, vl_expert_request(&L, 1, 0, 0, &fx));
    OP(&L, -EBUSY, vl_region_grow(&L, 1, L.stage[0].fixed_region[0], 1, &fx));
    OP(&L, -EALREADY, vl_stage_sleep(&L, 1, 0, 0, 0, NULL, NULL, &fx));
    OP(&L, -ENOENT, vl_stage_sleep(&L, 2, 0, 0, 0, NULL, NULL, &fx));
    OP(&L, -ENOENT, vl_stage_wake(&L, 2, 0, NULL));

    /* R5: its window lends as an unregistered stage's (but its initial
     * window: 10 chunks, and its fixed reservation: 4, stay free). */
    vl_fx_clear(&fx);
    OP(&L, 0, vl_expert_request(&L, 2, 1, 0, &fx));
    CHECK(L.stage[1].loan_chunks > lent_awake, "the sleeping window lent "
          "nothing (%u loans, %u awake)", L.stage[1].loan_chunks, lent_awake);
    CHECK_EQ_U(L.dev[0].count[VL_FREE], 10 + 4);

    /* Wake: usable again, holding nothing; its KV comes back through a
     * reserve that recalls the lender's pool loans (R6). */
    OP(&L, 0, vl_stage_wake(&L, 1, 0, &tokens));
    CHECK_EQ_U(tokens, vl_kv_target_tokens(&a, 100000));
    OP(&L, -EALREADY, vl_stage_wake(&L, 1, 0, NULL));
    vl_fx_clear(&fx);
    OP(&L, VL_PENDING, vl_kv_reserve(&L, 1, 0, tokens, 0, NULL, &fx));
    CHECK(fx_count(VL_FX_UNMAP, 2) > 0, "no recall of the lender's loans");
    answer_unmaps(&L, 2);
    OP(&L, 0, vl_kv_reserve(&L, 1, 0, tokens, 0, NULL, &fx));
    CHECK_EQ_U(L.stage[0].kv_chunks, kv);
    OP(&L, 0, vl_region_grow(&L, 1, L.stage[0].fixed_region[0], 4, &fx));
    OP(&L, 0, vl_stage_woke(&L, 1, 0, 42));
    CHECK(vl_stage_view(&L, 0, &sv) && !sv.asleep && sv.wakes == 1 &&
          sv.wake_us == 42, "the view does not show the wake");

    /* Ad-hoc stages sleep too; a stage released asleep leaves nothing. */
    OP(&L, 0, vl_stage_release(&L, 2, 1, &fx));
    uint32_t h = 0, r = 0;
    OP(&L, 0, vl_stage_register_adhoc(&L, 1, 0, 0, 3, &h));
    OP(&L, 0, vl_region_create(&L, 1, h, VL_FIXED, 6 * MiB, 1, &r));
    OP(&L, 0, vl_region_grow(&L, 1, r, 3, &fx));
    vl_fx_clear(&fx);
    OP(&L, 0, vl_stage_sleep(&L, 1, h, 0, 0, &tokens, &freed, &fx));
    CHECK_EQ_U(freed, 3);
    CHECK_EQ_U(tokens, 0);
    OP(&L, -EBUSY, vl_region_grow(&L, 1, r, 1, &fx));
    uint32_t r2 = 0;
    OP(&L, -EBUSY, vl_region_create(&L, 1, h, VL_FIXED, 2 * MiB, 1, &r2));
    OP(&L, 0, vl_stage_wake(&L, 1, h, NULL));
    OP(&L, 0, vl_region_grow(&L, 1, r, 3, &fx));
    OP(&L, 0, vl_stage_sleep(&L, 1, 0, 0, 0, NULL, NULL, &fx));
    OP(&L, 0, vl_stage_release(&L, 1, 0, &fx));
    CHECK(!L.stage[0].asleep, "a released stage stays asleep");
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    CHECK(!L.stage[0].asleep && L.stage[0].sleeps == 0, "registered asleep");
    vl_fini(&L);
}

int main(void)
{
    test_r04_seed_replay();
    test_r03_target_tokens();
    test_r02_admission();
    test_r07_no_loan_safety();
    test_r08_keep_window();
    test_r05_headroom();
    test_r09_layer_claims();
    test_r10_foreign_chunk();
    test_r01_adhoc();
    test_r11_quarantine();
    test_r06_two_clients_recall();
    test_r08_pending_unmaps();
    test_r08_trim_keeps_pool_loans();
    test_r08_trim_needed_bytes();
    test_r01_address_window();
    test_r01_check_catches_corruption();
    test_r13_restart();
    test_r13_resume_hostile();
    test_r13_resume_unseen_moves();
    test_r14_quotas();
    test_r15_missed_recall();
    test_r16_tenant_quotas();
    test_r17_weights_share();
    test_r17_weights_evict();
    test_r17_weights_restart();
    test_r17_weights_stage();
    test_r18_sleep_wake();
    test_r01_views();
    vl_fx_free(&fx);
    return check_report("test_ledger");
}
