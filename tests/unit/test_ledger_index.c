/* SPDX-License-Identifier: Apache-2.0 */
/* The ledger's indices at scale: what makes a request cost what it changes
 * (issue 17) must keep every answer the same. vl_check() runs after every
 * operation and recounts each index:
 *  - clients found by id through a hash (R14: a chunk's holder), with
 *    clients added and reaped in any order;
 *  - a release's duplicates found by marks on the chunks (R11), which
 *    never outlive the operation, also when it fails;
 *  - an expert region's loaned prefix (the backed slots, R9) kept as loans
 *    come, are recalled from the top, and go;
 *  - the gone clients' count a tenant's limit reads (R16). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "daemon/ledger/internal.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static struct vl_fxlist fx;

#define OP(L, want, call)                                                      \
    do {                                                                       \
        int op_r_ = (call);                                                    \
        CHECK(op_r_ == (want), "%s returned %d, expected %d (%s)", #call,     \
              op_r_, (int)(want), vl_why(L));                                  \
        int op_c_ = vl_check(L);                                               \
        CHECK(op_c_ == 0, "vl_check after %s: %s", #call, vl_why(L));          \
        vl_fx_clear(&fx);                                                      \
    } while (0)

static struct vl_ledger L;

static void init(uint64_t gib)
{
    struct vl_device_cfg d = {.id = 0, .chunk_bytes = 2 * MiB,
                              .capacity_bytes = gib * GiB,
                              .lend_unreserved = true};
    REQUIRE(vl_init(&L, &d, 1, 1ull << 44, 1ull << 46) == 0, "init");
}

/* A client holding n chunks of an ad-hoc region; its region. */
static uint32_t holder(uint32_t id, uint32_t n)
{
    uint32_t st = 0, reg = 0;
    OP(&L, 0, vl_client_add(&L, id));
    OP(&L, 0, vl_stage_register_adhoc(&L, id, 0, 0, 1, &st));
    OP(&L, 0, vl_region_create(&L, id, st, VL_FIXED, (uint64_t)(n ? n : 1) * 2 * MiB,
                               1, &reg));
    if (n)
        OP(&L, 0, vl_region_grow(&L, id, reg, n, &fx));
    return reg;
}

/* R14: 300 clients come and go in a shuffled order; each one's holdings
 * are found by its id all along (vl_check recounts them). */
static void test_r14_client_index(void)
{
    init(16);
    enum { N = 300 };
    uint32_t ids[N];
    for (uint32_t i = 0; i < N; i++) {
        ids[i] = 1000 + i * 7919 % 65521;
        holder(ids[i], i % 3);
    }
    srand(17);
    for (uint32_t i = N - 1; i > 0; i--) {
        uint32_t j = (uint32_t)rand() % (i + 1), t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    for (uint32_t i = 0; i < N; i++) {
        if (i % 3 == 0) /* a newcomer between the goings */
            holder(100000 + i, 1);
        OP(&L, 0, vl_client_disconnect(&L, ids[i], &fx));
        OP(&L, 0, vl_client_reap(&L, ids[i], &fx));
        struct vl_client_view v;
        CHECK(!vl_client_view(&L, ids[i], &v), "client %u is still found",
              ids[i]);
    }
    for (uint32_t i = 0; i < N; i += 3) {
        struct vl_client_view v;
        CHECK(vl_client_view(&L, 100000 + i, &v) && v.chunks == 1,
              "client %u lost", 100000 + i);
    }
    OP(&L, -EEXIST, vl_client_add(&L, 100000));
    vl_fini(&L);
}

/* R11: a release that lists a chunk twice, or one not held, changes
 * nothing and leaves no mark; one without changes everything once. */
static void test_r11_release_duplicates(void)
{
    init(16);
    uint32_t reg = holder(1, 64);
    holder(2, 4);
    struct vl_region_view rv;
    REQUIRE(vl_region_view(&L, reg, &rv), "region");
    uint64_t ids[64];
    for (uint32_t i = 0; i < 64; i++)
        ids[i] = rv.slot_chunk[i];
    uint64_t twice[65];
    memcpy(twice, ids, sizeof(ids));
    twice[64] = ids[40];
    OP(&L, -EINVAL, vl_chunks_release(&L, 1, twice, 65, &fx));
    uint64_t other[3] = {ids[0], ids[1], vl_chunk_id(0, 70000)};
    OP(&L, -ENOENT, vl_chunks_release(&L, 1, other, 3, &fx));
    struct vl_client_view v;
    CHECK(vl_client_view(&L, 1, &v) && v.chunks == 64, "a refused release "
          "changed what client 1 holds: %u", v.chunks);
    OP(&L, 0, vl_chunks_release(&L, 1, ids, 64, &fx));
    CHECK(vl_client_view(&L, 1, &v) && v.chunks == 0, "released: %u held",
          v.chunks);
    vl_fini(&L);
}

/* The chunks fx tells client to unmap (a recall's, a trim's). */
static uint64_t *unmaps(uint32_t client, size_t *n)
{
    uint64_t *v = malloc((fx.n + 1) * sizeof(*v));
    *n = 0;
    for (size_t i = 0; v && i < fx.n; i++)
        if (fx.v[i].kind == VL_FX_UNMAP && fx.v[i].client == client)
            v[(*n)++] = fx.v[i].chunk;
    return v;
}

/* Gives back what the last call told client to unmap; how many. */
static size_t answer(uint32_t client)
{
    size_t n;
    uint64_t *ids = unmaps(client, &n);
    vl_fx_clear(&fx);
    if (n)
        OP(&L, 0, vl_chunks_release(&L, client, ids, n, &fx));
    free(ids);
    return n;
}

/* R9: a stage's backed expert slots follow its loans: lent, recalled from
 * the top by another stage's KV, released, lent again. */
static void test_r09_loaned_prefix(void)
{
    init(8);
    struct vl_stage_cfg a;
    memset(&a, 0, sizeof(a));
    a.last_layer = 15;
    a.lanes = 1;
    a.lane_bytes_per_token[0] = (uint32_t)(2 * GiB / 262144);
    a.native_context = 262144;
    a.initial_tokens = 16384;
    a.step_tokens = 8192;
    a.expert_slot_bytes = 2 * MiB;
    a.lend = true;
    a.hold_ms = 1000;
    a.recall_deadline_ms = 100;
    struct vl_stage_cfg b = a;
    b.id = 1;
    b.first_layer = 16;
    b.last_layer = 31;
    OP(&L, 0, vl_stage_configure(&L, &a));
    OP(&L, 0, vl_stage_configure(&L, &b));
    OP(&L, 0, vl_client_add(&L, 1));
    OP(&L, 0, vl_client_add(&L, 2));
    OP(&L, 0, vl_stage_register(&L, 1, 0, false, &fx));
    vl_fx_clear(&fx);
    int r = vl_expert_request(&L, 1, 0, 0, &fx);
    CHECK(r == 0 && vl_check(&L) == 0, "lend: %d %s", r, vl_why(&L));
    vl_fx_clear(&fx);
    uint32_t lent = vl_expert_slots_backed(&L, 0);
    CHECK(lent > 1000, "stage 0 backs %u slots", lent);
    /* Stage 1 registers at once (its initial window was not lent, R5);
     * its reserve recalls the rest of its window, from the top of stage
     * 0's region. */
    OP(&L, 0, vl_stage_register(&L, 2, 1, false, &fx));
    CHECK(vl_expert_slots_backed(&L, 0) == lent, "the registration took "
          "loans: %u backed of %u", vl_expert_slots_backed(&L, 0), lent);
    r = vl_kv_reserve(&L, 2, 1, 262000, 0, NULL, &fx);
    CHECK(r == VL_PENDING && vl_check(&L) == 0, "reserve: %d %s", r, vl_why(&L));
    uint32_t during = vl_expert_slots_backed(&L, 0);
    size_t m = answer(1);
    CHECK(m > 0 && during + m <= lent, "%u backed while %zu are recalled",
          during, m);
    CHECK(vl_expert_slots_backed(&L, 0) == during, "the release moved the "
          "backed slots: %u, %u", vl_expert_slots_backed(&L, 0), during);
    OP(&L, 0, vl_kv_reserve(&L, 2, 1, 262000, 0, NULL, &fx));
    /* Stage 1's client goes (its window unregistered again); stage 0
     * borrows it, from where its loans end. */
    OP(&L, 0, vl_client_disconnect(&L, 2, &fx));
    OP(&L, 0, vl_client_reap(&L, 2, &fx));
    r = vl_expert_request(&L, 1, 0, 0, &fx);
    CHECK(r == 0 && vl_check(&L) == 0, "lend again: %d %s", r, vl_why(&L));
    vl_fx_clear(&fx);
    CHECK(vl_expert_slots_backed(&L, 0) > during, "backed %u after lending "
          "again, %u before", vl_expert_slots_backed(&L, 0), during);
    vl_fini(&L);
}

/* R16: a tenant's gone clients count against its limit whether or not
 * others are gone too. */
static void test_r16_gone_count(void)
{
    init(8);
    vl_set_limits(&L, &(struct vl_limits){.chunks_per_client = UINT32_MAX,
                                          .regions_per_client = UINT32_MAX,
                                          .stages_per_client = UINT32_MAX,
                                          .gone_per_tenant = 2});
    for (uint32_t i = 1; i <= 2; i++) {
        OP(&L, 0, vl_client_add_tenant(&L, i, 7, false));
        OP(&L, 0, vl_client_admit(&L, i));
        OP(&L, 0, vl_client_disconnect(&L, i, &fx));
    }
    /* Counted at its first request for memory, not when it connects. */
    OP(&L, 0, vl_client_add_tenant(&L, 3, 7, false));
    OP(&L, -EDQUOT, vl_client_admit(&L, 3));
    OP(&L, 0, vl_client_add_tenant(&L, 4, 8, false)); /* another tenant */
    OP(&L, 0, vl_client_admit(&L, 4));
    /* A resume is not counted: the client comes back for one of them; and
     * a resumed gone client holds nothing, so it no longer counts. */
    OP(&L, 0, vl_client_add_tenant(&L, 5, 7, false));
    struct vl_resume rs = {.from = 2};
    OP(&L, 0, vl_client_resume(&L, 5, &rs, &fx));
    OP(&L, 0, vl_client_admit(&L, 5));
    OP(&L, 0, vl_client_admit(&L, 3));
    OP(&L, 0, vl_client_disconnect(&L, 3, &fx)); /* gone: 1 and 3 */
    OP(&L, 0, vl_client_add_tenant(&L, 6, 7, false));
    OP(&L, -EDQUOT, vl_client_admit(&L, 6));
    OP(&L, 0, vl_client_reap(&L, 1, &fx));
    OP(&L, 0, vl_client_admit(&L, 6));
    vl_fini(&L);
}

int main(void)
{
    test_r14_client_index();
    test_r11_release_duplicates();
    test_r09_loaned_prefix();
    test_r16_gone_count();
    vl_fx_free(&fx);
    return check_report("test_ledger_index");
}
