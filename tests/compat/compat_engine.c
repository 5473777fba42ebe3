/* SPDX-License-Identifier: Apache-2.0 */
/* An engine for the upgrade test (test_upgrade.sh, upgrade.c): a real
 * client process that holds memory with known bytes in it while vramd is
 * replaced under it. It is built twice from this one file: against the
 * current libvram (vram-compat-engine) and, by build_releases.sh, against
 * each old release's libvram, so it may use only what vram.h had in the
 * oldest release of releases.txt.
 *
 * Usage: vram-compat-engine SOCKET NAME [--stage S] [--adhoc FIRST]
 *                           [--set NAME]... [--once]
 *   --stage S      configured stage S: KV for 40,000 + 1,000 tokens, its
 *                  fixed regions grown by 2 chunks, and the weight set of
 *                  its reservation "weights" (when the configuration names
 *                  one with a key) written and sealed, or checked
 *   --adhoc FIRST  an ad-hoc stage on device 0, layers FIRST to FIRST + 15,
 *                  with a fixed region of 4 chunks
 *   --set NAME     weight set NAME (8 MiB on device 0, the test's key):
 *                  written and sealed when new, else checked; kept mapped
 *   --once         exit after the setup
 * Every chunk is filled with a pattern of its address, every set with one
 * of its name and offset. Then one line per command on stdin:
 *   check N  the next call finds vramd replaced: it reconnects and resumes;
 *            then N reconnects in all, no stage lost, every region at its
 *            base with the same chunk in every slot, every byte as written
 *   grow     one more chunk for the ad-hoc region, filled
 *   exit     closes what it holds and exits 0
 * Each answered with one line, as the setup is: "ok held=N chunks=ID,..."
 * (every chunk it maps, ascending) or "fail WHY". */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vram.h> /* as an engine does: each release's own, by -I */

#define MAX_REGIONS 16
#define MAX_SLOTS 4096
#define MAX_SETS 4
#define SET_BYTES (8ull << 20)

struct slot {
    uint32_t region, lane, slot;
    uint64_t chunk;
};

struct set {
    char name[VRAM_WEIGHTS_NAME_MAX + 1];
    struct vram_weights_info w;
};

static vram_client *c;
static uint32_t regions[MAX_REGIONS];
static void *bases[MAX_REGIONS];
static int nregions;
static struct slot slots[MAX_SLOTS];
static int nslots;
static struct set sets[MAX_SETS];
static int nsets;
static uint32_t adhoc_region;
static int reconnects, stages_lost;
static char why[512];

static const uint8_t key[VRAM_WEIGHTS_KEY_BYTES] = {0xc0, 0x3a};

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return -1;
}

static void on_event(void *user, const struct vram_event *ev)
{
    (void)user;
    if (ev->type == VRAM_EVENT_RECONNECTED)
        reconnects++;
    else if (ev->type == VRAM_EVENT_STAGE_LOST)
        stages_lost++;
}

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* A chunk's words are their own addresses, salted: a chunk that moved, or
 * that someone else wrote, is caught. */
static void fill_chunk(void *p, uint64_t bytes)
{
    uint64_t *w = p;
    for (uint64_t i = 0; i < bytes / 8; i++)
        w[i] = (uint64_t)(uintptr_t)&w[i] ^ 0x5a5a5a5a5a5a5a5aull;
}

static bool chunk_intact(const void *p, uint64_t bytes)
{
    const uint64_t *w = p;
    for (uint64_t i = 0; i < bytes / 8; i++)
        if (w[i] != ((uint64_t)(uintptr_t)&w[i] ^ 0x5a5a5a5a5a5a5a5aull))
            return false;
    return true;
}

/* A set's words: its name and their offset, the same in every process. */
static void fill_set(const struct set *s)
{
    uint64_t *w = (uint64_t *)(uintptr_t)s->w.base, h = hash(s->name);
    for (uint64_t i = 0; i < s->w.bytes / 8; i++)
        w[i] = h + i;
}

static bool set_intact(const struct set *s)
{
    const uint64_t *w = (const uint64_t *)(uintptr_t)s->w.base;
    uint64_t h = hash(s->name);
    for (uint64_t i = 0; i < s->w.bytes / 8; i++)
        if (w[i] != h + i)
            return false;
    return true;
}

static int track_region(uint32_t region)
{
    struct vram_region_info ri;
    if (nregions == MAX_REGIONS || vram_region_info(c, region, &ri) < 0)
        return fail("region %u: no info", region);
    regions[nregions] = region;
    bases[nregions++] = ri.base;
    return 0;
}

/* Every mapped slot of every region, with its chunk; filled when fill. */
static int record(bool fill)
{
    nslots = 0;
    for (int r = 0; r < nregions; r++) {
        struct vram_region_info ri;
        if (vram_region_info(c, regions[r], &ri) < 0)
            return fail("region %u vanished", regions[r]);
        for (uint32_t l = 0; l < ri.lanes; l++) {
            int n = vram_region_lane_slots(c, regions[r], l);
            for (int i = 0; i < n; i++) {
                uint64_t chunk;
                if (vram_region_chunk(c, regions[r], l, (uint32_t)i, &chunk) < 0)
                    continue;
                if (nslots == MAX_SLOTS)
                    return fail("more than %d chunks", MAX_SLOTS);
                slots[nslots++] = (struct slot){regions[r], l, (uint32_t)i, chunk};
                if (fill)
                    fill_chunk(vram_region_slot(c, regions[r], l, (uint32_t)i),
                               ri.chunk_bytes);
            }
        }
    }
    return 0;
}

static int open_set(const char *name)
{
    if (nsets == MAX_SETS)
        return fail("more than %d sets", MAX_SETS);
    struct set *s = &sets[nsets];
    snprintf(s->name, sizeof(s->name), "%s", name);
    int e = vram_weights_open(c, name, 0, SET_BYTES, key, VRAM_WEIGHTS_NOWAIT, &s->w);
    if (e < 0)
        return fail("open set %s: %s", name, vram_client_last_error(c));
    nsets++;
    if (!s->w.writer)
        return s->w.sealed && set_intact(s) ? 0 : fail("set %s: bytes differ", name);
    fill_set(s);
    if ((e = vram_weights_seal(c, s->w.id)) < 0)
        return fail("seal %s: %s", name, vram_client_last_error(c));
    s->w.sealed = 1;
    return 0;
}

static int setup_stage(uint32_t stage)
{
    struct vram_stage_info si;
    struct vram_kv_result kr;
    if (vram_stage_register(c, stage, 0, &si) < 0)
        return fail("register stage %u: %s", stage, vram_client_last_error(c));
    if (vram_kv_reserve(c, stage, 40000, 1000, 0, &kr) < 0)
        return fail("kv_reserve: %s", vram_client_last_error(c));
    uint32_t ids[MAX_REGIONS];
    int n = vram_stage_regions(c, stage, ids, MAX_REGIONS);
    for (int i = 0; i < n && i < MAX_REGIONS; i++) {
        struct vram_region_info ri;
        if (vram_region_info(c, ids[i], &ri) < 0)
            return fail("region %u: no info", ids[i]);
        if (ri.kind == VRAM_REGION_FIXED && vram_region_grow(c, ids[i], 2) < 0)
            return fail("grow fixed region: %s", vram_client_last_error(c));
        if (ri.kind != VRAM_REGION_EXPERT && track_region(ids[i]) < 0)
            return -1;
    }
    /* The reservation a configured set backs (R17): the first owner
     * writes it, a later one maps it sealed. */
    struct set *s = &sets[nsets];
    int e = vram_stage_weights(c, stage, "weights", &s->w);
    if (e == -ENOENT || e == -ENODATA)
        return 0;
    if (e < 0 || nsets == MAX_SETS)
        return fail("stage weights: %s", vram_client_last_error(c));
    snprintf(s->name, sizeof(s->name), "stage %u weights", stage);
    nsets++;
    if (!s->w.writer)
        return set_intact(s) ? 0 : fail("stage %u's set: bytes differ", stage);
    fill_set(s);
    if (vram_weights_seal(c, s->w.id) < 0)
        return fail("seal stage %u's set: %s", stage, vram_client_last_error(c));
    return 0;
}

static int setup_adhoc(uint32_t first)
{
    uint32_t stage;
    if (vram_stage_register_adhoc(c, 0, first, first + 15, &stage) < 0)
        return fail("register ad-hoc: %s", vram_client_last_error(c));
    if (vram_region_create(c, stage, VRAM_REGION_FIXED, 32ull << 20, 1,
                           &adhoc_region) < 0 ||
        vram_region_grow(c, adhoc_region, 4) < 0)
        return fail("ad-hoc region: %s", vram_client_last_error(c));
    return track_region(adhoc_region);
}

/* After vramd was replaced: everything where it was, as it was. */
static int check(int want_reconnects)
{
    if (vram_client_ping(c) < 0)
        return fail("ping: %s", vram_client_last_error(c));
    if (reconnects != want_reconnects || stages_lost)
        return fail("%d reconnects (want %d), %d stages lost", reconnects,
                    want_reconnects, stages_lost);
    for (int r = 0; r < nregions; r++) {
        struct vram_region_info ri;
        if (vram_region_info(c, regions[r], &ri) < 0 || ri.base != bases[r])
            return fail("region %u moved or vanished", regions[r]);
    }
    for (int i = 0; i < nslots; i++) {
        const struct slot *s = &slots[i];
        struct vram_region_info ri;
        uint64_t chunk;
        vram_region_info(c, s->region, &ri);
        if (vram_region_chunk(c, s->region, s->lane, s->slot, &chunk) < 0 ||
            chunk != s->chunk)
            return fail("region %u lane %u slot %u: chunk %llu lost or changed",
                        s->region, s->lane, s->slot, (unsigned long long)s->chunk);
        if (!chunk_intact(vram_region_slot(c, s->region, s->lane, s->slot),
                          ri.chunk_bytes))
            return fail("chunk %llu: bytes differ", (unsigned long long)s->chunk);
    }
    int before = nslots;
    if (record(false) < 0)
        return -1;
    if (nslots != before)
        return fail("%d chunks mapped, %d before", nslots, before);
    for (int i = 0; i < nsets; i++) {
        struct vram_weights_info w;
        if (vram_weights_info(c, sets[i].w.id, &w) < 0 || w.base != sets[i].w.base ||
            !w.sealed)
            return fail("set %s: not open, moved or not sealed", sets[i].name);
        if (!set_intact(&sets[i]))
            return fail("set %s: bytes differ", sets[i].name);
    }
    return 0;
}

static int grow(void)
{
    if (!adhoc_region)
        return fail("no ad-hoc region");
    if (vram_region_grow(c, adhoc_region, 1) < 0)
        return fail("grow after the resume: %s", vram_client_last_error(c));
    return record(true);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void answer(int rc, const char *word)
{
    if (rc < 0) {
        printf("fail %s\n", why);
        return;
    }
    static uint64_t ids[MAX_SLOTS];
    for (int i = 0; i < nslots; i++)
        ids[i] = slots[i].chunk;
    qsort(ids, (size_t)nslots, sizeof(ids[0]), cmp_u64);
    printf("%s held=%d chunks=", word, nslots);
    for (int i = 0; i < nslots; i++)
        printf("%s%llu", i ? "," : "", (unsigned long long)ids[i]);
    printf("\n");
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: vram-compat-engine SOCKET NAME [--stage S] "
                "[--adhoc FIRST] [--set NAME]... [--once]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    char err[256] = "";
    struct vram_client_options o = {.name = argv[2], .error = err,
                                    .error_len = sizeof(err)};
    if (vram_client_connect(argv[1], &o, &c) < 0) {
        printf("fail connect: %s\n", err);
        return 1;
    }
    vram_client_set_event_callback(c, on_event, NULL);
    bool once = false;
    int rc = 0;
    for (int i = 3; i < argc && rc == 0; i++) {
        if (!strcmp(argv[i], "--once"))
            once = true;
        else if (i + 1 == argc)
            rc = fail("%s wants a value", argv[i]);
        else if (!strcmp(argv[i], "--stage"))
            rc = setup_stage((uint32_t)atoi(argv[++i]));
        else if (!strcmp(argv[i], "--adhoc"))
            rc = setup_adhoc((uint32_t)atoi(argv[++i]));
        else if (!strcmp(argv[i], "--set"))
            rc = open_set(argv[++i]);
        else
            rc = fail("unknown option %s", argv[i]);
    }
    if (rc == 0)
        rc = record(true);
    answer(rc, "ok");
    if (rc < 0 || once) {
        vram_client_close(c);
        return rc < 0;
    }
    char line[256];
    while (fgets(line, sizeof(line), stdin)) {
        int n;
        if (sscanf(line, "check %d", &n) == 1)
            answer(check(n), "ok");
        else if (!strncmp(line, "grow", 4))
            answer(grow(), "ok");
        else if (!strncmp(line, "exit", 4))
            break;
        else
            answer(fail("unknown command %s", line), "ok");
    }
    for (int i = 0; i < nsets; i++)
        if (strncmp(sets[i].name, "stage ", 6)) /* its stage's release closes it */
            vram_weights_close(c, sets[i].w.id);
    vram_client_close(c);
    return 0;
}
