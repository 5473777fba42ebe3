/* SPDX-License-Identifier: Apache-2.0 */
#include "common/nvml.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "platform/dl.h"
#include "platform/gpu_share.h"

/* nvmlMemory_t, whose layout NVML keeps stable (the v1 structure). */
struct vnvml_memory {
    unsigned long long total, free, used;
};

int vnvml_load(struct vnvml *n, char *why, size_t whylen)
{
    struct vnvml t;
    memset(&t, 0, sizeof(t));
    const struct vp_gpu_system *sys = vp_gpu_system();
    if (!(t.lib = vp_dl_open(sys->nvml))) {
        if (why && whylen)
            snprintf(why, whylen, "no NVML (%s)", sys->nvml_where);
        return -ENOENT;
    }
    /* The _v2 entry points are the ones nvml.h maps the plain names to. */
    *(void **)&t.init = vp_dl_sym(t.lib, "nvmlInit_v2");
    *(void **)&t.shutdown = vp_dl_sym(t.lib, "nvmlShutdown");
    *(void **)&t.by_uuid = vp_dl_sym(t.lib, "nvmlDeviceGetHandleByUUID");
    *(void **)&t.memory = vp_dl_sym(t.lib, "nvmlDeviceGetMemoryInfo");
    if (!t.init || !t.shutdown || !t.by_uuid || !t.memory) {
        if (why && whylen)
            snprintf(why, whylen, "%s lacks nvmlInit_v2, "
                     "nvmlDeviceGetHandleByUUID or nvmlDeviceGetMemoryInfo",
                     sys->nvml);
        vp_dl_close(t.lib);
        return -ENOENT;
    }
    int r = t.init();
    if (r != 0) {
        if (why && whylen)
            snprintf(why, whylen, "%s: nvmlInit_v2 failed (NVML "
                     "error %d)", sys->nvml, r);
        vp_dl_close(t.lib);
        return -ENOENT;
    }
    *n = t;
    return 0;
}

int vnvml_free_bytes(const struct vnvml *n, const char *uuid, uint64_t *out)
{
    void *dev = NULL;
    struct vnvml_memory m;
    if (!n || !n->lib)
        return -ENOENT;
    if (n->by_uuid(uuid, &dev) != 0 || n->memory(dev, &m) != 0)
        return -EIO;
    *out = m.free;
    return 0;
}

void vnvml_unload(struct vnvml *n)
{
    if (!n || !n->lib)
        return;
    n->shutdown();
    vp_dl_close(n->lib);
    n->lib = NULL;
}

int vnvml_fits(uint64_t free, uint64_t keep, uint64_t need, char *why,
               size_t whylen)
{
    /* Written so that no sum can wrap. */
    if (free >= keep && free - keep >= need)
        return 0;
    if (!why || !whylen)
        return -ENOSPC;
    char kept[80] = "";
    if (keep)
        snprintf(kept, sizeof(kept), ", of which %llu MiB stay to other "
                 "processes", (unsigned long long)(keep >> 20));
    snprintf(why, whylen, "%llu MiB more would oversubscribe the GPU: it has "
             "%llu MiB of dedicated memory free%s; under WDDM an "
             "oversubscribed allocation pages to system memory instead of "
             "failing", (unsigned long long)((need >> 20) + !!(need & ((1u << 20) - 1))),
             (unsigned long long)(free >> 20), kept);
    return -ENOSPC;
}
