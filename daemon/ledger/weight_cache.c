/* SPDX-License-Identifier: Apache-2.0 */
/* Weight sets: named, sealed, shared read-only, cached when nobody maps
 * them, evicted least recently used first when a live engine needs the
 * room.
 *
 * Enforces R17. A set's memory is the backend's own allocations, not
 * chunks: the ledger charges its device whole chunks of capacity for it
 * (d->weights: free chunk ids kept out of reach, as a lowered capacity
 * keeps them, so no chunk moves), taken only from memory no promise needs
 * (R2 holds whatever sets exist), and carves its address range from the
 * window once: the same range in every process that maps it. */
#include "daemon/ledger/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct vl_wset *find(const struct vl_ledger *L, uint32_t id)
{
    for (size_t i = 0; i < L->nwset; i++)
        if (L->wset[i]->id == id)
            return L->wset[i];
    return NULL;
}

static struct vl_wset *find_name(const struct vl_ledger *L, const char *name)
{
    for (size_t i = 0; i < L->nwset; i++)
        if (strcmp(L->wset[i]->name, name) == 0)
            return L->wset[i];
    return NULL;
}

static bool uses(const struct vl_wset *w, uint32_t client)
{
    for (uint32_t i = 0; i < w->nuser; i++)
        if (w->user[i] == client)
            return true;
    return false;
}

/* Each client counts the sets it maps (its view, in O(1)). */
static void count(struct vl_ledger *L, uint32_t client, int delta)
{
    struct vl_client *c = vli_client_find(L, client);
    if (c)
        c->wsets += (uint32_t)delta;
}

static int user_add(struct vl_ledger *L, struct vl_wset *w, uint32_t client)
{
    if (uses(w, client))
        return 0;
    if (w->nuser == w->user_cap) {
        uint32_t cap = w->user_cap ? w->user_cap * 2 : 4;
        uint32_t *v = realloc(w->user, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        w->user = v;
        w->user_cap = cap;
    }
    w->user[w->nuser++] = client;
    count(L, client, 1);
    return 0;
}

static void user_remove(struct vl_ledger *L, struct vl_wset *w, uint32_t client)
{
    for (uint32_t i = 0; i < w->nuser; i++)
        if (w->user[i] == client) {
            w->user[i] = w->user[--w->nuser];
            count(L, client, -1);
            return;
        }
}

static bool name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > VL_WSET_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] <= 0x20 || (unsigned char)name[i] >= 0x7f)
            return false;
    return true;
}

/* R17: the set leaves: its chunks of capacity and its range come back, and
 * the daemon frees its allocations. */
static void drop(struct vl_ledger *L, struct vl_wset *w, struct vl_fxlist *fx,
                 bool evicted)
{
    struct vl_device *d = &L->dev[w->dev];
    d->weights -= w->units;
    if (w->stage != VL_NONE) { /* the stage's promise for it is back */
        struct vl_stage *s = &L->stage[w->stage];
        s->set_chunks -= w->units;
        s->fixed_set[w->fixed] = 0;
    }
    vli_va_release(L, w->base, w->va_bytes);
    vli_fx_push(fx, (struct vl_fx){.kind = VL_FX_WSET_DROP, .set = w->id,
                                   .evicted = evicted});
    for (size_t i = 0; i < L->nwset; i++)
        if (L->wset[i] == w) {
            L->wset[i] = L->wset[--L->nwset];
            break;
        }
    if (L->obs.wset)
        L->obs.wset(L->obs.ctx, w->id, NULL);
    for (uint32_t k = 0; k < w->nuser; k++)
        count(L, w->user[k], -1);
    free(w->user);
    free(w);
}

static void note(struct vl_ledger *L, const struct vl_wset *w)
{
    if (!L->obs.wset)
        return;
    struct vl_wset_view v;
    vl_wset_view(L, w->id, &v);
    L->obs.wset(L->obs.ctx, w->id, &v);
}

static bool cached(const struct vl_wset *w)
{
    /* A set that backs a stage's reservation holds memory promised to the
     * stage anyway: evicting it would free nothing for anyone. */
    return w->sealed && !w->keep && w->nuser == 0 && w->stage == VL_NONE;
}

/* The configured stage (owned by client) whose fixed reservation f names
 * set name on device di and has no set yet, or NULL. */
static struct vl_stage *stage_entry(struct vl_ledger *L, uint32_t client,
                                    const char *name, uint32_t device,
                                    uint32_t *f_out)
{
    for (uint32_t i = 0; i < L->nstage && i < VL_CONFIG_STAGES; i++) {
        struct vl_stage *s = &L->stage[i];
        if (!s->used || !s->configured || s->owner != client ||
            s->cfg.device != device)
            continue;
        for (uint32_t f = 0; f < s->cfg.nfixed; f++)
            if (vl_fixed_set(&s->cfg, f) && !s->fixed_set[f] &&
                strcmp(vl_fixed_set(&s->cfg, f)->name, name) == 0) {
                *f_out = f;
                return s;
            }
    }
    return NULL;
}

static void attach(struct vl_ledger *L, struct vl_wset *w, uint32_t stage,
                   uint32_t f)
{
    struct vl_stage *s = &L->stage[stage];
    w->stage = stage;
    w->fixed = f;
    s->fixed_set[f] = w->id;
    s->set_chunks += w->units;
}

uint32_t vli_weights_cached(const struct vl_ledger *L, uint32_t device)
{
    uint32_t n = 0;
    for (size_t i = 0; i < L->nwset; i++)
        if (L->wset[i]->dev == device && cached(L->wset[i]))
            n += L->wset[i]->units;
    return n;
}

uint32_t vl_weights_make_room(struct vl_ledger *L, uint32_t device,
                              uint32_t need, struct vl_fxlist *fx)
{
    if (device >= L->ndev)
        return 0;
    struct vl_device *d = &L->dev[device];
    uint32_t n = 0;
    if (vli_dev_unpromised(L, d) < need && vli_fx_reserve(fx, L->nwset) < 0)
        return 0; /* out of memory: nothing evicted */
    while (vli_dev_unpromised(L, d) < need) {
        struct vl_wset *lru = NULL;
        for (size_t i = 0; i < L->nwset; i++) {
            struct vl_wset *w = L->wset[i];
            if (w->dev == device && cached(w) &&
                (!lru || w->last_use < lru->last_use))
                lru = w;
        }
        if (!lru)
            break;
        drop(L, lru, fx, true);
        n++;
    }
    return n;
}

/* R17: what an existing set must match to be mapped: anything else is
 * another layout, never mapped. */
static int match(struct vl_ledger *L, const struct vl_wset *w,
                 const struct vl_wset_req *req)
{
    const struct vl_device *d = &L->dev[w->dev];
    if (d->cfg.id != req->device || w->bytes != req->bytes ||
        memcmp(w->key, req->key, VL_WSET_KEY) != 0)
        return vli_fail(L, -ESTALE, "weight set '%s' exists with another "
                        "layout: %llu MiB on device %u%s, key %02x%02x%02x"
                        "%02x...; this open asked for %llu MiB on device %u, "
                        "key %02x%02x%02x%02x...", w->name,
                        (unsigned long long)(w->bytes >> 20), d->cfg.id,
                        w->sealed ? ", sealed" : ", being written",
                        w->key[0], w->key[1], w->key[2], w->key[3],
                        (unsigned long long)(req->bytes >> 20), req->device,
                        req->key[0], req->key[1], req->key[2], req->key[3]);
    return 0;
}

int vl_weights_open(struct vl_ledger *L, uint32_t client,
                    const struct vl_wset_req *req, uint32_t *set_out,
                    bool *writer_out, struct vl_fxlist *fx)
{
    struct vl_client *cl = vli_client_find(L, client);
    if (!cl || cl->gone)
        return vli_fail(L, -ENOENT, "no connected client %u", client);
    if (!name_ok(req->name))
        return vli_fail(L, -EINVAL, "a weight set's name is 1 to %d printable "
                        "bytes without spaces", VL_WSET_NAME_MAX);
    if (!req->key)
        return vli_fail(L, -EINVAL, "a weight set needs its key");
    struct vl_wset *w = find_name(L, req->name);
    if (w) {
        int e = match(L, w, req);
        if (e < 0)
            return e;
        if (!w->sealed && w->writer != client)
            return vli_fail(L, -EAGAIN, "weight set '%s' is being written by "
                            "client %u", w->name, w->writer);
        if (!w->sealed) { /* its writer, again */
            *set_out = w->id;
            *writer_out = true;
            return 0;
        }
        if (user_add(L, w, client) < 0)
            return vli_fail(L, -ENOMEM, "out of memory");
        w->last_use = ++L->tick;
        note(L, w);
        *set_out = w->id;
        *writer_out = false;
        return 0;
    }

    int di = vl_device_index(L, req->device);
    if (di < 0)
        return vli_fail(L, -ENODEV, "no device %u", req->device);
    struct vl_device *d = &L->dev[di];
    if (!req->bytes || !req->alloc_bytes ||
        req->alloc_bytes % 4096 != 0)
        return vli_fail(L, -EINVAL, "weight set '%s': %llu bytes in "
                        "allocations of %llu (both must be positive, the "
                        "allocation whole pages)", req->name,
                        (unsigned long long)req->bytes,
                        (unsigned long long)req->alloc_bytes);
    /* R17: the set a configured stage's fixed reservation names, opened by
     * the stage's owner: made in the stage's own promised memory, in the
     * reservation's allocation size. */
    uint32_t fixed = 0;
    struct vl_stage *owner = stage_entry(L, client, req->name, req->device, &fixed);
    uint64_t alloc = req->alloc_bytes;
    if (owner) {
        const struct vl_fixed_cfg *fc = &owner->cfg.fixed[fixed];
        const struct vl_set_cfg *sc = vl_fixed_set(&owner->cfg, fixed);
        if (req->bytes > fc->bytes)
            return vli_fail(L, -E2BIG, "weight set '%s': %llu bytes, stage %u "
                            "reserves %llu for it (its fixed reservation "
                            "'%s')", req->name, (unsigned long long)req->bytes,
                            owner->cfg.id, (unsigned long long)fc->bytes,
                            fc->name);
        if (sc->has_key && memcmp(sc->key, req->key, VL_WSET_KEY) != 0)
            return vli_fail(L, -ESTALE, "weight set '%s': stage %u's "
                            "reservation '%s' names it with another key than "
                            "the one given", req->name, owner->cfg.id, fc->name);
        alloc = sc->alloc ? sc->alloc : alloc;
    }
    uint64_t nalloc = vli_div_up(req->bytes, alloc);
    if (nalloc > VL_WSET_ALLOCS_MAX)
        return vli_fail(L, -E2BIG, "weight set '%s': %llu allocations of %llu "
                        "MiB, at most %d", req->name, (unsigned long long)nalloc,
                        (unsigned long long)(alloc >> 20),
                        VL_WSET_ALLOCS_MAX);
    uint64_t total = nalloc * alloc;
    uint64_t cb = d->cfg.chunk_bytes;
    uint64_t units = vli_div_up(total, cb);
    if (units > vl_capacity(d))
        return vli_fail(L, -E2BIG, "weight set '%s': %llu MiB do not fit device "
                        "%u (%llu MiB)", req->name,
                        (unsigned long long)(total >> 20), req->device,
                        (unsigned long long)((uint64_t)vl_capacity(d) * cb >> 20));
    if (owner && units > vli_fixed_entry_chunks(&owner->cfg, fixed, cb))
        return vli_fail(L, -E2BIG, "weight set '%s': %llu MiB, more than stage "
                        "%u reserves for it", req->name,
                        (unsigned long long)(units * cb >> 20), owner->cfg.id);
    if (L->nwset >= VL_MAX_WSETS)
        return vli_fail(L, -ENOSPC, "%d weight sets exist, the most vramd keeps",
                        VL_MAX_WSETS);
    uint32_t per = L->limits.wsets_per_tenant;
    if (per && !cl->exempt && vli_weights_of_tenant(L, cl->tenant) >= per)
        return vli_fail(L, -EDQUOT, "uid %u's clients made %u weight sets, "
                        "their limit (limits.weight_sets_per_user)",
                        cl->tenant, per);
    if (req->keep && !cl->exempt)
        return vli_fail(L, -EPERM, "keeping a weight set is for "
                        "administrators");
    uint64_t align = L->region_align ? L->region_align : cb;
    uint64_t va = vli_div_up(total, align) * align;
    /* Room: memory no promise needs, after cached sets of the device went
     * (least recently used first). Nothing is evicted unless the set then
     * fits. */
    uint32_t room = owner ? vli_free_for_fixed(L, d, owner) : vli_dev_unpromised(L, d);
    uint32_t evictable = owner ? 0 : vli_weights_cached(L, (uint32_t)di);
    if (room + evictable < units)
        return vli_fail(L, -ENOSPC, "weight set '%s': %llu MiB asked, %llu MiB "
                        "free on device %u (and %llu MiB of cached sets)",
                        req->name, (unsigned long long)(units * cb >> 20),
                        (unsigned long long)((uint64_t)room * cb >> 20),
                        req->device,
                        (unsigned long long)((uint64_t)evictable * cb >> 20));
    struct vl_wset *n = calloc(1, sizeof(*n));
    uint64_t base = 0;
    if (!n || vli_fx_reserve(fx, L->nwset + 1) < 0) {
        free(n);
        return vli_fail(L, -ENOMEM, "out of memory");
    }
    /* The range: cached sets give theirs back as they go, so evict first
     * when the window is short too. */
    vl_weights_make_room(L, (uint32_t)di, (uint32_t)units, fx);
    if (vli_va_alloc(L, va, align, &base) < 0) {
        free(n);
        return vli_fail(L, -ENOSPC, "weight set '%s': no %llu MiB of address "
                        "window left", req->name, (unsigned long long)(va >> 20));
    }
    struct vl_wset **v = realloc(L->wset, (L->nwset + 1) * sizeof(*v));
    if (!v || user_add(L, n, client) < 0) {
        vli_va_release(L, base, va);
        free(n->user);
        free(n);
        if (v)
            L->wset = v;
        return vli_fail(L, -ENOMEM, "out of memory");
    }
    L->wset = v;
    n->id = ++L->next_wset_id;
    n->dev = (uint32_t)di;
    strcpy(n->name, req->name);
    memcpy(n->key, req->key, VL_WSET_KEY);
    n->bytes = req->bytes;
    n->alloc_bytes = alloc;
    n->nalloc = (uint32_t)nalloc;
    n->units = (uint32_t)units;
    n->base = base;
    n->va_bytes = va;
    n->writer = client;
    n->keep = req->keep;
    n->tenant = cl->tenant;
    n->exempt = cl->exempt;
    n->last_use = ++L->tick;
    n->stage = VL_NONE;
    d->weights += n->units;
    L->wset[L->nwset++] = n;
    if (owner)
        attach(L, n, (uint32_t)(owner - L->stage), fixed);
    note(L, n);
    *set_out = n->id;
    *writer_out = true;
    return 0;
}

int vl_weights_seal(struct vl_ledger *L, uint32_t client, uint32_t set,
                    uint64_t sealed_at)
{
    struct vl_wset *w = find(L, set);
    if (!w || !uses(w, client))
        return vli_fail(L, -ENOENT, "weight set %u is not open here", set);
    if (w->sealed)
        return vli_fail(L, -EALREADY, "weight set '%s' is sealed already",
                        w->name);
    if (w->writer != client)
        return vli_fail(L, -EPERM, "weight set '%s' is written by client %u",
                        w->name, w->writer);
    w->sealed = true;
    w->writer = 0;
    w->sealed_at = sealed_at;
    w->last_use = ++L->tick;
    note(L, w);
    return 0;
}

int vl_weights_close(struct vl_ledger *L, uint32_t client, uint32_t set,
                     struct vl_fxlist *fx)
{
    struct vl_wset *w = find(L, set);
    if (!w || !uses(w, client))
        return vli_fail(L, -ENOENT, "weight set %u is not open here", set);
    if (vli_fx_reserve(fx, 1) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    if (!w->sealed) { /* its writer: what it wrote is not a set */
        drop(L, w, fx, false);
        return 0;
    }
    user_remove(L, w, client);
    w->last_use = ++L->tick;
    note(L, w);
    return 0;
}

int vl_weights_drop(struct vl_ledger *L, uint32_t set, struct vl_fxlist *fx)
{
    struct vl_wset *w = find(L, set);
    if (!w)
        return vli_fail(L, -ENOENT, "no weight set %u", set);
    if (w->nuser)
        return vli_fail(L, -EBUSY, "weight set '%s' is mapped by %u client%s "
                        "(client %u first)", w->name, w->nuser,
                        w->nuser == 1 ? "" : "s", w->user[0]);
    if (vli_fx_reserve(fx, 1) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    drop(L, w, fx, false);
    return 0;
}

void vli_weights_client_gone(struct vl_ledger *L, uint32_t client,
                             struct vl_fxlist *fx)
{
    size_t writes = 0;
    for (size_t i = 0; i < L->nwset; i++)
        writes += !L->wset[i]->sealed && L->wset[i]->writer == client;
    if (writes && vli_fx_reserve(fx, writes) < 0)
        return; /* out of memory: its sets stay, charged, until a drop */
    for (size_t i = 0; i < L->nwset;) {
        struct vl_wset *w = L->wset[i];
        if (!uses(w, client)) {
            i++;
            continue;
        }
        if (!w->sealed && w->writer == client) {
            drop(L, w, fx, false); /* the slot now holds another set */
            continue;
        }
        user_remove(L, w, client);
        w->last_use = ++L->tick;
        note(L, w);
        i++;
    }
}

void vli_weights_client_move(struct vl_ledger *L, uint32_t from, uint32_t to)
{
    for (size_t i = 0; i < L->nwset; i++) {
        struct vl_wset *w = L->wset[i];
        if (!uses(w, from))
            continue;
        user_remove(L, w, from);
        bool had = uses(w, to);
        /* Two of the process's gone clients may have mapped it: once. */
        if (!had && user_add(L, w, to) < 0)
            continue; /* cannot fail: the entry just freed holds it */
        if (w->writer == from)
            w->writer = to;
        note(L, w);
    }
}

uint32_t vli_weights_of_tenant(const struct vl_ledger *L, uint32_t tenant)
{
    uint32_t n = 0;
    for (size_t i = 0; i < L->nwset; i++)
        n += L->wset[i]->tenant == tenant && !L->wset[i]->exempt;
    return n;
}

void vli_weights_free_all(struct vl_ledger *L)
{
    for (size_t i = 0; i < L->nwset; i++) {
        free(L->wset[i]->user);
        free(L->wset[i]);
    }
    free(L->wset);
    L->wset = NULL;
    L->nwset = 0;
}

bool vl_wset_view(const struct vl_ledger *L, uint32_t set,
                  struct vl_wset_view *out)
{
    const struct vl_wset *w = find(L, set);
    if (!w)
        return false;
    *out = (struct vl_wset_view){
        .id = w->id,
        .device = L->dev[w->dev].cfg.id,
        .name = w->name,
        .key = w->key,
        .bytes = w->bytes,
        .alloc_bytes = w->alloc_bytes,
        .nalloc = w->nalloc,
        .units = w->units,
        .base = w->base,
        .va_bytes = w->va_bytes,
        .writer = w->writer,
        .sealed = w->sealed,
        .keep = w->keep,
        .tenant = w->tenant,
        .users = w->nuser,
        .user = w->user,
        .sealed_at = w->sealed_at,
        .last_use = w->last_use,
        .stage = w->stage,
        .fixed = w->fixed,
    };
    return true;
}

uint32_t vl_wset_find(const struct vl_ledger *L, const char *name)
{
    const struct vl_wset *w = name ? find_name(L, name) : NULL;
    return w ? w->id : 0;
}

void vl_each_wset(const struct vl_ledger *L,
                  void (*fn)(void *ud, const struct vl_wset_view *v), void *ud)
{
    for (size_t i = 0; i < L->nwset; i++) {
        struct vl_wset_view v;
        vl_wset_view(L, L->wset[i]->id, &v);
        fn(ud, &v);
    }
}

int vl_weights_restore(struct vl_ledger *L, const struct vl_wset_view *v)
{
    int di = vl_device_index(L, v->device);
    if (di < 0)
        return vli_fail(L, -EINVAL, "weight set %u: no device %u", v->id,
                        v->device);
    struct vl_device *d = &L->dev[di];
    if (!v->sealed || !name_ok(v->name) || !v->id || find(L, v->id) ||
        find_name(L, v->name) || !v->alloc_bytes || !v->nalloc ||
        v->nalloc > VL_WSET_ALLOCS_MAX ||
        v->bytes > (uint64_t)v->nalloc * v->alloc_bytes ||
        v->units != vli_div_up((uint64_t)v->nalloc * v->alloc_bytes,
                               d->cfg.chunk_bytes) ||
        L->nwset >= VL_MAX_WSETS)
        return vli_fail(L, -EINVAL, "weight set %u ('%.64s') is inconsistent",
                        v->id, v->name ? v->name : "");
    /* Back to its stage's reservation if the configuration still names it
     * there (it may have changed while vramd was down: then an ordinary,
     * cached set). */
    const struct vl_stage *as = v->stage != VL_NONE && v->stage < L->nstage
                                    ? &L->stage[v->stage] : NULL;
    const struct vl_set_cfg *asc = as && as->configured && v->fixed < VL_MAX_FIXED &&
                                           v->fixed < as->cfg.nfixed
                                       ? vl_fixed_set(&as->cfg, v->fixed) : NULL;
    bool attaching = asc && !as->fixed_set[v->fixed] &&
                     strcmp(asc->name, v->name) == 0 &&
                     v->units <= vli_fixed_entry_chunks(&as->cfg, v->fixed,
                                                        d->cfg.chunk_bytes);
    uint32_t room = attaching ? vli_free_for_fixed(L, d, &L->stage[v->stage])
                              : vli_dev_unpromised(L, d);
    if (room < v->units)
        return vli_fail(L, -EINVAL, "weight set %u ('%s'): %u chunks, %u free "
                        "on device %u", v->id, v->name, v->units, room,
                        v->device);
    for (uint32_t k = 0; k < v->users; k++) {
        const struct vl_client *c = vli_client_find(L, v->user[k]);
        if (!c || !c->gone)
            return vli_fail(L, -EINVAL, "weight set %u: user %u is no gone "
                            "client", v->id, v->user[k]);
    }
    ptrdiff_t at = vli_va_find(L, v->base, v->va_bytes);
    if (at < 0 || vli_va_take_exact(L, v->base, v->va_bytes) < 0)
        return vli_fail(L, -EINVAL, "weight set %u: its range is taken or "
                        "outside the window", v->id);
    struct vl_wset *n = calloc(1, sizeof(*n));
    struct vl_wset **arr = realloc(L->wset, (L->nwset + 1) * sizeof(*arr));
    if (arr)
        L->wset = arr;
    if (!n || !arr) {
        free(n);
        vli_va_release(L, v->base, v->va_bytes);
        return vli_fail(L, -ENOMEM, "out of memory");
    }
    for (uint32_t k = 0; k < v->users; k++)
        if (user_add(L, n, v->user[k]) < 0) {
            free(n->user);
            free(n);
            vli_va_release(L, v->base, v->va_bytes);
            return vli_fail(L, -ENOMEM, "out of memory");
        }
    n->id = v->id;
    n->dev = (uint32_t)di;
    snprintf(n->name, sizeof(n->name), "%s", v->name);
    memcpy(n->key, v->key, VL_WSET_KEY);
    n->bytes = v->bytes;
    n->alloc_bytes = v->alloc_bytes;
    n->nalloc = v->nalloc;
    n->units = v->units;
    n->base = v->base;
    n->va_bytes = v->va_bytes;
    n->sealed = true;
    n->keep = v->keep;
    n->tenant = v->tenant;
    n->sealed_at = v->sealed_at;
    n->last_use = ++L->tick;
    n->stage = VL_NONE;
    d->weights += n->units;
    if (attaching)
        attach(L, n, v->stage, v->fixed);
    if (n->id > L->next_wset_id)
        L->next_wset_id = n->id;
    L->wset[L->nwset++] = n;
    note(L, n); /* into the new state file */
    return 0;
}
