/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA backend: chunks are CUDA VMM allocations (cuMemCreate) on their
 * device, exported to clients as POSIX file descriptors.
 *
 * The driver is loaded at run time (common/cuda_driver.c), so one vramd runs
 * everywhere and says in one line why CUDA is unavailable.
 *
 * Confidentiality: a chunk that leaves its holder is never handed out again
 * with its bytes. In "fresh" mode (the default) its handle is released and
 * a new allocation made: the driver clears pages between processes (the GPU
 * suite asserts it on every run), and the daemon needs no CUDA context at
 * all, which on an H200 saves 550 MiB of each GPU and 110-125 ms of start-up
 * per device. In "zero" mode the daemon clears the chunk itself through a
 * scratch mapping (cuMemsetD8) and reuses it; that needs each device's
 * primary context, retained once.
 *
 * Both kinds of work (creating new chunks, scrubbing returned ones) run from
 * the idle loop, off the grant path; a grant takes a ready chunk when there
 * is one. The pool is filled up to every chunk the ledger could grant now
 * (its free chunks), so that a grant waits for the driver only when the
 * pool is empty: creating and exporting a chunk costs 40-60 us, more than
 * the client's import and map. Two limits bound it: what the GPU has free
 * (NVML; less the device's reserve, so that the fill never takes memory
 * other processes on the GPU use), and file descriptors: chunks beyond what
 * the fd limit leaves room for are created but exported only when granted
 * (or when exported ones have gone out).
 *
 * On Windows the chunks are NT handles (CU_MEM_HANDLE_TYPE_WIN32) whose
 * security descriptor comes from platform/gpu_share.h, and a GPU
 * under WDDM gets one more bound: every chunk, granted or made ahead, must
 * fit in NVML's dedicated free memory, because WDDM pages an oversubscribed
 * allocation to system memory instead of failing it. That path is compiled
 * but has never run: there is no Windows GPU machine here. */
#include "daemon/backends/backend.h"
#include "daemon/backends/standby.h"
#include "daemon/config.h"
#include "daemon/backends/section.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The "cuda" section: cuda's own settings, parsed here (section.h). */
struct cuda_conf {
    bool zero;      /* scrub "zero": the daemon clears; "fresh": new memory */
    bool peers_off; /* peer_access "off": no GPU maps another's chunks, as
                       on GPUs without P2P */
};
_Static_assert(sizeof(struct cuda_conf) <= VD_BACKEND_CONF_BYTES, "slot");

static void cuda_conf_defaults(void *conf)
{
    struct cuda_conf *c = conf;
    c->zero = false; /* "fresh" */
    c->peers_off = false;
}

static void cuda_conf_parse(const cJSON *v, void *conf,
                            const struct vd_section_errs *e)
{
    struct cuda_conf *c = conf;
    static const char *const ck[] = {"scrub", "peer_access", NULL};
    vd_section_known_keys(e, v, "cuda", ck);
    const char *sc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "scrub"));
    if (cJSON_GetObjectItemCaseSensitive(v, "scrub") &&
        (!sc || (strcmp(sc, "zero") && strcmp(sc, "fresh"))))
        vd_section_error(e, "cuda.scrub: expected \"zero\" or \"fresh\"");
    else if (sc)
        c->zero = strcmp(sc, "zero") == 0;
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(v, "peer_access");
    const char *ps = cJSON_GetStringValue(pa);
    if (pa && (!ps || (strcmp(ps, "auto") && strcmp(ps, "off"))))
        vd_section_error(e, "cuda.peer_access: expected \"auto\" (where the "
                         "GPUs allow it) or \"off\"");
    else if (ps)
        c->peers_off = strcmp(ps, "off") == 0;
}

const struct vd_backend_section vd_backend_cuda_section = {
    .key = "cuda",
    .size = sizeof(struct cuda_conf),
    .defaults = cuda_conf_defaults,
    .parse = cuda_conf_parse,
};

#ifdef VRAM_HAVE_CUDA_H
#include "platform/clock.h"
#include "common/cuda_driver.h"
#include "platform/handle.h"
#include "daemon/log.h"
#include "platform/gpu_share.h"
#include "common/nvml.h"

#define NONE ((CUmemGenericAllocationHandle)0)

struct cuda_dev {
    CUdevice dev;
    int ordinal;
    uint64_t chunk_bytes;
    uint32_t nchunks;
    CUmemGenericAllocationHandle *h; /* per chunk; NONE without memory */
    CUmemGenericAllocationHandle *ready, *made, *dirty;
    vp_handle *ready_h;  /* exported ahead, so a grant does not export */
    uint32_t nready, nmade, ndirty;
    uint32_t fill_cap;   /* the standby: created ahead at most (standby.h) */
    uint64_t last_return_ns; /* a chunk came back to the pool (scrub zero) */
    uint32_t export_cap; /* of those, exported ahead at most (fds) */
    uint64_t reserve;    /* bytes of the GPU the fill leaves to others */
    uint64_t gpu_free;   /* NVML's figure, less what was created since */
    uint64_t checked_ns; /* when gpu_free was read */
    uint32_t since_check;
    bool short_logged;   /* the fill stopped for the GPU's free memory */
    bool wddm;           /* Windows' display driver model: never oversubscribe */
    bool nvml_failed;    /* the last reading failed (logged once) */
    CUcontext ctx;
    CUdeviceptr scratch;
};

struct cuda_backend {
    struct vd_backend base;
    struct vcu cu;
    struct cuda_dev dev[64];
    struct vnvml nvml;  /* lib NULL without NVML: the capacity alone */
    bool zero;          /* scrub by memset (needs a context) */
    bool need_ctx;      /* cuMemCreate refused to run without a context */
    uint32_t idle_release_ms; /* pool.idle_release_ms */
    uint64_t created, scrubbed, released;
    struct vp_gpu_share *share; /* the chunks' handles' security */
};

static const char *err(struct cuda_backend *b, CUresult r)
{
    static char buf[160];
    return vcu_strerror(&b->cu, r, buf, sizeof(buf));
}

static CUmemAllocationProp chunk_prop(const struct cuda_backend *b,
                                      const struct cuda_dev *d)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = VCU_SHAREABLE_TYPE;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = d->ordinal;
    /* Required with CU_MEM_HANDLE_TYPE_WIN32, and NULL otherwise. */
    p.win32HandleMetaData = vp_gpu_share_meta(b->share);
    return p;
}

static int use_ctx(struct cuda_backend *b, struct cuda_dev *d)
{
    if (!d->ctx) {
        uint64_t t0 = vp_now_ns();
        CUresult r = b->cu.cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
        if (r != CUDA_SUCCESS) {
            vlog(VLOG_ERR, "cuda device %d: cannot retain its primary context: "
                 "%s", d->ordinal, err(b, r));
            return -EIO;
        }
        vlog(VLOG_INFO, "cuda device %d: primary context retained in %.1f ms "
             "(needed to scrub returned chunks)", d->ordinal,
             (double)(vp_now_ns() - t0) / 1e6);
    }
    return b->cu.cuCtxSetCurrent(d->ctx) == CUDA_SUCCESS ? 0 : -EIO;
}

/* Under WDDM a cuMemCreate beyond the GPU's dedicated memory does not fail:
 * the allocation pages to system memory, and the engine that maps it runs
 * from there (one engine on Windows measured a prompt going from 9.7 s to
 * 426 s that way). So on such a GPU no chunk is made that NVML's dedicated
 * free figure does not cover: the fill also leaves the device's reserve,
 * a grant needs only its chunk. The figure is read again when it is older
 * than 100 ms or 64 chunks, and always before a refusal, so that a refusal
 * rests on a fresh reading; in between, each chunk made lowers it. Without
 * a reading there is no chunk (-EIO): guessing is what this guards
 * against. */
static int wddm_read(struct cuda_backend *b, struct cuda_dev *d, uint64_t now)
{
    uint64_t f;
    if (vnvml_free_bytes(&b->nvml, b->base.info[d - b->dev].uuid, &f) < 0) {
        /* Once until a reading works again: the fill retries every turn. */
        if (!d->nvml_failed)
            vlog(VLOG_ERR, "cuda device %d (WDDM): no chunk made: NVML "
                 "cannot say how much dedicated memory is free, and under "
                 "WDDM an oversubscribed allocation pages to system memory "
                 "instead of failing", d->ordinal);
        d->nvml_failed = true;
        return -EIO;
    }
    d->nvml_failed = false;
    d->gpu_free = f;
    d->checked_ns = now;
    d->since_check = 0;
    return 0;
}

static int wddm_room(struct cuda_backend *b, struct cuda_dev *d, bool filling,
                     uint64_t bytes)
{
    uint64_t keep = filling ? d->reserve : 0, now = vp_now_ns();
    bool read = d->since_check >= 64 || now - d->checked_ns > 100000000ull;
    char why[256];
    if (read && wddm_read(b, d, now) < 0)
        return -EIO;
    if (vnvml_fits(d->gpu_free, keep, bytes, why, sizeof(why)) == 0)
        return 0;
    if (!read) { /* the refusal rests on a fresh reading */
        if (wddm_read(b, d, now) < 0)
            return -EIO;
        if (vnvml_fits(d->gpu_free, keep, bytes, why, sizeof(why)) == 0)
            return 0;
    }
    /* The fill meets a full GPU as a matter of course: it says so once. */
    if (!filling || !d->short_logged)
        vlog(filling ? VLOG_NOTICE : VLOG_ERR, "cuda device %d (WDDM): %s "
             "refused: %s", d->ordinal,
             filling ? "a chunk made ahead" : "a grant's chunk", why);
    if (filling)
        d->short_logged = true;
    return -ENOSPC;
}

/* An allocation of bytes (a chunk's, or a weight set's) on d. */
static int create_bytes(struct cuda_backend *b, struct cuda_dev *d,
                        bool filling, uint64_t bytes,
                        CUmemGenericAllocationHandle *out)
{
    CUmemAllocationProp p = chunk_prop(b, d);
    if (d->wddm) {
        int e = wddm_room(b, d, filling, bytes);
        if (e < 0)
            return e;
    }
    if (b->need_ctx && use_ctx(b, d) < 0)
        return -EIO;
    CUresult r = b->cu.cuMemCreate(out, bytes, &p, 0);
    if (r == CUDA_ERROR_INVALID_CONTEXT && !b->need_ctx) {
        b->need_ctx = true;
        vlog(VLOG_NOTICE, "cuMemCreate needs a current context on this driver");
        if (use_ctx(b, d) < 0)
            return -EIO;
        r = b->cu.cuMemCreate(out, bytes, &p, 0);
    }
    if (r != CUDA_SUCCESS) {
        /* The fill meets a full GPU as a matter of course: it says so once. */
        if (!filling || r != CUDA_ERROR_OUT_OF_MEMORY)
            vlog(VLOG_ERR, "cuda device %d: cuMemCreate of %llu bytes: %s",
                 d->ordinal, (unsigned long long)bytes, err(b, r));
        return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
    }
    b->created++;
    /* The fill lowers the figure itself (cuda_prefill); a grant here. */
    if (d->wddm && !filling) {
        d->gpu_free = d->gpu_free > bytes ? d->gpu_free - bytes : 0;
        d->since_check++;
    }
    return 0;
}

static int create(struct cuda_backend *b, struct cuda_dev *d, bool filling,
                  CUmemGenericAllocationHandle *out)
{
    return create_bytes(b, d, filling, d->chunk_bytes, out);
}

/* Zeroes a chunk through the daemon's scratch mapping. */
static int scrub(struct cuda_backend *b, struct cuda_dev *d,
                 CUmemGenericAllocationHandle h)
{
    if (use_ctx(b, d) < 0)
        return -EIO;
    CUresult r;
    if (!d->scratch) {
        r = b->cu.cuMemAddressReserve(&d->scratch, d->chunk_bytes, 0, 0, 0);
        if (r != CUDA_SUCCESS) {
            vlog(VLOG_ERR, "cuda device %d: scratch reservation: %s",
                 d->ordinal, err(b, r));
            return -EIO;
        }
    }
    CUmemAccessDesc a;
    memset(&a, 0, sizeof(a));
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = d->ordinal;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = b->cu.cuMemMap(d->scratch, d->chunk_bytes, 0, h, 0);
    if (r == CUDA_SUCCESS) {
        r = b->cu.cuMemSetAccess(d->scratch, d->chunk_bytes, &a, 1);
        if (r == CUDA_SUCCESS)
            r = b->cu.cuMemsetD8(d->scratch, 0, d->chunk_bytes);
        if (r == CUDA_SUCCESS)
            r = b->cu.cuCtxSynchronize();
        b->cu.cuMemUnmap(d->scratch, d->chunk_bytes);
    }
    if (r != CUDA_SUCCESS) {
        vlog(VLOG_ERR, "cuda device %d: scrubbing a chunk failed: %s",
             d->ordinal, err(b, r));
        return -EIO;
    }
    b->scrubbed++;
    return 0;
}

/* A shareable handle for h, or VP_NONE. */
static vp_handle export_handle(struct cuda_backend *b, CUmemGenericAllocationHandle h)
{
    vp_handle out = VP_NONE;
    /* The driver writes an int (an fd) or a HANDLE of this process, pushed
     * into the client at send time and closed here; a NULL HANDLE is no
     * handle (VP_NONE's -1 is INVALID_HANDLE_VALUE, which no export
     * returns). */
    union {
        int fd;
        void *h;
    } sh = {0};
    bool nt = vp_gpu_system()->handle == VP_GPU_HANDLE_NT;
    if (b->cu.cuMemExportToShareableHandle(&sh, h, VCU_SHAREABLE_TYPE, 0) ==
        CUDA_SUCCESS && (!nt || sh.h))
        out.v = nt ? (intptr_t)sh.h : sh.fd;
    return out;
}

static int cuda_chunk_handle(struct vd_backend *vb, uint32_t dev, uint32_t idx,
                             vp_handle *out)
{
    struct cuda_backend *b = (struct cuda_backend *)vb;
    if (dev >= vb->ndev || idx >= b->dev[dev].nchunks)
        return -EINVAL;
    struct cuda_dev *d = &b->dev[dev];
    if (d->h[idx] == NONE) {
        if (d->nready) {
            d->nready--;
            d->h[idx] = d->ready[d->nready];
            if (vp_ok(d->ready_h[d->nready])) {
                *out = d->ready_h[d->nready];
                d->ready_h[d->nready] = VP_NONE;
                return 0;
            }
        } else if (d->nmade) {
            d->h[idx] = d->made[--d->nmade]; /* exported below */
        } else {
            CUmemGenericAllocationHandle h;
            int e = create(b, d, false, &h);
            if (e < 0)
                return e;
            if (b->zero && scrub(b, d, h) < 0) {
                b->cu.cuMemRelease(h);
                return -EIO;
            }
            d->h[idx] = h;
        }
    }
    vp_handle sh = export_handle(b, d->h[idx]);
    if (!vp_ok(sh)) {
        vlog(VLOG_ERR, "cuda device %d: export of chunk %u failed", d->ordinal,
             idx);
        return -EIO;
    }
    *out = sh;
    return 0;
}

static void cuda_chunk_drop(struct vd_backend *vb, uint32_t dev, uint32_t idx)
{
    struct cuda_backend *b = (struct cuda_backend *)vb;
    if (dev >= vb->ndev || idx >= b->dev[dev].nchunks)
        return;
    struct cuda_dev *d = &b->dev[dev];
    if (d->h[idx] == NONE)
        return;
    if (b->zero) {
        d->dirty[d->ndirty++] = d->h[idx]; /* scrubbed from the idle loop */
        d->last_return_ns = vp_now_ns();
    } else {
        b->cu.cuMemRelease(d->h[idx]);
        b->released++;
    }
    d->h[idx] = NONE;
}

/* Whether the GPU has room for one more chunk beside the reserve, by
 * NVML's free figure, read again every 64 chunks or 100 ms (a read costs
 * tens of microseconds; other processes' use changes slowly). */
static bool room_on_gpu(struct cuda_backend *b, struct cuda_dev *d,
                        const char *uuid)
{
    if (!b->nvml.lib)
        return true;
    uint64_t now = vp_now_ns();
    if (d->since_check >= 64 || now - d->checked_ns > 100000000ull) {
        uint64_t f;
        if (vnvml_free_bytes(&b->nvml, uuid, &f) < 0)
            return true; /* no figure: the capacity alone */
        d->gpu_free = f;
        d->checked_ns = now;
        d->since_check = 0;
    }
    if (d->gpu_free >= d->reserve + d->chunk_bytes)
        return true;
    if (!d->short_logged) {
        vlog(VLOG_NOTICE, "cuda device %d: the pool stops at %u chunks made "
             "ahead: the GPU has %llu MiB free and the fill leaves %llu MiB",
             d->ordinal, d->nready + d->nmade,
             (unsigned long long)(d->gpu_free >> 20),
             (unsigned long long)(d->reserve >> 20));
        d->short_logged = true;
    }
    return false;
}

static void pool_push(struct cuda_backend *b, struct cuda_dev *d,
                      CUmemGenericAllocationHandle h)
{
    if (d->nready < d->export_cap) {
        d->ready_h[d->nready] = export_handle(b, h);
        d->ready[d->nready++] = h;
    } else {
        d->made[d->nmade++] = h;
    }
}

/* Gives back one chunk made ahead, an unexported one first. */
static void pool_drop_one(struct cuda_backend *b, struct cuda_dev *d)
{
    if (d->nmade) {
        b->cu.cuMemRelease(d->made[--d->nmade]);
    } else {
        d->nready--;
        vp_close(&d->ready_h[d->nready]);
        b->cu.cuMemRelease(d->ready[d->nready]);
    }
    b->released++;
}

static int cuda_prefill(struct vd_backend *vb, uint32_t dev, uint32_t want,
                        uint32_t n)
{
    struct cuda_backend *b = (struct cuda_backend *)vb;
    if (dev >= vb->ndev)
        return 0;
    struct cuda_dev *d = &b->dev[dev];
    uint32_t done = 0;
    /* The standby, or what came back beyond it until it has been idle for
     * pool.idle_release_ms (standby.h); new chunks only up to the standby. */
    uint32_t hold = vd_standby_hold(d->fill_cap, d->nready + d->nmade + d->ndirty,
                                    d->last_return_ns, vp_now_ns(),
                                    b->idle_release_ms);
    if (want > hold)
        want = hold;
    uint32_t make = want < d->fill_cap ? want : d->fill_cap;
    /* Returned chunks first: they hold memory already. */
    while (d->ndirty && done < n) {
        CUmemGenericAllocationHandle h = d->dirty[--d->ndirty];
        if (d->nready + d->nmade < want && scrub(b, d, h) == 0) {
            pool_push(b, d, h);
        } else {
            b->cu.cuMemRelease(h);
            b->released++;
        }
        done++;
    }
    /* More than the ledger could grant (its capacity went down): back. */
    while (d->nready + d->nmade > want && done < n) {
        pool_drop_one(b, d);
        done++;
    }
    /* Exported ones went out with grants: export made ones in their place. */
    while (d->nmade && d->nready < d->export_cap && done < n) {
        CUmemGenericAllocationHandle h = d->made[--d->nmade];
        d->ready_h[d->nready] = export_handle(b, h);
        d->ready[d->nready++] = h;
        done++;
    }
    while (d->nready + d->nmade < make && done < n &&
           room_on_gpu(b, d, vb->info[dev].uuid)) {
        CUmemGenericAllocationHandle h;
        if (create(b, d, true, &h) < 0) {
            d->gpu_free = 0; /* read again in 100 ms */
            break;
        }
        if (b->zero && scrub(b, d, h) < 0) {
            b->cu.cuMemRelease(h);
            break;
        }
        pool_push(b, d, h);
        d->gpu_free = d->gpu_free > d->chunk_bytes ? d->gpu_free - d->chunk_bytes : 0;
        d->since_check++;
        d->short_logged = false;
        done++;
    }
    return (int)done;
}

static size_t cuda_fds_held(struct vd_backend *vb)
{
    /* Handles are not fds; only the ready pool's exported fds are held. */
    struct cuda_backend *b = (struct cuda_backend *)vb;
    size_t n = 0;
    for (uint32_t i = 0; i < vb->ndev; i++)
        for (uint32_t k = 0; k < b->dev[i].nready; k++)
            n += vp_ok(b->dev[i].ready_h[k]);
    return n;
}

static uint32_t cuda_pool_ready(struct vd_backend *vb, uint32_t dev)
{
    struct cuda_backend *b = (struct cuda_backend *)vb;
    return dev < vb->ndev ? b->dev[dev].nready + b->dev[dev].nmade : 0;
}

static void cuda_destroy(struct vd_backend *vb)
{
    struct cuda_backend *b = (struct cuda_backend *)vb;
    for (uint32_t i = 0; i < vb->ndev; i++) {
        struct cuda_dev *d = &b->dev[i];
        for (uint32_t k = 0; d->h && k < d->nchunks; k++)
            if (d->h[k] != NONE)
                b->cu.cuMemRelease(d->h[k]);
        for (uint32_t k = 0; k < d->nready; k++) {
            b->cu.cuMemRelease(d->ready[k]);
            vp_close(&d->ready_h[k]);
        }
        for (uint32_t k = 0; k < d->nmade; k++)
            b->cu.cuMemRelease(d->made[k]);
        for (uint32_t k = 0; k < d->ndirty; k++)
            b->cu.cuMemRelease(d->dirty[k]);
        if (d->scratch)
            b->cu.cuMemAddressFree(d->scratch, d->chunk_bytes);
        if (d->ctx)
            b->cu.cuDevicePrimaryCtxRelease(d->dev);
        free(d->h);
        free(d->ready);
        free(d->made);
        free(d->ready_h);
        free(d->dirty);
    }
    vnvml_unload(&b->nvml);
    vcu_unload(&b->cu);
    vp_gpu_share_free(b->share);
    free(b);
}

/* R17: a weight set's allocations, each made, exported and released at
 * once: the exported handle alone keeps the memory and its bytes (checked
 * on an H200 with 4 GiB: an fd held by a process with no CUDA context, the
 * exporter gone), so the daemon holds no allocation, only handles. */
static int cuda_wset_alloc(struct vd_backend *vb, uint32_t dev, uint64_t bytes,
                           uint32_t n, vp_handle *out, char *why, size_t whylen)
{
    struct cuda_backend *b = (struct cuda_backend *)vb;
    if (dev >= vb->ndev) {
        snprintf(why, whylen, "no device %u", dev);
        return -ENODEV;
    }
    struct cuda_dev *d = &b->dev[dev];
    uint32_t k = 0;
    int e = 0;
    for (; k < n; k++) {
        CUmemGenericAllocationHandle h;
        e = create_bytes(b, d, false, bytes, &h);
        if (e < 0) {
            snprintf(why, whylen, "cuda device %d: allocation %u of %u (%llu "
                     "MiB) could not be made%s", d->ordinal, k + 1, n,
                     (unsigned long long)(bytes >> 20),
                     e == -ENOMEM ? ": out of GPU memory" : "");
            break;
        }
        out[k] = export_handle(b, h);
        b->cu.cuMemRelease(h);
        if (!vp_ok(out[k])) {
            snprintf(why, whylen, "cuda device %d: allocation %u of %u could "
                     "not be exported", d->ordinal, k + 1, n);
            e = -EIO;
            break;
        }
    }
    if (e < 0)
        while (k--)
            vp_close(&out[k]);
    return e;
}

/* Read-only is each mapping's access on cuda (CU_MEM_ACCESS_FLAGS_PROT_READ,
 * set by the client's library): nothing to do to the allocation. */
static int cuda_wset_seal(struct vd_backend *vb, uint32_t dev, vp_handle h,
                          char *why, size_t whylen)
{
    (void)vb;
    (void)dev;
    (void)h;
    (void)why;
    (void)whylen;
    return 0;
}

static const struct vd_backend_ops cuda_ops = {
    .name = "cuda",
    .chunk_handle = cuda_chunk_handle,
    .chunk_drop = cuda_chunk_drop,
    .prefill = cuda_prefill,
    .fds_held = cuda_fds_held,
    .pool_ready = cuda_pool_ready,
    .wset_alloc = cuda_wset_alloc,
    .wset_seal = cuda_wset_seal,
    .destroy = cuda_destroy,
};

int vd_backend_cuda_create(struct vd_config *cfg,
                           const struct vd_backend_conf *conf,
                           struct vd_backend **out, char *why, size_t whylen)
{
    const struct cuda_conf *cc = (const struct cuda_conf *)conf->bytes;
    struct cuda_backend *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    int e = vcu_load(&b->cu, why, whylen);
    if (e < 0) {
        free(b);
        return e;
    }
    b->base.ops = &cuda_ops;
    b->base.gpu = true;
    /* The driver's NT handles on Windows, whose access is no section's: a
     * copy with map rights would not import (backend.h). */
    b->base.handles = VD_HANDLES_OPAQUE;
    b->zero = cc->zero;
    b->idle_release_ms = cfg->pool_idle_release_ms;
    int n = 0;
    b->cu.cuDeviceGetCount(&n);
    if (n <= 0) {
        snprintf(why, whylen, "the NVIDIA driver reports no GPU");
        goto fail;
    }
    if (!cfg->devices_given) { /* every GPU, total memory less a reserve */
        cfg->ndev = (uint32_t)(n < 64 ? n : 64);
        for (uint32_t i = 0; i < cfg->ndev; i++) {
            memset(&cfg->dev[i], 0, sizeof(cfg->dev[i]));
            cfg->dev[i].l.id = i;
            cfg->dev[i].l.chunk_bytes = 2u << 20;
            cfg->dev[i].reserve_bytes = 1ull << 30;
        }
    }
    b->base.ndev = cfg->ndev;
    char nvml_why[160] = "";
    if (vnvml_load(&b->nvml, nvml_why, sizeof(nvml_why)) < 0)
        vlog(VLOG_NOTICE, "NVML is not available: the pool fills up to the "
             "devices' capacity without looking at what else uses the GPUs");
    e = vp_gpu_share_create(&b->share, why, whylen);
    if (e < 0)
        goto fail;
    if (vp_gpu_share_describe(b->share))
        vlog(VLOG_INFO, "%s", vp_gpu_share_describe(b->share));
    /* Exported chunks ahead are fds. Half of what the fd limit leaves beside
     * the clients' sockets (and what they keep while quarantined) goes to
     * them, shared by the devices; a grant beyond them exports as it goes. */
    uint64_t lim = vp_handle_limit(), keep = 1024 + 4ull * cfg->max_clients;
    uint64_t budget64 = lim > keep ? (lim - keep) / 2 / (cfg->ndev ? cfg->ndev : 1) : 0;
    uint32_t export_budget = budget64 > UINT32_MAX ? UINT32_MAX : (uint32_t)budget64;
    for (uint32_t i = 0; i < cfg->ndev; i++) {
        struct cuda_dev *d = &b->dev[i];
        struct vd_device_info *info = &b->base.info[i];
        d->ordinal = (int)cfg->dev[i].l.id;
        if (d->ordinal >= n) {
            snprintf(why, whylen, "devices[%u].id: no GPU %d (the driver shows "
                     "%d)", i, d->ordinal, n);
            goto fail;
        }
        b->cu.cuDeviceGet(&d->dev, d->ordinal);
        b->cu.cuDeviceGetName(info->name, sizeof(info->name), d->dev);
        CUuuid u;
        if (b->cu.cuDeviceGetUuid(&u, d->dev) == CUDA_SUCCESS) {
            const unsigned char *x = (const unsigned char *)u.bytes;
            snprintf(info->uuid, sizeof(info->uuid),
                     "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                     "%02x%02x%02x%02x%02x%02x", x[0], x[1], x[2], x[3], x[4],
                     x[5], x[6], x[7], x[8], x[9], x[10], x[11], x[12], x[13],
                     x[14], x[15]);
        }
        size_t total = 0;
        b->cu.cuDeviceTotalMem(&total, d->dev);
        info->total_bytes = total;
        info->id = (uint32_t)d->ordinal;
        int vmm = 0, fdok = 0;
        b->cu.cuDeviceGetAttribute(
            &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d->dev);
        b->cu.cuDeviceGetAttribute(&fdok, VCU_SHAREABLE_ATTR, d->dev);
        info->vmm = vmm;
        /* The status's posix_fd is the POSIX kind only: on Windows the
         * shareable kind is the NT handle, checked here all the same. */
        info->posix_fd = vp_gpu_system()->handle == VP_GPU_HANDLE_FD && fdok;
        if (!vmm || !fdok) {
            snprintf(why, whylen, "GPU %d (%s) lacks %s", d->ordinal, info->name,
                     !vmm ? "virtual memory management" : VCU_SHAREABLE_NAME);
            goto fail;
        }
        /* TCC fails an allocation the GPU cannot hold, as Linux does; WDDM
         * does not (wddm_room). Unknown counts as WDDM. */
        int tcc = 0;
        if (vp_gpu_system()->paging_model &&
            b->cu.cuDeviceGetAttribute(&tcc, CU_DEVICE_ATTRIBUTE_TCC_DRIVER,
                                       d->dev) != CUDA_SUCCESS)
            tcc = 0;
        d->wddm = vp_gpu_system()->paging_model && !tcc;
        if (d->wddm && !b->nvml.lib) {
            snprintf(why, whylen, "GPU %d (%s) runs under WDDM, where an "
                     "oversubscribed allocation pages to system memory "
                     "instead of failing, and vramd cannot see its dedicated "
                     "free memory without NVML: %s", d->ordinal, info->name,
                     nvml_why);
            goto fail;
        }
        CUmemAllocationProp p = chunk_prop(b, d);
        size_t gran = 0;
        b->cu.cuMemGetAllocationGranularity(&gran, &p,
                                            CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        info->granularity = gran;
        d->chunk_bytes = cfg->dev[i].l.chunk_bytes;
        if (gran && d->chunk_bytes % gran) {
            snprintf(why, whylen, "devices[%u].chunk: %llu bytes is not a "
                     "multiple of GPU %d's granularity %zu", i,
                     (unsigned long long)d->chunk_bytes, d->ordinal, gran);
            goto fail;
        }
        d->nchunks = (uint32_t)(total / d->chunk_bytes);
        uint64_t basis = vd_standby_basis(total, cfg->dev[i].has_capacity,
                                          cfg->dev[i].l.capacity_bytes);
        d->fill_cap = vd_standby_chunks(cfg->pool_prefill, cfg->pool_standby,
                                        basis, d->wddm, d->chunk_bytes,
                                        d->nchunks);
        info->standby_chunks = d->fill_cap;
        d->export_cap = d->fill_cap < export_budget ? d->fill_cap : export_budget;
        d->reserve = cfg->dev[i].reserve_bytes;
        d->h = calloc(d->nchunks, sizeof(*d->h));
        d->ready = calloc(d->export_cap ? d->export_cap : 1, sizeof(*d->ready));
        /* Returned chunks may swell the pool past the standby (standby.h). */
        d->made = calloc(d->nchunks ? d->nchunks : 1, sizeof(*d->made));
        d->ready_h = calloc(d->export_cap ? d->export_cap : 1, sizeof(vp_handle));
        d->dirty = calloc(d->nchunks, sizeof(*d->dirty));
        if (!d->h || !d->ready || !d->made || !d->ready_h || !d->dirty) {
            snprintf(why, whylen, "out of memory");
            goto fail;
        }
        for (uint32_t k = 0; k < (d->export_cap ? d->export_cap : 1); k++)
            d->ready_h[k] = VP_NONE;
        /* With peer access off (cuda.peer_access), a host whose GPUs have
         * P2P behaves as a consumer pair without it: every chunk is mapped
         * for its own GPU only, and engines copy through the host. */
        for (uint32_t k = 0; k < (uint32_t)n && k < 64 && !cc->peers_off;
             k++) {
            int can = 0;
            if ((int)k != d->ordinal) {
                CUdevice peer;
                b->cu.cuDeviceGet(&peer, (int)k);
                b->cu.cuDeviceCanAccessPeer(&can, d->dev, peer);
            }
            if (can)
                info->peers |= 1ull << k;
        }
    }
    *out = &b->base;
    return 0;
fail:
    b->base.ndev = b->base.ndev ? b->base.ndev : 0;
    cuda_destroy(&b->base);
    return -ENODEV;
}

#else
int vd_backend_cuda_create(struct vd_config *cfg,
                           const struct vd_backend_conf *conf,
                           struct vd_backend **out, char *why, size_t whylen)
{
    (void)cfg;
    (void)conf;
    (void)out;
    snprintf(why, whylen, "vramd was built without the CUDA headers (cuda.h)");
    return -ENOSYS;
}
#endif
