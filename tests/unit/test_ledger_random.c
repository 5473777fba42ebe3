/* SPDX-License-Identifier: Apache-2.0 */
/* Randomized operation sequences over the ledger. After every operation:
 * vl_check() is 0, the public counters add up per device, and an independent
 * shadow map of chunk holders, built only from the effects (MAP adds, DROP
 * removes, MOVE and UNMAP keep), agrees with the ledger; no chunk is ever
 * mapped while the shadow says someone holds it. At the end of each round
 * every recall is answered and every gone client reaped, after which every
 * registered stage must reach its native context.
 *
 * VRAM_SEED=N reruns one sequence; the seed is printed either way. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "tests/check.h"
#include "daemon/ledger/internal.h"

#define MiB (1ull << 20)
#define VA_BASE (1ull << 40)
#define VA_SIZE (1ull << 36)
#define ROUNDS 12
#define OPS_PER_ROUND 2500
#define MAX_CLIENTS 64

static uint64_t rng_state;

static uint64_t rnd(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static uint32_t below(uint32_t n)
{
    return n ? (uint32_t)(rnd() % n) : 0;
}

static bool chance(uint32_t percent)
{
    return below(100) < percent;
}

/* Outcomes per operation, printed at the end: proof the paths are taken. */
static struct stat {
    const char *op;
    uint64_t ok, err, effects[VL_FX_BUDGET + 1];
} stats[32];

static void count(const char *op, int r)
{
    size_t i = 0;
    while (i < 32 && stats[i].op && strcmp(stats[i].op, op) != 0)
        i++;
    if (i == 32)
        return;
    stats[i].op = op;
    if (r == 0)
        stats[i].ok++;
    else
        stats[i].err++;
}

struct pending {
    uint32_t client;
    uint64_t chunk;
};

static struct {
    struct vl_ledger L;
    struct vl_fxlist fx;
    uint32_t *shadow[VL_MAX_DEVICES]; /* holder per chunk, from effects */
    uint32_t live[MAX_CLIENTS], nlive;
    uint32_t gone[MAX_CLIENTS], ngone;
    uint32_t next_client;
    struct pending *unmap; /* UNMAPs not answered yet */
    size_t nunmap, capunmap;
    uint64_t ops, round;
    const char *op;
} W;

#define FAIL_IF(cond, ...)                                                     \
    do {                                                                       \
        if (cond) {                                                            \
            fprintf(stderr, "round %llu op %llu (%s): ",                       \
                    (unsigned long long)W.round, (unsigned long long)W.ops,    \
                    W.op);                                                     \
            REQUIRE(!(cond), __VA_ARGS__);                                     \
        }                                                                      \
    } while (0)

static void unmap_push(uint32_t client, uint64_t chunk)
{
    if (W.nunmap == W.capunmap) {
        W.capunmap = W.capunmap ? W.capunmap * 2 : 256;
        W.unmap = realloc(W.unmap, W.capunmap * sizeof(*W.unmap));
        REQUIRE(W.unmap, "out of memory");
    }
    W.unmap[W.nunmap++] = (struct pending){client, chunk};
}

static uint32_t *shadow_of(uint64_t chunk)
{
    uint32_t di = (uint32_t)(chunk >> 32), idx = (uint32_t)chunk;
    FAIL_IF(di >= W.L.ndev || idx >= W.L.dev[di].nchunks,
            "effect names chunk %llx that does not exist",
            (unsigned long long)chunk);
    return &W.shadow[di][idx];
}

/* Applies the effects of the last operation to the shadow map. */
static void absorb(int result, bool may_fail_with_effects)
{
    count(W.op, result);
    for (size_t i = 0; i < 32; i++)
        if (stats[i].op == W.op || (stats[i].op && !strcmp(stats[i].op, W.op)))
            for (size_t k = 0; k < W.fx.n; k++)
                if (W.fx.v[k].kind <= VL_FX_BUDGET)
                    stats[i].effects[W.fx.v[k].kind]++;
    if (result < 0 && !may_fail_with_effects)
        FAIL_IF(W.fx.n != 0, "failed with %d but left %zu effects", result,
                W.fx.n);
    for (size_t i = 0; i < W.fx.n; i++) {
        const struct vl_fx *e = &W.fx.v[i];
        if (e->kind == VL_FX_BUDGET)
            continue;
        uint32_t *h = shadow_of(e->chunk);
        switch (e->kind) {
        case VL_FX_MAP: {
            FAIL_IF(result != 0, "MAP effect from a failed or pending "
                    "operation");
            FAIL_IF(*h != 0, "chunk %llx mapped to client %u while client %u "
                    "holds it", (unsigned long long)e->chunk, e->client, *h);
            struct vl_region *r = vli_region_find(&W.L, e->region);
            FAIL_IF(!r || r->client != e->client, "MAP into region %u not "
                    "of client %u", e->region, e->client);
            FAIL_IF(W.L.dev[e->chunk >> 32].cfg.id != r->device,
                    "foreign chunk %llx mapped into region %u of device %u",
                    (unsigned long long)e->chunk, r->id, r->device);
            *h = e->client;
            break;
        }
        case VL_FX_MOVE:
            FAIL_IF(result != 0, "MOVE effect from a failed or pending "
                    "operation");
            FAIL_IF(*h != e->client, "chunk %llx moved for client %u, held "
                    "by %u", (unsigned long long)e->chunk, e->client, *h);
            break;
        case VL_FX_UNMAP:
            FAIL_IF(*h != e->client, "unmap of chunk %llx sent to %u, held by "
                    "%u", (unsigned long long)e->chunk, e->client, *h);
            unmap_push(e->client, e->chunk);
            break;
        case VL_FX_DROP:
            FAIL_IF(*h != e->client, "drop of chunk %llx for %u, held by %u",
                    (unsigned long long)e->chunk, e->client, *h);
            *h = 0;
            break;
        default:
            FAIL_IF(1, "unknown effect kind %u", e->kind);
        }
    }
}

/* Every invariant, the counters and the shadow map, after each operation. */
static void verify(void)
{
    int e = vl_check(&W.L);
    FAIL_IF(e != 0, "vl_check: %s", vl_why(&W.L));
    for (uint32_t di = 0; di < W.L.ndev; di++) {
        struct vl_device *d = &W.L.dev[di];
        FAIL_IF((uint64_t)d->fixed + d->kv + d->loaned + d->count[VL_FREE] +
                        d->count[VL_QUARANTINED] != d->nchunks,
                "device %u: %u + %u + %u + %u + %u != %u", d->cfg.id,
                d->fixed, d->kv, d->loaned, d->count[VL_FREE],
                d->count[VL_QUARANTINED], d->nchunks);
        for (uint32_t k = 0; k < d->nchunks; k++)
            FAIL_IF(d->chunks[k].holder != W.shadow[di][k],
                    "device %u chunk %u: ledger says holder %u (%s), the "
                    "effects say %u", d->cfg.id, k, d->chunks[k].holder,
                    vl_state_name(d->chunks[k].state), W.shadow[di][k]);
    }
    check_count++;
}

#define RUN(name, result_var, may_fail_with_effects, call)                     \
    do {                                                                       \
        W.op = name;                                                           \
        vl_fx_clear(&W.fx);                                                    \
        result_var = (call);                                                   \
        absorb(result_var, may_fail_with_effects);                             \
        verify();                                                              \
        W.ops++;                                                               \
    } while (0)

/* ---- picking things ------------------------------------------------------ */

static uint32_t pick_live(void)
{
    return W.nlive ? W.live[below(W.nlive)] : 0;
}

/* A random used stage; configured or not as asked; owned or not. */
static int pick_stage(bool configured, bool owned, uint32_t *out)
{
    uint32_t start = below(W.L.nstage);
    for (uint32_t k = 0; k < W.L.nstage; k++) {
        uint32_t i = (start + k) % W.L.nstage;
        struct vl_stage *s = &W.L.stage[i];
        if (s->used && s->configured == configured && (s->owner != 0) == owned) {
            *out = i;
            return 0;
        }
    }
    return -1;
}

/* Up to max random chunks held by client (granted, loaned or recalling). */
static size_t pick_held(uint32_t client, uint64_t *ids, size_t max)
{
    size_t n = 0;
    uint32_t di0 = below(W.L.ndev);
    for (uint32_t dd = 0; dd < W.L.ndev && n < max; dd++) {
        uint32_t di = (di0 + dd) % W.L.ndev;
        struct vl_device *d = &W.L.dev[di];
        uint32_t start = below(d->nchunks);
        for (uint32_t k = 0; k < d->nchunks && n < max; k++) {
            uint32_t idx = (start + k) % d->nchunks;
            struct vl_chunk *c = &d->chunks[idx];
            if (c->holder == client && c->state != VL_FREE &&
                c->state != VL_QUARANTINED && chance(30))
                ids[n++] = vl_chunk_id(di, idx);
        }
    }
    return n;
}

/* ---- operations ------------------------------------------------------------ */

static void op_client_add(void)
{
    if (W.nlive + W.ngone >= MAX_CLIENTS)
        return;
    int r;
    uint32_t id = W.next_client++;
    RUN("client_add", r, false, vl_client_add(&W.L, id));
    FAIL_IF(r != 0, "client_add %u: %s", id, vl_why(&W.L));
    W.live[W.nlive++] = id;
    RUN("client_add twice", r, false, vl_client_add(&W.L, id));
    FAIL_IF(r != -EEXIST, "duplicate client id accepted");
}

/* Stages client owns, through the view (R14). */
static uint32_t stages_of(uint32_t client)
{
    struct vl_client_view cv;
    return vl_client_view(&W.L, client, &cv) ? cv.stages : 0;
}

static size_t fx_kind_count(int kind)
{
    size_t n = 0;
    for (size_t i = 0; i < W.fx.n; i++)
        n += W.fx.v[i].kind == kind;
    return n;
}

static void op_register(void)
{
    uint32_t st, c = pick_live();
    if (!c || pick_stage(true, false, &st) < 0)
        return;
    int r;
    bool at_limit = stages_of(c) >= W.L.limits.stages_per_client;
    uint32_t recalling_before = 0;
    for (uint32_t i = 0; i < W.L.ndev; i++)
        recalling_before += W.L.dev[i].count[VL_RECALLING];
    RUN("stage_register", r, false,
        vl_stage_register(&W.L, c, st, chance(15), &W.fx));
    struct vl_stage *s = &W.L.stage[st];
    struct vl_device *d = NULL;
    for (uint32_t i = 0; i < W.L.ndev; i++)
        if (W.L.dev[i].cfg.id == s->cfg.device)
            d = &W.L.dev[i];
    if (r == 0) {
        FAIL_IF(s->owner != c, "registered but not owned");
        /* R5: the initial window, always (pool loans in it are recalled
         * first). */
        FAIL_IF(s->kv_chunks != s->register_chunks, "registration mapped "
                "%u chunks, %u expected", s->kv_chunks, s->register_chunks);
        if (s->no_loan)
            FAIL_IF(s->kv_chunks != s->window_chunks, "no-loan stage with a "
                    "partial window");
    } else if (at_limit) {
        FAIL_IF(r != -E2BIG, "register at the limit: %d (%s)", r,
                vl_why(&W.L));
    } else if (r == VL_PENDING) {
        /* R5, R6: pool loans sit in its initial window: recalled (or on
         * their way already), nothing else changed. */
        FAIL_IF(s->owner != 0, "a waiting registration took the stage");
        FAIL_IF(s->no_loan, "a no-loan stage's registration waits");
        FAIL_IF(recalling_before == 0 && fx_kind_count(VL_FX_UNMAP) == 0 &&
                    d->count[VL_QUARANTINED] == 0,
                "registration waits for nothing: %s", vl_why(&W.L));
        for (size_t i = 0; i < W.fx.n; i++)
            FAIL_IF(W.fx.v[i].kind == VL_FX_MAP || W.fx.v[i].kind == VL_FX_MOVE,
                    "a waiting registration mapped memory");
    } else {
        FAIL_IF(r != -EAGAIN, "register: %d (%s)", r, vl_why(&W.L));
        FAIL_IF(d->count[VL_QUARANTINED] == 0,
                "register refused without quarantine: %s", vl_why(&W.L));
    }
    /* A second owner is refused. */
    uint32_t c2 = pick_live();
    if (r == 0 && c2) {
        bool c2_full = stages_of(c2) >= W.L.limits.stages_per_client;
        RUN("stage_register again", r, false,
            vl_stage_register(&W.L, c2, st, false, &W.fx));
        FAIL_IF(r != (c2_full ? -E2BIG : -EEXIST), "stage registered twice: "
                "%d", r);
    }
}

static void op_register_adhoc(void)
{
    uint32_t c = pick_live(), st;
    if (!c)
        return;
    struct vl_device *d = &W.L.dev[below(W.L.ndev)];
    uint32_t first = below(60), last = first + below(8);
    int r;
    bool at_limit = stages_of(c) >= W.L.limits.stages_per_client;
    RUN("stage_register_adhoc", r, false,
        vl_stage_register_adhoc(&W.L, c, d->cfg.id, first, last, &st));
    FAIL_IF(at_limit ? r != -E2BIG : r != 0 && r != -E2BIG, "adhoc: %d (%s)",
            r, vl_why(&W.L));
}

static void op_stage_release(void)
{
    uint32_t st;
    if (pick_stage(chance(50), true, &st) < 0)
        return;
    uint32_t owner = W.L.stage[st].owner;
    int r;
    RUN("stage_release", r, false, vl_stage_release(&W.L, owner, st, &W.fx));
    FAIL_IF(r != 0, "stage_release: %s", vl_why(&W.L));
    FAIL_IF(W.L.stage[st].used && W.L.stage[st].owner, "still owned");
}

static void op_region_create(void)
{
    uint32_t st, rg;
    if (pick_stage(false, true, &st) < 0)
        return;
    struct vl_stage *s = &W.L.stage[st];
    uint64_t bytes = (uint64_t)(below(24) + 1) * MiB / (chance(20) ? 3 : 1);
    int r;
    struct vl_client_view cv;
    REQUIRE(vl_client_view(&W.L, s->owner, &cv), "owner %u", s->owner);
    bool at_limit = cv.regions >= W.L.limits.regions_per_client;
    RUN("region_create", r, false,
        vl_region_create(&W.L, s->owner, st, (int)below(VL_NKINDS), bytes,
                         below(3) + 1, &rg));
    FAIL_IF(at_limit ? r != -E2BIG : r != 0 && r != -ENOSPC,
            "region_create: %d (%s)", r, vl_why(&W.L));
}

static void op_region_grow(void)
{
    if (!W.L.nregion)
        return;
    struct vl_region *rg = W.L.region[below((uint32_t)W.L.nregion)];
    struct vl_stage *s = &W.L.stage[rg->stage];
    uint32_t n = below(5), client = rg->client, id = rg->id;
    bool kv_or_ex = rg->kind == VL_KV || rg->kind == VL_EXPERT;
    uint32_t before = rg->used;
    struct vl_client_view cv;
    REQUIRE(vl_client_view(&W.L, client, &cv), "client %u", client);
    bool over = (uint64_t)cv.chunks + (uint64_t)n * rg->lanes >
                W.L.limits.chunks_per_client;
    int r;
    RUN("region_grow", r, false, vl_region_grow(&W.L, client, id, n, &W.fx));
    if (over) /* R14: judged first */
        FAIL_IF(r != -EDQUOT, "region_grow past the quota: %d (%s)", r,
                vl_why(&W.L));
    else if (s->configured && kv_or_ex)
        FAIL_IF(r != -EPERM, "configured %s region grew: %d",
                vl_kind_name(rg->kind), r);
    else if (r == 0)
        FAIL_IF(rg->used != before + n * rg->lanes, "grew by %u, asked %u",
                rg->used - before, n * rg->lanes);
    else
        FAIL_IF(r != -E2BIG && r != -ENOSPC && r != -EDQUOT,
                "region_grow: %d (%s)", r, vl_why(&W.L));
    /* A configured stage's fixed reservation is a hard promise. */
    if (s->configured && !kv_or_ex && r == -ENOSPC)
        FAIL_IF(1, "fixed region of a configured stage refused: %s",
                vl_why(&W.L));
}

static void op_region_release(void)
{
    if (!W.L.nregion)
        return;
    struct vl_region *rg = W.L.region[below((uint32_t)W.L.nregion)];
    bool configured = W.L.stage[rg->stage].configured;
    int r;
    RUN("region_release", r, false,
        vl_region_release(&W.L, rg->client, rg->id, &W.fx));
    FAIL_IF(configured ? r != -EPERM : r != 0, "region_release: %d (%s)", r,
            vl_why(&W.L));
}

/* Checks that a successful reserve left the whole budget mapped. */
static void check_budget(uint32_t st, uint64_t tokens)
{
    struct vl_stage *s = &W.L.stage[st];
    struct vl_region *kv = vli_region_find(&W.L, s->kv_region);
    uint64_t cb = 0;
    for (uint32_t i = 0; i < W.L.ndev; i++)
        if (W.L.dev[i].cfg.id == s->cfg.device)
            cb = W.L.dev[i].cfg.chunk_bytes;
    uint64_t target = vl_kv_target_tokens(&s->cfg, tokens);
    FAIL_IF(target < tokens, "target %llu below %llu tokens",
            (unsigned long long)target, (unsigned long long)tokens);
    for (uint32_t l = 0; l < s->cfg.lanes; l++) {
        uint32_t t = vl_lane_chunks(&s->cfg, l, target, cb);
        FAIL_IF((uint64_t)t * cb < tokens * s->cfg.lane_bytes_per_token[l],
                "lane %u: %u chunks can't hold %llu tokens", l, t,
                (unsigned long long)tokens);
        for (uint32_t i = 0; i < t; i++) {
            uint64_t id = kv->slot_chunk[(size_t)l * kv->stride_slots + i];
            FAIL_IF(id == VL_CHUNK_NONE, "stage %u lane %u slot %u: budget of "
                    "%llu tokens not mapped", st, l, i,
                    (unsigned long long)tokens);
            FAIL_IF(W.L.dev[id >> 32].chunks[(uint32_t)id].state != VL_GRANTED,
                    "stage %u lane %u slot %u: budget chunk not granted", st,
                    l, i);
        }
    }
}

static void maybe_snapshot(uint32_t owner);
static void maybe_die_before_reply(uint32_t owner, int r);
static unsigned long stats_stale;

static void op_kv_reserve(void)
{
    uint32_t st;
    if (pick_stage(true, true, &st) < 0)
        return;
    struct vl_stage *s = &W.L.stage[st];
    uint64_t native = s->cfg.native_context;
    uint64_t prompt = chance(10) ? native + below(100) : below((uint32_t)native);
    uint64_t output = below(1024);
    uint32_t recalled = UINT32_MAX, owner = s->owner;
    uint32_t kv_before = s->kv_chunks;
    int r;
    maybe_snapshot(owner);
    RUN("kv_reserve", r, true,
        vl_kv_reserve(&W.L, owner, st, prompt, output, &recalled, &W.fx));
    if (prompt + output > native) {
        FAIL_IF(r != -E2BIG, "reserve beyond the native context: %d", r);
        maybe_die_before_reply(owner, r);
        return;
    }
    if (r == 0) {
        check_budget(st, prompt + output);
        size_t moves = 0, maps = 0;
        for (size_t i = 0; i < W.fx.n; i++) {
            moves += W.fx.v[i].kind == VL_FX_MOVE;
            maps += W.fx.v[i].kind == VL_FX_MAP;
            FAIL_IF(W.fx.v[i].kind == VL_FX_UNMAP, "successful reserve recalls");
        }
        FAIL_IF(recalled != moves, "recalled %u, %zu moves", recalled, moves);
        FAIL_IF(s->kv_chunks != kv_before + moves + maps, "KV grew by %u with "
                "%zu moves and %zu maps", s->kv_chunks - kv_before, moves, maps);
        maybe_die_before_reply(owner, r);
        return;
    }
    maybe_die_before_reply(owner, r);
    FAIL_IF(r != VL_PENDING, "kv_reserve: %d (%s)", r, vl_why(&W.L));
    FAIL_IF(recalled != UINT32_MAX, "out-parameter written on failure");
    FAIL_IF(s->kv_chunks != kv_before, "a failed reserve changed the KV");
    for (size_t i = 0; i < W.fx.n; i++)
        FAIL_IF(W.fx.v[i].kind == VL_FX_UNMAP && W.fx.v[i].client == owner &&
                    W.fx.v[i].stage == st,
                "a stage recalled its own loans");
    /* Waiting is only ever for recalls, trims or quarantine to end. */
    struct vl_device *d = NULL;
    for (uint32_t i = 0; i < W.L.ndev; i++)
        if (W.L.dev[i].cfg.id == s->cfg.device)
            d = &W.L.dev[i];
    FAIL_IF(d->count[VL_RECALLING] == 0 && d->count[VL_QUARANTINED] == 0,
            "reserve waits with nothing to wait for: %s", vl_why(&W.L));
}

static void op_kv_trim(void)
{
    uint32_t st;
    if (pick_stage(true, true, &st) < 0)
        return;
    struct vl_stage *s = &W.L.stage[st];
    uint64_t tokens = chance(5) ? UINT64_MAX : below((uint32_t)s->cfg.native_context);
    uint32_t kv_before = s->kv_chunks;
    int r;
    uint32_t owner = s->owner;
    maybe_snapshot(owner);
    RUN("kv_trim", r, false, vl_kv_trim(&W.L, owner, st, tokens, &W.fx));
    FAIL_IF(r != 0, "kv_trim: %s", vl_why(&W.L));
    if (s->keep_window || s->no_loan)
        FAIL_IF(W.fx.n != 0 || s->kv_chunks != kv_before,
                "a stage that keeps its window was trimmed");
    for (size_t i = 0; i < W.fx.n; i++)
        FAIL_IF(W.fx.v[i].kind == VL_FX_MAP, "trim mapped a chunk");
    maybe_die_before_reply(owner, r);
}

static void op_expert_request(void)
{
    uint32_t st;
    if (pick_stage(true, true, &st) < 0)
        return;
    struct vl_stage *s = &W.L.stage[st];
    struct vl_client *cl = vli_client_find(&W.L, s->owner);
    bool delinquent = cl->delinquent;
    uint32_t quota = W.L.limits.chunks_per_client, before = cl->chunks;
    uint64_t max = chance(40) ? 0 : (uint64_t)below(40) * MiB;
    int r;
    RUN("expert_request", r, false,
        vl_expert_request(&W.L, s->owner, st, max, &W.fx));
    FAIL_IF(before >= quota ? r != -EDQUOT : delinquent ? r != -EPERM : r != 0,
            "expert_request: %d (%s)", r, vl_why(&W.L));
    /* R14: loans stop at the quota (KV reserves may have passed it). */
    FAIL_IF(cl->chunks > before && cl->chunks > quota, "loans took client %u "
            "from %u to %u chunks, quota %u", cl->id, before, cl->chunks,
            quota);
    for (size_t i = 0; i < W.fx.n; i++)
        FAIL_IF(W.fx.v[i].kind != VL_FX_MAP && W.fx.v[i].kind != VL_FX_BUDGET,
                "expert_request emitted effect %u", W.fx.v[i].kind);
}

static void op_expert_claim(void)
{
    uint32_t st;
    if (pick_stage(true, true, &st) < 0)
        return;
    struct vl_stage *s = &W.L.stage[st];
    uint32_t backed = vl_expert_slots_backed(&W.L, st);
    uint32_t slots[4], n = below(4) + 1;
    for (uint32_t i = 0; i < n; i++)
        slots[i] = below(backed + 2);
    uint32_t layer = s->cfg.first_layer + below(s->cfg.last_layer -
                                                s->cfg.first_layer + 3);
    int r;
    RUN("expert_claim", r, false,
        vl_expert_claim(&W.L, s->owner, st, layer, slots, n));
    if (layer > s->cfg.last_layer)
        FAIL_IF(r != -EPERM, "claim by layer %u outside %u-%u: %d", layer,
                s->cfg.first_layer, s->cfg.last_layer, r);
    else if (r == 0)
        for (uint32_t i = 0; i < n; i++)
            FAIL_IF(s->slot_layer[slots[i]] != layer, "claim not recorded");
    else
        FAIL_IF(r != -EINVAL && r != -EBUSY, "expert_claim: %d", r);
}

static void op_chunks_release(void)
{
    uint32_t c = pick_live();
    if (!c)
        return;
    uint64_t ids[8];
    size_t n = pick_held(c, ids, 1 + below(7));
    bool bad = chance(15);
    if (bad && n < 8) /* one that isn't held by c: all or nothing */
        ids[n++] = vl_chunk_id(below(W.L.ndev), below(W.L.dev[0].nchunks));
    int r;
    RUN("chunks_release", r, false, vl_chunks_release(&W.L, c, ids, n, &W.fx));
    if (!bad)
        FAIL_IF(r != 0, "chunks_release of held chunks: %s", vl_why(&W.L));
    else if (r == 0) /* the extra one happened to be c's */
        return;
    else
        FAIL_IF(r != -ENOENT && r != -EINVAL, "chunks_release: %d", r);
}

/* Clients answer some of their outstanding unmaps (recalls and trims). */
static void op_answer_unmaps(bool all)
{
    uint32_t c = all ? 0 : pick_live();
    uint64_t *ids = malloc((W.nunmap ? W.nunmap : 1) * sizeof(*ids));
    REQUIRE(ids, "out of memory");
    for (uint32_t k = 0; k < W.nlive; k++) {
        uint32_t client = W.live[k];
        if (!all && client != c)
            continue;
        size_t n = 0, keep = 0;
        for (size_t i = 0; i < W.nunmap; i++) {
            struct pending *p = &W.unmap[i];
            struct vl_chunk *ch =
                &W.L.dev[p->chunk >> 32].chunks[(uint32_t)p->chunk];
            bool answer = p->client == client && (all || chance(70));
            /* Chunks the client already gave back otherwise are forgotten. */
            if (ch->holder != p->client || ch->state != VL_RECALLING)
                continue;
            bool dup = false;
            for (size_t j = 0; j < n && !dup; j++)
                dup = ids[j] == p->chunk;
            if (dup)
                continue;
            if (answer)
                ids[n++] = p->chunk;
            else
                W.unmap[keep++] = *p;
        }
        W.nunmap = keep;
        if (n) {
            int r;
            RUN("answer unmaps", r, false,
                vl_chunks_release(&W.L, client, ids, n, &W.fx));
            FAIL_IF(r != 0, "answering %zu unmaps: %s", n, vl_why(&W.L));
        }
    }
    free(ids);
}

/* What a client's process knows it holds, taken at its disconnect: the
 * declaration it makes when it resumes (R13). */
struct decl {
    uint32_t client;
    bool stale; /* taken before a reserve or trim whose reply never came */
#define DECL_STAGES 1024
    struct vl_resume_stage st[DECL_STAGES]; /* more is a failure below */
    size_t nst;
    struct vl_resume_region *rg;
    size_t nrg;
    struct vl_resume_chunk *ch;
    size_t nch;
};
static struct decl decls[MAX_CLIENTS];
static size_t ndecls;

static void decl_build(struct decl *d, uint32_t c)
{
    memset(d, 0, sizeof(*d));
    d->client = c;
    for (uint32_t i = 0; i < W.L.nstage; i++) {
        struct vl_stage *s = &W.L.stage[i];
        if (!s->used || s->owner != c)
            continue;
        FAIL_IF(d->nst == DECL_STAGES, "client %u owns over %d stages", c,
                DECL_STAGES);
        d->st[d->nst++] = (struct vl_resume_stage){
            .id = i, .configured = s->configured, .keep_window = s->keep_window,
            .device = s->cfg.device, .first_layer = s->cfg.first_layer,
            .last_layer = s->cfg.last_layer};
    }
    d->rg = calloc(W.L.nregion + 1, sizeof(*d->rg));
    size_t nchunks = 0;
    for (size_t i = 0; i < W.L.nregion; i++)
        nchunks += W.L.region[i]->client == c ? W.L.region[i]->used : 0;
    d->ch = calloc(nchunks + 1, sizeof(*d->ch));
    REQUIRE(d->rg && d->ch, "out of memory");
    for (size_t i = 0; i < W.L.nregion; i++) {
        struct vl_region *r = W.L.region[i];
        if (r->client != c)
            continue;
        struct vl_resume_region *x = &d->rg[d->nrg++];
        *x = (struct vl_resume_region){
            .id = r->id, .stage = r->stage, .kind = r->kind, .base = r->base,
            .lane_stride = r->lane_stride, .va_bytes = r->va_bytes,
            .lanes = r->lanes};
        memcpy(x->lane_slots, r->lane_slots, r->lanes * sizeof(uint32_t));
        for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++)
            if (r->slot_chunk[k] != VL_CHUNK_NONE)
                d->ch[d->nch++] = (struct vl_resume_chunk){
                    .chunk = r->slot_chunk[k], .region = r->id, .slot = k};
    }
}

static void decl_take(uint32_t c)
{
    if (ndecls < MAX_CLIENTS)
        decl_build(&decls[ndecls++], c);
}

static void decl_drop(size_t i)
{
    free(decls[i].rg);
    free(decls[i].ch);
    decls[i] = decls[--ndecls];
}

/* Client live[k] goes; its process declares pre if given (what it maps
 * when a reply died with vramd), else what the ledger gave it. */
static void disconnect(uint32_t k, struct decl *pre)
{
    uint32_t c = W.live[k];
    if (pre) {
        if (ndecls < MAX_CLIENTS)
            decls[ndecls++] = *pre;
        else
            free(pre->rg), free(pre->ch);
        memset(pre, 0, sizeof(*pre));
    } else {
        decl_take(c);
    }
    int r;
    RUN("disconnect", r, false, vl_client_disconnect(&W.L, c, &W.fx));
    FAIL_IF(r != 0, "disconnect: %s", vl_why(&W.L));
    FAIL_IF(W.fx.n != 0, "disconnect emitted effects");
    W.live[k] = W.live[--W.nlive];
    W.gone[W.ngone++] = c;
    for (uint32_t di = 0; di < W.L.ndev; di++)
        for (uint32_t i = 0; i < W.L.dev[di].nchunks; i++) {
            struct vl_chunk *ch = &W.L.dev[di].chunks[i];
            FAIL_IF(ch->holder == c && ch->state != VL_QUARANTINED,
                    "chunk of a gone client is %s", vl_state_name(ch->state));
        }
    for (uint32_t i = 0; i < W.L.nstage; i++)
        FAIL_IF(W.L.stage[i].used && W.L.stage[i].owner == c,
                "stage %u still owned by a gone client", i);
}

static void op_disconnect(void)
{
    if (W.nlive)
        disconnect(below(W.nlive), NULL);
}

/* Before a reserve or trim, now and then: what the owner maps. If the call
 * then changes anything, vramd "dies" before the reply: the process still
 * maps every chunk where it was, disconnects, and declares that. */
static struct decl pre;

static void maybe_snapshot(uint32_t owner)
{
    free(pre.rg);
    free(pre.ch);
    memset(&pre, 0, sizeof(pre));
    if (chance(8))
        decl_build(&pre, owner);
}

static void maybe_die_before_reply(uint32_t owner, int r)
{
    if (!pre.client)
        return;
    bool changed = false;
    for (size_t i = 0; i < W.fx.n; i++)
        changed |= W.fx.v[i].client == owner && (W.fx.v[i].kind == VL_FX_MOVE ||
                                                 W.fx.v[i].kind == VL_FX_MAP);
    if (r == 0 && changed)
        for (uint32_t k = 0; k < W.nlive; k++)
            if (W.live[k] == owner) {
                pre.stale = true;
                stats_stale++;
                disconnect(k, &pre);
                return;
            }
    free(pre.rg);
    free(pre.ch);
    memset(&pre, 0, sizeof(pre));
}

static void op_reap(void)
{
    if (!W.ngone)
        return;
    uint32_t k = below(W.ngone), c = W.gone[k];
    uint32_t q = 0;
    for (uint32_t di = 0; di < W.L.ndev; di++)
        for (uint32_t i = 0; i < W.L.dev[di].nchunks; i++)
            q += W.L.dev[di].chunks[i].holder == c;
    int r;
    RUN("reap", r, false, vl_client_reap(&W.L, c, &W.fx));
    FAIL_IF(r != 0, "reap: %s", vl_why(&W.L));
    FAIL_IF(W.fx.n != q, "reap of %u chunks emitted %zu effects", q, W.fx.n);
    W.gone[k] = W.gone[--W.ngone];
    for (size_t i = 0; i < ndecls; i++)
        if (decls[i].client == c)
            decl_drop(i--);
}

/* A gone client's process comes back as a new client and declares what it
 * holds, now and then leaving some chunks out (freed) or naming a chunk it
 * does not hold (lost). Afterwards the new client holds exactly what was
 * declared and placed. */
static void op_resume(void)
{
    if (!ndecls || W.nlive + W.ngone >= MAX_CLIENTS)
        return;
    size_t di = below((uint32_t)ndecls);
    struct decl *d = &decls[di];
    uint32_t from = d->client;
    op_client_add();
    uint32_t c = W.live[W.nlive - 1];
    bool omit = chance(30), bogus = chance(10) && d->nch;
    struct vl_resume rs = {.from = from, .stages = d->st, .nstages = d->nst,
                           .regions = d->rg, .nregions = d->nrg,
                           .chunks = d->ch, .nchunks = d->nch};
    size_t n = d->nch;
    if (omit && n)
        n = below((uint32_t)n);
    rs.nchunks = n;
    uint64_t saved = 0;
    if (bogus && n) {
        saved = d->ch[0].chunk;
        d->ch[0].chunk ^= 1; /* a neighbour: most likely not from's */
    }
    /* A lying process: a chunk declared in another of its regions (say a
     * configured stage's fixed chunk in an ad-hoc region). It may be lost,
     * never placed where it would break a promise (verify() checks). */
    bool liar = n > 1 && d->nrg > 1 && chance(15);
    uint32_t lie_i = liar ? below((uint32_t)n) : 0, lie_region = 0, lie_slot = 0;
    if (liar) {
        lie_region = d->ch[lie_i].region;
        lie_slot = d->ch[lie_i].slot;
        d->ch[lie_i].region = d->rg[below((uint32_t)d->nrg)].id;
        d->ch[lie_i].slot = below(4);
    }
    uint32_t before = vli_client_find(&W.L, from)->chunks;
    /* Adopted chunks change holder without an effect: the shadow follows
     * the declaration before the check. */
    W.op = "resume";
    vl_fx_clear(&W.fx);
    int r = vl_client_resume(&W.L, c, &rs, &W.fx);
    absorb(r, true);
    FAIL_IF(r != 0, "resume: %s", vl_why(&W.L));
    size_t placed = 0;
    for (size_t i = 0; i < n; i++) {
        struct vl_resume_chunk *x = &d->ch[i];
        if (x->lost)
            continue;
        placed++;
        *shadow_of(x->chunk) = c;
        struct vl_device *dv = &W.L.dev[x->chunk >> 32];
        struct vl_chunk *ch = &dv->chunks[(uint32_t)x->chunk];
        FAIL_IF(ch->holder != c || ch->region != x->region || ch->slot != x->slot,
                "resumed chunk %llx is not where it was declared",
                (unsigned long long)x->chunk);
    }
    struct vl_client *fc = vli_client_find(&W.L, from);
    FAIL_IF(vli_client_find(&W.L, c)->chunks != placed, "resumed client holds "
            "%u chunks, %zu placed", vli_client_find(&W.L, c)->chunks, placed);
    FAIL_IF(fc->chunks + placed > before, "chunks appeared: %u + %zu > %u",
            fc->chunks, placed, before);
    if (liar) {
        d->ch[lie_i].region = lie_region;
        d->ch[lie_i].slot = lie_slot;
    }
    /* A declaration from before an unanswered reserve or trim: every
     * chunk it names comes back, where the process maps it. */
    if (d->stale && !omit && !bogus && !liar)
        for (size_t i = 0; i < n; i++) {
            if (d->ch[i].lost) {
                for (size_t j = 0; j < d->nst; j++)
                    fprintf(stderr, "stage %u lost %d\n", d->st[j].id,
                            d->st[j].lost);
                for (size_t j = 0; j < d->nrg; j++)
                    fprintf(stderr, "region %u (stage %u kind %d) lost %d\n",
                            d->rg[j].id, d->rg[j].stage, d->rg[j].kind,
                            d->rg[j].lost);
                size_t shown = 0;
                for (size_t j = 0; j < n && shown < 8; j++)
                    if (d->ch[j].lost && ++shown)
                        fprintf(stderr, "chunk %llx lost %d\n",
                                (unsigned long long)d->ch[j].chunk,
                                d->ch[j].lost);
            }
            FAIL_IF(d->ch[i].lost, "stale but honest declaration: chunk %llx "
                    "(region %u slot %u) lost (%d)",
                    (unsigned long long)d->ch[i].chunk, d->ch[i].region,
                    d->ch[i].slot, d->ch[i].lost);
        }
    if (!omit && !bogus && !liar && !d->stale && placed != before) {
        for (size_t i = 0; i < d->nst; i++)
            fprintf(stderr, "stage %u lost %d\n", d->st[i].id, d->st[i].lost);
        for (size_t i = 0; i < d->nrg; i++)
            fprintf(stderr, "region %u lost %d\n", d->rg[i].id, d->rg[i].lost);
        for (size_t i = 0; i < n && i < 8; i++)
            fprintf(stderr, "chunk %llx lost %d\n",
                    (unsigned long long)d->ch[i].chunk, d->ch[i].lost);
        FAIL_IF(1, "a full declaration placed %zu of %u", placed, before);
    }
    verify();
    W.ops++;
    if (bogus)
        d->ch[0].chunk = saved;
    for (size_t i = 0; i < d->nrg; i++)
        FAIL_IF(!d->rg[i].lost && !vli_region_find(&W.L, d->rg[i].id),
                "region %u not back", d->rg[i].id);
    /* A second resume of the same process is refused. */
    int r2 = vl_client_resume(&W.L, c, &rs, NULL);
    FAIL_IF(r2 == 0, "resumed twice");
    decl_drop(di);
    if (fc->chunks == 0) { /* as the daemon does: nothing left to wait for */
        for (uint32_t k = 0; k < W.ngone; k++)
            if (W.gone[k] == from) {
                RUN("reap resumed", r, false, vl_client_reap(&W.L, from, &W.fx));
                FAIL_IF(r != 0, "reap: %s", vl_why(&W.L));
                W.gone[k] = W.gone[--W.ngone];
                break;
            }
    }
}

static void op_recall_missed(void)
{
    /* A client holding recalled loans misses its deadline. */
    for (uint32_t k = 0; k < W.nlive; k++) {
        uint32_t c = W.live[k];
        for (size_t i = 0; i < W.nunmap; i++)
            if (W.unmap[i].client == c) {
                /* R15: the policy is the recalled stage's. */
                struct vl_chunk_view cv;
                struct vl_region_view rv;
                uint32_t st = VL_NONE;
                if (vl_chunk_view(&W.L, W.unmap[i].chunk, &cv) &&
                    vl_region_view(&W.L, cv.region, &rv))
                    st = rv.stage;
                bool kill = st != VL_NONE &&
                            W.L.stage[st].cfg.kill_on_missed_recall;
                W.op = "recall_missed";
                enum vl_missed m = vl_recall_missed(&W.L, c, st);
                FAIL_IF(m != (kill ? VL_MISSED_KILL : VL_MISSED_DENY_LOANS),
                        "stage %u: policy %d", st, (int)m);
                FAIL_IF(!vli_client_find(&W.L, c)->delinquent, "not delinquent");
                verify();
                return;
            }
    }
}

static void op_probe(void)
{
    /* Foreign chunks and bogus requests are refused without effects. */
    if (W.L.nregion) {
        struct vl_region *rg = W.L.region[below((uint32_t)W.L.nregion)];
        uint32_t di = below(W.L.ndev);
        uint64_t id = vl_chunk_id(di, below(W.L.dev[di].nchunks));
        int r;
        RUN("chunk_check_region", r, false,
            vl_chunk_check_region(&W.L, id, rg->id));
        FAIL_IF(r != (W.L.dev[di].cfg.id == rg->device ? 0 : -EXDEV),
                "chunk_check_region: %d", r);
    }
    uint32_t st, c = pick_live();
    if (c && pick_stage(true, true, &st) == 0 && W.L.stage[st].owner != c) {
        int r;
        RUN("kv_reserve not owner", r, false,
            vl_kv_reserve(&W.L, c, st, 10, 10, NULL, &W.fx));
        FAIL_IF(r != -ENOENT, "reserve on another client's stage: %d", r);
    }
}

/* ---- rounds ------------------------------------------------------------------ */

static void setup_round(void)
{
    uint32_t ndev = 2 + below(2);
    struct vl_device_cfg devs[3];
    for (uint32_t i = 0; i < ndev; i++)
        devs[i] = (struct vl_device_cfg){
            .id = i * 3 + below(3), /* ids differ from indexes */
            .chunk_bytes = (chance(80) ? 2 : 4) * MiB,
            .capacity_bytes = (uint64_t)(64 + below(160)) * 2 * MiB,
            .lend_unreserved = chance(50)};
    int e = vl_init(&W.L, devs, ndev, VA_BASE, VA_SIZE);
    REQUIRE(e == 0, "vl_init: %s", vl_why(&W.L));
    /* R14: some rounds run under limits low enough to be met. */
    if (chance(40))
        vl_set_limits(&W.L, &(struct vl_limits){
                                .chunks_per_client = 20 + below(200),
                                .regions_per_client = 1 + below(6),
                                .stages_per_client = 1 + below(4)});
    for (uint32_t i = 0; i < ndev; i++) {
        W.shadow[i] = calloc(W.L.dev[i].nchunks, sizeof(uint32_t));
        REQUIRE(W.shadow[i], "out of memory");
    }
    /* Configured stages; some refused at admission. */
    uint32_t nstages = 2 + below(6);
    for (uint32_t id = 0; id < nstages; id++) {
        struct vl_stage_cfg c;
        memset(&c, 0, sizeof(c));
        c.id = id;
        c.device = devs[below(ndev)].id;
        c.first_layer = id * 8;
        c.last_layer = id * 8 + below(8);
        c.lanes = 1 + below(4);
        for (uint32_t l = 0; l < c.lanes; l++)
            c.lane_bytes_per_token[l] = 16 + below(300);
        c.native_context = 65536;
        c.initial_tokens = chance(10) ? 0 : 1024 * (1 + below(8));
        c.step_tokens = chance(10) ? 0 : 512 * (1 + below(16));
        c.nfixed = below(3);
        for (uint32_t f = 0; f < c.nfixed; f++)
            c.fixed[f] = (struct vl_fixed_cfg){
                .name = "f", .kind = chance(50) ? VL_FIXED : VL_DRAFT_KV,
                .bytes = (uint64_t)(1 + below(12)) * MiB};
        c.expert_slot_bytes = (uint64_t)(1 + below(6)) * MiB / 2;
        c.expert_region_bytes = chance(50) ? 0 : (uint64_t)(2 + below(60)) * MiB;
        c.lend = chance(85);
        c.headroom_bytes = chance(60) ? 0 : (uint64_t)below(12) * MiB;
        c.kill_on_missed_recall = chance(30);
        uint32_t reserved = 0;
        for (uint32_t i = 0; i < ndev; i++)
            if (W.L.dev[i].cfg.id == c.device)
                reserved = W.L.dev[i].reserved;
        e = vl_stage_configure(&W.L, &c);
        REQUIRE(e == 0 || e == -ENOSPC, "configure: %s", vl_why(&W.L));
        for (uint32_t i = 0; i < ndev; i++)
            if (W.L.dev[i].cfg.id == c.device && e < 0)
                REQUIRE(W.L.dev[i].reserved == reserved, "refused but reserved");
    }
    verify();
}

static void settle_round(void)
{
    /* Everyone answers, the gone are reaped: every registered stage must now
     * reach its native context, waiting at most for recalls it caused. */
    op_answer_unmaps(true);
    while (W.ngone)
        op_reap();
    for (uint32_t st = 0; st < W.L.nstage; st++) {
        struct vl_stage *s = &W.L.stage[st];
        if (!s->used || !s->configured || !s->owner)
            continue;
        int r = VL_PENDING;
        for (int tries = 0; tries < 3 && r == VL_PENDING; tries++) {
            RUN("settle kv_reserve", r, true,
                vl_kv_reserve(&W.L, s->owner, st, s->cfg.native_context, 0,
                              NULL, &W.fx));
            if (r == VL_PENDING)
                op_answer_unmaps(true);
        }
        FAIL_IF(r != 0, "stage %u can't reach its native context after all "
                "recalls were answered: %s", st, vl_why(&W.L));
        check_budget(st, s->cfg.native_context);
        FAIL_IF(s->kv_chunks != s->window_chunks, "full KV %u of window %u",
                s->kv_chunks, s->window_chunks);
    }
}

static void teardown_round(void)
{
    /* Everybody leaves; after the reaps every chunk is free. */
    while (W.nlive)
        op_disconnect();
    while (W.ngone)
        op_reap();
    for (uint32_t i = 0; i < W.L.ndev; i++) {
        REQUIRE(W.L.dev[i].count[VL_FREE] == W.L.dev[i].nchunks,
                "round %llu: device %u has %u of %u chunks free at the end",
                (unsigned long long)W.round, W.L.dev[i].cfg.id,
                W.L.dev[i].count[VL_FREE], W.L.dev[i].nchunks);
        free(W.shadow[i]);
        W.shadow[i] = NULL;
    }
    W.nunmap = 0;
    vl_fini(&W.L);
}

/* R4: after every round's settling each registered stage reaches its native
 * context. Every operation also checks R1 (vl_check, and the shadow map of
 * holders: no chunk granted while someone holds it), R11 (quarantine until
 * the reap) and R13 (resumes, with replies that died with vramd). */
static void test_r04_random_rounds(void)
{
    const char *env = getenv("VRAM_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0)
                        : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    if (!seed)
        seed = 1;
    printf("test_ledger_random: seed %llu (VRAM_SEED=%llu to repeat)\n",
           (unsigned long long)seed, (unsigned long long)seed);
    fflush(stdout);
    rng_state = seed;
    W.next_client = 1;
    for (W.round = 0; W.round < ROUNDS; W.round++) {
        setup_round();
        for (uint32_t i = 0; i < 3; i++)
            op_client_add();
        for (uint32_t i = 0; i < OPS_PER_ROUND; i++) {
            uint32_t x = below(100);
            if (x < 4)
                op_client_add();
            else if (x < 12)
                op_register();
            else if (x < 15)
                op_register_adhoc();
            else if (x < 18)
                op_stage_release();
            else if (x < 22)
                op_region_create();
            else if (x < 30)
                op_region_grow();
            else if (x < 32)
                op_region_release();
            else if (x < 50)
                op_kv_reserve();
            else if (x < 60)
                op_kv_trim();
            else if (x < 68)
                op_expert_request();
            else if (x < 72)
                op_expert_claim();
            else if (x < 78)
                op_chunks_release();
            else if (x < 88)
                op_answer_unmaps(false);
            else if (x < 91)
                op_disconnect();
            else if (x < 93)
                op_reap();
            else if (x < 94)
                op_resume();
            else if (x < 95)
                op_recall_missed();
            else
                op_probe();
            if (i % 500 == 499)
                settle_round();
        }
        settle_round();
        teardown_round();
    }
}

int main(void)
{
    test_r04_random_rounds();
    vl_fx_free(&W.fx);
    free(W.unmap);
    printf("test_ledger_random: %llu operations in %d rounds; %lu times "
           "vramd died before a reserve's or trim's reply\n",
           (unsigned long long)W.ops, ROUNDS, stats_stale);
    REQUIRE(stats_stale > 0, "no reply died: the stale declarations went "
            "untested");
    printf("%-22s %8s %8s %8s %8s %8s %8s\n", "operation", "ok", "failed",
           "map", "move", "unmap", "drop");
    for (size_t i = 0; i < 32 && stats[i].op; i++)
        printf("%-22s %8llu %8llu %8llu %8llu %8llu %8llu\n", stats[i].op,
               (unsigned long long)stats[i].ok,
               (unsigned long long)stats[i].err,
               (unsigned long long)stats[i].effects[VL_FX_MAP],
               (unsigned long long)stats[i].effects[VL_FX_MOVE],
               (unsigned long long)stats[i].effects[VL_FX_UNMAP],
               (unsigned long long)stats[i].effects[VL_FX_DROP]);
    return check_report("test_ledger_random");
}
