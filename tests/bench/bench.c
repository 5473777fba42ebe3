/* SPDX-License-Identifier: Apache-2.0 */
/* vram-bench: what brokering costs against what the OS or driver allows.
 *
 * For each backend (host: memfd chunks and mmap; cuda: VMM allocations), in
 * one run, it measures the in-process floors and the brokered paths and
 * prints one JSON object per line:
 *   floor_fresh            a new chunk made and mapped in-process
 *   floor_move             a held chunk moved to another slot in-process
 *   brokered_first_grant   1 GiB granted to a fresh client by vramd, counted
 *                          until mapped and accessible (ratio: floor_fresh)
 *   brokered_move_reserve  a KV reserve that moves the stage's own 1 GiB of
 *                          loans into KV (ratio: floor_move)
 *   brokered_move_trim     the trim that moves them back (ratio: floor_move)
 *   control_round_trip     vram_client_ping against a bare Unix-socket
 *                          ping-pong of the same bytes
 *   daemon_startup         fork/exec of vramd with two devices until a
 *                          connect + hello succeeds; its resident memory
 *   daemon_rss             the benchmark daemon's resident memory after
 *                          start and after the grants
 * Each baseline is measured in the same run as the path it is compared with,
 * repetitions interleaved, and nothing is timed while the daemon refills its
 * pool. Times are microseconds (*_us), median and p90 over repetitions. A missed
 * target is reported (met: false), not a failure; the program exits non-zero
 * only when a measurement could not be made. See tests/bench/README.md. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/bench/bench_util.h"
#include "proto/frame.h"
#include "tests/integration/harness.h"

#ifdef VRAM_HAVE_CUDA_H
#include "tests/bench/bench_cuda.h"
#include "common/cuda_driver.h"
#endif

/* Chunk size (--chunk): 2 MiB, the GPUs' granularity, unless asked. */
static uint64_t chunk_bytes = 2ull << 20;
#define CHUNK chunk_bytes
#define TARGET_GRANT 1.4
#define TARGET_MOVE 1.10
#define TARGET_PING 2.0

/* ---- options and sizes -------------------------------------------------- */

static bool opt_quick;
static const char *opt_capacity = "4GiB"; /* the benchmark daemon's device */
static FILE *out_file;
static int failures;

static uint32_t nchunks;   /* chunks per measured set: 512 (1 GiB), 32 quick */
static int grant_reps;     /* first grants (each to a fresh client) and
                              floor 1 sets */
static int move_reps;      /* reserve + trim cycles and floor 2 passes */
static int ping_reps;      /* round trips of each kind */
static int start_reps;     /* daemon starts */

/* ---- time and statistics ------------------------------------------------ */

static double us_since(uint64_t t0)
{
    return (double)(now_ns() - t0) / 1e3;
}

struct stat2 {
    double med, p90;
};

/* Median, and p90 by nearest rank. Sorts v. */
static struct stat2 stats(double *v, size_t n)
{
    struct stat2 s = {NAN, NAN};
    if (!n)
        return s;
    qsort(v, n, sizeof(*v), cmp_double);
    s.med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    size_t k = (size_t)ceil(0.9 * (double)n);
    s.p90 = v[k ? k - 1 : 0];
    return s;
}

/* ---- JSON lines --------------------------------------------------------- */

struct jl {
    char b[4096];
    size_t n;
    bool first;
};

static void jl_raw(struct jl *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void jl_raw(struct jl *j, const char *fmt, ...)
{
    if (j->n >= sizeof(j->b))
        return;
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(j->b + j->n, sizeof(j->b) - j->n, fmt, ap);
    va_end(ap);
    if (r > 0)
        j->n += (size_t)r;
    if (j->n > sizeof(j->b))
        j->n = sizeof(j->b);
}

static void jl_key(struct jl *j, const char *key)
{
    jl_raw(j, "%s\"%s\":", j->first ? "" : ",", key);
    j->first = false;
}

static void jl_str(struct jl *j, const char *key, const char *v)
{
    jl_key(j, key);
    jl_raw(j, "\"");
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\')
            jl_raw(j, "\\%c", *p);
        else if (*p < 0x20)
            jl_raw(j, "\\u%04x", *p);
        else if (*p == ';') /* keeps lines one CMake list element */
            jl_raw(j, ",");
        else
            jl_raw(j, "%c", *p);
    }
    jl_raw(j, "\"");
}

static void jl_u64(struct jl *j, const char *key, uint64_t v)
{
    jl_key(j, key);
    jl_raw(j, "%llu", (unsigned long long)v);
}

static void jl_num(struct jl *j, const char *key, double v)
{
    jl_key(j, key);
    if (isfinite(v))
        jl_raw(j, "%.3f", v);
    else
        jl_raw(j, "null");
}

static void jl_bool(struct jl *j, const char *key, bool v)
{
    jl_key(j, key);
    jl_raw(j, "%s", v ? "true" : "false");
}

static void jl_begin(struct jl *j, const char *bench, const char *backend)
{
    j->n = 0;
    j->first = true;
    jl_raw(j, "{");
    jl_str(j, "bench", bench);
    jl_str(j, "backend", backend);
}

static void jl_end(struct jl *j)
{
    jl_raw(j, "}");
    if (j->n >= sizeof(j->b) - 1) { /* cannot happen with these lines */
        fprintf(stderr, "vram-bench: a JSON line overflowed\n");
        failures++;
        return;
    }
    fprintf(stdout, "%.*s\n", (int)j->n, j->b);
    fflush(stdout);
    if (out_file) {
        fprintf(out_file, "%.*s\n", (int)j->n, j->b);
        fflush(out_file);
    }
}

/* A measurement that could not be made: a line saying why, and failure. */
static void fail_line(const char *bench, const char *backend, const char *fmt,
                      ...) __attribute__((format(printf, 3, 4)));
static void fail_line(const char *bench, const char *backend, const char *fmt,
                      ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "vram-bench: %s/%s: %s\n", backend, bench, msg);
    struct jl j;
    jl_begin(&j, bench, backend);
    jl_str(&j, "error", msg);
    jl_end(&j);
    failures++;
}

/* ---- where vramd is ----------------------------------------------------- */

static int find_vramd(void)
{
    const char *env = getenv("VRAMD_BIN");
    if (env && *env)
        return access(env, X_OK) == 0 ? 0 : -ENOENT;
    char exe[PATH_MAX], cand[PATH_MAX + 32], real[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *sl = strrchr(exe, '/');
        if (sl)
            *sl = '\0';
        const char *rel[] = {"/../vramd", "/vramd"};
        for (int i = 0; i < 2; i++) {
            snprintf(cand, sizeof(cand), "%s%s", exe, rel[i]);
            if (access(cand, X_OK) == 0 && realpath(cand, real)) {
                setenv("VRAMD_BIN", real, 1);
                return 0;
            }
        }
    }
#ifdef VRAM_BENCH_VRAMD
    if (access(VRAM_BENCH_VRAMD, X_OK) == 0) {
        setenv("VRAMD_BIN", VRAM_BENCH_VRAMD, 1);
        return 0;
    }
#endif
    return -ENOENT;
}

/* ---- backend abstraction for the floors and checks ---------------------- */

enum be { BE_HOST, BE_CUDA };

static const char *be_name(enum be b)
{
    return b == BE_HOST ? "host" : "cuda";
}

#ifdef VRAM_HAVE_CUDA_H
static struct vcu cu;
static CUcontext cu_ctx;
static CUdevice cu_dev;
static int cu_ngpu;
static char cu_gpu_name[128];

static const char *cu_err(CUresult r)
{
    static char buf[160];
    return vcu_strerror(&cu, r, buf, sizeof(buf));
}

/* The driver and a context on device 0 (its primary context, the one an
 * engine and libvram use). Returns 0 or -1 with a one-line reason. */
static int cu_setup(char *why, size_t len)
{
    if (vcu_load(&cu, why, len) < 0)
        return -1;
    CUresult r = cu.cuDeviceGetCount(&cu_ngpu);
    if (r != CUDA_SUCCESS || cu_ngpu <= 0) {
        snprintf(why, len, "the NVIDIA driver reports no GPU");
        goto fail;
    }
    int vmm = 0, fdok = 0;
    if ((r = cu.cuDeviceGet(&cu_dev, 0)) != CUDA_SUCCESS) {
        snprintf(why, len, "cuDeviceGet(0): %s", cu_err(r));
        goto fail;
    }
    cu.cuDeviceGetName(cu_gpu_name, sizeof(cu_gpu_name), cu_dev);
    cu.cuDeviceGetAttribute(
        &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cu_dev);
    cu.cuDeviceGetAttribute(
        &fdok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
        cu_dev);
    if (!vmm || !fdok) {
        snprintf(why, len, "GPU 0 (%s) lacks %s", cu_gpu_name,
                 !vmm ? "virtual memory management" : "POSIX fd handles");
        goto fail;
    }
    if ((r = cu.cuDevicePrimaryCtxRetain(&cu_ctx, cu_dev)) != CUDA_SUCCESS) {
        snprintf(why, len, "cuDevicePrimaryCtxRetain: %s", cu_err(r));
        goto fail;
    }
    if ((r = cu.cuCtxSetCurrent(cu_ctx)) != CUDA_SUCCESS) {
        snprintf(why, len, "cuCtxSetCurrent: %s", cu_err(r));
        cu.cuDevicePrimaryCtxRelease(cu_dev);
        goto fail;
    }
    return 0;
fail:
    vcu_unload(&cu);
    return -1;
}

static void cu_teardown(void)
{
    if (cu_ctx)
        cu.cuDevicePrimaryCtxRelease(cu_dev);
    cu_ctx = NULL;
    vcu_unload(&cu);
}

/* What an engine allocates in-process: device memory of GPU 0, no shareable
 * handle (the true floor; the broker's chunks also ask for a POSIX fd). */
static CUmemAllocationProp cu_prop(void)
{
    return bench_cu_prop(false);
}

static CUmemAccessDesc cu_access(void)
{
    return bench_cu_access();
}

/* Writes every byte of [p, p + n) from the GPU: the range is accessible. */
static int cu_touch(CUdeviceptr p, size_t n, char *why, size_t len)
{
    CUresult r = cu.cuMemsetD8(p, 0x5a, n);
    if (r == CUDA_SUCCESS)
        r = cu.cuCtxSynchronize();
    if (r != CUDA_SUCCESS) {
        snprintf(why, len, "cuMemsetD8 over the mapped range: %s", cu_err(r));
        return -1;
    }
    return 0;
}
#endif

/* ---- samples ------------------------------------------------------------ */

/* The figures of a set of nchunks chunks measured reps times: per chunk and
 * per GiB (the whole set's time, scaled to 1 GiB). */
struct set_figs {
    struct stat2 chunk, gib;
};

/* Samples of one path: per-chunk times (each operation timed alone, or a
 * repetition's total over its chunks) and per-repetition totals. */
struct series {
    double *per, *tot;
    size_t nper, ntot;
};

static double gib_scale(void)
{
    return (double)(1ull << 30) / ((double)nchunks * (double)CHUNK);
}

static bool series_init(struct series *s, int reps)
{
    s->per = calloc((size_t)reps * nchunks, sizeof(double));
    s->tot = calloc((size_t)reps, sizeof(double));
    s->nper = s->ntot = 0;
    return s->per && s->tot;
}

static void series_free(struct series *s)
{
    free(s->per);
    free(s->tot);
    s->per = s->tot = NULL;
}

/* A repetition's total time for the set; per_chunk: also count total /
 * nchunks as its per-chunk time (paths timed only as a whole). */
static void series_total(struct series *s, double us, bool per_chunk)
{
    s->tot[s->ntot++] = us * gib_scale();
    if (per_chunk)
        s->per[s->nper++] = us / nchunks;
}

static struct set_figs series_figs(struct series *s)
{
    return (struct set_figs){stats(s->per, s->nper), stats(s->tot, s->ntot)};
}

static void jl_set(struct jl *j, const struct set_figs *f)
{
    jl_num(j, "chunk_median_us", f->chunk.med);
    jl_num(j, "chunk_p90_us", f->chunk.p90);
    jl_num(j, "gib_median_us", f->gib.med);
    jl_num(j, "gib_p90_us", f->gib.p90);
}

static void jl_ratio(struct jl *j, const char *baseline, double num, double den,
                     double target)
{
    double r = den > 0 ? num / den : NAN;
    jl_str(j, "baseline", baseline);
    jl_num(j, "ratio", r);
    jl_num(j, "target", target);
    jl_bool(j, "met", isfinite(r) && r <= target);
}

/* The head of a line for a set path. */
static void jl_set_line(struct jl *j, const char *bench, const char *backend,
                        const char *what, int reps, const struct set_figs *f)
{
    jl_begin(j, bench, backend);
    jl_str(j, "what", what);
    jl_u64(j, "chunk_bytes", CHUNK);
    jl_u64(j, "chunks", nchunks);
    jl_u64(j, "reps", (uint64_t)reps);
    jl_set(j, f);
}

/* ---- /proc -------------------------------------------------------------- */

static long proc_rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kib = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kib;
}

/* utime + stime of pid, in clock ticks. */
static long long proc_cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the name may hold spaces */
    if (!p)
        return -1;
    unsigned long long ut = 0, st = 0;
    /* after ")": state ppid pgrp session tty_nr tpgid flags minflt cminflt
     * majflt cmajflt utime stime */
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
               &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

/* Waits until pid has used no CPU for quiet_ms (its idle loop stops once the
 * pool is full), at most max_ms. */
static bool wait_quiet(pid_t pid, int quiet_ms, int max_ms)
{
    long long last = proc_cpu_ticks(pid);
    int still = 0;
    for (int t = 0; t < max_ms; t += 20) {
        sleep_us(20000);
        long long now = proc_cpu_ticks(pid);
        if (now < 0)
            return false;
        if (now == last) {
            still += 20;
            if (still >= quiet_ms)
                return true;
        } else {
            still = 0;
            last = now;
        }
    }
    return false;
}

/* The pool is full again: every device reports want ready chunks (status's
 * pool_ready_chunks: created, and for cuda exported, ahead of any grant). */
static bool wait_pool(const struct daemon *d, enum be b, uint64_t want)
{
    (void)b;
    for (int t = 0; t < 20000; t += 5) {
        cJSON *st = daemon_status(d);
        uint64_t ready = UINT64_MAX;
        const cJSON *dev;
        cJSON_ArrayForEach(dev, cJSON_GetObjectItem(st, "devices")) {
            uint64_t n = json_u64(dev, "pool_ready_chunks");
            if (n < ready)
                ready = n;
        }
        cJSON_Delete(st);
        if (ready != UINT64_MAX && ready >= want) {
            wait_quiet(d->pid, 50, 2000); /* the last export settles */
            return true;
        }
        sleep_us(5000);
    }
    return false;
}

/* ---- floors ------------------------------------------------------------- */

/* A PROT_NONE reservation aligned to the chunk size, as libvram makes. */
static uint8_t *host_reserve(size_t bytes)
{
    size_t len = bytes + CHUNK;
    uint8_t *p = mmap(NULL, len, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)p + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1);
    if (a > (uintptr_t)p)
        munmap(p, a - (uintptr_t)p);
    size_t tail = (uintptr_t)p + len - (a + bytes);
    if (tail)
        munmap((void *)(a + bytes), tail);
    return (uint8_t *)a;
}

/* What the daemon does to make a chunk (make_memfd) and libvram to map it. */
static int host_new_chunk(uint8_t *at)
{
    int fd = memfd_create("vram-bench", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)CHUNK) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
        mmap(at, CHUNK, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
            MAP_FAILED) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

/* What libvram does to move a held chunk (host_unmap + host_map). */
static int host_move_chunk(int fd, uint8_t *from, uint8_t *to)
{
    if (mmap(from, CHUNK, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) ==
            MAP_FAILED ||
        mmap(to, CHUNK, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
            MAP_FAILED)
        return -errno;
    return 0;
}

/* One repetition of floor 1 on the host: nchunks fresh chunks mapped over a
 * reservation, each timed; then everything is let go (untimed). */
static bool host_fresh_rep(struct series *s)
{
    size_t bytes = (size_t)nchunks * CHUNK;
    int *fds = malloc(nchunks * sizeof(int));
    uint8_t *base = host_reserve(bytes);
    bool ok = fds && base;
    uint32_t made = 0;
    if (!ok) {
        fail_line("floor_fresh", "host", "out of memory or address space");
        goto out;
    }
    uint64_t t0 = now_ns();
    for (; made < nchunks; made++) {
        uint64_t t = now_ns();
        int fd = host_new_chunk(base + (size_t)made * CHUNK);
        s->per[s->nper++] = us_since(t);
        if (fd < 0) {
            fail_line("floor_fresh", "host", "chunk %u: %s", made, strerror(-fd));
            ok = false;
            goto out;
        }
        fds[made] = fd;
    }
    series_total(s, us_since(t0), false);
out:
    if (base)
        munmap(base, bytes);
    for (uint32_t i = 0; i < made; i++)
        close(fds[i]);
    free(fds);
    return ok;
}

#ifdef VRAM_HAVE_CUDA_H
#define CU_TRY(bench, call)                                                    \
    do {                                                                       \
        CUresult cu_r_ = (call);                                               \
        if (cu_r_ != CUDA_SUCCESS) {                                           \
            fail_line(bench, "cuda", "%s: %s", #call, cu_err(cu_r_));          \
            ok = false;                                                        \
            goto out;                                                          \
        }                                                                      \
    } while (0)

/* One repetition of floor 1 with CUDA VMM: cuMemCreate + cuMemMap +
 * cuMemSetAccess per chunk over a reservation; batched: one cuMemSetAccess
 * for the whole range at the end instead (kept for comparison: libvram
 * sets access per chunk, as one call a run measured no faster on an H200);
 * touch: check the range is accessible (untimed). */
static bool cuda_fresh_rep(struct series *s, bool touch, bool batched)
{
    size_t bytes = (size_t)nchunks * CHUNK;
    CUmemGenericAllocationHandle *h = calloc(nchunks, sizeof(*h));
    CUmemAllocationProp prop = cu_prop();
    CUmemAccessDesc acc = cu_access();
    CUdeviceptr va = 0;
    uint32_t made = 0, mapped = 0;
    bool ok = h != NULL;
    if (!ok) {
        fail_line("floor_fresh", "cuda", "out of memory");
        goto out;
    }
    CU_TRY("floor_fresh", cu.cuMemAddressReserve(&va, bytes, CHUNK, 0, 0));
    uint64_t t0 = now_ns();
    for (uint32_t i = 0; i < nchunks; i++) {
        CUdeviceptr at = va + (CUdeviceptr)i * CHUNK;
        uint64_t t = now_ns();
        CU_TRY("floor_fresh", cu.cuMemCreate(&h[i], CHUNK, &prop, 0));
        made = i + 1;
        CU_TRY("floor_fresh", cu.cuMemMap(at, CHUNK, 0, h[i], 0));
        mapped = i + 1;
        if (!batched)
            CU_TRY("floor_fresh", cu.cuMemSetAccess(at, CHUNK, &acc, 1));
        s->per[s->nper++] = us_since(t);
    }
    if (batched)
        CU_TRY("floor_fresh", cu.cuMemSetAccess(va, bytes, &acc, 1));
    series_total(s, us_since(t0), false);
    if (touch) {
        char why[256];
        if (cu_touch(va, bytes, why, sizeof(why)) < 0) {
            fail_line("floor_fresh", "cuda", "%s", why);
            ok = false;
        }
    }
out:
    for (uint32_t i = 0; i < mapped; i++)
        cu.cuMemUnmap(va + (CUdeviceptr)i * CHUNK, CHUNK);
    for (uint32_t i = 0; i < made; i++)
        cu.cuMemRelease(h[i]);
    if (va)
        cu.cuMemAddressFree(va, bytes);
    free(h);
    return ok;
}
#endif

static bool floor_fresh_rep(enum be b, struct series *s, bool touch,
                            bool batched)
{
#ifdef VRAM_HAVE_CUDA_H
    if (b == BE_CUDA)
        return cuda_fresh_rep(s, touch, batched);
#endif
    (void)touch;
    (void)batched;
    return b == BE_HOST && host_fresh_rep(s);
}

/* Floor 2: nchunks held chunks, moved between two reservations a and b, back
 * and forth, one full pass per repetition. */
struct mover {
    enum be b;
    uint32_t made;
    bool in_b;       /* where the chunks are after the last full pass */
    int *fds;        /* host */
    uint8_t *ha, *hb;
#ifdef VRAM_HAVE_CUDA_H
    CUmemGenericAllocationHandle *h;
    CUdeviceptr ca, cb;
    bool *mapped, *at_b; /* per chunk, for cleanup after a failure */
#endif
};

#ifdef VRAM_HAVE_CUDA_H
static bool cuda_mover_setup(struct mover *m)
{
    size_t bytes = (size_t)nchunks * CHUNK;
    CUmemAllocationProp prop = cu_prop();
    CUmemAccessDesc acc = cu_access();
    m->h = calloc(nchunks, sizeof(*m->h));
    m->mapped = calloc(nchunks, sizeof(bool));
    m->at_b = calloc(nchunks, sizeof(bool));
    bool ok = m->h && m->mapped && m->at_b;
    if (!ok) {
        fail_line("floor_move", "cuda", "out of memory");
        goto out;
    }
    CU_TRY("floor_move", cu.cuMemAddressReserve(&m->ca, bytes, CHUNK, 0, 0));
    CU_TRY("floor_move", cu.cuMemAddressReserve(&m->cb, bytes, CHUNK, 0, 0));
    for (; m->made < nchunks; m->made++) {
        uint32_t i = m->made;
        CUdeviceptr at = m->ca + (CUdeviceptr)i * CHUNK;
        CU_TRY("floor_move", cu.cuMemCreate(&m->h[i], CHUNK, &prop, 0));
        if (cu.cuMemMap(at, CHUNK, 0, m->h[i], 0) != CUDA_SUCCESS) {
            cu.cuMemRelease(m->h[i]);
            fail_line("floor_move", "cuda", "cuMemMap of chunk %u failed", i);
            ok = false;
            goto out;
        }
        m->mapped[i] = true;
        if (cu.cuMemSetAccess(at, CHUNK, &acc, 1) != CUDA_SUCCESS) {
            m->made++; /* mapped: let teardown unmap and release it */
            fail_line("floor_move", "cuda", "cuMemSetAccess of chunk %u "
                      "failed", i);
            ok = false;
            goto out;
        }
    }
out:
    return ok;
}

static bool cuda_mover_rep(struct mover *m, struct series *s, bool batched)
{
    CUmemAccessDesc acc = cu_access();
    CUdeviceptr from = m->in_b ? m->cb : m->ca, to = m->in_b ? m->ca : m->cb;
    bool ok = true;
    uint64_t t0 = now_ns();
    for (uint32_t i = 0; i < nchunks; i++) {
        CUdeviceptr f = from + (CUdeviceptr)i * CHUNK;
        CUdeviceptr t = to + (CUdeviceptr)i * CHUNK;
        uint64_t t1 = now_ns();
        CU_TRY("floor_move", cu.cuMemUnmap(f, CHUNK));
        m->mapped[i] = false;
        CU_TRY("floor_move", cu.cuMemMap(t, CHUNK, 0, m->h[i], 0));
        m->mapped[i] = true;
        m->at_b[i] = !m->in_b;
        if (!batched)
            CU_TRY("floor_move", cu.cuMemSetAccess(t, CHUNK, &acc, 1));
        s->per[s->nper++] = us_since(t1);
    }
    if (batched)
        CU_TRY("floor_move", cu.cuMemSetAccess(to, (size_t)nchunks * CHUNK,
                                               &acc, 1));
    series_total(s, us_since(t0), false);
    m->in_b = !m->in_b;
out:
    return ok;
}

static void cuda_mover_teardown(struct mover *m)
{
    for (uint32_t i = 0; i < m->made; i++) {
        if (m->mapped[i])
            cu.cuMemUnmap((m->at_b[i] ? m->cb : m->ca) + (CUdeviceptr)i * CHUNK,
                          CHUNK);
        cu.cuMemRelease(m->h[i]);
    }
    size_t bytes = (size_t)nchunks * CHUNK;
    if (m->ca)
        cu.cuMemAddressFree(m->ca, bytes);
    if (m->cb)
        cu.cuMemAddressFree(m->cb, bytes);
    free(m->h);
    free(m->mapped);
    free(m->at_b);
}
#endif

static bool mover_setup(struct mover *m, enum be b)
{
    memset(m, 0, sizeof(*m));
    m->b = b;
#ifdef VRAM_HAVE_CUDA_H
    if (b == BE_CUDA)
        return cuda_mover_setup(m);
#endif
    size_t bytes = (size_t)nchunks * CHUNK;
    m->fds = malloc(nchunks * sizeof(int));
    m->ha = host_reserve(bytes);
    m->hb = host_reserve(bytes);
    if (!m->fds || !m->ha || !m->hb) {
        fail_line("floor_move", "host", "out of memory or address space");
        return false;
    }
    for (; m->made < nchunks; m->made++) {
        int fd = host_new_chunk(m->ha + (size_t)m->made * CHUNK);
        if (fd < 0) {
            fail_line("floor_move", "host", "chunk %u: %s", m->made,
                      strerror(-fd));
            return false;
        }
        m->fds[m->made] = fd;
    }
    return true;
}

static bool mover_rep_batched(struct mover *m, struct series *s)
{
#ifdef VRAM_HAVE_CUDA_H
    if (m->b == BE_CUDA)
        return cuda_mover_rep(m, s, true);
#endif
    (void)m;
    (void)s;
    return true;
}

static bool mover_rep(struct mover *m, struct series *s)
{
#ifdef VRAM_HAVE_CUDA_H
    if (m->b == BE_CUDA)
        return cuda_mover_rep(m, s, false);
#endif
    uint8_t *from = m->in_b ? m->hb : m->ha, *to = m->in_b ? m->ha : m->hb;
    uint64_t t0 = now_ns();
    for (uint32_t i = 0; i < nchunks; i++) {
        uint64_t t = now_ns();
        int e = host_move_chunk(m->fds[i], from + (size_t)i * CHUNK,
                                to + (size_t)i * CHUNK);
        s->per[s->nper++] = us_since(t);
        if (e < 0) {
            fail_line("floor_move", "host", "move of chunk %u: %s", i,
                      strerror(-e));
            return false;
        }
    }
    series_total(s, us_since(t0), false);
    m->in_b = !m->in_b;
    return true;
}

/* The moved chunks are still accessible where they are now. */
static bool mover_check(struct mover *m)
{
#ifdef VRAM_HAVE_CUDA_H
    if (m->b == BE_CUDA) {
        char why[256];
        if (cu_touch(m->in_b ? m->cb : m->ca, (size_t)nchunks * CHUNK, why,
                     sizeof(why)) < 0) {
            fail_line("floor_move", "cuda", "%s", why);
            return false;
        }
        return true;
    }
#endif
    uint8_t *at = m->in_b ? m->hb : m->ha;
    for (uint32_t i = 0; i < nchunks; i++) {
        volatile uint64_t *w = (volatile uint64_t *)(at + (size_t)i * CHUNK);
        *w = i;
        if (*w != i) {
            fail_line("floor_move", "host", "chunk %u does not hold what was "
                      "written", i);
            return false;
        }
    }
    return true;
}

static void mover_teardown(struct mover *m)
{
#ifdef VRAM_HAVE_CUDA_H
    if (m->b == BE_CUDA) {
        cuda_mover_teardown(m);
        return;
    }
#endif
    size_t bytes = (size_t)nchunks * CHUNK;
    if (m->ha)
        munmap(m->ha, bytes);
    if (m->hb)
        munmap(m->hb, bytes);
    for (uint32_t i = 0; i < m->made; i++)
        close(m->fds[i]);
    free(m->fds);
}

/* ---- the benchmark daemon ----------------------------------------------- */

/* One device (4 GiB unless --capacity), a pool of nchunks ready chunks (512 =
 * 1 GiB), and
 * stage 0 for the moves: one KV lane of 8 KiB per token (256 tokens per
 * chunk), an initial window of 16384 tokens (64 chunks) and a native context
 * nchunks chunks beyond it, all of which it may lend (no headroom). */
#define MOVE_BPT 8192u
#define MOVE_INITIAL 16384u

static uint64_t move_native(void)
{
    return MOVE_INITIAL + (uint64_t)nchunks * (CHUNK / MOVE_BPT);
}

static void bench_config(char *buf, size_t len)
{
    snprintf(buf, len,
             "{\"devices\": [{\"id\": 0, \"capacity\": \"%s\", \"chunk\": \"%lluMiB\"}],"
             " \"pool\": {\"prefill_chunks\": %u},"
             " \"stages\": [{\"id\": 0, \"device\": 0, \"first_layer\": 0,"
             "  \"last_layer\": 15, \"kv_lanes\": [%u],"
             "  \"native_context\": %llu, \"initial_tokens\": %u,"
             "  \"step_tokens\": 8192, \"expert_slot\": \"2MiB\","
             "  \"loan\": {\"enabled\": true, \"headroom\": 0}}]}",
             opt_capacity, (unsigned long long)(CHUNK >> 20), nchunks, MOVE_BPT,
             (unsigned long long)move_native(), MOVE_INITIAL);
}

static vram_client *bench_connect(const struct daemon *d, const char *name,
                                  const char *bench, enum be b)
{
    vram_client *c = NULL;
    char err[256] = "";
    struct vram_client_options o = {.name = name, .error = err,
                                    .error_len = sizeof(err)};
    int e = vram_client_connect(d->sock, &o, &c);
    if (e < 0) {
        fail_line(bench, be_name(b), "connect: %s %s", vram_strerror(e), err);
        return NULL;
    }
    return c;
}

/* Handles what arrived after a reply (budget events), untimed. */
static void drain_events(vram_client *c)
{
    struct pollfd p = {.fd = vram_client_fd(c), .events = POLLIN};
    int wait = 2;
    while (poll(&p, 1, wait) > 0 && (p.revents & POLLIN)) {
        if (vram_client_dispatch(c) < 0)
            return;
        wait = 0;
    }
}

/* The region has expect chunks mapped, and they are accessible: written
 * (and on the host read back). */
static int check_access(enum be b, vram_client *c, uint32_t region,
                        uint32_t expect, char *why, size_t len)
{
    struct vram_region_info ri = {0};
    if (vram_region_info(c, region, &ri) < 0 || ri.mapped != expect) {
        snprintf(why, len, "region %u has %u chunks mapped, expected %u",
                 region, ri.mapped, expect);
        return -1;
    }
    if (b == BE_HOST) {
        for (uint32_t i = 0; i < expect; i++) {
            volatile uint64_t *w = vram_region_slot(c, region, 0, i);
            *w = 0x9e3779b97f4a7c15ull + i;
            if (*w != 0x9e3779b97f4a7c15ull + i) {
                snprintf(why, len, "slot %u does not hold what was written", i);
                return -1;
            }
        }
        return 0;
    }
#ifdef VRAM_HAVE_CUDA_H
    return cu_touch((CUdeviceptr)(uintptr_t)ri.base, (size_t)expect * CHUNK, why,
                    len);
#else
    snprintf(why, len, "built without CUDA");
    return -1;
#endif
}

struct rss {
    long start, grant, moves;
};

/* ---- 1 and 3: fresh chunks, first grant --------------------------------- */

/* One first grant: a fresh client, an ad-hoc stage and region (untimed), and
 * vram_region_grow of nchunks chunks, timed until it returns (every chunk
 * imported and mapped). */
static bool grant_rep(enum be b, const struct daemon *d, struct series *s,
                      double *setup_us, long *rss)
{
    const char *bn = "brokered_first_grant";
    vram_client *c = bench_connect(d, "bench-grant", bn, b);
    if (!c)
        return false;
    bool ok = false;
    uint32_t stage = 0, region = 0;
    uint64_t t0 = now_ns();
    int e = vram_stage_register_adhoc(c, 0, 0, 0, &stage);
    if (e == 0)
        e = vram_region_create(c, stage, VRAM_REGION_FIXED,
                               (uint64_t)nchunks * CHUNK, 1, &region);
    *setup_us = us_since(t0);
    if (e < 0) {
        fail_line(bn, be_name(b), "ad-hoc stage or region: %s: %s",
                  vram_strerror(e), vram_client_last_error(c));
        goto out;
    }
    t0 = now_ns();
    e = vram_region_grow(c, region, nchunks);
    double us = us_since(t0);
    if (e < 0) {
        fail_line(bn, be_name(b), "grow by %u chunks: %s: %s", nchunks,
                  vram_strerror(e), vram_client_last_error(c));
        goto out;
    }
    series_total(s, us, true);
    char why[256];
    if (check_access(b, c, region, nchunks, why, sizeof(why)) < 0) {
        fail_line(bn, be_name(b), "%s", why);
        goto out;
    }
    if (rss)
        *rss = proc_rss_kib(d->pid);
    ok = true;
out:
    vram_client_close(c);
    return ok;
}

/* Floor 1 and the brokered first grant, repetitions interleaved (and their
 * order alternated) so that a noisy machine weighs on both alike. */
static void phase_grant(enum be b, const struct daemon *d, struct rss *rss)
{
    const char *bn = "brokered_first_grant";
    struct series fl, fb, br;
    double *setup = calloc((size_t)grant_reps, sizeof(double));
    bool batch = b == BE_CUDA; /* host mappings carry their access */
    bool ok = series_init(&fl, grant_reps) && series_init(&br, grant_reps) &&
              series_init(&fb, grant_reps) && setup;
    bool pool_ready = true;
    if (!ok)
        fail_line(bn, be_name(b), "out of memory");
    for (int rep = 0; ok && rep < grant_reps; rep++) {
        for (int k = 0; ok && k < 2; k++) {
            /* A grant's chunks went back when its client closed: nothing is
             * timed while the daemon refills its pool. */
            pool_ready &= wait_pool(d, b, nchunks);
            if (rep == 0 && k == 0)
                rss->start = proc_rss_kib(d->pid);
            if ((k == 0) == (rep % 2 == 0)) {
                ok = floor_fresh_rep(b, &fl, rep == 0, false);
                if (ok && batch)
                    ok = floor_fresh_rep(b, &fb, rep == 0, true);
            } else {
                ok = grant_rep(b, d, &br, &setup[rep],
                               rep == grant_reps - 1 ? &rss->grant : NULL);
            }
        }
    }
    if (ok) {
        struct set_figs f = series_figs(&fl), g = series_figs(&br);
        struct stat2 st = stats(setup, (size_t)grant_reps);
        struct jl j;
        jl_set_line(&j, "floor_fresh", be_name(b),
                    b == BE_HOST ? "memfd_create+ftruncate+seal+mmap MAP_FIXED "
                                   "over a PROT_NONE reservation"
                                 : "cuMemCreate+cuMemMap+cuMemSetAccess",
                    grant_reps, &f);
        jl_end(&j);
        struct set_figs fbf = batch ? series_figs(&fb) : f;
        if (batch) {
            jl_set_line(&j, "floor_fresh_batched", be_name(b),
                        "cuMemCreate+cuMemMap per chunk, one cuMemSetAccess "
                        "for the range (for reference)", grant_reps, &fbf);
            jl_end(&j);
        }
        jl_set_line(&j, bn, be_name(b),
                    "vram_region_grow of a fresh client's ad-hoc region until "
                    "every chunk is mapped (pool prefilled)", grant_reps, &g);
        jl_num(&j, "setup_median_us", st.med);
        if (batch && fbf.gib.med > 0)
            jl_num(&j, "ratio_vs_floor_fresh_batched", g.gib.med / fbf.gib.med);
        jl_str(&j, "device_capacity", opt_capacity);
        jl_bool(&j, "pool_ready", pool_ready);
        jl_bool(&j, "daemon_invariant_checks", false);
        jl_ratio(&j, "floor_fresh", g.gib.med, f.gib.med, TARGET_GRANT);
        jl_end(&j);
    }
    series_free(&fl);
    series_free(&fb);
    series_free(&br);
    free(setup);
}

/* ---- 2 and 4: moves ----------------------------------------------------- */

static uint64_t counter(const struct daemon *d, const char *key)
{
    cJSON *st = daemon_status(d);
    uint64_t v = json_u64(cJSON_GetObjectItem(st, "counters"), key);
    cJSON_Delete(st);
    return v;
}

/* One cycle on stage 0: a reserve of the whole window, which moves the
 * stage's nchunks loans into KV, and the trim that moves them back. */
static bool move_rep(enum be b, vram_client *c, struct series *res,
                     struct series *trim)
{
    const char *bn = "brokered_move_reserve", *bt = "brokered_move_trim";
    uint64_t initial = (uint64_t)MOVE_INITIAL * MOVE_BPT;
    struct vram_kv_result r;
    uint64_t t0 = now_ns();
    int e = vram_kv_reserve(c, 0, move_native(), 0, 0, &r);
    double us = us_since(t0);
    if (e < 0) {
        fail_line(bn, be_name(b), "kv_reserve of %llu tokens: %s: %s",
                  (unsigned long long)move_native(), vram_strerror(e),
                  vram_client_last_error(c));
        return false;
    }
    if (r.recalled_chunks != nchunks ||
        r.kv_mapped_bytes != initial + (uint64_t)nchunks * CHUNK) {
        fail_line(bn, be_name(b), "the reserve moved %u chunks (KV %llu bytes); "
                  "expected %u", r.recalled_chunks,
                  (unsigned long long)r.kv_mapped_bytes, nchunks);
        return false;
    }
    series_total(res, us, true);
    drain_events(c);
    t0 = now_ns();
    e = vram_kv_trim(c, 0, 0);
    us = us_since(t0);
    if (e < 0) {
        fail_line(bt, be_name(b), "kv_trim: %s: %s", vram_strerror(e),
                  vram_client_last_error(c));
        return false;
    }
    series_total(trim, us, true);
    drain_events(c);
    struct vram_stage_info in;
    vram_stage_info(c, 0, &in);
    if (in.kv_mapped_bytes != initial ||
        in.expert_loaned_bytes != (uint64_t)nchunks * CHUNK) {
        fail_line(bt, be_name(b), "after the trim stage 0 has %llu bytes of KV "
                  "and %llu of loans", (unsigned long long)in.kv_mapped_bytes,
                  (unsigned long long)in.expert_loaned_bytes);
        return false;
    }
    return true;
}

/* Floor 2 and the brokered moves, interleaved like phase_grant. */
static void phase_move(enum be b, const struct daemon *d, struct rss *rss)
{
    const char *bn = "brokered_move_reserve", *bt = "brokered_move_trim";
    struct series fl, fb, res, trim;
    struct mover m;
    vram_client *c = NULL;
    bool batch = b == BE_CUDA;
    bool ok = series_init(&fl, move_reps) && series_init(&res, move_reps) &&
              series_init(&trim, move_reps) && series_init(&fb, move_reps);
    bool have_mover = false;
    if (!ok) {
        fail_line(bn, be_name(b), "out of memory");
        goto out;
    }
    have_mover = true;
    if (!(ok = mover_setup(&m, b)))
        goto out;
    if (!(c = bench_connect(d, "bench-move", bn, b))) {
        ok = false;
        goto out;
    }
    struct vram_stage_info in;
    int e = vram_stage_register(c, 0, 0, &in);
    if (e == 0)
        e = vram_expert_request(c, 0, 0);
    if (e == 0)
        e = vram_stage_info(c, 0, &in);
    if (e < 0) {
        fail_line(bn, be_name(b), "register stage 0 and take its loans: %s: %s",
                  vram_strerror(e), vram_client_last_error(c));
        ok = false;
        goto out;
    }
    uint64_t initial = (uint64_t)MOVE_INITIAL * MOVE_BPT;
    if (in.kv_mapped_bytes != initial ||
        in.expert_loaned_bytes != (uint64_t)nchunks * CHUNK) {
        fail_line(bn, be_name(b), "stage 0 has %llu bytes of KV and %llu of "
                  "loans; expected %llu and %llu",
                  (unsigned long long)in.kv_mapped_bytes,
                  (unsigned long long)in.expert_loaned_bytes,
                  (unsigned long long)initial,
                  (unsigned long long)nchunks * CHUNK);
        ok = false;
        goto out;
    }
    drain_events(c);
    /* Taking the loans may have drained the pool: let the refill end before
     * anything is timed. */
    wait_quiet(d->pid, 150, 20000);
    size_t held = vram_client_chunks_held(c);
    uint64_t grants0 = counter(d, "grants"), moves0 = counter(d, "moves");
    for (int rep = 0; ok && rep < move_reps; rep++) {
        if (rep % 2 == 0)
            ok = mover_rep(&m, &fl) && move_rep(b, c, &res, &trim);
        else
            ok = move_rep(b, c, &res, &trim) && mover_rep(&m, &fl);
        if (ok && batch)
            ok = mover_rep_batched(&m, &fb);
    }
    if (!ok || !(ok = mover_check(&m)))
        goto out;
    rss->moves = proc_rss_kib(d->pid);
    /* A move within a client sends no fd: the daemon counted moves, no
     * grants, and the client holds the very handles it held before. */
    uint64_t grants = counter(d, "grants") - grants0;
    uint64_t moves = counter(d, "moves") - moves0;
    if (grants != 0 || moves != 2ull * nchunks * (uint64_t)move_reps ||
        vram_client_chunks_held(c) != held) {
        fail_line(bn, be_name(b), "%llu grants and %llu moves during the "
                  "cycles (expected 0 and %llu); the client holds %zu handles, "
                  "%zu before", (unsigned long long)grants,
                  (unsigned long long)moves,
                  2ull * nchunks * (unsigned long long)move_reps,
                  vram_client_chunks_held(c), held);
        ok = false;
        goto out;
    }
    char why[256];
    if (check_access(b, c, in.expert_region, nchunks, why, sizeof(why)) < 0) {
        fail_line(bt, be_name(b), "the expert region after the cycles: %s", why);
        ok = false;
        goto out;
    }
    struct set_figs f = series_figs(&fl), fr = series_figs(&res),
                    ft = series_figs(&trim);
    struct jl j;
    jl_set_line(&j, "floor_move", be_name(b),
                b == BE_HOST ? "mmap PROT_NONE MAP_FIXED over the old slot+"
                               "mmap of the fd at the new slot"
                             : "cuMemUnmap+cuMemMap+cuMemSetAccess",
                move_reps, &f);
    jl_end(&j);
    struct set_figs fbf = batch ? series_figs(&fb) : f;
    if (batch) {
        jl_set_line(&j, "floor_move_batched", be_name(b),
                    "cuMemUnmap+cuMemMap per chunk, one cuMemSetAccess for the "
                    "range (for reference)", move_reps, &fbf);
        jl_end(&j);
    }
    jl_set_line(&j, bn, be_name(b),
                "vram_kv_reserve moving the stage's own expert loans into KV "
                "(no fd sent)", move_reps, &fr);
    jl_str(&j, "device_capacity", opt_capacity);
    jl_bool(&j, "daemon_invariant_checks", false);
    if (batch && fbf.gib.med > 0)
        jl_num(&j, "ratio_vs_floor_move_batched", fr.gib.med / fbf.gib.med);
    jl_ratio(&j, "floor_move", fr.gib.med, f.gib.med, TARGET_MOVE);
    jl_end(&j);
    jl_set_line(&j, bt, be_name(b),
                "vram_kv_trim moving that KV back into the stage's expert "
                "loans (no fd sent)", move_reps, &ft);
    jl_str(&j, "device_capacity", opt_capacity);
    jl_bool(&j, "daemon_invariant_checks", false);
    if (batch && fbf.gib.med > 0)
        jl_num(&j, "ratio_vs_floor_move_batched", ft.gib.med / fbf.gib.med);
    jl_ratio(&j, "floor_move", ft.gib.med, f.gib.med, TARGET_MOVE);
    jl_end(&j);
out:
    vram_client_close(c);
    if (have_mover)
        mover_teardown(&m);
    series_free(&fl);
    series_free(&fb);
    series_free(&res);
    series_free(&trim);
}

/* ---- 5: control round trip ---------------------------------------------- */

static int one_ping(enum be b, vram_client *c)
{
    int e = vram_client_ping(c);
    if (e < 0)
        fail_line("control_round_trip", be_name(b), "ping: %s: %s",
                  vram_strerror(e), vram_client_last_error(c));
    return e;
}

static int one_bare(enum be b, int fd, char *buf, size_t req, size_t rep)
{
    if (full_io(fd, buf, req, true) < 0 || full_io(fd, buf, rep, false) < 0) {
        fail_line("control_round_trip", be_name(b), "bare ping-pong: %s",
                  strerror(errno));
        return -1;
    }
    return 0;
}

/* vram_client_ping against a bare ping-pong over a socketpair with a forked
 * echo peer that reads the bytes of a ping frame and writes those of its
 * reply. After a warm-up, both run in blocks of 100, alternating. */
static void phase_ping(enum be b, const struct daemon *d)
{
    const char *bn = "control_round_trip";
    const int block = 100, warm = 200;
    double *ping = calloc((size_t)ping_reps, sizeof(double));
    double *bare = calloc((size_t)ping_reps, sizeof(double));
    vram_client *c = NULL;
    int sv[2] = {-1, -1};
    pid_t peer = -1;
    if (!ping || !bare) {
        fail_line(bn, be_name(b), "out of memory");
        goto out;
    }
    if (!(c = bench_connect(d, "bench-ping", bn, b)))
        goto out;
    wait_quiet(d->pid, 150, 20000);
    /* The frames libvram and vramd write: 16-byte header + JSON, with an
     * id of as many digits as the ids of the measured pings. */
    char js[128];
    int id = warm + ping_reps;
    size_t req = VW_FRAME_HEADER_SIZE +
                 (size_t)snprintf(js, sizeof(js),
                                  "{\"type\":\"ping\",\"id\":%d}", id);
    size_t rep = VW_FRAME_HEADER_SIZE +
                 (size_t)snprintf(js, sizeof(js),
                                  "{\"type\":\"reply\",\"id\":%d,\"ok\":true}", id);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        fail_line(bn, be_name(b), "socketpair: %s", strerror(errno));
        goto out;
    }
    fflush(NULL);
    peer = fork();
    if (peer < 0) {
        fail_line(bn, be_name(b), "fork: %s", strerror(errno));
        goto out;
    }
    if (peer == 0) { /* the echo peer */
        char buf[256] = {0};
        close(sv[0]);
        for (;;)
            if (full_io(sv[1], buf, req, false) < 0 ||
                full_io(sv[1], buf, rep, true) < 0)
                _exit(0);
    }
    close(sv[1]);
    sv[1] = -1;
    char buf[256] = {0};
    for (int i = 0; i < warm; i++)
        if (one_ping(b, c) < 0 || one_bare(b, sv[0], buf, req, rep) < 0)
            goto out;
    int np = 0, nb = 0;
    while (np < ping_reps || nb < ping_reps) {
        for (int k = 0; k < block && np < ping_reps; k++) {
            uint64_t t0 = now_ns();
            if (one_ping(b, c) < 0)
                goto out;
            ping[np++] = us_since(t0);
        }
        for (int k = 0; k < block && nb < ping_reps; k++) {
            uint64_t t0 = now_ns();
            if (one_bare(b, sv[0], buf, req, rep) < 0)
                goto out;
            bare[nb++] = us_since(t0);
        }
    }
    struct stat2 p = stats(ping, (size_t)np);
    struct stat2 q = stats(bare, (size_t)nb);
    struct jl j;
    jl_begin(&j, bn, be_name(b));
    jl_str(&j, "what", "vram_client_ping vs a bare socketpair ping-pong of the "
           "same bytes with a forked echo peer");
    jl_u64(&j, "round_trips", (uint64_t)ping_reps);
    jl_u64(&j, "request_bytes", req);
    jl_u64(&j, "reply_bytes", rep);
    jl_num(&j, "ping_median_us", p.med);
    jl_num(&j, "ping_p90_us", p.p90);
    jl_num(&j, "bare_median_us", q.med);
    jl_num(&j, "bare_p90_us", q.p90);
    jl_num(&j, "ratio_p90", q.p90 > 0 ? p.p90 / q.p90 : NAN);
    jl_ratio(&j, "bare_median_us", p.med, q.med, TARGET_PING);
    jl_end(&j);
out:
    if (sv[0] >= 0)
        close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    if (peer > 0)
        waitpid(peer, NULL, 0);
    vram_client_close(c);
    free(ping);
    free(bare);
}

/* ---- daemon start-up ---------------------------------------------------- */

/* Starts vramd and times fork/exec until a connect + hello succeeds. The
 * daemon keeps running; its pid is returned. */
static pid_t start_timed(const char *bin, const char *backend, const char *cfg,
                         const char *sock, const char *log, double *us,
                         char *why, size_t len)
{
    uint64_t t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, len, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(bin, bin, "--socket", sock, "--backend", backend, "--config", cfg,
              "--log-level", "notice", (char *)NULL);
        _exit(127);
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    for (;;) {
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid) {
            snprintf(why, len, "vramd exited during start (status %d); log %s",
                     ws, log);
            return -1;
        }
        if (now_ns() - t0 > 60ull * 1000000000ull) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            snprintf(why, len, "vramd not ready within 60 s; log %s", log);
            return -1;
        }
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(why, len, "socket: %s", strerror(errno));
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return -1;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            vram_client *c = NULL;
            struct vram_client_options o = {.name = "bench-start", .ctl = 1};
            if (vram_client_connect_fd(fd, &o, &c) == 0) { /* takes fd */
                *us = us_since(t0);
                vram_client_close(c);
                return pid;
            }
        } else {
            close(fd);
        }
        sleep_us(100);
    }
}

static int stop_daemon(pid_t pid)
{
    kill(pid, SIGTERM);
    for (int i = 0; i < 2000; i++) {
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid)
            return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        sleep_us(5000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return 128 + SIGKILL;
}

static void daemon_startup(enum be b)
{
    const char *bn = "daemon_startup";
    int ndev = 2;
#ifdef VRAM_HAVE_CUDA_H
    if (b == BE_CUDA && cu_ngpu < 2)
        ndev = cu_ngpu; /* a one-GPU machine: say so in the line */
#endif
    char dir[] = "/tmp/vram-bench-XXXXXX";
    if (!mkdtemp(dir)) {
        fail_line(bn, be_name(b), "mkdtemp: %s", strerror(errno));
        return;
    }
    char cfg[64], sock[64], log[64];
    snprintf(cfg, sizeof(cfg), "%s/vramd.json", dir);
    snprintf(sock, sizeof(sock), "%s/vramd.sock", dir);
    snprintf(log, sizeof(log), "%s/vramd.log", dir);
    FILE *f = fopen(cfg, "w");
    if (!f) {
        fail_line(bn, be_name(b), "%s: %s", cfg, strerror(errno));
        return;
    }
    /* Whole devices: 16 GiB host pools, or every byte of each GPU. */
    fprintf(f, "{\"devices\": [{\"id\": 0}%s]}\n", ndev > 1 ? ", {\"id\": 1}" : "");
    fclose(f);
    double *t = calloc((size_t)start_reps, sizeof(double));
    long rss_ready = -1, rss_settled = -1;
    bool settled = false;
    int done = 0;
    for (int i = 0; t && i < start_reps; i++) {
        char why[256];
        pid_t pid = start_timed(getenv("VRAMD_BIN"), be_name(b), cfg, sock, log,
                                &t[i], why, sizeof(why));
        if (pid < 0) {
            fail_line(bn, be_name(b), "%s", why);
            break;
        }
        if (i == 0) {
            rss_ready = proc_rss_kib(pid);
            settled = wait_quiet(pid, 150, 20000);
            rss_settled = proc_rss_kib(pid);
        }
        int rc = stop_daemon(pid);
        if (rc != 0) {
            fail_line(bn, be_name(b), "vramd exited with %d after SIGTERM; log "
                      "%s", rc, log);
            break;
        }
        done++;
    }
    if (t && done == start_reps) {
        struct stat2 s = stats(t, (size_t)start_reps);
        struct jl j;
        jl_begin(&j, bn, be_name(b));
        jl_str(&j, "what", "fork/exec of vramd until connect+hello succeeds");
        jl_u64(&j, "devices", (uint64_t)ndev);
        jl_u64(&j, "starts", (uint64_t)start_reps);
        jl_num(&j, "ready_median_us", s.med);
        jl_num(&j, "ready_p90_us", s.p90);
        jl_num(&j, "ready_max_us", t[start_reps - 1]);
        jl_u64(&j, "rss_ready_kib", (uint64_t)(rss_ready > 0 ? rss_ready : 0));
        jl_u64(&j, "rss_settled_kib", (uint64_t)(rss_settled > 0 ? rss_settled : 0));
        jl_bool(&j, "settled", settled);
        jl_end(&j);
        unlink(log);
    } else if (!t) {
        fail_line(bn, be_name(b), "out of memory");
    }
    free(t);
    unlink(cfg);
    unlink(sock);
    char state[sizeof(sock) + 8];
    snprintf(state, sizeof(state), "%s.state", sock);
    unlink(state); /* what the daemon leaves for the next one */
    rmdir(dir);
}

/* ---- 6: what an engine meets at the default configuration --------------- */

#define TARGET_DEFAULT 1.5

/* One line of the default-configuration phase: a brokered path's time per
 * chunk against the in-process floor's per chunk, measured in this run. */
static void default_line(enum be b, const char *bench, const char *what,
                         double us, uint32_t chunks, const struct set_figs *fl,
                         bool pool_full)
{
    struct jl j;
    jl_begin(&j, bench, be_name(b));
    jl_str(&j, "what", what);
    jl_u64(&j, "chunk_bytes", CHUNK);
    jl_u64(&j, "chunks", chunks);
    jl_num(&j, "total_us", us);
    jl_num(&j, "chunk_us", us / chunks);
    jl_num(&j, "floor_chunk_median_us", fl->chunk.med);
    jl_bool(&j, "pool_full_before", pool_full);
    jl_str(&j, "config", "default pool (no pool.prefill_chunks)");
    jl_ratio(&j, "floor_fresh", us / chunks, fl->chunk.med, TARGET_DEFAULT);
    jl_end(&j);
}

static uint64_t pool_ready_now(const struct daemon *d)
{
    cJSON *st = daemon_status(d);
    const cJSON *dev = cJSON_GetArrayItem(cJSON_GetObjectItem(st, "devices"), 0);
    uint64_t n = dev ? json_u64(dev, "pool_ready_chunks") : 0;
    cJSON_Delete(st);
    return n;
}

/* Until the pool holds want chunks, or stops growing short of them (the
 * host backend keeps 16; a GPU may have less free): whether it holds want. */
static bool pool_settle(const struct daemon *d, uint64_t want)
{
    uint64_t last = UINT64_MAX;
    for (int still = 0, t = 0; t < 20000; t += 10) {
        uint64_t n = pool_ready_now(d);
        if (n >= want)
            return wait_quiet(d->pid, 50, 2000);
        still = n == last ? still + 10 : 0;
        if (still >= 300)
            return false;
        last = n;
        sleep_us(10000);
    }
    return false;
}

/* An engine's start with background mapping (vram_client_set_background_map):
 * it asks for its weights' memory, reads its weights meanwhile (here a host
 * copy of the same bytes, as from the page cache), then waits until the
 * memory is mapped. What it waited for is the grow call plus the final
 * wait; the copy's own time, alone and beside the mapping, says whether the
 * mapping slowed the engine's work down. */
struct bg_figs {
    double waited_us, call_us, wait_us, work_us, work_alone_us;
};

static double host_work(uint8_t *dst, const uint8_t *src, size_t n)
{
    uint64_t t0 = now_ns();
    memcpy(dst, src, n);
    return us_since(t0);
}

static bool background_rep(enum be b, const struct daemon *d, uint8_t *dst,
                           const uint8_t *src, struct bg_figs *out)
{
    const char *bn = "default_first_grant_background";
    size_t bytes = (size_t)nchunks * CHUNK;
    vram_client *c = bench_connect(d, "bench-background", bn, b);
    if (!c)
        return false;
    bool ok = false;
    uint32_t stage = 0, region = 0;
    int e = vram_stage_register_adhoc(c, 0, 0, 0, &stage);
    if (e == 0)
        e = vram_region_create(c, stage, VRAM_REGION_FIXED, bytes, 1, &region);
    if (e == 0)
        e = vram_client_set_background_map(c, 1);
    if (e < 0) {
        fail_line(bn, be_name(b), "setup: %s: %s", vram_strerror(e),
                  vram_client_last_error(c));
        goto out;
    }
    struct bg_figs f = {0};
    f.work_alone_us = host_work(dst, src, bytes);
    uint64_t t0 = now_ns();
    e = vram_region_grow(c, region, nchunks);
    f.call_us = us_since(t0);
    if (e < 0) {
        fail_line(bn, be_name(b), "grow by %u chunks: %s: %s", nchunks,
                  vram_strerror(e), vram_client_last_error(c));
        goto out;
    }
    f.work_us = host_work(dst, src, bytes);
    t0 = now_ns();
    e = vram_client_wait(c);
    f.wait_us = us_since(t0);
    f.waited_us = f.call_us + f.wait_us;
    if (e != (int)nchunks) {
        fail_line(bn, be_name(b), "vram_client_wait: %d (%s), expected %u chunks",
                  e, e < 0 ? vram_client_last_error(c) : "", nchunks);
        goto out;
    }
    char why[256];
    if (check_access(b, c, region, nchunks, why, sizeof(why)) < 0) {
        fail_line(bn, be_name(b), "%s", why);
        goto out;
    }
    *out = f;
    ok = true;
out:
    vram_client_close(c);
    return ok;
}

#define TARGET_BACKGROUND 0.9

static void background_json(enum be b, const char *bench, const char *what,
                            const struct bg_figs *f, const struct set_figs *fl,
                            bool pool_full)
{
    struct jl j;
    jl_begin(&j, bench, be_name(b));
    jl_str(&j, "what", what);
    jl_u64(&j, "chunk_bytes", CHUNK);
    jl_u64(&j, "chunks", nchunks);
    jl_num(&j, "waited_us", f->waited_us);
    jl_num(&j, "call_us", f->call_us);
    jl_num(&j, "chunk_us", f->waited_us / nchunks);
    jl_num(&j, "floor_chunk_median_us", fl->chunk.med);
    jl_num(&j, "work_alone_us", f->work_alone_us);
    jl_num(&j, "work_beside_mapping_us", f->work_us);
    jl_num(&j, "work_ratio",
           f->work_alone_us > 0 ? f->work_us / f->work_alone_us : NAN);
    jl_bool(&j, "pool_full_before", pool_full);
    jl_str(&j, "config", "default pool (no pool.prefill_chunks)");
    jl_ratio(&j, "floor_fresh", f->waited_us / nchunks, fl->chunk.med,
             TARGET_BACKGROUND);
    jl_end(&j);
}

static void background_line(enum be b, const struct daemon *d,
                            const struct set_figs *fl, bool pool_full)
{
    const char *bn = "default_first_grant_background";
    size_t bytes = (size_t)nchunks * CHUNK;
    uint8_t *src = malloc(bytes), *dst = malloc(bytes);
    enum { REPS = 3 };
    double waited[REPS], work[REPS], alone[REPS], call[REPS];
    bool ok = src && dst;
    if (!ok)
        fail_line(bn, be_name(b), "out of memory");
    if (ok) {
        /* Touched, with a byte that is not 0 (malloc and a memset of 0
         * may become calloc's untouched pages): the copies fault nothing
         * in. */
        memset(src, 0x3c, bytes);
        memset(dst, 0xc3, bytes);
    }
    for (int rep = 0; ok && rep < REPS; rep++) {
        struct bg_figs f;
        pool_settle(d, nchunks);
        ok = background_rep(b, d, dst, src, &f);
        waited[rep] = f.waited_us;
        work[rep] = f.work_us;
        alone[rep] = f.work_alone_us;
        call[rep] = f.call_us;
    }
    free(src);
    free(dst);
    if (!ok)
        return;
    struct bg_figs med = {.waited_us = stats(waited, REPS).med,
                          .call_us = stats(call, REPS).med,
                          .work_us = stats(work, REPS).med,
                          .work_alone_us = stats(alone, REPS).med};
    background_json(b, bn, "an engine's first grant (4 GiB; 64 MiB quick) with "
                    "background mapping: the time it waits (the grow call and "
                    "the final vram_client_wait) while it copies the same bytes "
                    "on the host meanwhile (median of 3)", &med, fl, pool_full);
}

/* vramd started with no pool setting, as users run it: an engine's first
 * grant of 4 GiB right after start (before the background fill could
 * finish) and again after the pool settled, a KV grow from free memory, and
 * a stage's first expert_request of its whole loan room. */
static void phase_default(enum be b)
{
    const char *bn = "default_config";
    uint32_t saved = nchunks;
    nchunks = opt_quick ? 32 : 2048; /* 4 GiB, or 64 MiB quick */
    uint32_t window = nchunks, initial = 1;
    char dir[] = "/tmp/vram-bench-XXXXXX";
    if (!mkdtemp(dir)) {
        fail_line(bn, be_name(b), "mkdtemp: %s", strerror(errno));
        nchunks = saved;
        return;
    }
    struct daemon d = {0};
    snprintf(d.dir, sizeof(d.dir), "%s", dir);
    snprintf(d.config, sizeof(d.config), "%s/vramd.json", dir);
    snprintf(d.sock, sizeof(d.sock), "%s/vramd.sock", dir);
    snprintf(d.log, sizeof(d.log), "%s/vramd.log", dir);
    FILE *f = fopen(d.config, "w");
    if (!f) {
        fail_line(bn, be_name(b), "%s: %s", d.config, strerror(errno));
        goto out;
    }
    /* One lane of one chunk a token-block: the KV window is `window`
     * chunks, its initial part one chunk; the device holds a grant and the
     * window beside each other. */
    fprintf(f, "{\"devices\": [{\"id\": 0, \"capacity\": \"%lluMiB\", \"chunk\": "
            "\"%lluMiB\"}], \"stages\": [{\"id\": 0, \"device\": 0, "
            "\"first_layer\": 0, \"last_layer\": 0, \"kv_lanes\": [%llu], "
            "\"native_context\": %u, \"initial_tokens\": 1, \"step_tokens\": 1, "
            "\"expert_slot\": \"%lluMiB\", \"loan\": {\"enabled\": true, "
            "\"headroom\": 0}}]}\n",
            (unsigned long long)((uint64_t)(2 * nchunks + window) * (CHUNK >> 20)),
            (unsigned long long)(CHUNK >> 20), (unsigned long long)CHUNK, window,
            (unsigned long long)(CHUNK >> 20));
    fclose(f);
    double start_us = 0;
    char why[256];
    d.pid = start_timed(getenv("VRAMD_BIN"), be_name(b), d.config, d.sock, d.log,
                        &start_us, why, sizeof(why));
    if (d.pid < 0) {
        fail_line(bn, be_name(b), "%s", why);
        goto out;
    }
    struct series cold, settled, fl;
    bool ok = series_init(&cold, 1) && series_init(&settled, 3) &&
              series_init(&fl, 3);
    double setup;
    /* Right after ready: whatever the fill has made by now. */
    bool cold_full = pool_ready_now(&d) >= nchunks, full = false;
    ok = ok && grant_rep(b, &d, &cold, &setup, NULL);
    for (int rep = 0; ok && rep < 3; rep++) {
        /* The floor only while vramd is idle: its fill's driver calls would
         * slow the floor's own down. */
        full = pool_settle(&d, nchunks);
        ok = floor_fresh_rep(b, &fl, rep == 0, false);
        ok = ok && grant_rep(b, &d, &settled, &setup, NULL);
    }
    struct set_figs ff = series_figs(&fl), sf = series_figs(&settled);
    if (ok) {
        /* The cold grant came first, before the floors were measured. */
        default_line(b, "default_first_grant_cold", "an engine's first grant "
                     "(4 GiB; 64 MiB quick) right after vramd is ready",
                     cold.tot[0] / gib_scale(), nchunks, &ff, cold_full);
        default_line(b, "default_first_grant_settled", "the same grant once the "
                     "pool has filled (median of 3)",
                     sf.gib.med / gib_scale(), nchunks, &ff, full);
        background_line(b, &d, &ff, full);
    }
    /* Each by a fresh client once the pool is full: a KV grow from free
     * memory; a first expert_request of the whole loan room; the same KV
     * grow asked one step ahead with background mapping (the engine decodes
     * the current step meanwhile: here a host copy of the same bytes); and
     * the KV grow once the stage holds its own loans (they move into KV:
     * already imported, so no import is on the path). */
    static const struct {
        const char *bench, *what;
    } kv_lines[] = {
        {"default_kv_grow", "vram_kv_reserve of a stage's whole window beyond "
                            "its initial chunk, from free memory"},
        {"default_first_expert_request", "a stage's first vram_expert_request(0): "
                                         "its whole loan room, from free memory"},
        {"default_kv_grow_background",
         "the same KV grow asked one step ahead with background mapping: the "
         "reserve call and the final vram_client_wait, while the engine works "
         "meanwhile (a host copy of the same bytes)"},
        {"default_kv_grow_from_loans",
         "the same KV grow when the stage holds its own expert loans (taken "
         "first, untimed): they move into KV, no import"},
    };
    size_t wbytes = (size_t)window * CHUNK;
    uint8_t *wsrc = malloc(wbytes), *wdst = malloc(wbytes);
    if (wsrc && wdst) {
        memset(wsrc, 0x3c, wbytes);
        memset(wdst, 0xc3, wbytes);
    }
    for (int k = 0; ok && k < 4; k++) {
        full = pool_settle(&d, window);
        vram_client *c = bench_connect(&d, "bench-default", bn, b);
        if (!c) {
            ok = false;
            break;
        }
        struct vram_stage_info si;
        int e = vram_stage_register(c, 0, 0, &si);
        if (e == 0 && k == 3) {
            e = vram_expert_request(c, 0, 0);
            full = pool_settle(&d, window); /* what the loans took, made again */
        }
        if (e == 0 && k == 2)
            e = wsrc && wdst ? vram_client_set_background_map(c, 1) : -ENOMEM;
        uint64_t t0 = now_ns();
        struct vram_kv_result r = {0};
        struct vram_residency res = {0};
        if (e == 0 && k != 1)
            e = vram_kv_reserve(c, 0, window - 1, 1, VRAM_KV_HOLD, &r);
        else if (e == 0)
            e = vram_expert_request(c, 0, 0);
        double us = us_since(t0);
        if (e == VRAM_PENDING && k == 2) {
            /* Sent: the reply is read and mapped beside the work, and the
             * stage's figures are had after the wait. */
            host_work(wdst, wsrc, wbytes);
            t0 = now_ns();
            int n = vram_client_wait(c);
            us += us_since(t0);
            e = n < 0 ? n : 0;
            if (e == 0)
                e = vram_stage_info(c, 0, &si);
            r.kv_mapped_bytes = si.kv_mapped_bytes;
        }
        if (e == 0 && k == 1)
            e = vram_expert_residency(c, 0, &res);
        uint32_t got = k != 1 ? (uint32_t)(r.kv_mapped_bytes / CHUNK) - initial
                              : res.expert_slots_backed;
        if (e == 0 && k != 1 &&
            check_access(b, c, si.kv_region, window, why, sizeof(why)) < 0) {
            fail_line(bn, be_name(b), "%s: %s", kv_lines[k].bench, why);
            ok = false;
        } else if (e < 0 || got != window - initial) {
            fail_line(bn, be_name(b), "%s: %s (%s), %u chunks of %u",
                      kv_lines[k].bench, vram_strerror(e),
                      vram_client_last_error(c), got, window - initial);
            ok = false;
        } else if (k < 2) {
            default_line(b, kv_lines[k].bench, kv_lines[k].what, us, got, &ff,
                         full);
        } else {
            struct jl j;
            jl_begin(&j, kv_lines[k].bench, be_name(b));
            jl_str(&j, "what", kv_lines[k].what);
            jl_u64(&j, "chunk_bytes", CHUNK);
            jl_u64(&j, "chunks", got);
            jl_num(&j, "total_us", us);
            jl_num(&j, "chunk_us", us / got);
            jl_num(&j, "floor_chunk_median_us", ff.chunk.med);
            jl_bool(&j, "pool_full_before", full);
            jl_str(&j, "config", "default pool (no pool.prefill_chunks)");
            jl_ratio(&j, "floor_fresh", us / got, ff.chunk.med, TARGET_BACKGROUND);
            jl_end(&j);
        }
        vram_client_close(c);
    }
    free(wsrc);
    free(wdst);
    series_free(&cold);
    series_free(&settled);
    series_free(&fl);
    if (stop_daemon(d.pid) != 0)
        fail_line(bn, be_name(b), "vramd did not stop cleanly (log %s)", d.log);
    else if (ok)
        unlink(d.log);
out:
    unlink(d.config);
    unlink(d.sock);
    char state[sizeof(d.sock) + 8];
    snprintf(state, sizeof(state), "%s.state", d.sock);
    unlink(state);
    rmdir(dir);
    nchunks = saved;
}

/* ---- a backend from end to end ------------------------------------------ */

static void environment_line(enum be b)
{
    struct jl j;
    jl_begin(&j, "environment", be_name(b));
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
    jl_str(&j, "date", date);
    struct utsname u;
    if (uname(&u) == 0) {
        jl_str(&j, "host", u.nodename);
        jl_str(&j, "kernel", u.release);
        jl_str(&j, "machine", u.machine);
    }
    char line[256], cpu[160] = "";
    FILE *f = fopen("/proc/cpuinfo", "re");
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p += 1 + (p[1] == ' ');
                p[strcspn(p, "\n")] = '\0';
                snprintf(cpu, sizeof(cpu), "%s", p);
            }
            break;
        }
    if (f)
        fclose(f);
    jl_str(&j, "cpu", cpu);
    jl_u64(&j, "cpus", (uint64_t)sysconf(_SC_NPROCESSORS_ONLN));
#ifdef VRAM_HAVE_CUDA_H
    if (b == BE_CUDA) {
        jl_u64(&j, "driver_version", (uint64_t)cu.driver_version);
        jl_u64(&j, "gpus", (uint64_t)cu_ngpu);
        jl_str(&j, "gpu0", cu_gpu_name);
    }
#endif
    jl_bool(&j, "quick", opt_quick);
    jl_str(&j, "vramd", getenv("VRAMD_BIN"));
    jl_end(&j);
}

static void run_backend(enum be b)
{
    environment_line(b);
    setenv("VRAM_TEST_BACKEND", be_name(b), 1); /* read by daemon_start */
    /* Neither the tests' decode of every frame the daemon sends nor the
     * ledger's invariant check after every change is what users run: both
     * are off in the benchmark's daemon (tests/bench/README.md). */
    setenv("VRAMD_CHECK_REPLIES", "0", 1);
    setenv("VRAMD_CHECK_INVARIANTS", "0", 1);
    char cfg[1024];
    bench_config(cfg, sizeof(cfg));
    struct daemon d;
    int e = daemon_start(&d, cfg, NULL);
    if (e < 0) {
        fail_line("brokered", be_name(b), "vramd did not start: %s (log %s)",
                  strerror(-e), d.log);
        daemon_kill(&d); /* a start that timed out leaves it running */
    } else {
        struct rss rss = {-1, -1, -1};
        phase_grant(b, &d, &rss);
        phase_move(b, &d, &rss);
        phase_ping(b, &d);
        struct jl j;
        jl_begin(&j, "daemon_rss", be_name(b));
        jl_str(&j, "what", "VmRSS of the benchmark daemon (one device, pool "
               "prefilled): after start, holding the last grant, after the "
               "moves");
        jl_u64(&j, "rss_after_start_kib", (uint64_t)(rss.start > 0 ? rss.start : 0));
        jl_u64(&j, "rss_after_grant_kib", (uint64_t)(rss.grant > 0 ? rss.grant : 0));
        jl_u64(&j, "rss_after_moves_kib", (uint64_t)(rss.moves > 0 ? rss.moves : 0));
        jl_end(&j);
        if (daemon_stop(&d) != 0) {
            fail_line("brokered", be_name(b), "vramd did not stop cleanly (log "
                      "%s)", d.log);
        } else { /* keep the directory only when something went wrong */
            unlink(d.log);
            unlink(d.config);
            rmdir(d.dir);
        }
    }
    daemon_startup(b);
    phase_default(b);
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: vram-bench [--backend host|cuda|all] [--quick] [--out FILE]\n"
            "                  [--capacity SIZE] [--chunk MIB]\n"
            "Measures vramd's brokered paths against in-process floors; prints\n"
            "one JSON object per line. Exits non-zero only if a measurement\n"
            "failed (a missed target is reported, not an error).\n"
            "  --backend B  host, cuda or all (default all; cuda is skipped with\n"
            "               a one-line reason where no driver or GPU is present)\n"
            "  --quick      few repetitions and 64 MiB sets (smoke test)\n"
            "  --out FILE   also write the lines to FILE\n"
            "  --capacity SIZE  the benchmark daemon's device (default 4GiB;\n"
            "               its expert region spans it, which the ledger's\n"
            "               moves scan)\n"
            "  --chunk MIB  chunk size in MiB, a power of two (default 2); sets\n"
            "               stay 1 GiB (64 MiB quick)\n"
            "VRAMD_BIN names the daemon (default: the one of this build).\n");
}

int main(int argc, char **argv)
{
    const char *backend = "all", *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
            backend = argv[++i];
        } else if (strncmp(argv[i], "--backend=", 10) == 0) {
            backend = argv[i] + 10;
        } else if (strcmp(argv[i], "--quick") == 0) {
            opt_quick = true;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strncmp(argv[i], "--out=", 6) == 0) {
            out = argv[i] + 6;
        } else if (strcmp(argv[i], "--capacity") == 0 && i + 1 < argc) {
            opt_capacity = argv[++i];
        } else if (strncmp(argv[i], "--capacity=", 11) == 0) {
            opt_capacity = argv[i] + 11;
        } else if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc) {
            unsigned long mib = strtoul(argv[++i], NULL, 10);
            if (!mib || mib > 512 || (mib & (mib - 1))) {
                fprintf(stderr, "vram-bench: --chunk takes a power of two of "
                        "MiB up to 512, not '%s'\n", argv[i]);
                return 2;
            }
            chunk_bytes = (uint64_t)mib << 20;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    bool want_host = strcmp(backend, "host") == 0 || strcmp(backend, "all") == 0;
    bool want_cuda = strcmp(backend, "cuda") == 0 || strcmp(backend, "all") == 0;
    if (!want_host && !want_cuda) {
        fprintf(stderr, "vram-bench: --backend must be host, cuda or all, not "
                "'%s'\n", backend);
        return 2;
    }
    /* A size as the config takes it ("4GiB", "16GiB"); it goes into JSON. */
    if (!*opt_capacity ||
        strspn(opt_capacity, "0123456789.KMGTiBkb") != strlen(opt_capacity)) {
        fprintf(stderr, "vram-bench: --capacity takes a size such as 16GiB, "
                "not '%s'\n", opt_capacity);
        return 2;
    }
    nchunks = (uint32_t)((opt_quick ? 64ull << 20 : 1ull << 30) / CHUNK);
    if (nchunks < 2)
        nchunks = 2;
    grant_reps = opt_quick ? 3 : 20;
    move_reps = opt_quick ? 3 : 20;
    ping_reps = opt_quick ? 2000 : 10000;
    start_reps = opt_quick ? 2 : 5;
    signal(SIGPIPE, SIG_IGN);
    if (find_vramd() < 0) {
        fprintf(stderr, "vram-bench: cannot find vramd (set VRAMD_BIN)\n");
        return 1;
    }
    if (out && !(out_file = fopen(out, "w"))) {
        fprintf(stderr, "vram-bench: %s: %s\n", out, strerror(errno));
        return 1;
    }
    if (want_host)
        run_backend(BE_HOST);
    if (want_cuda) {
#ifdef VRAM_HAVE_CUDA_H
        char why[256] = "";
        if (cu_setup(why, sizeof(why)) < 0) {
            fprintf(stderr, "vram-bench: cuda skipped: %s\n", why);
        } else {
            run_backend(BE_CUDA);
            cu_teardown();
        }
#else
        fprintf(stderr, "vram-bench: cuda skipped: this vram-bench was built "
                "without the CUDA headers\n");
#endif
    }
    if (out_file)
        fclose(out_file);
    return failures || check_failures ? 1 : 0;
}
