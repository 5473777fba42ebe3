/* The GPU suite: vramd's cuda backend on real cards (run by scripts/gpu.sh).
 * Each subtest runs in its own process, forked before anything touches
 * CUDA, so it may fork clients of its own. On one GPU both stages share
 * GPU 0 (the seed's split in seed-pp32-16-1gpu.json, same figures) and the
 * subtests that need two GPUs say "skipped: one GPU".
 *
 *   retention   data and addresses survive KV grow, trim, loans and recalls;
 *               a moved chunk keeps its bytes; chunks live on their stage's
 *               own GPU
 *   graph       a CUDA graph captured over brokered KV and expert memory is
 *               replayed after budget changes, without recapture
 *   peer        with peer access asked, GPU 0 writes GPU 1's chunk; a chunk
 *               of GPU 1 offered to a region of GPU 0 is refused (foreign)
 *   nop2p       with cuda.peer_access "off" (the seed's consumer pair has no
 *               P2P) no chunk is mapped for another GPU, even when asked
 *   scrub       a chunk another client wrote comes back zeroed
 *   killed      a client killed during a recall: its chunks go to the
 *               waiting client only after its process is gone
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "harness.h"

#define CK(call)                                                               \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != CUDA_SUCCESS) {                                              \
            const char *n_ = NULL;                                             \
            cuGetErrorName(r_, &n_);                                           \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,      \
                    #call, n_ ? n_ : "?");                                     \
            exit(2);                                                           \
        }                                                                      \
    } while (0)

/* p[i] += add for i < n: JIT-compiled by the driver, no nvcc needed. */
static const char bump_ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry bump(.param .u64 p, .param .u32 n, .param .u32 add)\n{\n"
    "  .reg .b32 %r<8>;\n  .reg .b64 %rd<5>;\n  .reg .pred %p1;\n"
    "  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r1, [n];\n"
    "  ld.param.u32 %r2, [add];\n  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n"
    "  mad.lo.s32 %r6, %r3, %r4, %r5;\n  setp.ge.u32 %p1, %r6, %r1;\n"
    "  @%p1 bra DONE;\n  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.u32 %rd3, %r6, 4;\n  add.s64 %rd4, %rd2, %rd3;\n"
    "  ld.global.u32 %r7, [%rd4];\n  add.s32 %r7, %r7, %r2;\n"
    "  st.global.u32 [%rd4], %r7;\nDONE:\n  ret;\n}\n";

#define CHUNK (2 * MIB)
#define WORDS (CHUNK / 4)

static char scenario[512];
static int ngpu;  /* GPUs the driver shows */
static int gpu_b; /* the second stage's GPU: 1, or 0 on one GPU */

/* A subtest's exit code when it cannot run here (and says why). */
#define SKIPPED 77

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    REQUIRE(f, "cannot open %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static CUcontext ctx_for(int dev)
{
    CUdevice d;
    CUcontext c;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, dev));
    CK(cuDevicePrimaryCtxRetain(&c, d));
    CK(cuCtxSetCurrent(c));
    return c;
}

static uint32_t word_at(CUdeviceptr p)
{
    uint32_t v = 0;
    CK(cuMemcpyDtoH(&v, p, 4));
    return v;
}

/* Every word of a chunk equals want? */
static bool chunk_is(CUdeviceptr p, uint32_t want)
{
    static uint32_t buf[WORDS];
    CK(cuMemcpyDtoH(buf, p, CHUNK));
    for (size_t i = 0; i < WORDS; i++)
        if (buf[i] != want)
            return false;
    return true;
}

static CUdeviceptr slot(vram_client *c, uint32_t region, uint32_t lane, uint32_t s)
{
    return (CUdeviceptr)(uintptr_t)vram_region_slot(c, region, lane, s);
}

static vram_client *connect_cuda(const struct daemon *d, const char *name)
{
    vram_client *c = connect_client(d, name);
    REQUIRE(strcmp(vram_client_backend(c), "cuda") == 0, "daemon backend is %s",
            vram_client_backend(c));
    return c;
}

/* ---- retention and addresses -------------------------------------------- */

static int t_retention(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, read_file(scenario), NULL) == 0, "start vramd");
    vram_client *c = connect_cuda(&d, "gpu-retention");
    struct vram_stage_info s0, s1;
    REQUIRE(vram_stage_register(c, 0, 0, &s0) == 0, "register 0: %s",
            vram_client_last_error(c));
    REQUIRE(vram_stage_register(c, 1, 0, &s1) == 0, "register 1: %s",
            vram_client_last_error(c));
    REQUIRE(vram_expert_request(c, 0, 0) == 0, "loans: %s", vram_client_last_error(c));
    struct vram_region_info kv0, ex0, kv1;
    vram_region_info(c, s0.kv_region, &kv0);
    vram_region_info(c, s0.expert_region, &ex0);
    vram_region_info(c, s1.kv_region, &kv1);
    ctx_for(0);

    /* Owning-device correctness: stage 1's memory is on GPU 1. */
    REQUIRE(vram_kv_reserve(c, 1, 8192, 1024, VRAM_KV_HOLD, NULL) == 0, "s1 kv");
    int ord = -1;
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                             slot(c, s1.kv_region, 9, 0)));
    CHECK(ord == gpu_b, "stage 1's KV lives on GPU %d, not %d", ord, gpu_b);
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                             slot(c, s0.kv_region, 0, 0)));
    CHECK(ord == 0, "stage 0's KV lives on GPU %d", ord);

    /* Initial window: 5 chunks per lane; expert loans fill the rest. */
    for (uint32_t l = 0; l < 16; l++)
        for (uint32_t i = 0; i < 5; i++)
            CK(cuMemsetD32(slot(c, s0.kv_region, l, i), 0x10000 + l * 100 + i, WORDS));
    struct vram_residency res;
    vram_expert_residency(c, 0, &res);
    uint32_t loan_chunks = (uint32_t)(res.expert_loaned_bytes / CHUNK);
    CHECK_EQ_U(loan_chunks, 976);
    for (uint32_t k = 0; k < loan_chunks; k++)
        CK(cuMemsetD32(slot(c, s0.expert_region, 0, k), 0xE0000000u + k, WORDS));

    /* Grow to 73,728 tokens: 14 more chunks per lane, all taken from the
     * stage's own loans (the tail of the expert region), moved, not copied. */
    struct vram_kv_result r;
    REQUIRE(vram_kv_reserve(c, 0, 65536, 1024, VRAM_KV_HOLD, &r) == 0, "grow");
    CHECK_EQ_U(r.recalled_chunks, 16 * 14);
    /* The moved chunks keep the expert bytes they had. */
    uint32_t seen_moved = 0;
    for (uint32_t l = 0; l < 16; l++)
        for (uint32_t i = 5; i < 19; i++) {
            uint32_t w = word_at(slot(c, s0.kv_region, l, i));
            seen_moved += (w & 0xF0000000u) == 0xE0000000u &&
                          (w - 0xE0000000u) >= loan_chunks - 16 * 14;
        }
    CHECK_EQ_U(seen_moved, 16 * 14);
    /* KV written before keeps its data; remaining expert slots too. */
    for (uint32_t l = 0; l < 16; l++)
        for (uint32_t i = 0; i < 5; i++)
            CHECK(chunk_is(slot(c, s0.kv_region, l, i), 0x10000 + l * 100 + i),
                  "KV lane %u slot %u lost its data", l, i);
    for (uint32_t k = 0; k < loan_chunks - 16 * 14; k += 37)
        CHECK(chunk_is(slot(c, s0.expert_region, 0, k), 0xE0000000u + k),
              "expert chunk %u lost its data", k);

    /* Trim: the surplus goes back to expert loans, again by moving. */
    for (uint32_t l = 0; l < 16; l++)
        for (uint32_t i = 5; i < 19; i++)
            CK(cuMemsetD32(slot(c, s0.kv_region, l, i), 0x20000 + l * 100 + i, WORDS));
    REQUIRE(vram_kv_trim(c, 0, 0) == 0, "trim");
    vram_expert_residency(c, 0, &res);
    CHECK_EQ_U(res.expert_loaned_bytes, 976 * CHUNK);
    uint32_t back = 0;
    for (uint32_t k = 976 - 16 * 14; k < 976; k++)
        back += (word_at(slot(c, s0.expert_region, 0, k)) & 0xFFFF0000u) == 0x20000;
    CHECK_EQ_U(back, 16 * 14);

    /* The whole window, then back: addresses never moved. */
    REQUIRE(vram_kv_reserve(c, 0, 261000, 1024, VRAM_KV_HOLD, &r) == 0, "262K");
    CHECK_EQ_U(r.kv_mapped_bytes, 2112 * MIB);
    CK(cuMemsetD32(slot(c, s0.kv_region, 15, 65), 0x5A5A5A5A, WORDS));
    CHECK(chunk_is(slot(c, s0.kv_region, 15, 65), 0x5A5A5A5A), "last KV chunk");
    REQUIRE(vram_kv_trim(c, 0, 0) == 0, "trim 2");
    struct vram_region_info kv0b, ex0b, kv1b;
    vram_region_info(c, s0.kv_region, &kv0b);
    vram_region_info(c, s0.expert_region, &ex0b);
    vram_region_info(c, s1.kv_region, &kv1b);
    CHECK(kv0b.base == kv0.base && ex0b.base == ex0.base && kv1b.base == kv1.base,
          "a region moved");
    for (uint32_t l = 0; l < 16; l++)
        for (uint32_t i = 0; i < 5; i++)
            CHECK(chunk_is(slot(c, s0.kv_region, l, i), 0x10000 + l * 100 + i),
                  "KV lane %u slot %u lost its data after 262K", l, i);
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("gpu retention");
}

/* What device dev may do with the memory at p. */
static unsigned long long access_flags(CUdeviceptr p, int dev)
{
    unsigned long long flags = 0;
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CK(cuMemGetAccess(&flags, &loc, p));
    return flags;
}

/* A client asking for peer access, with an ad-hoc stage and a 16 MiB fixed
 * region of two chunks on each of GPUs 0 and 1. */
static vram_client *two_gpu_client(const struct daemon *d, const char *name,
                                   uint32_t *r0, uint32_t *r1)
{
    char err[256] = "";
    struct vram_client_options o = {.name = name, .peer_access = 1,
                                    .error = err, .error_len = sizeof(err)};
    vram_client *c;
    REQUIRE(vram_client_connect(d->sock, &o, &c) == 0, "connect: %s", err);
    uint32_t s0, s1;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 31, &s0) == 0, "stage 0: %s", vram_client_last_error(c));
    REQUIRE(vram_stage_register_adhoc(c, 1, 32, 47, &s1) == 0, "stage 1: %s", vram_client_last_error(c));
    REQUIRE(vram_region_create(c, s0, VRAM_REGION_FIXED, 16 * MIB, 1, r0) == 0, "r0: %s", vram_client_last_error(c));
    REQUIRE(vram_region_create(c, s1, VRAM_REGION_FIXED, 16 * MIB, 1, r1) == 0, "r1: %s", vram_client_last_error(c));
    REQUIRE(vram_region_grow(c, *r0, 2) == 0, "grow r0: %s", vram_client_last_error(c));
    REQUIRE(vram_region_grow(c, *r1, 2) == 0, "grow r1: %s", vram_client_last_error(c));
    return c;
}

/* ---- peer access and foreign chunks ------------------------------------ */

static int t_peer(void)
{
    if (ngpu < 2) {
        printf("gpu peer: skipped: one GPU (peer access and foreign chunks "
               "need chunks of two GPUs)\n");
        return SKIPPED;
    }
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    uint32_t r0, r1;
    vram_client *c = two_gpu_client(&d, "gpu-peer", &r0, &r1);
    CUdevice g0, g1;
    int can = 0;
    ctx_for(0);
    CK(cuDeviceGet(&g0, 0));
    CK(cuDeviceGet(&g1, 1));
    CK(cuDeviceCanAccessPeer(&can, g0, g1));
    CUdeviceptr far = slot(c, r1, 0, 0);
    CK(cuMemsetD32(far, 7, WORDS));
    CK(cuCtxSynchronize());
    if (can) {
        /* A kernel on GPU 0 writes GPU 1's chunk through the same address. */
        CUmodule mod;
        CUfunction bump;
        CK(cuModuleLoadData(&mod, bump_ptx));
        CK(cuModuleGetFunction(&bump, mod, "bump"));
        unsigned n = WORDS, add = 5;
        void *args[] = {&far, &n, &add};
        CK(cuLaunchKernel(bump, WORDS / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        CK(cuCtxSynchronize());
        CHECK(chunk_is(far, 12), "GPU 0's write through peer access is missing");
        CHECK(access_flags(far, 0) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
              "GPU 1's chunk is not mapped for GPU 0");
        CK(cuModuleUnload(mod));
    } else {
        printf("gpu peer: GPUs 0 and 1 have no peer access; owner-only mapping\n");
    }
    /* Foreign chunk: GPU 1's chunk offered to a region of GPU 0. */
    int e = vram_region_move_chunk(c, r1, 0, 1, r0, 0, 5);
    CHECK(e == -EXDEV, "foreign chunk accepted: %d %s", e, vram_client_last_error(c));
    CK(cuMemsetD32(slot(c, r1, 0, 1), 0x77, WORDS));
    CHECK(chunk_is(slot(c, r1, 0, 1), 0x77), "refused chunk not usable in place");
    /* A chunk of the same device moves and keeps its bytes. */
    CK(cuMemsetD32(slot(c, r0, 0, 1), 0x1234, WORDS));
    REQUIRE(vram_region_move_chunk(c, r0, 0, 1, r0, 0, 6) == 0, "move: %s",
            vram_client_last_error(c));
    CHECK(chunk_is(slot(c, r0, 0, 6), 0x1234), "moved chunk lost its bytes");
    int ord = -1;
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, far));
    CHECK(ord == 1, "GPU 1's chunk reports GPU %d", ord);
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("gpu peer");
}

/* ---- graphs ------------------------------------------------------------- */

static int t_graph(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, read_file(scenario), NULL) == 0, "start vramd");
    vram_client *c = connect_cuda(&d, "gpu-graph");
    struct vram_stage_info s0;
    REQUIRE(vram_stage_register(c, 0, 0, &s0) == 0, "register");
    REQUIRE(vram_expert_request(c, 0, 0) == 0, "loans");
    ctx_for(0);
    CUmodule mod;
    CUfunction bump;
    CK(cuModuleLoadData(&mod, bump_ptx));
    CK(cuModuleGetFunction(&bump, mod, "bump"));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    /* Memory the graph uses: KV lanes' first chunks (always within the
     * initial window) and expert chunks 0..7 (the head of the loans). */
    CUdeviceptr targets[24];
    int nt = 0;
    for (uint32_t l = 0; l < 16; l++)
        targets[nt++] = slot(c, s0.kv_region, l, 0);
    for (uint32_t k = 0; k < 8; k++)
        targets[nt++] = slot(c, s0.expert_region, 0, k);
    for (int i = 0; i < nt; i++)
        CK(cuMemsetD32(targets[i], 1000u * (unsigned)i, WORDS));

    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    unsigned n = WORDS, add = 1;
    for (int i = 0; i < nt; i++) {
        void *args[] = {&targets[i], &n, &add};
        CK(cuLaunchKernel(bump, WORDS / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
    }
    CUgraph g;
    CUgraphExec ge;
    CK(cuStreamEndCapture(s, &g));
    CK(cuGraphInstantiate(&ge, g, 0));
    CK(cuGraphLaunch(ge, s));
    CK(cuStreamSynchronize(s));
    for (int i = 0; i < nt; i++)
        CHECK(chunk_is(targets[i], 1000u * (unsigned)i + 1), "first replay, target %d", i);

    /* Budget changes: grow (recalls loans from the tail), trim (lends back),
     * a bigger grow, trim. The head of the expert region stays backed. */
    static const uint64_t prompts[] = {65536, 131072, 32768, 200000};
    for (int k = 0; k < 4; k++) {
        REQUIRE(vram_kv_reserve(c, 0, prompts[k], 1024, VRAM_KV_HOLD, NULL) == 0,
                "reserve %llu", (unsigned long long)prompts[k]);
        CK(cuGraphLaunch(ge, s)); /* no recapture */
        CK(cuStreamSynchronize(s));
        REQUIRE(vram_kv_trim(c, 0, 0) == 0, "trim");
        CK(cuGraphLaunch(ge, s));
        CK(cuStreamSynchronize(s));
    }
    for (int i = 0; i < nt; i++)
        CHECK(chunk_is(targets[i], 1000u * (unsigned)i + 9),
              "after 8 replays across budget changes, target %d", i);
    struct vram_residency res;
    vram_expert_residency(c, 0, &res);
    CHECK(res.version >= 9, "residency version %llu", (unsigned long long)res.version);
    CK(cuGraphExecDestroy(ge));
    CK(cuGraphDestroy(g));
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("gpu graph");
}

/* ---- confidentiality ---------------------------------------------------- */

static int writer(const struct daemon *d, void *p)
{
    uint32_t *rounds = p;
    vram_client *c = connect_cuda(d, "gpu-writer");
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, (uint32_t)gpu_b, 0, 1, &st) == 0, "register");
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 256 * MIB, 1, &r) == 0, "region");
    REQUIRE(vram_region_grow(c, r, *rounds) == 0, "grow");
    ctx_for(gpu_b);
    for (uint32_t i = 0; i < *rounds; i++)
        CK(cuMemsetD32(slot(c, r, 0, i), 0xDEADBEEF, WORDS));
    CK(cuCtxSynchronize());
    vram_client_close(c);
    return 0;
}

static int confidentiality(const char *config, bool assert_clean)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    uint32_t n = 64;
    pid_t w = spawn(writer, &d, &n);
    CHECK(wait_child(w) == 0, "writer failed");
    usleep(300000); /* returned chunks are scrubbed from the idle loop */
    vram_client *c = connect_cuda(&d, "gpu-reader");
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, (uint32_t)gpu_b, 0, 1, &st) == 0, "register");
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 256 * MIB, 1, &r) == 0, "region");
    REQUIRE(vram_region_grow(c, r, n) == 0, "grow");
    ctx_for(gpu_b);
    static uint32_t buf[WORDS];
    uint32_t leaked = 0, zero = 0;
    for (uint32_t i = 0; i < n; i++) {
        CK(cuMemcpyDtoH(buf, slot(c, r, 0, i), CHUNK));
        bool any = false, all0 = true;
        for (size_t k = 0; k < WORDS; k++) {
            any |= buf[k] == 0xDEADBEEF;
            all0 &= buf[k] == 0;
        }
        leaked += any;
        zero += all0;
    }
    printf("{\"bench\":\"confidentiality\",\"config\":\"%s\",\"chunks\":%u,"
           "\"with_previous_bytes\":%u,\"all_zero\":%u}\n",
           strstr(config, "fresh") ? "fresh" : "zero", n, leaked, zero);
    if (assert_clean) {
        CHECK(leaked == 0, "%u chunks showed the previous client's bytes", leaked);
        CHECK(zero == n, "%u of %u chunks were not zeroed", n - zero, n);
    }
    vram_client_close(c);
    daemon_stop(&d);
    return 0;
}

/* The devices part of a config: GPUs 0 and 1 of `each`, or GPU 0 alone. */
static const char *devices_json(const char *each, const char *extra0)
{
    static char buf[4][256];
    static int k;
    char *b = buf[k++ % 4];
    if (ngpu > 1)
        snprintf(b, 256, "[{\"id\": 0, \"capacity\": \"%s\"%s},"
                 " {\"id\": 1, \"capacity\": \"%s\"}]", each, extra0, each);
    else
        snprintf(b, 256, "[{\"id\": 0, \"capacity\": \"%s\"%s}]", each, extra0);
    return b;
}

static int t_scrub(void)
{
    char zero[512], fresh[512];
    snprintf(zero, sizeof(zero), "{\"devices\": %s, \"pool\": {\"prefill_chunks\": 64},"
             " \"cuda\": {\"scrub\": \"zero\"}}", devices_json("1GiB", ""));
    snprintf(fresh, sizeof(fresh), "{\"devices\": %s, \"pool\": {\"prefill_chunks\": 0},"
             " \"cuda\": {\"scrub\": \"fresh\"}}", devices_json("1GiB", ""));
    /* Each phase in a process of its own: its reader starts CUDA, and the
     * next phase's writer must be forked from a process that has not. */
    const char *configs[2] = {zero, fresh};
    for (int i = 0; i < 2; i++) {
        fflush(NULL);
        pid_t p = fork();
        if (p == 0) {
            /* zero: the daemon clears; fresh: the driver does (and vramd's
             * default relies on it, so it is asserted too) */
            confidentiality(configs[i], true);
            exit(check_failures ? 1 : 0);
        }
        CHECK(wait_child(p) == 0, "scrub phase %d failed", i);
    }
    return check_report("gpu scrub");
}

/* ---- no-P2P mode -------------------------------------------------------- */

/* cuda.peer_access "off": the seed's consumer pair has no P2P, and a host
 * whose GPUs have it behaves the same way: vramd lists no peers, and a
 * client that asks for peer access still maps each chunk for its own GPU
 * only (engines copy through the host, as they must there). */
static int t_nop2p(void)
{
    if (ngpu < 2) {
        printf("gpu nop2p: skipped: one GPU (the no-P2P mode is about "
               "mapping one GPU's chunks for another)\n");
        return SKIPPED;
    }
    char cfg[512];
    snprintf(cfg, sizeof(cfg), "{\"devices\": %s, \"pool\": {\"prefill_chunks\": 0},"
             " \"cuda\": {\"peer_access\": \"off\"}}", devices_json("256MiB", ""));
    struct daemon d;
    REQUIRE(daemon_start(&d, cfg, NULL) == 0, "start vramd");
    cJSON *st = daemon_status(&d);
    const cJSON *devs = cJSON_GetObjectItem(st, "devices");
    for (int i = 0; i < cJSON_GetArraySize(devs); i++) {
        const cJSON *pa = cJSON_GetObjectItem(cJSON_GetArrayItem(devs, i),
                                              "peer_access");
        CHECK(cJSON_GetArraySize(pa) == 0, "device %d lists %d peers", i,
              cJSON_GetArraySize(pa));
    }
    cJSON_Delete(st);
    uint32_t r0, r1;
    vram_client *c = two_gpu_client(&d, "gpu-nop2p", &r0, &r1);
    ctx_for(0);
    CUdevice g0, g1;
    int can = 0;
    CK(cuDeviceGet(&g0, 0));
    CK(cuDeviceGet(&g1, 1));
    CK(cuDeviceCanAccessPeer(&can, g0, g1));
    CUdeviceptr near = slot(c, r0, 0, 0), far = slot(c, r1, 0, 0);
    CHECK(access_flags(near, 0) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          "GPU 0 cannot access its own chunk");
    CHECK(access_flags(far, 1) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          "GPU 1 cannot access its own chunk");
    CHECK(access_flags(far, 0) == 0 && access_flags(near, 1) == 0,
          "a chunk is mapped for the other GPU with peer access off "
          "(the hardware %s P2P)", can ? "has" : "has no");
    CK(cuMemsetD32(far, 9, WORDS));
    CK(cuCtxSynchronize());
    CHECK(chunk_is(far, 9), "GPU 1's chunk is not usable by its own GPU");
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("gpu nop2p");
}

/* ---- a client killed during a recall ------------------------------------ */

static char loan_config[1024];
static const char loan_stages[] =
    " \"pool\": {\"prefill_chunks\": 8},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\","
    "   \"loan\": {\"recall_deadline_ms\": 400, \"hold_ms\": 8000}},"
    "  {\"id\": 1, \"device\": 0, \"first_layer\": 16, \"last_layer\": 31,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\","
    "   \"loan\": {\"recall_deadline_ms\": 400, \"hold_ms\": 8000}}]}";

static int hog(const struct daemon *d, void *p)
{
    struct rendezvous *rv = p;
    vram_client *c = connect_cuda(d, "gpu-hog");
    struct vram_stage_info in;
    REQUIRE(vram_stage_register(c, 0, 0, &in) == 0, "register: %s",
            vram_client_last_error(c));
    REQUIRE(vram_expert_request(c, 0, 0) == 0, "loans");
    ctx_for(0);
    struct vram_residency res;
    vram_expert_residency(c, 0, &res);
    for (uint32_t k = 0; k < res.expert_slots_backed; k++)
        CK(cuMemsetD32(slot(c, in.expert_region, 0, k), 0xABCD0000u + k, WORDS));
    CK(cuCtxSynchronize());
    rv_send(rv->to_parent[1], res.expert_slots_backed);
    pause(); /* never answers the recall; killed here */
    return 0;
}

static int t_killed(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, loan_config, NULL) == 0, "start vramd");
    struct rendezvous rv;
    rv_init(&rv);
    pid_t a = spawn(hog, &d, &rv);
    uint64_t slots = rv_recv(rv.to_parent[0]);
    CHECK(slots > 200, "hog holds %llu slots", (unsigned long long)slots);
    pid_t killer = fork();
    if (killer == 0) {
        usleep(1500000); /* past the 400 ms recall deadline, inside the hold */
        kill(a, SIGKILL);
        _exit(0);
    }
    vram_client *b = connect_cuda(&d, "gpu-waiter");
    struct vram_stage_info in;
    REQUIRE(vram_stage_register(b, 1, 0, &in) == 0, "register B");
    struct vram_kv_result r;
    int e = vram_kv_reserve(b, 1, 200000, 1000, VRAM_KV_HOLD, &r);
    CHECK(e == 0, "B's held reserve: %s", vram_client_last_error(b));
    CHECK_EQ_U(r.kv_mapped_bytes, 25 * CHUNK);
    wait_child(killer);
    CHECK(wait_child(a) == 128 + SIGKILL, "hog was not killed");
    CHECK(daemon_log_contains(&d, "missed the 400 ms recall deadline"),
          "missed deadline not logged");
    /* Ordering: the hog's chunks were freed (process gone) before any grant
     * to B. */
    FILE *f = fopen(d.log, "r");
    char line[1024];
    int gone = 0, granted = 0, n = 0;
    while (fgets(line, sizeof(line), f)) {
        n++;
        if (!gone && strstr(line, "is gone:"))
            gone = n;
        /* The registration maps at once (its initial window is never
         * lent); the held reserve waits for the rest: its grant. */
        if (!granted && strstr(line, "of stage 1 granted"))
            granted = n;
    }
    fclose(f);
    CHECK(gone && granted && gone < granted,
          "grant (line %d) did not wait for the holder to be gone (line %d)",
          granted, gone);
    /* B's memory is zeroed memory, not the hog's. */
    ctx_for(0);
    uint32_t dirty = 0;
    for (uint32_t i = 0; i < 25; i++)
        dirty += !chunk_is(slot(b, in.kv_region, 0, i), 0);
    CHECK(dirty == 0, "%u of B's chunks were not zero", dirty);
    vram_client_close(b);
    daemon_stop(&d);
    return check_report("gpu killed");
}

/* ---- vramd restarted under a CUDA engine ------------------------------- */

static int restarted;
static void on_restart_event(void *u, const struct vram_event *ev)
{
    (void)u;
    restarted += ev->type == VRAM_EVENT_RECONNECTED;
}

/* The engine's imported handles keep the GPU memory alive while vramd is
 * down; the restarted vramd gives the same chunks back at the same
 * addresses, and when they are finally released, the chunk ids it grants
 * again are new, zeroed memory. */
static int t_restart(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, loan_config, NULL) == 0, "start vramd");
    vram_client *c = connect_cuda(&d, "gpu-restart");
    vram_client_set_event_callback(c, on_restart_event, NULL);
    struct vram_stage_info in;
    REQUIRE(vram_stage_register(c, 0, 0, &in) == 0, "register: %s",
            vram_client_last_error(c));
    REQUIRE(vram_expert_request(c, 0, 0) == 0, "loans");
    ctx_for(0);
    struct vram_residency res;
    vram_expert_residency(c, 0, &res);
    uint32_t kv = (uint32_t)(in.kv_mapped_bytes / CHUNK), ex = res.expert_slots_backed;
    for (uint32_t i = 0; i < kv; i++)
        CK(cuMemsetD32(slot(c, in.kv_region, 0, i), 0x4B560000u + i, WORDS));
    for (uint32_t k = 0; k < ex; k++)
        CK(cuMemsetD32(slot(c, in.expert_region, 0, k), 0xE0000000u + k, WORDS));
    CK(cuCtxSynchronize());
    cJSON *st = daemon_status(&d);
    uint64_t granted = status_dev(st, 0, "granted_bytes") +
                       status_dev(st, 0, "loaned_bytes");
    cJSON_Delete(st);

    daemon_kill(&d);
    /* With vramd gone the memory is still ours: read it. */
    CHECK(chunk_is(slot(c, in.kv_region, 0, 0), 0x4B560000u), "KV while vramd is down");
    REQUIRE(daemon_restart(&d, loan_config, NULL) == 0, "restart vramd");
    st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "quarantined_bytes"), granted);
    cJSON_Delete(st);

    /* The next call reconnects and resumes; the KV grows from own loans. */
    struct vram_kv_result r;
    REQUIRE(vram_kv_reserve(c, 0, 100000, 1000, VRAM_KV_HOLD, &r) == 0,
            "reserve after the restart: %s", vram_client_last_error(c));
    CHECK_EQ_U(restarted, 1);
    for (uint32_t i = 0; i < kv; i++)
        CHECK(chunk_is(slot(c, in.kv_region, 0, i), 0x4B560000u + i),
              "KV chunk %u lost its data across the restart", i);
    vram_expert_residency(c, 0, &res);
    for (uint32_t k = 0; k < res.expert_slots_backed; k += 7)
        CHECK(chunk_is(slot(c, in.expert_region, 0, k), 0xE0000000u + k),
              "expert chunk %u lost its data across the restart", k);
    st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "quarantined_bytes"), 0);
    cJSON_Delete(st);
    /* Released, the same chunk ids come back from the new vramd as new,
     * zeroed GPU memory. */
    REQUIRE(vram_stage_release(c, 0) == 0, "release");
    struct vram_stage_info in2;
    REQUIRE(vram_stage_register(c, 0, 0, &in2) == 0, "register again: %s",
            vram_client_last_error(c));
    REQUIRE(vram_kv_reserve(c, 0, 100000, 1000, VRAM_KV_HOLD, &r) == 0,
            "reserve again");
    uint32_t dirty = 0, n = (uint32_t)(r.kv_mapped_bytes / CHUNK);
    for (uint32_t i = 0; i < n; i++)
        dirty += !chunk_is(slot(c, in2.kv_region, 0, i), 0);
    CHECK(dirty == 0, "%u of %u chunks granted after the restart were not zero",
          dirty, n);
    vram_client_close(c);
    daemon_stop(&d);
    return check_report("gpu restart");
}

/* How many GPUs the driver shows, asked in a child so that this process
 * starts no CUDA before it forks the subtests. */
static int count_gpus(void)
{
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
        int n = 0;
        if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS)
            n = 0;
        _exit(n > 100 ? 100 : n);
    }
    return wait_child(p);
}

int main(int argc, char **argv)
{
    ngpu = count_gpus();
    if (ngpu < 1) {
        fprintf(stderr, "test_gpu: no CUDA device (the driver shows none)\n");
        return 1;
    }
    gpu_b = ngpu > 1 ? 1 : 0;
    printf("test_gpu: %d GPU%s; stage 1 on GPU %d\n", ngpu, ngpu > 1 ? "s" : "",
           gpu_b);
    snprintf(scenario, sizeof(scenario), "%s/tests/scenarios/%s",
             getenv("VRAM_SOURCE_DIR") ? getenv("VRAM_SOURCE_DIR") : ".",
             ngpu > 1 ? "seed-pp32-16.json" : "seed-pp32-16-1gpu.json");
    snprintf(loan_config, sizeof(loan_config), "{\"devices\": %s,%s",
             devices_json("512MiB", ", \"lend_unreserved\": true"), loan_stages);
    setenv("VRAM_TEST_BACKEND", "cuda", 1);
    static const struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {{"retention", t_retention}, {"peer", t_peer}, {"nop2p", t_nop2p},
                 {"graph", t_graph},
                 {"scrub", t_scrub}, {"killed", t_killed},
                 {"restart", t_restart}};
    int failed = 0, skipped = 0;
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        if (argc > 1 && strcmp(argv[1], tests[i].name) != 0)
            continue;
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) /* CUDA starts inside: the test may fork first */
            exit(tests[i].fn());
        int rc = wait_child(pid);
        printf("gpu %s: %s\n", tests[i].name,
               rc == 0 ? "passed" : rc == SKIPPED ? "skipped" : "FAILED");
        failed += rc != 0 && rc != SKIPPED;
        skipped += rc == SKIPPED;
    }
    printf("%d passed, %d skipped, %d failed\n",
           (int)(sizeof(tests) / sizeof(tests[0])) - failed - skipped, skipped,
           failed);
    return failed ? 1 : 0;
}
