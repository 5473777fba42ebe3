/* SPDX-License-Identifier: Apache-2.0 */
/* Mapping cuda chunks into this process with CUDA VMM: a region's range is
 * reserved once at the daemon's address (cuMemAddressReserve with that
 * address; a driver that does not honour it is an error, since the address
 * must never differ), each imported chunk is mapped over its slot (cuMemMap)
 * and made accessible to its own GPU, and to peers when asked and possible
 * (cuMemSetAccess). Imported handles stay open while held, so a move is an
 * unmap, a map and a set-access, with no import; so does each chunk's
 * shareable handle on Linux, closed at its release (one per chunk held, as
 * for host chunks). On Windows the shareable handle is an NT handle vramd
 * pushed into this process; it is closed right after the import. That path
 * is compiled but has never run: there is no Windows GPU machine here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/client_record.h"
#include "client/lib/mappers.h"

#ifdef VRAM_HAVE_CUDA_H
#include "common/cuda_driver.h"
#include "platform/cuda_import.h"

struct vc_cuda {
    struct vcu cu;
    int ndev;
    CUcontext ctx;     /* a primary context this client retained, or NULL */
    CUdevice ctx_dev;
    int8_t *peers;     /* ndev * ndev: can k access j's memory (-1 unknown) */
};

static struct vc_cuda *st(vram_client *c)
{
    return c->mapper_state;
}

static int fail(vram_client *c, CUresult r, int err, const char *what)
{
    char buf[160];
    snprintf(c->last_error, sizeof(c->last_error), "%s: %s", what,
             vcu_strerror(&st(c)->cu, r, buf, sizeof(buf)));
    return err;
}

static int cu_reserve(vram_client *c, uint64_t base, uint64_t size)
{
    CUdeviceptr p = 0;
    CUresult r = st(c)->cu.cuMemAddressReserve(&p, size, 0, (CUdeviceptr)base, 0);
    if (r != CUDA_SUCCESS)
        return fail(c, r, -EADDRINUSE, "cuMemAddressReserve");
    if (p != base) {
        st(c)->cu.cuMemAddressFree(p, size);
        snprintf(c->last_error, sizeof(c->last_error),
                 "the CUDA driver did not honour the region's address 0x%llx "
                 "(it offered 0x%llx); set the daemon's address_window to a "
                 "range the driver accepts", (unsigned long long)base,
                 (unsigned long long)p);
        return -EADDRINUSE;
    }
    return 0;
}

static void cu_unreserve(vram_client *c, uint64_t base, uint64_t size)
{
    st(c)->cu.cuMemAddressFree((CUdeviceptr)base, size);
}

static int cu_import(vram_client *c, struct vc_chunk *ch, vp_handle sh,
                     uint64_t bytes)
{
    (void)bytes;
    CUmemGenericAllocationHandle h;
    CUresult r = st(c)->cu.cuMemImportFromShareableHandle(
        &h, vcu_shareable_arg(sh.v), VCU_SHAREABLE_TYPE);
    if (r != CUDA_SUCCESS)
        return fail(c, r, -EIO, "cuMemImportFromShareableHandle");
    ch->handle = (uint64_t)h;
    /* The allocation handle keeps the memory; what becomes of the
     * shareable one is the OS's (platform/cuda_import.h). */
    ch->h = vp_cuda_import_kept(sh);
    return 0;
}

/* Who may access device dev's memory: itself, and its peers when the
 * client asked for peer access and the GPUs allow it (asked once). */
static size_t access_of(vram_client *c, int dev, CUmemAccessDesc *a, size_t max,
                        CUmemAccess_flags flags)
{
    struct vc_cuda *s = st(c);
    size_t n = 0;
    memset(a, 0, max * sizeof(*a));
    a[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a[n].location.id = dev;
    a[n++].flags = flags;
    if (!c->peer_access || !s->peers || dev < 0 || dev >= s->ndev)
        return n;
    for (int k = 0; k < s->ndev && n < max; k++) {
        if (k == dev || k >= 64 || !((c->dev_peers[k] >> dev) & 1))
            continue; /* vramd's cuda.peer_access says no */
        int8_t *p = &s->peers[dev * s->ndev + k];
        if (*p < 0) {
            CUdevice owner, peer;
            int can = 0;
            s->cu.cuDeviceGet(&owner, dev);
            s->cu.cuDeviceGet(&peer, k);
            s->cu.cuDeviceCanAccessPeer(&can, peer, owner);
            *p = can != 0;
        }
        if (!*p)
            continue;
        a[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        a[n].location.id = k;
        a[n++].flags = flags;
    }
    return n;
}

static int set_access_flags(vram_client *c, uint64_t addr, uint64_t bytes,
                            int dev, CUmemAccess_flags flags)
{
    CUmemAccessDesc a[64];
    size_t n = access_of(c, dev, a, 64, flags);
    CUresult r = st(c)->cu.cuMemSetAccess((CUdeviceptr)addr, bytes, a, n);
    return r == CUDA_SUCCESS ? 0 : fail(c, r, -EIO, "cuMemSetAccess");
}

static int set_access(vram_client *c, uint64_t addr, uint64_t bytes, int dev)
{
    CUmemAccessDesc a[64];
    size_t n = access_of(c, dev, a, 64, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUresult r = st(c)->cu.cuMemSetAccess((CUdeviceptr)addr, bytes, a, n);
    return r == CUDA_SUCCESS ? 0 : fail(c, r, -EIO, "cuMemSetAccess");
}

static int cu_map(vram_client *c, struct vc_chunk *ch, uint64_t addr,
                  uint64_t bytes)
{
    struct vc_cuda *s = st(c);
    CUresult r = s->cu.cuMemMap((CUdeviceptr)addr, bytes, 0,
                                (CUmemGenericAllocationHandle)ch->handle, 0);
    if (r != CUDA_SUCCESS)
        return fail(c, r, -EIO, "cuMemMap");
    int e = set_access(c, addr, bytes, (int)ch->device);
    if (e < 0)
        s->cu.cuMemUnmap((CUdeviceptr)addr, bytes);
    return e;
}

/* A sealed weight set's allocation: readable only, by every GPU that may
 * read it. */
static int cu_map_ro(vram_client *c, struct vc_chunk *ch, uint64_t addr,
                     uint64_t bytes)
{
    struct vc_cuda *s = st(c);
    CUresult r = s->cu.cuMemMap((CUdeviceptr)addr, bytes, 0,
                                (CUmemGenericAllocationHandle)ch->handle, 0);
    if (r != CUDA_SUCCESS)
        return fail(c, r, -EIO, "cuMemMap");
    int e = set_access_flags(c, addr, bytes, (int)ch->device,
                             CU_MEM_ACCESS_FLAGS_PROT_READ);
    if (e < 0)
        s->cu.cuMemUnmap((CUdeviceptr)addr, bytes);
    return e;
}

static int cu_unmap(vram_client *c, struct vc_chunk *ch, uint64_t addr,
                    uint64_t bytes)
{
    (void)ch;
    CUresult r = st(c)->cu.cuMemUnmap((CUdeviceptr)addr, bytes);
    return r == CUDA_SUCCESS ? 0 : fail(c, r, -EIO, "cuMemUnmap");
}

static void cu_release(vram_client *c, struct vc_chunk *ch)
{
    if (ch->handle)
        st(c)->cu.cuMemRelease((CUmemGenericAllocationHandle)ch->handle);
    ch->handle = 0;
    vp_close(&ch->h);
}

/* Sleep and wake: every kernel of the context is done before its memory
 * is read out (the engine's streams may still be writing KV). Host copies
 * are pinned, so that a sleep and a wake run at the bus's speed. */
/* Copies and pinned host memory need a current context on the calling
 * thread, which may not be the one that connected (a Python engine's
 * worker): one without any works in the context this client retained. */
static void cu_bind(struct vc_cuda *s)
{
    CUcontext cur = NULL;
    if (s->cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && !cur && s->ctx)
        s->cu.cuCtxSetCurrent(s->ctx);
}

static int cu_copy_out(vram_client *c, void *dst, uint64_t addr, uint64_t bytes)
{
    struct vc_cuda *s = st(c);
    cu_bind(s);
    CUresult r = s->cu.cuCtxSynchronize();
    if (r == CUDA_SUCCESS)
        r = s->cu.cuMemcpyDtoH(dst, (CUdeviceptr)addr, (size_t)bytes);
    return r == CUDA_SUCCESS ? 0 : fail(c, r, -EIO, "cuMemcpyDtoH");
}

static int cu_copy_in(vram_client *c, uint64_t addr, const void *src,
                      uint64_t bytes)
{
    struct vc_cuda *s = st(c);
    cu_bind(s);
    CUresult r = s->cu.cuMemcpyHtoD((CUdeviceptr)addr, src, (size_t)bytes);
    return r == CUDA_SUCCESS ? 0 : fail(c, r, -EIO, "cuMemcpyHtoD");
}

static void *cu_host_alloc(vram_client *c, uint64_t bytes)
{
    struct vc_cuda *s = st(c);
    void *p = NULL;
    cu_bind(s);
    return s->cu.cuMemHostAlloc(&p, (size_t)bytes, 0) == CUDA_SUCCESS ? p : NULL;
}

static void cu_host_free(vram_client *c, void *p)
{
    struct vc_cuda *s = st(c);
    if (!p)
        return;
    cu_bind(s);
    s->cu.cuMemFreeHost(p);
}

/* The background thread (background.c) works in the context of the thread
 * that made the call: the engine's, or the one this library retained. */
static void *cu_thread_context(vram_client *c)
{
    CUcontext cur = NULL;
    st(c)->cu.cuCtxGetCurrent(&cur);
    return cur ? (void *)cur : (void *)st(c)->ctx;
}

static void cu_thread_adopt(vram_client *c, void *ctx)
{
    if (ctx)
        st(c)->cu.cuCtxSetCurrent((CUcontext)ctx);
}

static void cu_destroy(vram_client *c)
{
    struct vc_cuda *s = st(c);
    if (!s)
        return;
    if (s->ctx) {
        CUcontext cur = NULL;
        s->cu.cuCtxGetCurrent(&cur);
        s->cu.cuDevicePrimaryCtxRelease(s->ctx_dev);
        /* The last retain gone, the context is destroyed: a thread left
         * with it current would hand the next client (and the engine) a
         * dead context (CUDA_ERROR_CONTEXT_IS_DESTROYED at the first copy). */
        unsigned flags = 0;
        int active = 1;
        if (cur == s->ctx &&
            s->cu.cuDevicePrimaryCtxGetState(s->ctx_dev, &flags, &active) ==
                CUDA_SUCCESS &&
            !active)
            s->cu.cuCtxSetCurrent(NULL);
    }
    vcu_unload(&s->cu);
    free(s->peers);
    free(s);
    c->mapper_state = NULL;
}

static const struct vc_mapper cuda_mapper = {
    .name = "cuda",
    .reserve = cu_reserve,
    .unreserve = cu_unreserve,
    .import = cu_import,
    .map = cu_map,
    .map_ro = cu_map_ro,
    .unmap = cu_unmap,
    .release = cu_release,
    .destroy = cu_destroy,
    .copy_out = cu_copy_out,
    .copy_in = cu_copy_in,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .thread_context = cu_thread_context,
    .thread_adopt = cu_thread_adopt,
};

const struct vc_mapper *vc_cuda_mapper(vram_client *c, char *why, size_t whylen)
{
    struct vc_cuda *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    if (vcu_load(&s->cu, why, whylen) < 0) {
        free(s);
        return NULL;
    }
    s->cu.cuDeviceGetCount(&s->ndev);
    if (s->ndev > 0) {
        s->peers = malloc((size_t)s->ndev * (size_t)s->ndev);
        if (s->peers)
            memset(s->peers, -1, (size_t)s->ndev * (size_t)s->ndev);
    }
    /* VMM calls and copies want a current context; engines normally have
     * one. For an engine that has none yet (or one left current after it
     * was destroyed), use device 0's primary context. A primary context
     * that is current is retained too: another client of this process
     * that retained it may release it first, and it must live as long as
     * this client. */
    CUcontext cur = NULL;
    CUdevice dev = 0;
    s->cu.cuCtxGetCurrent(&cur);
    if (cur && s->cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        cur = NULL;
    if (!cur)
        s->cu.cuDeviceGet(&dev, 0);
    CUcontext primary = NULL;
    if (s->cu.cuDevicePrimaryCtxRetain(&primary, dev) == CUDA_SUCCESS) {
        if (!cur || cur == primary) {
            s->ctx = primary;
            s->ctx_dev = dev;
            if (!cur)
                s->cu.cuCtxSetCurrent(primary);
        } else {
            /* The engine's own context: nothing of ours to keep. */
            s->cu.cuDevicePrimaryCtxRelease(dev);
        }
    }
    c->mapper_state = s;
    return &cuda_mapper;
}
#else
const struct vc_mapper *vc_cuda_mapper(vram_client *c, char *why, size_t whylen)
{
    (void)c;
    snprintf(why, whylen, "this libvram was built without the CUDA headers");
    return NULL;
}
#endif
