/* The host backend: each chunk is a memfd of the chunk size, sealed so no one
 * can shrink or grow it under a mapping. Scrubbing is by fresh memory: when a
 * chunk leaves its holder the daemon closes its memfd, and the next grant of
 * that chunk gets a new, zero-filled one from the pre-filled pool. */
#include "backend.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct host_dev {
    uint64_t chunk_bytes;
    uint32_t nchunks;
    int *fd;     /* per chunk, -1 while it has no memory */
    int *ready;  /* pre-filled pool */
    uint32_t nready, ready_cap;
};

struct host_backend {
    struct vd_backend base;
    struct host_dev dev[64];
    size_t held;
};

static int make_memfd(uint64_t bytes)
{
    int fd = memfd_create("vramd-chunk", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)bytes) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

static int host_chunk_fd(struct vd_backend *b, uint32_t dev, uint32_t idx,
                         int *fd_out, bool *close_after)
{
    struct host_backend *h = (struct host_backend *)b;
    if (dev >= b->ndev || idx >= h->dev[dev].nchunks)
        return -EINVAL;
    struct host_dev *d = &h->dev[dev];
    if (d->fd[idx] < 0) {
        int fd = d->nready ? d->ready[--d->nready] : make_memfd(d->chunk_bytes);
        if (fd < 0)
            return fd;
        d->fd[idx] = fd; /* the idle loop refills the pool */
    }
    *fd_out = d->fd[idx];
    *close_after = false;
    return 0;
}

static void host_chunk_drop(struct vd_backend *b, uint32_t dev, uint32_t idx)
{
    struct host_backend *h = (struct host_backend *)b;
    if (dev >= b->ndev || idx >= h->dev[dev].nchunks)
        return;
    struct host_dev *d = &h->dev[dev];
    if (d->fd[idx] >= 0) {
        close(d->fd[idx]);
        d->fd[idx] = -1;
    }
}

static int host_prefill(struct vd_backend *b, uint32_t n)
{
    struct host_backend *h = (struct host_backend *)b;
    int made = 0;
    for (uint32_t i = 0; i < b->ndev && (uint32_t)made < n; i++) {
        struct host_dev *d = &h->dev[i];
        while (d->nready < d->ready_cap && (uint32_t)made < n) {
            int fd = make_memfd(d->chunk_bytes);
            if (fd < 0)
                return made;
            d->ready[d->nready++] = fd;
            made++;
        }
    }
    return made;
}

static size_t host_fds_held(struct vd_backend *b)
{
    struct host_backend *h = (struct host_backend *)b;
    size_t n = 0;
    for (uint32_t i = 0; i < b->ndev; i++) {
        n += h->dev[i].nready;
        for (uint32_t k = 0; k < h->dev[i].nchunks; k++)
            n += h->dev[i].fd[k] >= 0;
    }
    return n;
}

static uint64_t host_chunk_ino(struct vd_backend *b, uint32_t dev, uint32_t idx)
{
    struct host_backend *h = (struct host_backend *)b;
    struct stat st;
    if (dev >= b->ndev || idx >= h->dev[dev].nchunks || h->dev[dev].fd[idx] < 0 ||
        fstat(h->dev[dev].fd[idx], &st) < 0)
        return 0;
    return (uint64_t)st.st_ino;
}

static uint32_t host_pool_ready(struct vd_backend *b, uint32_t dev)
{
    struct host_backend *h = (struct host_backend *)b;
    return dev < b->ndev ? h->dev[dev].nready : 0;
}

static void host_destroy(struct vd_backend *b)
{
    struct host_backend *h = (struct host_backend *)b;
    for (uint32_t i = 0; i < b->ndev; i++) {
        struct host_dev *d = &h->dev[i];
        for (uint32_t k = 0; d->fd && k < d->nchunks; k++)
            if (d->fd[k] >= 0)
                close(d->fd[k]);
        for (uint32_t k = 0; k < d->nready; k++)
            close(d->ready[k]);
        free(d->fd);
        free(d->ready);
    }
    free(h);
}

static const struct vd_backend_ops host_ops = {
    .name = "host",
    .chunk_fd = host_chunk_fd,
    .chunk_drop = host_chunk_drop,
    .prefill = host_prefill,
    .fds_held = host_fds_held,
    .pool_ready = host_pool_ready,
    .chunk_ino = host_chunk_ino,
    .destroy = host_destroy,
};

int vd_backend_host_create(uint32_t ndev, const uint32_t *ids,
                           const uint64_t *chunk_bytes, const uint32_t *nchunks,
                           uint32_t prefill, struct vd_backend **out)
{
    if (ndev == 0 || ndev > 64)
        return -EINVAL;
    struct host_backend *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->base.ops = &host_ops;
    h->base.ndev = ndev;
    for (uint32_t i = 0; i < ndev; i++) {
        struct host_dev *d = &h->dev[i];
        d->chunk_bytes = chunk_bytes[i];
        d->nchunks = nchunks[i];
        d->fd = malloc(nchunks[i] * sizeof(int));
        d->ready_cap = prefill;
        d->ready = malloc((prefill ? prefill : 1) * sizeof(int));
        if (!d->fd || !d->ready) {
            h->base.ndev = i + 1;
            host_destroy(&h->base);
            return -ENOMEM;
        }
        for (uint32_t k = 0; k < nchunks[i]; k++)
            d->fd[k] = -1;
        struct vd_device_info *info = &h->base.info[i];
        info->id = ids[i];
        snprintf(info->name, sizeof(info->name), "host memory pool %u", ids[i]);
        info->total_bytes = (uint64_t)nchunks[i] * chunk_bytes[i];
        info->granularity = (uint64_t)sysconf(_SC_PAGESIZE);
        info->posix_fd = true;
    }
    *out = &h->base;
    return 0;
}
