/* SPDX-License-Identifier: Apache-2.0 */
/* vram-bench-driver: how far the CUDA driver lets a broker overlap its own
 * work with its clients', measured without vramd.
 *
 * A grant of chunks the pool has not made yet costs, on the driver, vramd's
 * cuMemCreate + cuMemExportToShareableHandle and the engine's import + map +
 * set-access of each chunk. Whether a broker can hide the first half behind
 * the second depends on whether the driver runs them at once: this program
 * measures that, on GPU 0, in two processes like vramd's and an engine's:
 *   driver_floor          in-process cuMemCreate + cuMemMap + cuMemSetAccess
 *   driver_create_export  create + export, on 1, 2 and 4 threads at once
 *                         (the threads have no context, like vramd's)
 *   driver_import_map     chunks exported ahead, sent to a second process
 *                         that imports and maps each as it arrives and sets
 *                         access once for the run (libvram sets it a chunk
 *                         at a time: one call a run measured no faster on
 *                         an H200) (a grant from a filled pool: made a
 *                         second before)
 *   driver_sequential     create + export of the whole set, then the same
 *                         import at once (a grant that makes its chunks
 *                         first); import_part_us is the import's share
 *   driver_pipelined      each chunk sent as soon as it is exported, the
 *                         second process importing the ones before meanwhile
 *   driver_cold_bound     the lowest ratio to driver_floor that a grant of
 *                         chunks not made ahead can reach on this driver
 *   driver_import_threads a set received whole, then imported, mapped and
 *                         made accessible a chunk at a time (as libvram
 *                         does) on 1, 2 and 4 threads of the engine: whether
 *                         the engine's half of a grant scales with threads
 * Each set is --chunks chunks (2048: 4 GiB) of 2 MiB; figures are per chunk,
 * medians over --reps sets, the kinds interleaved. Linux only (the chunks
 * travel as SCM_RIGHTS descriptors, as vramd's do). Without a usable GPU it
 * prints one line saying why and exits 0. See tests/bench/README.md. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/bench/bench_util.h"

#ifdef VRAM_HAVE_CUDA_H
#include "tests/bench/bench_cuda.h"
#include "common/cuda_driver.h"

#define CHUNK (2ull << 20)
#define FD_TYPE CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
#define MAX_THREADS 4
/* A set's count word to the importer: the count, a flag, the threads. */
#define COUNT_MASK 0xfffffu
#define ACCESS_ONCE (1u << 20)

static struct vcu cu;
static uint32_t nchunks = 2048;
static int reps = 3;
static FILE *out;

static double us_since(uint64_t t0)
{
    return (double)(now_ns() - t0) / 1e3;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void line(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    fflush(out);
}

/* Quotes and backslashes become spaces: the text goes into a JSON string. */
static void json_safe(char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            *s = ' ';
}

static void skip_line(char *why)
{
    json_safe(why);
    line("{\"bench\":\"driver\",\"backend\":\"cuda\",\"skipped\":true,"
         "\"why\":\"%s\"}", why);
}

/* Both processes hold a whole set's descriptors at once (2048 by default):
 * the soft limit on open files is raised to the hard one. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int ctx_on(CUcontext *ctx)
{
    CUdevice dev;
    if (cu.cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cu.cuDevicePrimaryCtxRetain(ctx, dev) != CUDA_SUCCESS ||
        cu.cuCtxSetCurrent(*ctx) != CUDA_SUCCESS)
        return -1;
    return 0;
}

/* ---- descriptors over the socket (one per message, as a reply frame's) --- */

static int send_fd(int s, int fd)
{
    char c = 0, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec v = {&c, 1};
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    memset(ctl, 0, sizeof(ctl));
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof(ctl);
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof(int));
    ssize_t r;
    do
        r = sendmsg(s, &m, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    return r == 1 ? 0 : -1;
}

static int recv_fd(int s)
{
    char c, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec v = {&c, 1};
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof(ctl);
    ssize_t r;
    do
        r = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    struct cmsghdr *h = r == 1 ? CMSG_FIRSTHDR(&m) : NULL;
    if (!h || h->cmsg_type != SCM_RIGHTS || h->cmsg_len != CMSG_LEN(sizeof(int)))
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(h), sizeof(int));
    return fd;
}

/* ---- the second process: an engine's import, map and set-access -------- */

/* driver_import_threads' worker: chunks from, from + step, ... of a set
 * received whole, imported, mapped and made accessible one by one. */
struct import_job {
    CUcontext ctx;
    const int *fd;
    bool *mapped;
    CUdeviceptr va;
    uint32_t from, step, n;
    bool access_once; /* no set-access a chunk: one for the set, after */
    bool failed;
};

static void *import_some(void *arg)
{
    struct import_job *j = arg;
    CUmemAccessDesc acc = bench_cu_access();
    if (cu.cuCtxSetCurrent(j->ctx) != CUDA_SUCCESS) {
        j->failed = true;
        return NULL;
    }
    for (uint32_t i = j->from; i < j->n; i += j->step) {
        CUmemGenericAllocationHandle h;
        CUdeviceptr at = j->va + (CUdeviceptr)i * CHUNK;
        if (cu.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)j->fd[i],
                                              FD_TYPE) != CUDA_SUCCESS) {
            j->failed = true;
            continue;
        }
        CUresult r = cu.cuMemMap(at, CHUNK, 0, h, 0);
        cu.cuMemRelease(h); /* the mapping keeps it */
        if (r != CUDA_SUCCESS) {
            j->failed = true;
            continue;
        }
        j->mapped[i] = true;
        if (!j->access_once && cu.cuMemSetAccess(at, CHUNK, &acc, 1) != CUDA_SUCCESS)
            j->failed = true;
    }
    return NULL;
}

/* A set for driver_import_threads: every descriptor received first
 * (answered 'r': the broker's clock starts there), then imported on
 * `threads` threads; 'd' (or 'e'), unmapped, 'c'. With access_once the
 * set is made accessible by one call after the imports (driver_import_access). */
static int import_threaded(int s, CUcontext ctx, uint32_t n, uint32_t threads,
                           bool access_once)
{
    CUdeviceptr va = 0;
    size_t bytes = (size_t)n * CHUNK;
    int *fd = malloc(n * sizeof(*fd));
    bool *mapped = calloc(n, sizeof(*mapped));
    uint32_t got = 0;
    int e = 1;
    char st = 'd';
    if (!fd || !mapped || threads > MAX_THREADS ||
        cu.cuMemAddressReserve(&va, bytes, CHUNK, 0, 0) != CUDA_SUCCESS)
        goto out;
    if (full_io(s, "g", 1, true) < 0)
        goto out;
    for (; got < n; got++)
        if ((fd[got] = recv_fd(s)) < 0)
            goto out;
    if (full_io(s, "r", 1, true) < 0)
        goto out;
    pthread_t th[MAX_THREADS];
    struct import_job job[MAX_THREADS];
    uint32_t started = 0;
    for (uint32_t k = 0; k < threads; k++) {
        job[k] = (struct import_job){ctx, fd, mapped, va, k, threads, n,
                                     access_once, false};
        if (pthread_create(&th[k], NULL, import_some, &job[k]) != 0)
            break;
        started++;
    }
    for (uint32_t k = 0; k < started; k++) {
        pthread_join(th[k], NULL);
        if (job[k].failed)
            st = 'e';
    }
    CUmemAccessDesc acc = bench_cu_access();
    if (st == 'd' && access_once && started == threads &&
        cu.cuMemSetAccess(va, bytes, &acc, 1) != CUDA_SUCCESS)
        st = 'e';
    if (started < threads ||
        (st == 'd' && cu.cuMemsetD8(va, 0x5a, bytes) != CUDA_SUCCESS))
        st = 'e';
    cu.cuCtxSynchronize();
    if (full_io(s, &st, 1, true) < 0)
        goto out;
    for (uint32_t i = 0; i < n; i++)
        if (mapped[i])
            cu.cuMemUnmap(va + (CUdeviceptr)i * CHUNK, CHUNK);
    e = full_io(s, "c", 1, true) < 0;
out:
    for (uint32_t i = 0; i < got; i++)
        close(fd[i]);
    if (va)
        cu.cuMemAddressFree(va, bytes);
    free(fd);
    free(mapped);
    return e;
}

/* Per set: reads the count (0: done; its top byte, when not 0, the threads
 * of driver_import_threads, and ACCESS_ONCE), answers 'g', imports and maps each descriptor
 * as it arrives, answers 'd' (or 'e' at a failure), unmaps and answers
 * 'c'. */
static int importer(int s)
{
    CUcontext ctx;
    char why[256];
    if (vcu_load(&cu, why, sizeof(why)) < 0 || ctx_on(&ctx) < 0)
        return 1;
    CUmemAccessDesc acc = bench_cu_access();
    uint32_t n;
    while (full_io(s, &n, sizeof(n), false) == 0 && n) {
        if (n >> 24) {
            if (import_threaded(s, ctx, n & COUNT_MASK, n >> 24,
                                (n & ACCESS_ONCE) != 0))
                return 1;
            continue;
        }
        CUdeviceptr va = 0;
        size_t bytes = (size_t)n * CHUNK;
        char st = 'd';
        if (cu.cuMemAddressReserve(&va, bytes, CHUNK, 0, 0) != CUDA_SUCCESS)
            return 1;
        if (full_io(s, "g", 1, true) < 0)
            return 1;
        uint32_t mapped = 0;
        for (uint32_t i = 0; i < n; i++) {
            int fd = recv_fd(s);
            CUmemGenericAllocationHandle h;
            CUdeviceptr at = va + (CUdeviceptr)i * CHUNK;
            if (fd < 0)
                return 1;
            CUresult r = cu.cuMemImportFromShareableHandle(
                &h, (void *)(intptr_t)fd, FD_TYPE);
            close(fd);
            if (r != CUDA_SUCCESS) {
                st = 'e';
                continue;
            }
            r = cu.cuMemMap(at, CHUNK, 0, h, 0);
            cu.cuMemRelease(h); /* the mapping keeps it */
            if (r == CUDA_SUCCESS)
                mapped++;
            else
                st = 'e';
        }
        /* One set-access for the contiguous run (libvram sets it a chunk
         * at a time; on an H200 the two cost the same). */
        if (st == 'd' && (cu.cuMemSetAccess(va, bytes, &acc, 1) != CUDA_SUCCESS ||
                          cu.cuMemsetD8(va, 0x5a, bytes) != CUDA_SUCCESS))
            st = 'e';
        cu.cuCtxSynchronize();
        /* Answered before the unmapping, which no grant waits for. */
        if (full_io(s, &st, 1, true) < 0)
            return 1;
        for (uint32_t i = 0; i < mapped; i++)
            cu.cuMemUnmap(va + (CUdeviceptr)i * CHUNK, CHUNK);
        cu.cuMemAddressFree(va, bytes);
        if (full_io(s, "c", 1, true) < 0)
            return 1;
    }
    return 0;
}

struct peer {
    int s;
    pid_t pid;
};

static int peer_start(struct peer *p, const char *self)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        /* exec, not fork alone: the driver is not usable in a forked child */
        if (dup2(sv[1], 3) < 0)
            _exit(127);
        execl(self, self, "--importer", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return -1;
    }
    p->s = sv[0];
    p->pid = pid;
    return 0;
}

static void peer_stop(struct peer *p)
{
    uint32_t zero = 0;
    full_io(p->s, &zero, sizeof(zero), true);
    close(p->s);
    waitpid(p->pid, NULL, 0);
}

/* ---- the broker's side -------------------------------------------------- */

struct maker {
    CUmemGenericAllocationHandle *h;
    int *fd;
    uint32_t from, step, n;
    int send_to; /* >= 0: send each descriptor as soon as it is made */
    bool failed;
};

/* Create and export chunks from, from + step, ... (a thread with no context,
 * like vramd's). */
static void *make_chunks(void *arg)
{
    struct maker *m = arg;
    CUmemAllocationProp p = bench_cu_prop(true);
    for (uint32_t i = m->from; i < m->n; i += m->step) {
        if (cu.cuMemCreate(&m->h[i], CHUNK, &p, 0) != CUDA_SUCCESS) {
            m->failed = true;
            return NULL;
        }
        if (cu.cuMemExportToShareableHandle(&m->fd[i], m->h[i], FD_TYPE, 0) !=
            CUDA_SUCCESS) {
            cu.cuMemRelease(m->h[i]);
            m->h[i] = 0;
            m->failed = true;
            return NULL;
        }
        if (m->send_to >= 0 && send_fd(m->send_to, m->fd[i]) < 0) {
            m->failed = true;
            return NULL;
        }
    }
    return NULL;
}

static void release_set(CUmemGenericAllocationHandle *h, int *fd)
{
    for (uint32_t i = 0; i < nchunks; i++) {
        if (h[i])
            cu.cuMemRelease(h[i]);
        if (fd[i] >= 0)
            close(fd[i]);
        h[i] = 0;
        fd[i] = -1;
    }
}

/* Makes the set on `threads` threads; sending to s (>= 0) as it goes. */
static int make_set(CUmemGenericAllocationHandle *h, int *fd, int threads, int s)
{
    pthread_t th[MAX_THREADS];
    struct maker m[MAX_THREADS];
    int started = 0, e = 0;
    for (int k = 0; k < threads; k++) {
        m[k] = (struct maker){h, fd, (uint32_t)k, (uint32_t)threads, nchunks, s, false};
        if (pthread_create(&th[k], NULL, make_chunks, &m[k]) != 0) {
            e = -1;
            break;
        }
        started++;
    }
    for (int k = 0; k < started; k++) {
        pthread_join(th[k], NULL);
        if (m[k].failed)
            e = -1;
    }
    return e;
}

/* The importer takes a set: the count, its 'g' when its range is reserved. */
static int peer_begin(struct peer *p)
{
    char g;
    return full_io(p->s, &nchunks, sizeof(nchunks), true) < 0 ||
                   full_io(p->s, &g, 1, false) < 0 || g != 'g'
               ? -1
               : 0;
}

/* The set mapped: *us is the time since t0. Then waits for the unmapping,
 * so that nothing timed next runs beside it. */
static int peer_end(struct peer *p, uint64_t t0, double *us)
{
    char st, c;
    if (full_io(p->s, &st, 1, false) < 0 || st != 'd')
        return -1;
    *us = us_since(t0) / nchunks;
    return full_io(p->s, &c, 1, false) < 0 || c != 'c' ? -1 : 0;
}

/* The set's descriptors, in order. */
static int send_set(struct peer *p, const int *fd)
{
    for (uint32_t i = 0; i < nchunks; i++)
        if (send_fd(p->s, fd[i]) < 0)
            return -1;
    return 0;
}

/* A set for driver_import_threads: sent whole, then timed from the
 * importer's 'r' to its 'd'. */
static int import_threads_rep(struct peer *p, const int *fd, uint32_t threads,
                              bool access_once, double *us)
{
    uint32_t w = nchunks | threads << 24 | (access_once ? ACCESS_ONCE : 0);
    char g, r;
    if (full_io(p->s, &w, sizeof(w), true) < 0 || full_io(p->s, &g, 1, false) < 0 ||
        g != 'g' || send_set(p, fd) < 0 || full_io(p->s, &r, 1, false) < 0 || r != 'r')
        return -1;
    return peer_end(p, now_ns(), us);
}

/* One repetition of every kind; per-chunk microseconds into the arrays. */
struct figs {
    double floor[8], make[MAX_THREADS + 1][8], import[8], seq[8], pipe[8];
    double threads[MAX_THREADS + 1][8];
    double access[2][8], reimport[8];
};

static int floor_rep(double *per_chunk)
{
    CUmemAllocationProp p = bench_cu_prop(false);
    CUmemAccessDesc acc = bench_cu_access();
    CUmemGenericAllocationHandle *h = calloc(nchunks, sizeof(*h));
    CUdeviceptr va = 0;
    size_t bytes = (size_t)nchunks * CHUNK;
    uint32_t made = 0;
    int e = -1;
    if (!h || cu.cuMemAddressReserve(&va, bytes, CHUNK, 0, 0) != CUDA_SUCCESS)
        goto out;
    uint64_t t0 = now_ns();
    for (; made < nchunks; made++) {
        CUdeviceptr at = va + (CUdeviceptr)made * CHUNK;
        if (cu.cuMemCreate(&h[made], CHUNK, &p, 0) != CUDA_SUCCESS)
            goto out;
        if (cu.cuMemMap(at, CHUNK, 0, h[made], 0) != CUDA_SUCCESS ||
            cu.cuMemSetAccess(at, CHUNK, &acc, 1) != CUDA_SUCCESS) {
            cu.cuMemRelease(h[made]);
            goto out;
        }
    }
    *per_chunk = us_since(t0) / nchunks;
    e = cu.cuMemsetD8(va, 0x5a, bytes) == CUDA_SUCCESS ? 0 : -1;
    cu.cuCtxSynchronize();
out:
    for (uint32_t i = 0; i < made; i++) {
        cu.cuMemUnmap(va + (CUdeviceptr)i * CHUNK, CHUNK);
        cu.cuMemRelease(h[i]);
    }
    if (va)
        cu.cuMemAddressFree(va, bytes);
    free(h);
    return e;
}

static int run_rep(struct peer *p, int rep, struct figs *f,
                   CUmemGenericAllocationHandle *h, int *fd)
{
    if (floor_rep(&f->floor[rep]) < 0)
        return -1;
    for (int t = 1; t <= MAX_THREADS; t *= 2) {
        uint64_t t0 = now_ns();
        int e = make_set(h, fd, t, -1);
        f->make[t][rep] = us_since(t0) / nchunks;
        if (e < 0)
            return -1;
        if (t < MAX_THREADS)
            release_set(h, fd);
    }
    /* A filled pool: the chunks of the last set, exported already and left
     * a second, as a pool's are before a grant takes them. */
    sleep_us(1000000);
    for (uint32_t t = 1; t <= MAX_THREADS; t *= 2)
        if (import_threads_rep(p, fd, t, false, &f->threads[t][rep]) < 0)
            return -1;
    if (peer_begin(p) < 0)
        return -1;
    uint64_t t0 = now_ns();
    if (send_set(p, fd) < 0 || peer_end(p, t0, &f->import[rep]) < 0)
        return -1;
    release_set(h, fd);
    /* Made on the grant's path, then sent. */
    if (peer_begin(p) < 0)
        return -1;
    t0 = now_ns();
    if (make_set(h, fd, 1, -1) < 0 || send_set(p, fd) < 0 ||
        peer_end(p, t0, &f->seq[rep]) < 0)
        return -1;
    release_set(h, fd);
    /* Each sent as soon as it is exported. */
    if (peer_begin(p) < 0)
        return -1;
    t0 = now_ns();
    if (make_set(h, fd, 1, p->s) < 0)
        return -1;
    if (peer_end(p, t0, &f->pipe[rep]) < 0)
        return -1;
    release_set(h, fd);
    /* driver_import_access: a fresh set each, settled a second, imported
     * on one thread with a set-access a chunk and with one for the set
     * (the order alternating by set); the second set then imported again,
     * as the other kinds' sets are: is a second import of the same
     * allocations cheaper? */
    for (int v = 0; v < 2; v++) {
        bool once = (v + rep) % 2;
        if (make_set(h, fd, 1, -1) < 0)
            return -1;
        sleep_us(1000000);
        if (import_threads_rep(p, fd, 1, once, &f->access[once][rep]) < 0)
            return -1;
        if (v == 1 && import_threads_rep(p, fd, 1, false, &f->reimport[rep]) < 0)
            return -1;
        release_set(h, fd);
    }
    return 0;
}

static void report(struct figs *f, const char *gpu)
{
    double fl = median(f->floor, reps);
    double imp = median(f->import, reps), seq = median(f->seq, reps);
    double pip = median(f->pipe, reps), mk1 = median(f->make[1], reps);
    line("{\"bench\":\"driver_floor\",\"backend\":\"cuda\",\"gpu\":\"%s\","
         "\"what\":\"in-process cuMemCreate + cuMemMap + cuMemSetAccess\","
         "\"chunks\":%u,\"reps\":%d,\"chunk_us\":%.3f}", gpu, nchunks, reps, fl);
    for (int t = 1; t <= MAX_THREADS; t *= 2) {
        double mk = median(f->make[t], reps);
        line("{\"bench\":\"driver_create_export\",\"backend\":\"cuda\","
             "\"what\":\"cuMemCreate + cuMemExportToShareableHandle on threads "
             "without a context, wall time per chunk\",\"threads\":%d,"
             "\"chunk_us\":%.3f,\"chunks_per_s\":%.0f,\"speedup_vs_1\":%.3f}",
             t, mk, 1e6 / mk, mk1 / mk);
    }
    line("{\"bench\":\"driver_import_map\",\"backend\":\"cuda\",\"what\":\"chunks "
         "exported ahead, sent to a second process that imports and maps each as "
         "it arrives and sets access once for the run\",\"chunk_us\":%.3f,\"baseline\":\"driver_floor\","
         "\"ratio\":%.3f}", imp, imp / fl);
    /* Less the making, what importing chunks made a moment ago cost: more
     * than settled ones, if the driver still works on new allocations. */
    line("{\"bench\":\"driver_sequential\",\"backend\":\"cuda\",\"what\":\"the "
         "set created and exported, then sent and imported at once\","
         "\"chunk_us\":%.3f,\"import_part_us\":%.3f,\"baseline\":\"driver_floor\","
         "\"ratio\":%.3f}", seq, seq - mk1, seq / fl);
    /* Perfect overlap would cost the larger of the two halves. */
    double ideal = mk1 > imp ? mk1 : imp;
    line("{\"bench\":\"driver_pipelined\",\"backend\":\"cuda\",\"what\":\"each "
         "chunk sent as soon as it is exported while the second process imports "
         "the ones before\",\"chunk_us\":%.3f,\"sum_of_halves_us\":%.3f,"
         "\"perfect_overlap_us\":%.3f,\"overlap_gained\":%.3f,"
         "\"baseline\":\"driver_floor\",\"ratio\":%.3f}",
         pip, mk1 + imp, ideal, (mk1 + imp - pip) / (mk1 + imp - ideal), pip / fl);
    double th1 = median(f->threads[1], reps);
    for (int t = 1; t <= MAX_THREADS; t *= 2) {
        double x = median(f->threads[t], reps);
        line("{\"bench\":\"driver_import_threads\",\"backend\":\"cuda\","
             "\"what\":\"a set received whole, then imported, mapped and made "
             "accessible a chunk at a time on threads of the engine, wall time "
             "per chunk\",\"threads\":%d,\"chunk_us\":%.3f,\"speedup_vs_1\":%.3f,"
             "\"baseline\":\"driver_floor\",\"ratio\":%.3f}", t, x, th1 / x, x / fl);
    }
    double a0 = median(f->access[0], reps), a1 = median(f->access[1], reps);
    double ri = median(f->reimport, reps);
    line("{\"bench\":\"driver_import_access\",\"backend\":\"cuda\","
         "\"what\":\"a fresh set received whole, imported and mapped on one "
         "thread with a set-access a chunk, with one set-access for the set, "
         "and imported a second time with one a chunk; wall time per chunk\","
         "\"per_chunk_us\":%.3f,\"once_us\":%.3f,\"reimport_us\":%.3f,"
         "\"ratio_once\":%.3f,\"ratio_reimport\":%.3f,"
         "\"baseline\":\"driver_floor\",\"ratio\":%.3f}",
         a0, a1, ri, a1 / a0, ri / a0, a0 / fl);
    double best = pip < seq ? pip : seq;
    line("{\"bench\":\"driver_cold_bound\",\"backend\":\"cuda\",\"what\":\"the "
         "lowest ratio to the in-process floor that a grant of chunks not made "
         "ahead reaches on this driver (the better of sequential and "
         "pipelined)\",\"chunk_us\":%.3f,\"baseline\":\"driver_floor\","
         "\"ratio\":%.3f,\"filled_pool_ratio\":%.3f}", best, best / fl, imp / fl);
}

static int run(const char *self)
{
    char why[256];
    CUcontext ctx;
    int ngpu = 0;
    if (vcu_load(&cu, why, sizeof(why)) < 0) {
        skip_line(why);
        return 0;
    }
    if (cu.cuDeviceGetCount(&ngpu) != CUDA_SUCCESS || ngpu < 1 || ctx_on(&ctx) < 0) {
        snprintf(why, sizeof(why), "the NVIDIA driver reports no usable GPU");
        skip_line(why);
        return 0;
    }
    char gpu[128] = "";
    CUdevice dev;
    cu.cuDeviceGet(&dev, 0);
    cu.cuDeviceGetName(gpu, sizeof(gpu), dev);
    json_safe(gpu);
    CUmemGenericAllocationHandle *h = calloc(nchunks, sizeof(*h));
    int *fd = malloc(nchunks * sizeof(*fd));
    struct figs f;
    struct peer p;
    int e = 1;
    if (!h || !fd || peer_start(&p, self) < 0) {
        fprintf(stderr, "vram-bench-driver: cannot start the importer\n");
        goto out;
    }
    for (uint32_t i = 0; i < nchunks; i++)
        fd[i] = -1;
    for (int rep = 0; rep < reps; rep++)
        if (run_rep(&p, rep, &f, h, fd) < 0) {
            fprintf(stderr, "vram-bench-driver: a driver call failed in set %d\n",
                    rep);
            release_set(h, fd);
            peer_stop(&p);
            goto out;
        }
    peer_stop(&p);
    report(&f, gpu);
    e = 0;
out:
    free(h);
    free(fd);
    return e;
}
#endif

int main(int argc, char **argv)
{
#ifdef VRAM_HAVE_CUDA_H
    out = stdout;
    raise_nofile();
    if (argc == 2 && strcmp(argv[1], "--importer") == 0)
        return importer(3);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--chunks") == 0 && i + 1 < argc)
            nchunks = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            if (!(out = fopen(argv[++i], "w"))) {
                perror(argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: vram-bench-driver [--chunks N] [--reps R "
                            "(1-8)] [--out FILE]\n");
            return 2;
        }
    }
    if (!nchunks || nchunks > COUNT_MASK || reps < 1 || reps > 8) {
        fprintf(stderr, "vram-bench-driver: --chunks 1-1048575, --reps 1-8\n");
        return 2;
    }
    return run("/proc/self/exe");
#else
    (void)argc;
    (void)argv;
    printf("{\"bench\":\"driver\",\"backend\":\"cuda\",\"skipped\":true,"
           "\"why\":\"built without cuda.h\"}\n");
    return 0;
#endif
}
