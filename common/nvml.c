#include "nvml.h"

#include <errno.h>
#include <string.h>

#include "dl.h"

#ifdef _WIN32
#define VNVML_LIBRARY "nvml.dll"
#else
#define VNVML_LIBRARY "libnvidia-ml.so.1"
#endif

/* nvmlMemory_t, whose layout NVML keeps stable (the v1 structure). */
struct vnvml_memory {
    unsigned long long total, free, used;
};

int vnvml_load(struct vnvml *n)
{
    struct vnvml t;
    memset(&t, 0, sizeof(t));
    if (!(t.lib = vp_dl_open(VNVML_LIBRARY)))
        return -ENOENT;
    /* The _v2 entry points are the ones nvml.h maps the plain names to. */
    *(void **)&t.init = vp_dl_sym(t.lib, "nvmlInit_v2");
    *(void **)&t.shutdown = vp_dl_sym(t.lib, "nvmlShutdown");
    *(void **)&t.by_uuid = vp_dl_sym(t.lib, "nvmlDeviceGetHandleByUUID");
    *(void **)&t.memory = vp_dl_sym(t.lib, "nvmlDeviceGetMemoryInfo");
    if (!t.init || !t.shutdown || !t.by_uuid || !t.memory || t.init() != 0) {
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
