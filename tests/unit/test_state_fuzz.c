/* SPDX-License-Identifier: Apache-2.0 */
/* The checked state file (format 5), against damage and against kills.
 *
 * A real file, written by the real state code over a real ledger: three
 * clients of this process with chunks on two devices, regions (ranges),
 * ad-hoc stages, a sealed weight set and its users, a dropped client. Then
 * 1,000 mutations from a fixed seed: bit flips (one, several, anywhere or
 * in the header and chunk tables), truncations, extensions, swaps of two
 * tables' bytes and of two blocks. Each must be refused by the reader or
 * mean exactly what the original meant: everything the reader uses
 * (holders, stages, ranges, chunk records, weight sets and users, the next
 * client id, the devices) is compared. An accepted file is also rebuilt
 * into a ledger as vramd would, and must hold exactly what the original's
 * rebuild holds: a chunk a live holder maps is never free there (no double
 * grant).
 *
 * Then kills: a child makes changes through the ledger's observer without
 * end, is killed with SIGKILL at a random moment, and its file must be
 * accepted every time, each chunk record one the child wrote.
 *
 * Also: CRC-32C's check value, and the journal's states by hand (pending
 * and sealed means the old block; pending and unsealed is refused). And the
 * cost of a change, in ns. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/check.h"
#include "daemon/state/crc32c.h"
#include "daemon/state/format.h"
#include "daemon/state/journal.h"
#include "daemon/ledger/ledger.h"
#include "daemon/log.h"
#include "daemon/state/state.h"
#include "tests/unit/state_meaning.h"
#include "tests/unit/state_rebuild.h"

#define MiB (1024ull * 1024)
#define MUTATIONS 1000

static char dir[64], path[128];

static struct vl_ledger *ledger(void)
{
    struct vl_device_cfg dev[2] = {
        {.id = 0, .chunk_bytes = 2 * MiB, .capacity_bytes = 256 * MiB},
        {.id = 1, .chunk_bytes = 1 * MiB, .capacity_bytes = 128 * MiB}};
    struct vl_ledger *L = NULL;
    char why[128];
    REQUIRE(vl_new(dev, 2, 1ull << 40, 64ull << 30, 1u << 30, &L, why,
                   sizeof(why)) == 0, "vl_new: %s", why);
    return L;
}

static const struct vd_state_params *params(struct vl_ledger *L)
{
    static struct vd_state_params prm;
    prm = (struct vd_state_params){.ledger = L, .max_clients = 8,
                                   .max_regions_per_client = 8};
    return &prm;
}

static uint8_t *read_all(const char *p, size_t *len)
{
    FILE *f = fopen(p, "rb");
    REQUIRE(f, "open %s", p);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    REQUIRE(b && fread(b, 1, (size_t)n, f) == (size_t)n, "read %s", p);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void write_all(const char *p, const void *b, size_t n)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0 && (!n || write(fd, b, n) == (ssize_t)n), "write %s", p);
    close(fd);
}

/* What vramd rebuilds from the file at path: per device, how many chunks
 * are held (by the gone clients) and free; -errno when it refuses. */
struct rebuilt {
    uint32_t free[2], quarantined[2];
    size_t orphans;
};

static int rebuild(struct rebuilt *r)
{
    struct vl_ledger *L = ledger();
    size_t n = 0;
    int e = state_rebuild(params(L), path, &n);
    if (e == 0) {
        memset(r, 0, sizeof(*r));
        r->orphans = n;
        for (uint32_t d = 0; d < 2; d++) {
            struct vl_device_view dv;
            vl_device_view(L, d, &dv);
            r->free[d] = dv.free;
            r->quarantined[d] = dv.quarantined;
        }
    }
    vl_free(L);
    return e;
}

/* ---- the file ------------------------------------------------------------ */

/* Holders 1-3 are this process; 4 was dropped. */
static void make_file(uint8_t **file, size_t *len)
{
    unlink(path);
    struct vl_ledger *L = ledger();
    struct vd_orphan *orph = NULL;
    size_t n = 0;
    struct vd_state *st = NULL;
    REQUIRE(vd_state_open(params(L), path, &orph, &n, &st) == 0, "open");
    free(orph);
    struct vl_fxlist fx = {0};
    for (uint32_t c = 1; c <= 4; c++) {
        char name[16];
        snprintf(name, sizeof(name), "engine-%u", c);
        REQUIRE(vl_client_add(L, c) == 0 &&
                    vd_state_holder_add(st, c, getpid(), 0, 1000 + c, name) == 0,
                "client %u", c);
        vd_state_next_client(st, c + 1);
    }
    for (uint32_t c = 1; c <= 3; c++) {
        uint32_t stage, region;
        uint32_t dev = c % 2;
        REQUIRE(vl_stage_register_adhoc(L, c, dev, 0, c, &stage) == 0, "stage");
        REQUIRE(vl_region_create(L, c, stage, VL_FIXED, 32 * MiB, 1, &region) == 0,
                "region: %s", vl_why(L));
        REQUIRE(vl_region_grow(L, c, region, 3 + c, &fx) == 0, "grow: %s",
                vl_why(L));
        REQUIRE(vl_region_create(L, c, stage, VL_KV, 4 * MiB, 2, &region) == 0,
                "kv region: %s", vl_why(L));
        REQUIRE(vl_region_grow(L, c, region, 2, &fx) == 0, "kv grow: %s",
                vl_why(L));
    }
    vd_state_holder_evicted(st, 3);
    vd_state_holder_drop(st, 4);
    /* A sealed weight set, mapped by clients 1 and 2. */
    static const uint8_t key[VL_WSET_KEY] = {1, 2, 3};
    struct vl_wset_req wr = {.name = "model/stage0", .key = key, .device = 0,
                             .bytes = 20 * MiB, .alloc_bytes = 16 * MiB};
    uint32_t set = 0, again = 0;
    bool writer = false;
    int e = vl_weights_open(L, 1, &wr, &set, &writer, &fx);
    if (e == 0 && vl_weights_seal(L, 1, set, 1234) == 0)
        e = vl_weights_open(L, 2, &wr, &again, &writer, &fx);
    CHECK(e == 0, "the weight set: %s", vl_why(L));
    vl_fx_free(&fx);
    *file = read_all(path, len);
    vd_state_close(st);
    vl_set_observer(L, NULL);
    vl_free(L);
}

/* ---- mutations ------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }

static void swap_bytes(uint8_t *a, uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

enum kind { FLIP1, FLIPN, FLIP_HOT, TRUNC, EXTEND, SWAP_TABLES, SWAP_BLOCKS, NKINDS };
static const char *const kind_name[NKINDS] = {
    "one bit flipped", "2-16 bits flipped", "bits flipped in the header or "
    "chunk tables", "truncated", "extended", "two tables swapped",
    "two blocks swapped"};

/* The mutated file in *out (*outlen bytes); false when it came out the
 * same as the original (a swap of equal bytes). */
static bool mutate(enum kind k, const uint8_t *file, size_t len,
                   const struct vd_state_blocks *bl, uint8_t *out, size_t *outlen)
{
    memcpy(out, file, len);
    *outlen = len;
    switch (k) {
    case FLIP1:
        out[below(len)] ^= (uint8_t)(1u << below(8));
        break;
    case FLIPN: {
        uint64_t n = 2 + below(15);
        uint64_t at = below(len);
        for (uint64_t i = 0; i < n; i++) /* near one another, or anywhere */
            if (i % 2)
                out[(at + below(64)) % len] ^= (uint8_t)(1u << below(8));
            else
                out[below(len)] ^= (uint8_t)(1u << below(8));
        break;
    }
    case FLIP_HOT: {
        uint32_t n = 1 + (uint32_t)below(3);
        for (uint32_t i = 0; i < n; i++) {
            uint64_t at;
            if (below(2)) {
                at = below(VD_STATE_HDR_V5_BYTES);
            } else {
                const struct vd_state_table *t = &bl->t[VD_T_CHUNKS + below(2)];
                at = t->off + below((uint64_t)t->count * 8);
            }
            out[at] ^= (uint8_t)(1u << below(8));
        }
        break;
    }
    case TRUNC:
        *outlen = below(len);
        break;
    case EXTEND: {
        size_t n = 1 + below(4096);
        for (size_t i = 0; i < n; i++)
            out[len + i] = below(2) ? 0 : (uint8_t)rnd();
        *outlen = len + n;
        break;
    }
    case SWAP_TABLES: {
        uint32_t a = (uint32_t)below(bl->ntables), b = (uint32_t)below(bl->ntables);
        if (a == b)
            b = (a + 1) % bl->ntables;
        const struct vd_state_table *ta = &bl->t[a], *tb = &bl->t[b];
        size_t na = (size_t)ta->count * ta->rec, nb = (size_t)tb->count * tb->rec;
        swap_bytes(out + ta->off, out + tb->off, na < nb ? na : nb);
        break;
    }
    case SWAP_BLOCKS: {
        uint32_t a = (uint32_t)below(bl->nblocks), b = (uint32_t)below(bl->nblocks);
        uint32_t ta, tb, la, lb;
        uint64_t oa, ob;
        vd_state_block_at(bl, a, &ta, &oa, &la);
        vd_state_block_at(bl, b, &tb, &ob, &lb);
        swap_bytes(out + oa, out + ob, la < lb ? la : lb);
        /* Half the time with their checksums too: the block's number in
         * its sum is what refuses that. */
        if (below(2)) {
            uint32_t *check = (uint32_t *)(void *)(out + VD_STATE_CHECK_AT(out)->off_check);
            uint32_t t = check[a];
            check[a] = check[b];
            check[b] = t;
        }
        break;
    }
    default:
        break;
    }
    return *outlen != len || memcmp(out, file, len) != 0;
}

static void test_mutations(const uint8_t *file, size_t len)
{
    struct meaning orig = {0}, m = {0};
    REQUIRE(meaning_of(file, len, &orig) == 0, "the original is refused");
    write_all(path, file, len);
    struct rebuilt r0, r;
    REQUIRE(rebuild(&r0) == 0, "the original is not rebuilt");
    CHECK(r0.orphans == 3, "%zu live holders rebuilt, not 3", r0.orphans);
    CHECK(r0.quarantined[0] > 0 && r0.quarantined[1] > 0,
          "the rebuild holds nothing (%u, %u)", r0.quarantined[0],
          r0.quarantined[1]);
    struct vd_state_view v0;
    uint8_t *tmp = malloc(len);
    memcpy(tmp, file, len);
    REQUIRE(vd_state_check(tmp, len, &v0, (char[64]){0}, 64) == 0, "check");
    struct vd_state_blocks bl;
    vd_state_blocks(v0.h, &bl);
    free(tmp);
    uint8_t *out = malloc(len + 4096 + 8);
    unsigned refused[NKINDS] = {0}, same[NKINDS] = {0}, changed[NKINDS] = {0};
    unsigned double_grants = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < MUTATIONS; i++) {
        enum kind k = (enum kind)(i % NKINDS);
        size_t n;
        if (!mutate(k, file, len, &bl, out, &n)) {
            same[k]++;
            continue;
        }
        int e = meaning_of(out, n, &m);
        if (e < 0) {
            refused[k]++;
            continue;
        }
        if (m.n == orig.n && memcmp(m.b, orig.b, m.n) == 0)
            same[k]++;
        else {
            changed[k]++;
            CHECK(0, "mutation %d (%s) was accepted and means something else", i,
                  kind_name[k]);
        }
        /* Accepted: what vramd rebuilds from it is the original's. */
        write_all(path, out, n);
        e = rebuild(&r);
        CHECK(e == 0, "mutation %d (%s): the check passed, the rebuild refused "
              "(%d)", i, kind_name[k], e);
        if (e == 0 && (r.free[0] > r0.free[0] || r.free[1] > r0.free[1] ||
                       r.quarantined[0] != r0.quarantined[0] ||
                       r.quarantined[1] != r0.quarantined[1])) {
            double_grants++;
            CHECK(0, "mutation %d (%s): rebuilt with %u/%u free, %u/%u held; "
                  "the original %u/%u, %u/%u", i, kind_name[k], r.free[0],
                  r.free[1], r.quarantined[0], r.quarantined[1], r0.free[0],
                  r0.free[1], r0.quarantined[0], r0.quarantined[1]);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    unsigned tr = 0, ts = 0, tc = 0;
    for (int k = 0; k < NKINDS; k++) {
        printf("  %-45s refused %3u, same meaning %3u, another meaning %u\n",
               kind_name[k], refused[k], same[k], changed[k]);
        tr += refused[k];
        ts += same[k];
        tc += changed[k];
    }
    printf("mutations: %d on a file of %zu bytes (%u blocks): refused %u, same "
           "meaning %u, another meaning %u, double grants %u (%.2f s)\n",
           MUTATIONS, len, bl.nblocks, tr, ts, tc, double_grants,
           (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    CHECK(tc == 0 && double_grants == 0, "%u mutations got through", tc);
    free(out);
    free(orig.b);
    free(m.b);
}

/* ---- the journal by hand ------------------------------------------------- */

/* A change interrupted at each point of its protocol: the reader sees the
 * record old, old, old, new, and refuses a pending journal that is not
 * sealed. */
static void test_journal_states(const uint8_t *file, size_t len)
{
    struct meaning orig = {0}, m = {0}, fresh = {0};
    REQUIRE(meaning_of(file, len, &orig) == 0, "the original is refused");
    uint8_t *b = malloc(len);
    struct vd_journal jl;
    const struct vd_state_hdr *h = (const void *)file;
    uint32_t rec = h->dev[0].nchunks - 1; /* a free chunk, made held */
    uint64_t *cs;
    for (int point = 0; point < 5; point++) {
        memcpy(b, file, len);
        vd_journal_init(&jl, b); /* the same sums: the file is whole */
        REQUIRE(memcmp(b, file, len) == 0 || point, "init changed a whole file");
        cs = (uint64_t *)(void *)(b + h->off_chunks[0]);
        vd_journal_begin(&jl, VD_T_CHUNKS, rec);
        struct vd_state_journal *j = jl.j;
        if (point >= 1)
            cs[rec] = 7ull | 3ull << 32;
        if (point == 2) /* the new sum stored, the journal still pending */
            jl.check[jl.block] = vd_state_block_crc(jl.block, jl.at, jl.len);
        if (point == 3) {
            vd_journal_end(&jl);
            j->state = VD_JOURNAL_PENDING; /* ... as if before its idle */
            j->seal = ~j->seal;
        }
        if (point == 4)
            vd_journal_end(&jl);
        int e = meaning_of(b, len, &m);
        CHECK(e == 0, "interrupted at point %d: refused", point);
        if (point < 4)
            CHECK(e == 0 && m.n == orig.n && memcmp(m.b, orig.b, m.n) == 0,
                  "interrupted at point %d: not the old record", point);
        else
            CHECK(e == 0 && m.n == orig.n + 16, "done: not the new record");
        /* Pending, its seal broken: damage. */
        if (point == 1) {
            j->seal ^= 1;
            CHECK(meaning_of(b, len, &fresh) == -EBADMSG,
                  "a pending journal without its seal was accepted");
            j->seal ^= 1;
            j->state ^= 1;
            CHECK(meaning_of(b, len, &fresh) == -EBADMSG,
                  "a journal neither idle nor pending was accepted");
            j->state ^= 1;
            ((uint8_t *)(j + 1))[3] ^= 0x10;
            CHECK(meaning_of(b, len, &fresh) == -EBADMSG,
                  "a pending journal's damaged data was accepted");
        }
    }
    free(b);
    free(orig.b);
    free(m.b);
    free(fresh.b);
}

/* A format 5 file whose version field reads 2, 3 or 4 (5 to 4 is one bit)
 * must not be read as an older, unchecked format: then one more flip in a
 * chunk record would pass. */
static void test_version_downgrade(const uint8_t *file, size_t len)
{
    uint8_t *b = malloc(len);
    REQUIRE(b, "malloc");
    struct meaning m = {0};
    for (uint32_t v = VD_STATE_VERSION_NO_NAMES; v < VD_STATE_VERSION_CRC; v++) {
        memcpy(b, file, len);
        memcpy(b + offsetof(struct vd_state_hdr, version), &v, sizeof(v));
        CHECK(meaning_of(b, len, &m) == -EBADMSG,
              "a format 5 file with version %u was read as format %u", v, v);
    }
    free(b);
    free(m.b);
}

/* ---- kills ------------------------------------------------------------- */

/* Changes without end: grants and releases through the ledger, whose
 * observer writes the file. */
static void churn(void)
{
    struct vl_ledger *L = ledger();
    struct vd_orphan *orph = NULL;
    size_t n = 0;
    struct vd_state *st = NULL;
    unlink(path);
    if (vd_state_open(params(L), path, &orph, &n, &st) < 0)
        _exit(3);
    struct vl_fxlist fx = {0};
    uint32_t stage[3], region[3];
    for (uint32_t c = 1; c <= 3; c++)
        if (vl_client_add(L, c) < 0 ||
            vd_state_holder_add(st, c, getpid(), 0, 0, "churn") < 0 ||
            vl_stage_register_adhoc(L, c, c % 2, 0, 1, &stage[c - 1]) < 0 ||
            vl_region_create(L, c, stage[c - 1], VL_FIXED, 8 * MiB, 1,
                             &region[c - 1]) < 0)
            _exit(4);
    /* Ready: the file is in place. */
    if (write(1, "", 0) < 0)
        _exit(5);
    kill(getppid(), SIGUSR1);
    for (uint64_t i = 0;; i++) {
        uint32_t c = 1 + (uint32_t)(i % 3);
        vl_region_grow(L, c, region[c - 1], 1 + (uint32_t)(i % 5), &fx);
        vl_region_release(L, c, region[c - 1], &fx);
        vl_region_create(L, c, stage[c - 1], VL_FIXED, 8 * MiB, 1,
                         &region[c - 1]);
        vd_state_holder_name(st, c, i % 2 ? "churn-a" : "churn-b");
        vd_state_next_client(st, 10 + (uint32_t)i);
        vl_fx_free(&fx);
        fx = (struct vl_fxlist){0};
    }
}

static volatile sig_atomic_t ready;
static void on_usr1(int s) { (void)s; ready = 1; }

static void test_kills(int rounds)
{
    signal(SIGUSR1, on_usr1);
    unsigned accepted = 0, pending = 0;
    for (int i = 0; i < rounds; i++) {
        ready = 0;
        pid_t pid = fork();
        REQUIRE(pid >= 0, "fork");
        if (pid == 0) {
            churn();
            _exit(0);
        }
        while (!ready)
            nanosleep(&(struct timespec){0, 100000}, NULL);
        nanosleep(&(struct timespec){0, (long)(below(3000) * 1000)}, NULL);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        size_t len;
        uint8_t *b = read_all(path, &len);
        const struct vd_state_journal *j =
            (const void *)(b + VD_STATE_CHECK_AT(b)->off_journal);
        pending += j->state == VD_JOURNAL_PENDING;
        struct meaning m = {0};
        int e = meaning_of(b, len, &m);
        CHECK(e == 0, "killed in round %d: the file is refused", i);
        accepted += e == 0;
        free(m.b);
        free(b);
    }
    signal(SIGUSR1, SIG_DFL);
    printf("kills: %d rounds, %u files accepted, %u of them with the journal "
           "pending (a change cut short)\n", rounds, accepted, pending);
}

/* ---- cost ---------------------------------------------------------------- */

static void test_cost(void)
{
    struct vl_ledger *L = ledger();
    struct vd_orphan *orph = NULL;
    size_t n = 0;
    struct vd_state *st = NULL;
    unlink(path);
    REQUIRE(vd_state_open(params(L), path, &orph, &n, &st) == 0, "open");
    free(orph);
    /* The observer's chunk store, as a grant makes it: 100,000 changes. */
    const struct vl_observer *obs = NULL;
    (void)obs;
    size_t len;
    uint8_t *b = read_all(path, &len);
    free(b);
    /* Through the journal directly, on a mapping of its own. */
    uint8_t *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    REQUIRE(map != MAP_FAILED, "mmap");
    b = read_all(path, &len);
    memcpy(map, b, len);
    free(b);
    struct vd_journal jl;
    vd_journal_init(&jl, map);
    const struct vd_state_hdr *h = (const void *)map;
    uint64_t *cs = (uint64_t *)(void *)(map + h->off_chunks[0]);
    uint32_t nch = h->dev[0].nchunks;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint32_t i = 0; i < 100000; i++) {
        uint32_t k = i % nch;
        vd_journal_begin(&jl, VD_T_CHUNKS, k);
        __atomic_store_n(&cs[k], cs[k] ? 0 : (uint64_t)(1 + i % 7), __ATOMIC_RELEASE);
        vd_journal_end(&jl);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e5;
    struct meaning m = {0};
    CHECK(meaning_of(map, len, &m) == 0, "the file after 100,000 changes is refused");
    free(m.b);
    /* The same stores without the journal, for comparison. */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint32_t i = 0; i < 100000; i++) {
        uint32_t k = i % nch;
        __atomic_store_n(&cs[k], cs[k] ? 0 : (uint64_t)(1 + i % 7), __ATOMIC_RELEASE);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double bare = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e5;
    printf("cost: 100,000 chunk-record changes, %.0f ns per change journaled "
           "and summed (%.1f ns the bare store)\n", ns, bare);
    munmap(map, len);
    vd_state_close(st);
    vl_set_observer(L, NULL);
    vl_free(L);
}

int main(void)
{
    vlog_init(0);
    CHECK(vd_crc32c(0, "123456789", 9) == 0xE3069283u, "CRC-32C's check value");
    /* Any split sums the same (the aligned fast path and the tails). */
    uint8_t bytes[100];
    for (int i = 0; i < 100; i++)
        bytes[i] = (uint8_t)(i * 37 + 1);
    uint32_t whole = vd_crc32c(0, bytes, 100);
    for (int cut = 0; cut <= 100; cut += 7)
        CHECK(vd_crc32c(vd_crc32c(0, bytes, (size_t)cut), bytes + cut,
                        (size_t)(100 - cut)) == whole, "split at %d", cut);

    snprintf(dir, sizeof(dir), "/tmp/vram-state-fuzz-XXXXXX");
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof(path), "%s/vramd.sock.state", dir);
    uint8_t *file;
    size_t len;
    make_file(&file, &len);
    test_journal_states(file, len);
    test_version_downgrade(file, len);
    test_mutations(file, len);
    test_kills(60);
    test_cost();
    free(file);
    char p2[200];
    unlink(path);
    snprintf(p2, sizeof(p2), "%s.new", path);
    unlink(p2);
    snprintf(p2, sizeof(p2), "%s.discarded", path);
    unlink(p2);
    rmdir(dir);
    return check_report("test_state_fuzz");
}
