/* SPDX-License-Identifier: Apache-2.0 */
/* A minimal engine on libvram, written to be copied.
 *
 * It connects to vramd, registers one configured stage, loads its weights
 * into the stage's fixed region, borrows every expert loan it may have and
 * loads experts into the backed expert slots, then serves a few requests:
 * KV reserved before decode, written, trimmed after. It keeps a residency
 * table (which expert is in which slot) that the event callback keeps true
 * while the daemon moves memory between KV and experts.
 *
 * Usage: vram-example-engine [SOCKET [STAGE]]
 *   SOCKET  vramd's socket (default: $VRAM_SOCKET, else /run/vramd/vramd.sock)
 *   STAGE   a stage of vramd's configuration (default 0)
 *
 * examples/engine.json is a daemon configuration it runs against;
 * docs/engines.md explains what each call does. Exit status: 0 served, 1 a
 * call failed, 2 usage. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vram.h>

/* The model: this many experts per layer of the stage, each the size of one
 * expert slot (the daemon's expert_slot). */
#define EXPERTS_PER_LAYER 8

/* What the engine knows about its memory. The callback updates it, so it is
 * passed as the callback's user pointer rather than kept in globals. */
struct engine {
    vram_client *c;
    uint32_t stage;
    struct vram_stage_info info;
    bool host;             /* chunks are host memory this process may touch */
    uint32_t nslots;       /* expert slots of the stage's expert region */
    uint32_t backed;       /* slots [0, backed) have memory */
    uint32_t nexperts;
    int32_t *slot_expert;  /* per slot: the expert loaded there, or -1 */
    int32_t *expert_slot;  /* per expert: its slot, or -1 when not resident */
    bool *claimed;         /* per expert: its slot is claimed for its layer */
    uint32_t *scratch;     /* slot lists for vram_expert_claim */
    bool stage_lost;       /* register again before the next request */
    bool kv_lost;          /* a reconnect lost chunks: map and compute again */
};

struct request {
    uint64_t prompt, output;
};

/* The last one is longer than the native context of engine.json's stage,
 * to show that the daemon refuses it rather than clamping it. */
static const struct request requests[] = {
    {8192, 1024}, {65536, 2048}, {200000, 4096}, {300000, 1024}, {8192, 512},
};

static double mib(uint64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

static unsigned char expert_byte(uint32_t expert)
{
    return (unsigned char)(expert * 37u + 11u);
}

static int fail(const struct engine *e, const char *what, int err)
{
    fprintf(stderr, "engine: %s: %s (%s)\n", what, vram_strerror(err),
            vram_client_last_error(e->c));
    return err;
}

/* With the host backend chunks are shared memory mapped into this process.
 * With the cuda backend the same addresses are device virtual addresses:
 * an engine writes them with cuMemcpyHtoD or cuMemsetD8, or from kernels,
 * never through a CPU pointer. */
static void fill(const struct engine *e, void *p, unsigned char byte, size_t n)
{
    if (e->host)
        memset(p, byte, n);
}

/* ---- the residency table, kept true by the event callback --------------- */

static void evict(struct engine *e, uint32_t first, uint32_t end)
{
    if (end > e->nslots)
        end = e->nslots;
    for (uint32_t s = first; s < end; s++) {
        int32_t x = e->slot_expert[s];
        if (x < 0)
            continue;
        e->expert_slot[x] = -1;
        e->claimed[x] = false;
        e->slot_expert[s] = -1;
    }
}

static void set_backed(struct engine *e, uint32_t backed)
{
    if (backed > e->nslots)
        backed = e->nslots;
    /* RECALL and EXPERT_SHRINK have evicted these already; a budget that
     * shrank some other way (a reconnect that lost chunks) has not. */
    evict(e, backed, e->nslots);
    e->backed = backed;
}

static void on_event(void *user, const struct vram_event *ev)
{
    struct engine *e = user;
    switch (ev->type) {
    case VRAM_EVENT_RECALL:
    case VRAM_EVENT_EXPERT_SHRINK:
        if (ev->stage != e->stage)
            break;
        /* The slots lose their memory when this returns. A CUDA engine
         * first waits for every kernel that may still read them (syncs the
         * streams that use them); nothing may touch them afterwards. */
        evict(e, ev->slot_first, ev->slot_end);
        set_backed(e, ev->expert_slots_backed);
        printf("  %s: expert slots [%u, %u) leave, %u stay backed\n",
               ev->type == VRAM_EVENT_RECALL ? "recall" : "expert shrink",
               ev->slot_first, ev->slot_end, ev->expert_slots_backed);
        break;
    case VRAM_EVENT_BUDGET_CHANGED:
        /* Loading experts into new slots is left to the main loop: a
         * callback runs inside a library call and should return soon. */
        if (ev->stage == e->stage)
            set_backed(e, ev->expert_slots_backed);
        break;
    case VRAM_EVENT_RECONNECTED: {
        /* Same regions, addresses and chunks: nothing to remap, no graph to
         * capture again. Chunks that could not be taken back are unmapped
         * already; what they held is gone. */
        struct vram_residency r;
        if (vram_expert_residency(e->c, e->stage, &r) == 0)
            set_backed(e, r.expert_slots_backed);
        if (ev->lost_chunks)
            e->kv_lost = true;
        printf("  reconnected to vramd: %u chunks kept, %u lost\n", ev->nchunks,
               ev->lost_chunks);
        break;
    }
    case VRAM_EVENT_STAGE_LOST:
        if (ev->stage != e->stage)
            break;
        evict(e, 0, e->nslots);
        e->backed = 0;
        e->stage_lost = true;
        printf("  stage %u lost in a reconnect: registering it again\n",
               ev->stage);
        break;
    default:
        break; /* a newer library's events */
    }
}

/* The library reads the connection only inside calls. An engine that
 * spends long stretches decoding without calling it lets recalls wait, so
 * between decode steps it handles whatever arrived, without blocking. */
static int pump_events(struct engine *e)
{
    struct pollfd p = {.fd = (int)vram_client_fd(e->c), .events = POLLIN};
    while (poll(&p, 1, 0) > 0) {
        int n = vram_client_dispatch(e->c);
        if (n < 0)
            return fail(e, "dispatch", n);
        if (n == 0)
            break; /* only part of a frame so far */
    }
    return 0;
}

/* ---- setup --------------------------------------------------------------- */

static void print_regions(const struct engine *e)
{
    uint32_t ids[16];
    int n = vram_stage_regions(e->c, e->stage, ids, 16);
    for (int i = 0; i < n && i < 16; i++) {
        struct vram_region_info ri;
        if (vram_region_info(e->c, ids[i], &ri) < 0)
            continue;
        /* Lanes of different bytes per token have different lengths. */
        int first = vram_region_lane_slots(e->c, ri.id, 0), other = first;
        for (uint32_t l = 1; l < ri.lanes; l++) {
            int s = vram_region_lane_slots(e->c, ri.id, l);
            if (s != first)
                other = s;
        }
        printf("  region %u %s: base %p, %u lane%s of %d%s slots of %g MiB, "
               "lane stride %g MiB, %u chunks mapped\n",
               ri.id, vram_region_name(e->c, ri.id), ri.base, ri.lanes,
               ri.lanes == 1 ? "" : "s", first, other != first ? " (or fewer)" : "",
               mib(ri.chunk_bytes), mib(ri.lane_stride), ri.mapped);
    }
}

static int register_stage(struct engine *e)
{
    int err = vram_stage_register(e->c, e->stage, 0, &e->info);
    if (err < 0)
        return fail(e, "register the stage", err);
    e->stage_lost = false;
    printf("registered stage %u: layers %u-%u on device %u, kv %g of %g MiB "
           "mapped\n", e->stage, e->info.first_layer, e->info.last_layer,
           e->info.device, mib(e->info.kv_mapped_bytes),
           mib(e->info.kv_max_bytes));
    print_regions(e);

    int n = vram_expert_slots(e->c, e->stage);
    if (n < 0)
        return fail(e, "expert slots", n);
    free(e->slot_expert);
    free(e->expert_slot);
    free(e->claimed);
    free(e->scratch);
    e->nslots = (uint32_t)n;
    e->backed = 0;
    e->nexperts = EXPERTS_PER_LAYER *
                  (e->info.last_layer - e->info.first_layer + 1);
    e->slot_expert = malloc((e->nslots + 1) * sizeof(*e->slot_expert));
    e->expert_slot = malloc(e->nexperts * sizeof(*e->expert_slot));
    e->claimed = calloc(e->nexperts, sizeof(*e->claimed));
    e->scratch = malloc(e->nexperts * sizeof(*e->scratch));
    if (!e->slot_expert || !e->expert_slot || !e->claimed || !e->scratch) {
        /* The callback still runs (inside close, say): no table, no slots. */
        e->nslots = e->nexperts = 0;
        fprintf(stderr, "engine: out of memory\n");
        return -ENOMEM;
    }
    for (uint32_t s = 0; s < e->nslots; s++)
        e->slot_expert[s] = -1;
    for (uint32_t x = 0; x < e->nexperts; x++)
        e->expert_slot[x] = -1;
    printf("stage %u: %u expert slots of %g MiB, %u experts in the model\n",
           e->stage, e->nslots, mib(e->info.expert_slot_bytes), e->nexperts);
    return 0;
}

/* Fixed regions are mapped by the engine when it loads them: all of it,
 * since weights stay for the life of the stage. */
static int load_weights(struct engine *e)
{
    uint32_t ids[16];
    int n = vram_stage_regions(e->c, e->stage, ids, 16);
    if (n < 0)
        return fail(e, "stage regions", n);
    for (int i = 0; i < n && i < 16; i++) {
        struct vram_region_info ri;
        if (vram_region_info(e->c, ids[i], &ri) < 0 || ri.kind != VRAM_REGION_FIXED)
            continue;
        int slots = vram_region_lane_slots(e->c, ri.id, 0);
        if (slots < 0)
            return fail(e, "fixed region slots", slots);
        if ((uint32_t)slots > ri.mapped) {
            int err = vram_region_grow(e->c, ri.id, (uint32_t)slots - ri.mapped);
            if (err < 0)
                return fail(e, "map the weights", err);
        }
        fill(e, ri.base, 0x5a, (size_t)slots * ri.chunk_bytes);
        printf("%s: %g MiB mapped at %p\n", vram_region_name(e->c, ri.id),
               mib((uint64_t)slots * ri.chunk_bytes), ri.base);
    }
    return 0;
}

/* Claims tell vramd which layer uses which slot, so that a resume after a
 * reconnect keeps them. A claim made while a recall takes the slot away is
 * refused with EINVAL: the expert is evicted by then, and claimed again
 * when it is loaded again. */
static int claim_experts(struct engine *e)
{
    uint32_t first = e->info.first_layer;
    for (uint32_t layer = first; layer <= e->info.last_layer; layer++) {
        size_t n = 0;
        uint32_t x0 = (layer - first) * EXPERTS_PER_LAYER;
        for (uint32_t x = x0; x < x0 + EXPERTS_PER_LAYER; x++)
            if (e->expert_slot[x] >= 0 && !e->claimed[x])
                e->scratch[n++] = (uint32_t)e->expert_slot[x];
        if (!n)
            continue;
        int err = vram_expert_claim(e->c, e->stage, layer, e->scratch, n);
        if (err == -EINVAL)
            continue;
        if (err < 0)
            return fail(e, "claim expert slots", err);
        for (uint32_t x = x0; x < x0 + EXPERTS_PER_LAYER; x++)
            if (e->expert_slot[x] >= 0)
                e->claimed[x] = true;
    }
    return 0;
}

/* Experts not resident go into the lowest free backed slots. */
static int load_experts(struct engine *e)
{
    uint32_t slot = 0;
    for (uint32_t x = 0; x < e->nexperts; x++) {
        if (e->expert_slot[x] >= 0)
            continue;
        while (slot < e->backed && e->slot_expert[slot] >= 0)
            slot++;
        if (slot >= e->backed)
            break;
        void *p = vram_expert_slot(e->c, e->stage, slot);
        if (!p) {
            fprintf(stderr, "engine: expert slot %u has no address\n", slot);
            return -EFAULT;
        }
        fill(e, p, expert_byte(x), e->info.expert_slot_bytes);
        e->slot_expert[slot] = (int32_t)x;
        e->expert_slot[x] = (int32_t)slot;
    }
    return claim_experts(e);
}

static uint32_t resident(const struct engine *e)
{
    uint32_t n = 0;
    for (uint32_t x = 0; x < e->nexperts; x++)
        n += e->expert_slot[x] >= 0;
    return n;
}

/* Not something an engine needs: the example checks that the experts that
 * stayed backed kept their bytes, at their addresses, while chunks moved
 * between KV and experts around them. */
static int check_experts(const struct engine *e)
{
    if (!e->host)
        return 0;
    size_t last = e->info.expert_slot_bytes - 1;
    for (uint32_t x = 0; x < e->nexperts; x++) {
        if (e->expert_slot[x] < 0)
            continue;
        const unsigned char *p =
            vram_expert_slot(e->c, e->stage, (uint32_t)e->expert_slot[x]);
        if (!p || p[0] != expert_byte(x) || p[last] != expert_byte(x)) {
            fprintf(stderr, "engine: expert %u in slot %d lost its bytes\n", x,
                    e->expert_slot[x]);
            return -EIO;
        }
    }
    return 0;
}

/* ---- serving --------------------------------------------------------------- */

/* Attention kernels would write the tokens' K and V into the lanes. The
 * first page of each chunk is enough to show that every slot of each
 * lane's mapped prefix is usable (an unmapped one would fault) without
 * making the example slow. Returns the chunks written. */
static int write_kv(struct engine *e, const struct vram_region_info *kv,
                    unsigned char tag)
{
    size_t page = kv->chunk_bytes < 4096 ? kv->chunk_bytes : 4096;
    int written = 0;
    for (uint32_t lane = 0; lane < kv->lanes; lane++) {
        int slots = vram_region_lane_slots(e->c, kv->id, lane);
        for (int s = 0; s < slots; s++) {
            if (vram_region_chunk(e->c, kv->id, lane, (uint32_t)s, NULL) < 0)
                break;
            fill(e, vram_region_slot(e->c, kv->id, lane, (uint32_t)s), tag, page);
            written++;
        }
    }
    return written;
}

/* Everything a stage needs before it serves: at start, and again after a
 * reconnect lost it. */
static int setup_stage(struct engine *e)
{
    int err = register_stage(e);
    if (err == 0)
        err = load_weights(e);
    if (err < 0)
        return err;
    /* 0: every loan the stage may have. Getting less, or none, is fine. */
    if ((err = vram_expert_request(e->c, e->stage, 0)) < 0)
        return fail(e, "expert loans", err);
    if ((err = load_experts(e)) < 0)
        return err;
    printf("experts: %u slots backed, %u experts resident\n", e->backed,
           resident(e));
    return 0;
}

static int serve(struct engine *e, unsigned n, const struct request *rq)
{
    int err;
    if (e->stage_lost && (err = setup_stage(e)) < 0)
        return err;
    /* HOLD: wait (up to the stage's hold_ms) for other clients to give
     * back loans rather than fail with EAGAIN at once. */
    struct vram_kv_result r;
    err = vram_kv_reserve(e->c, e->stage, rq->prompt, rq->output, VRAM_KV_HOLD,
                          &r);
    if (err == -E2BIG) {
        /* Longer than the model's native context: the daemon never
         * clamps, so the request is refused here, and the next served. */
        printf("request %u: %" PRIu64 "+%" PRIu64 " tokens: refused: %s\n", n,
               rq->prompt, rq->output, vram_client_last_error(e->c));
        return 0;
    }
    /* A server would put a request that met -ETIMEDOUT (other clients did
     * not give memory back within hold_ms) back in its queue; here every
     * other error is unexpected. */
    if (err < 0)
        return fail(e, "kv reserve", err);
    printf("request %u: %" PRIu64 "+%" PRIu64 " tokens: kv %g MiB mapped, %u "
           "expert slots backed, %u experts resident\n", n, rq->prompt,
           rq->output, mib(r.kv_mapped_bytes), r.expert_slots_backed,
           resident(e));
    if ((err = check_experts(e)) < 0)
        return err;

    struct vram_region_info kv;
    if ((err = vram_region_info(e->c, e->info.kv_region, &kv)) < 0)
        return fail(e, "kv region", err);
    int chunks = write_kv(e, &kv, (unsigned char)n);
    if ((uint64_t)chunks * kv.chunk_bytes != r.kv_mapped_bytes) {
        fprintf(stderr, "engine: %d KV chunks in the lanes' prefixes, %g MiB "
                "mapped\n", chunks, mib(r.kv_mapped_bytes));
        return -EIO;
    }
    if ((err = pump_events(e)) < 0)
        return err;
    if (e->kv_lost) {
        /* A reconnect lost chunks (unmapped now): map the budget again and
         * recompute what they held. */
        e->kv_lost = false;
        err = vram_kv_reserve(e->c, e->stage, rq->prompt, rq->output,
                              VRAM_KV_HOLD, &r);
        if (err < 0)
            return fail(e, "kv reserve after a reconnect", err);
        write_kv(e, &kv, (unsigned char)n);
    }

    /* The request is done: the KV beyond the initial window goes back to
     * expert loans (or to the pool), and the experts it evicted come back. */
    if ((err = vram_kv_trim(e->c, e->stage, 0)) < 0)
        return fail(e, "kv trim", err);
    if ((err = load_experts(e)) < 0)
        return err;
    struct vram_stage_info si;
    if ((err = vram_stage_info(e->c, e->stage, &si)) < 0)
        return fail(e, "stage info", err);
    printf("request %u: trimmed: kv %g MiB mapped, %u expert slots backed, %u "
           "experts resident\n", n, mib(si.kv_mapped_bytes),
           si.expert_slots_backed, resident(e));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 3 || (argc > 1 && (strcmp(argv[1], "-h") == 0 ||
                                  strcmp(argv[1], "--help") == 0))) {
        fprintf(stderr, "usage: %s [SOCKET [STAGE]]\n", argv[0]);
        return 2;
    }
    const char *path = argc > 1 && argv[1][0] ? argv[1] : NULL;
    uint32_t stage = 0;
    if (argc > 2) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(argv[2], &end, 10);
        if (errno || *end || end == argv[2] || v > UINT32_MAX) {
            fprintf(stderr, "engine: '%s' is not a stage id\n", argv[2]);
            return 2;
        }
        stage = (uint32_t)v;
    }

    char why[512] = "";
    struct vram_client_options opt = {.name = "example-engine", .error = why,
                                      .error_len = sizeof(why)};
    struct engine e = {.stage = stage};
    int status = 1;
    int err = vram_client_connect(path, &opt, &e.c);
    if (err < 0) {
        fprintf(stderr, "engine: %s\n", why[0] ? why : vram_strerror(err));
        return 1;
    }
    e.host = strcmp(vram_client_backend(e.c), "host") == 0;
    printf("connected as client %u (backend %s)\n", vram_client_id(e.c),
           vram_client_backend(e.c));
    /* Before registering: events may come with any call from now on. */
    vram_client_set_event_callback(e.c, on_event, &e);

    if (setup_stage(&e) < 0)
        goto cleanup;
    for (size_t i = 0; i < sizeof(requests) / sizeof(requests[0]); i++)
        if (serve(&e, (unsigned)i + 1, &requests[i]) < 0)
            goto cleanup;
    status = 0;
    printf("engine: done\n");

cleanup:
    /* Releases the stages: their memory goes back to vramd's pool at once.
     * The callback can still run in here, so the tables outlive it. */
    vram_client_close(e.c);
    free(e.slot_expert);
    free(e.expert_slot);
    free(e.claimed);
    free(e.scratch);
    return status;
}
