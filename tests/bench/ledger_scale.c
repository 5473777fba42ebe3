/* SPDX-License-Identifier: Apache-2.0 */
/* vram-bench-ledger: the ledger's costs at the scale of a large host, without
 * I/O (issue 17's scale targets, the ledger's part). One device of --capacity
 * (default 128 GiB in 2 MiB chunks; --capacity-gib N) lent whole to stage 0 as expert loans,
 * then stage 1's KV reserve of its whole window recalls them (16K chunks at
 * the default) and stage 0's release answers the recall; last, clients
 * holding nothing come and go (issue 17's empty connect, the ledger's
 * part), and one holding 16 chunks goes. Each line gives the
 * CPU time of one operation against its target; --quick uses 8 GiB (the
 * ctest smoke run checks only that it runs and prints its lines). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/ledger/internal.h"

static struct vl_fxlist fx;

static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The chunks the effects tell client to unmap (a recall's). */
static uint64_t *unmaps(uint32_t client, size_t *n)
{
    uint64_t *v = malloc((fx.n + 1) * sizeof(*v));
    *n = 0;
    for (size_t i = 0; v && i < fx.n; i++)
        if (fx.v[i].kind == VL_FX_UNMAP && fx.v[i].client == client)
            v[(*n)++] = fx.v[i].chunk;
    return v;
}

/* One line; target_ms 0: none set (a figure to watch, not a target). */
static void line(const char *bench, const char *what, size_t chunks, double ms,
                 double target_ms)
{
    printf("{\"bench\":\"%s\",\"backend\":\"ledger\",\"what\":\"%s\","
           "\"chunks\":%zu,\"cpu_ms\":%.4f,\"per_chunk_us\":%.3f", bench,
           what, chunks, ms, chunks ? ms * 1e3 / (double)chunks : 0.0);
    if (target_ms > 0)
        printf(",\"target_ms\":%.3f,\"met\":%s", target_ms,
               ms <= target_ms ? "true" : "false");
    printf("}\n");
}

/* Chunks the effects map, move or unmap. */
static size_t moved(void)
{
    size_t n = 0;
    for (size_t i = 0; i < fx.n; i++)
        n += fx.v[i].kind == VL_FX_MAP || fx.v[i].kind == VL_FX_MOVE ||
             fx.v[i].kind == VL_FX_UNMAP;
    return n;
}

int main(int argc, char **argv)
{
    uint64_t gib = 128;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            gib = 8;
        else if (strcmp(argv[i], "--capacity-gib") == 0 && i + 1 < argc)
            gib = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: vram-bench-ledger [--quick] "
                    "[--capacity-gib N]\n");
            return 2;
        }
    }
    const uint64_t MiB = 1ull << 20;
    struct vl_device_cfg d = {.id = 0, .chunk_bytes = 2 * MiB,
                              .capacity_bytes = gib << 30,
                              .lend_unreserved = true};
    static struct vl_ledger L;
    if (vl_init(&L, &d, 1, 1ull << 44, 1ull << 46) < 0) {
        printf("{\"bench\":\"setup\",\"backend\":\"ledger\",\"error\":\"%s\"}\n",
               vl_why(&L));
        return 1;
    }
    /* Two stages whose windows are a quarter of the device each (4 lanes):
     * 16,384 chunks at 128 GiB, the recall of 16K chunks. */
    struct vl_stage_cfg a;
    memset(&a, 0, sizeof(a));
    a.device = 0;
    a.last_layer = 15;
    a.lanes = 4;
    for (int l = 0; l < 4; l++)
        a.lane_bytes_per_token[l] = (uint32_t)((gib << 30) / 16 / 262144);
    a.native_context = 262144;
    a.initial_tokens = 16384;
    a.step_tokens = 8192;
    a.expert_slot_bytes = 1572864;
    a.lend = true;
    a.hold_ms = 1000;
    a.recall_deadline_ms = 100;
    struct vl_stage_cfg b = a;
    b.id = 1;
    b.first_layer = 16;
    b.last_layer = 31;
    int e = vl_stage_configure(&L, &a);
    if (!e)
        e = vl_stage_configure(&L, &b);
    if (!e)
        e = vl_client_add(&L, 1);
    if (!e)
        e = vl_client_add(&L, 2);
    /* A small client on the big device: 16 chunks of an ad-hoc region,
     * then gone and reaped; the cost is what it holds, not the device. */
    uint32_t st_small = 0, reg = 0;
    double t0, t1;
    int ce = vl_client_add(&L, 500);
    if (!ce)
        ce = vl_stage_register_adhoc(&L, 500, 0, 0, 1, &st_small);
    if (!ce)
        ce = vl_region_create(&L, 500, st_small, VL_FIXED, 32 * MiB, 1, &reg);
    if (!ce)
        ce = vl_region_grow(&L, 500, reg, 16, &fx);
    vl_fx_clear(&fx);
    t0 = cpu_ms();
    if (!ce)
        ce = vl_client_disconnect(&L, 500, &fx);
    if (!ce)
        ce = vl_client_reap(&L, 500, &fx);
    t1 = cpu_ms();
    if (ce) {
        printf("{\"bench\":\"setup\",\"backend\":\"ledger\",\"error\":"
               "\"small client: %s\"}\n", vl_why(&L));
        return 1;
    }
    line("ledger_small_client_gone", "disconnect and reap of a client "
         "holding 16 chunks", 16, t1 - t0, 0.05);
    if (!e)
        e = vl_stage_register(&L, 1, 0, false, &fx);
    vl_fx_clear(&fx);
    t0 = cpu_ms();
    if (!e)
        e = vl_expert_request(&L, 1, 0, 0, &fx);
    t1 = cpu_ms();
    if (e) {
        printf("{\"bench\":\"setup\",\"backend\":\"ledger\",\"error\":\"%s\"}\n",
               vl_why(&L));
        return 1;
    }
    line("ledger_loans", "expert_request lending the whole device",
         L.stage[0].loan_chunks, t1 - t0, 0);
    /* Stage 1 registers at once: its initial window was kept free (R5). */
    vl_fx_clear(&fx);
    e = vl_stage_register(&L, 2, 1, false, &fx);
    size_t n;
    uint64_t *ids;
    vl_fx_clear(&fx);
    t0 = cpu_ms();
    int r = vl_kv_reserve(&L, 2, 1, 262000, 100, NULL, &fx);
    t1 = cpu_ms();
    ids = unmaps(1, &n);
    if (e || r != VL_PENDING || !ids || !n) {
        printf("{\"bench\":\"setup\",\"backend\":\"ledger\",\"error\":\"no "
               "recall (%d, %d): %s\"}\n", e, r, vl_why(&L));
        return 1;
    }
    line("ledger_recall", "kv_reserve recalling pool loans", n, t1 - t0, 10.0);
    vl_fx_clear(&fx);
    t0 = cpu_ms();
    e = vl_chunks_release(&L, 1, ids, n, &fx);
    t1 = cpu_ms();
    line("ledger_release", "chunk_release answering that recall", n, t1 - t0,
         10.0);
    vl_fx_clear(&fx);
    t0 = cpu_ms();
    r = vl_kv_reserve(&L, 2, 1, 262000, 100, NULL, &fx);
    t1 = cpu_ms();
    line("ledger_reserve", "the reserve again, granting what came back",
         moved(), t1 - t0, 0);
    vl_fx_clear(&fx);
    t0 = cpu_ms();
    int t = vl_kv_trim(&L, 2, 1, 0, &fx);
    t1 = cpu_ms();
    line("ledger_trim", "kv_trim of that window back to the initial one",
         moved(), t1 - t0, 0);
    /* An empty client (vramctl, an engine before it asks for memory):
     * added, disconnected and reaped, 100 times. */
    vl_fx_clear(&fx);
    ce = 0;
    t0 = cpu_ms();
    for (uint32_t k = 0; k < 100 && !ce; k++) {
        ce = vl_client_add(&L, 100 + k);
        if (!ce)
            ce = vl_client_disconnect(&L, 100 + k, &fx);
        if (!ce)
            ce = vl_client_reap(&L, 100 + k, &fx);
    }
    t1 = cpu_ms();
    line("ledger_empty_client", "add, disconnect and reap of a client "
         "holding nothing (per client)", 0, (t1 - t0) / 100, 0.05);
    free(ids);
    vl_fx_free(&fx);
    return e || r || t || ce ? 1 : 0;
}
