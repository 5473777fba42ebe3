/* SPDX-License-Identifier: Apache-2.0 */
/* Weight sets (vram.h): a set's allocations are imported once and mapped at
 * the daemon's address, the same in every process, read-write for its
 * writer until the seal and read-only after, and for everyone else. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/call.h"
#include "client/lib/call_frame.h"
#include "client/lib/client_record.h"
#include "client/lib/error.h"
#include "proto/hexkey.h"
#include "client/lib/mappers.h"
#include "platform/mem.h"
#include "client/lib/weight_sets.h"

static struct vc_wset *find(const vram_client *c, uint32_t id)
{
    for (size_t i = 0; i < c->nwsets; i++)
        if (c->wsets[i].info.id == id)
            return &c->wsets[i];
    return NULL;
}

static uint64_t alloc_addr(const struct vc_wset *w, uint32_t i)
{
    return w->info.base + (uint64_t)i * w->info.alloc_bytes;
}

/* Unmaps the mapped allocations (from the last). */
static void unmap_all(vram_client *c, struct vc_wset *w)
{
    while (w->nmapped) {
        uint32_t i = --w->nmapped;
        c->mapper->unmap(c, &w->alloc[i], alloc_addr(w, i), w->info.alloc_bytes);
    }
}

/* Maps every allocation, read-write or read-only; on failure what was
 * mapped stays mapped (nmapped says how much). */
static int map_all(vram_client *c, struct vc_wset *w, bool rw)
{
    int e = 0;
    while (e == 0 && w->nmapped < w->info.allocs) {
        uint32_t i = w->nmapped;
        e = rw || !c->mapper->map_ro
                    ? c->mapper->map(c, &w->alloc[i], alloc_addr(w, i),
                                     w->info.alloc_bytes)
                    : c->mapper->map_ro(c, &w->alloc[i], alloc_addr(w, i),
                                        w->info.alloc_bytes);
        if (e == 0)
            w->nmapped++;
    }
    /* A process this one forks later does not get the mappings (host
     * memory; GPU mappings are never inherited): a forked worker would
     * hold the set writable past the seal, and find its range taken. */
    if (strcmp(c->mapper->name, "host") == 0)
        vp_vm_dontfork(w->info.base, w->va_bytes);
    return e;
}

/* Everything this process holds of the set goes (its record stays for the
 * caller to remove). */
static void release(vram_client *c, struct vc_wset *w)
{
    unmap_all(c, w);
    for (uint32_t i = 0; w->alloc && i < w->info.allocs; i++)
        if (w->alloc[i].handle || vp_ok(w->alloc[i].h))
            c->mapper->release(c, &w->alloc[i]);
    free(w->alloc);
    w->alloc = NULL;
    if (w->va_bytes)
        c->mapper->unreserve(c, w->info.base, w->va_bytes);
    w->va_bytes = 0;
}

static void remove_rec(vram_client *c, struct vc_wset *w)
{
    size_t i = (size_t)(w - c->wsets);
    c->wsets[i] = c->wsets[--c->nwsets];
}

static void close_handles(struct vw_weights_handle_array *a)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].has_fd)
            vp_close(&a->v[i].fd);
}

/* Takes the handles of one reply: each imported (the import owns it). */
static int take(vram_client *c, struct vc_wset *w,
                struct vw_weights_handle_array *a, uint32_t *got)
{
    int e = 0;
    for (size_t i = 0; i < a->n; i++) {
        struct vw_t_weights_handle *h = &a->v[i];
        if (!h->has_fd)
            continue;
        if (e < 0 || h->index >= w->info.allocs ||
            w->alloc[h->index].handle || vp_ok(w->alloc[h->index].h)) {
            vp_close(&h->fd);
            if (e == 0)
                e = vc_set_error(c, -EPROTO, "weight set %u: the daemon sent "
                                 "allocation %u twice or out of range",
                                 w->info.id, h->index);
            continue;
        }
        struct vc_chunk *ch = &w->alloc[h->index];
        ch->device = w->info.device;
        vp_handle fd = h->fd;
        h->has_fd = false;
        e = c->mapper->import(c, ch, fd, w->info.alloc_bytes);
        if (e < 0) {
            vp_close(&fd);
            *ch = (struct vc_chunk){.h = VP_NONE};
            continue;
        }
        (*got)++;
    }
    return e;
}

static int do_open(vram_client *c, const char *name, uint32_t device,
                   uint64_t bytes, const uint8_t *key, uint32_t flags,
                   struct vram_weights_info *info)
{
    if (!name || !*name || strlen(name) > VRAM_WEIGHTS_NAME_MAX || !key)
        return vc_set_error(c, -EINVAL, "a weight set needs a name of 1 to %d "
                            "bytes and a key", VRAM_WEIGHTS_NAME_MAX);
    char hex[2 * VRAM_WEIGHTS_KEY_BYTES + 1];
    vw_hex_encode(key, VRAM_WEIGHTS_KEY_BYTES, hex);
    /* The wait for another writer's seal stays inside this call's own
     * timeout, with a second for the reply. */
    uint32_t wait = flags & VRAM_WEIGHTS_NOWAIT ? 0
                    : c->timeout_ms > 1000     ? (uint32_t)c->timeout_ms - 1000
                                               : 0;
    struct vw_req_weights_open m = {
        .name = name, .device = device, .bytes = bytes, .key = hex,
        .has_wait_ms = true, .wait_ms = wait,
        .has_keep = (flags & VRAM_WEIGHTS_KEEP) != 0,
        .keep = (flags & VRAM_WEIGHTS_KEEP) != 0};
    struct vw_rep_weights_open rep;
    struct vw_arena a = {0};
    int e = vc_call(c, VW_REQ_WEIGHTS_OPEN, &m, &rep, &a);
    if (e < 0) {
        vw_arena_free(&a);
        return e;
    }
    struct vc_wset *have = find(c, rep.set.id);
    if (have) { /* open here already (a writer's second open): the same */
        close_handles(&rep.handles);
        vw_arena_free(&a);
        *info = have->info;
        return 0;
    }
    const struct vw_t_weights_info *s = &rep.set;
    struct vc_wset w = {
        .info = {.id = s->id, .device = s->device, .base = s->base,
                 .bytes = s->bytes, .alloc_bytes = s->alloc_bytes,
                 .allocs = s->allocs, .writer = s->writer, .sealed = s->sealed},
    };
    snprintf(w.name, sizeof(w.name), "%s", s->name);
    struct vc_wset *v = NULL;
    if (!s->allocs || !s->alloc_bytes ||
        (uint64_t)s->allocs * s->alloc_bytes > s->va_bytes ||
        s->bytes > (uint64_t)s->allocs * s->alloc_bytes) {
        e = vc_set_error(c, -EPROTO, "weight set %u: the daemon's geometry "
                         "does not add up", s->id);
        goto fail;
    }
    w.alloc = calloc(s->allocs, sizeof(*w.alloc));
    v = realloc(c->wsets, (c->nwsets + 1) * sizeof(*v));
    if (v)
        c->wsets = v;
    if (!w.alloc || !v) {
        e = vc_set_error(c, -ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < s->allocs; i++)
        w.alloc[i].h = VP_NONE;
    e = c->mapper->reserve(c, s->base, s->va_bytes);
    if (e < 0)
        goto fail;
    w.va_bytes = s->va_bytes;
    uint32_t got = 0;
    e = take(c, &w, &rep.handles, &got);
    while (e == 0 && got < w.info.allocs) {
        struct vw_req_weights_handles more = {.set = w.info.id, .first = got};
        struct vw_rep_weights_handles mrep;
        struct vw_arena ma = {0};
        e = vc_call(c, VW_REQ_WEIGHTS_HANDLES, &more, &mrep, &ma);
        uint32_t before = got;
        if (e == 0)
            e = take(c, &w, &mrep.handles, &got);
        if (e == 0 && got == before)
            e = vc_set_error(c, -EPROTO, "weight set %u: no handles from "
                             "allocation %u on", w.info.id, got);
        vw_arena_free(&ma);
    }
    if (e == 0)
        e = map_all(c, &w, w.info.writer && !w.info.sealed);
    if (e < 0)
        goto fail;
    close_handles(&rep.handles);
    vw_arena_free(&a);
    c->wsets[c->nwsets++] = w;
    *info = w.info;
    return 0;
fail:;
    char keep[512];
    snprintf(keep, sizeof(keep), "%s", c->last_error);
    close_handles(&rep.handles);
    uint32_t id = rep.set.id;
    vw_arena_free(&a);
    release(c, &w);
    /* vramd counts it mapped here: it is not. */
    struct vw_req_weights_close cl = {.set = id};
    if (!c->broken)
        vc_call(c, VW_REQ_WEIGHTS_CLOSE, &cl, NULL, NULL);
    snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
    return e;
}

static int do_seal(vram_client *c, uint32_t id)
{
    struct vc_wset *w = find(c, id);
    if (!w)
        return vc_set_error(c, -ENOENT, "weight set %u is not open here", id);
    if (w->info.sealed)
        return vc_set_error(c, -EALREADY, "weight set '%s' is sealed already",
                            w->name);
    if (!w->info.writer)
        return vc_set_error(c, -EPERM, "weight set '%s' is written by another "
                            "client", w->name);
    /* No writable mapping may remain anywhere for the seal to hold (the
     * host backend's refuses while one does), this one's first. */
    unmap_all(c, w);
    struct vw_req_weights_seal m = {.set = id};
    struct vw_rep_weights_seal rep;
    struct vw_arena a = {0};
    int e = vc_call(c, VW_REQ_WEIGHTS_SEAL, &m, &rep, &a);
    vw_arena_free(&a);
    bool sealed = e == 0;
    char keep[512];
    snprintf(keep, sizeof(keep), "%s", c->last_error);
    int r = map_all(c, w, !sealed);
    if (sealed) {
        w->info.sealed = 1;
        w->info.writer = 0;
    }
    if (e == 0 && r < 0)
        return r; /* sealed, but not all of it mapped again here */
    if (e < 0)
        snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
    return e;
}

static int do_close(vram_client *c, uint32_t id, bool tell)
{
    struct vc_wset *w = find(c, id);
    if (!w)
        return vc_set_error(c, -ENOENT, "weight set %u is not open here", id);
    release(c, w);
    remove_rec(c, w);
    if (!tell || c->broken)
        return 0;
    struct vw_req_weights_close m = {.set = id};
    int e = vc_call(c, VW_REQ_WEIGHTS_CLOSE, &m, NULL, NULL);
    return e == -ENOENT ? 0 : e; /* dropped meanwhile: closed all the same */
}

int vc_weights_open(vram_client *c, const char *name, uint32_t device,
                    uint64_t bytes, const uint8_t *key, uint32_t flags,
                    struct vram_weights_info *info)
{
    return do_open(c, name, device, bytes, key, flags, info);
}

int vc_weights_close(vram_client *c, uint32_t id)
{
    return do_close(c, id, true);
}

bool vc_weights_is_open(const vram_client *c, uint32_t id)
{
    return find(c, id) != NULL;
}

void vc_weights_close_all(vram_client *c, bool tell)
{
    while (c->nwsets)
        do_close(c, c->wsets[0].info.id, tell);
    free(c->wsets);
    c->wsets = NULL;
}

int vram_weights_open(vram_client *c, const char *name, uint32_t device,
                      uint64_t bytes, const uint8_t key[VRAM_WEIGHTS_KEY_BYTES],
                      uint32_t flags, struct vram_weights_info *info)
{
    vc_enter(c);
    return vc_leave(c, info ? do_open(c, name, device, bytes, key, flags, info)
                            : vc_set_error(c, -EINVAL, "info is NULL"));
}

int vram_weights_seal(vram_client *c, uint32_t id)
{
    vc_enter(c);
    return vc_leave(c, do_seal(c, id));
}

int vram_weights_close(vram_client *c, uint32_t id)
{
    vc_enter(c);
    return vc_leave(c, do_close(c, id, true));
}

int vram_weights_info(const vram_client *c, uint32_t id,
                      struct vram_weights_info *out)
{
    vc_enter(c);
    const struct vc_wset *w = find(c, id);
    if (w)
        *out = w->info;
    return vc_leave(c, w ? 0
                         : vc_set_error((vram_client *)c, -ENOENT, "weight set "
                                        "%u is not open here", id));
}
