/* SPDX-License-Identifier: Apache-2.0 */
/* Clients: connect, disconnect and reap; quarantine, and the quarantined
 * chunks that stand for a configured stage's promise.
 *
 * Enforces R11 (quarantine) and R13 (a gone client keeps its chunks,
 * address ranges and ad-hoc stage ids until its process is gone). */
#include "daemon/ledger/internal.h"

#include <errno.h>
#include <stdlib.h>

/* ---- the id index ------------------------------------------------------ */

#define CH_GONE UINT32_MAX

static size_t ch_home(uint32_t id, size_t cap)
{
    return (size_t)((id * 2654435761u) & (uint32_t)(cap - 1));
}

struct vl_client *vli_client_find(const struct vl_ledger *L, uint32_t id)
{
    if (!L->ch_cap || !id)
        return NULL;
    for (size_t i = ch_home(id, L->ch_cap);; i = (i + 1) & (L->ch_cap - 1)) {
        uint32_t v = L->ch[i];
        if (v == 0)
            return NULL;
        if (v != CH_GONE && L->client[v - 1].id == id)
            return &L->client[v - 1];
    }
}

/* The slot of client index k (whose id is id). */
static size_t ch_slot(const struct vl_ledger *L, uint32_t id, size_t k)
{
    size_t i = ch_home(id, L->ch_cap);
    while (L->ch[i] != k + 1)
        i = (i + 1) & (L->ch_cap - 1);
    return i;
}

/* Room for one more: rebuilt (removed slots dropped) before it fills. */
static int ch_room(struct vl_ledger *L)
{
    if ((L->ch_used + 1) * 4 <= L->ch_cap * 3)
        return 0;
    size_t cap = L->ch_cap ? L->ch_cap : 64;
    while ((L->nclient + 1) * 2 > cap)
        cap *= 2;
    uint32_t *v = calloc(cap, sizeof(*v));
    if (!v)
        return -ENOMEM;
    for (size_t k = 0; k < L->nclient; k++) {
        size_t i = ch_home(L->client[k].id, cap);
        while (v[i])
            i = (i + 1) & (cap - 1);
        v[i] = (uint32_t)k + 1;
    }
    free(L->ch);
    L->ch = v;
    L->ch_cap = cap;
    L->ch_used = L->nclient;
    return 0;
}

static void ch_insert(struct vl_ledger *L, uint32_t id, size_t k)
{
    size_t i = ch_home(id, L->ch_cap);
    while (L->ch[i] && L->ch[i] != CH_GONE)
        i = (i + 1) & (L->ch_cap - 1);
    if (!L->ch[i])
        L->ch_used++;
    L->ch[i] = (uint32_t)k + 1;
}

/* Removes client[k], moving the last one into its place. */
static void client_remove(struct vl_ledger *L, size_t k)
{
    L->ch[ch_slot(L, L->client[k].id, k)] = CH_GONE;
    size_t last = L->nclient - 1;
    if (k != last) {
        L->ch[ch_slot(L, L->client[last].id, last)] = (uint32_t)k + 1;
        L->client[k] = L->client[last];
    }
    L->nclient--;
}

static uint64_t *bytes_in(struct vl_client *cl, int state)
{
    return state == VL_QUARANTINED ? &cl->quarantined_bytes : &cl->held_bytes;
}

/* A chunk of d, in state (granted, loaned, recalling or quarantined), joins
 * cl's holdings: the counters views and quotas (R14) read. */
void vli_client_gain(struct vl_client *cl, const struct vl_device *d, int state)
{
    if (!cl)
        return;
    cl->chunks++;
    *bytes_in(cl, state) += d->cfg.chunk_bytes;
}

/* ... or leaves them, in the state it had there. */
void vli_client_lose(struct vl_client *cl, const struct vl_device *d, int state)
{
    if (!cl || !cl->chunks)
        return;
    cl->chunks--;
    *bytes_in(cl, state) -= d->cfg.chunk_bytes;
}

/* R11: a quarantined chunk stands for a configured stage's promise, and
 * keeps what it counted as: a resumed stage (R13) gets these very chunks
 * back, so its hard promise must not change meanwhile. */
void vli_qstage_set(struct vl_ledger *L, struct vl_chunk *c, uint32_t stage,
                    int cat)
{
    c->qstage = (uint16_t)stage;
    c->qcat = (uint8_t)cat;
    L->stage[stage].quarantined++;
    L->stage[stage].q_fixed += cat == VL_CAT_FIXED;
}

void vli_qstage_clear(struct vl_ledger *L, struct vl_chunk *c)
{
    if (c->qstage == VL_QSTAGE_NONE)
        return;
    struct vl_stage *qs = &L->stage[c->qstage];
    if (qs->quarantined)
        qs->quarantined--;
    if (c->qcat == VL_CAT_FIXED && qs->q_fixed)
        qs->q_fixed--;
    c->qstage = VL_QSTAGE_NONE;
    c->qcat = VL_CAT_NONE;
}

/* R16: what one tenant's clients hold together, counted when a quota asks
 * (only for tenants that are not exempt). */
struct vli_tenant_use {
    uint32_t gone, stages;
    uint64_t va_bytes;
};

static void tenant_use(const struct vl_ledger *L, uint32_t tenant,
                       struct vli_tenant_use *u)
{
    *u = (struct vli_tenant_use){0};
    for (size_t i = 0; i < L->nclient; i++) {
        const struct vl_client *c = &L->client[i];
        if (c->tenant != tenant || c->exempt)
            continue;
        u->gone += c->gone && !c->resumed; /* a resumed one holds nothing */
        u->va_bytes += c->va_bytes;
    }
    for (uint32_t i = 0; i < L->nstage; i++) {
        const struct vl_stage *s = &L->stage[i];
        if (!s->used || s->configured)
            continue;
        const struct vl_client *c =
            vli_client_find(L, s->owner ? s->owner : s->held_by);
        u->stages += c && c->tenant == tenant && !c->exempt;
    }
}

int vli_quota_va(struct vl_ledger *L, uint32_t client, uint64_t more)
{
    const struct vl_client *cl = vli_client_find(L, client);
    if (!cl)
        return 0;
    uint64_t per = L->limits.va_bytes_per_client;
    if (per && cl->va_bytes + more > per)
        return vli_fail(L, -EDQUOT, "client %u would reserve %llu MiB of "
                        "address space, over its limit of %llu MiB "
                        "(limits.address_space_per_client)", client,
                        (unsigned long long)((cl->va_bytes + more) >> 20),
                        (unsigned long long)(per >> 20));
    uint64_t pt = L->limits.va_bytes_per_tenant;
    if (pt && !cl->exempt) {
        struct vli_tenant_use u;
        tenant_use(L, cl->tenant, &u);
        if (u.va_bytes + more > pt)
            return vli_fail(L, -EDQUOT, "uid %u's clients would reserve %llu "
                            "MiB of address space, over their limit of %llu "
                            "MiB (limits.address_space_per_user)", cl->tenant,
                            (unsigned long long)((u.va_bytes + more) >> 20),
                            (unsigned long long)(pt >> 20));
    }
    return 0;
}

int vli_quota_stage(struct vl_ledger *L, uint32_t client)
{
    const struct vl_client *cl = vli_client_find(L, client);
    uint32_t pt = L->limits.stages_per_tenant;
    if (!cl || !pt || cl->exempt)
        return 0;
    struct vli_tenant_use u;
    tenant_use(L, cl->tenant, &u);
    if (u.stages >= pt)
        return vli_fail(L, -EDQUOT, "uid %u's clients hold %u ad-hoc stages, "
                        "their limit (limits.stages_per_user)", cl->tenant,
                        u.stages);
    return 0;
}

void vli_client_va(struct vl_ledger *L, uint32_t client, int64_t delta)
{
    struct vl_client *cl = vli_client_find(L, client);
    if (cl)
        cl->va_bytes += (uint64_t)delta;
}

int vl_client_add_tenant(struct vl_ledger *L, uint32_t id, uint32_t tenant,
                         bool exempt)
{
    int e = vl_client_add(L, id);
    if (e < 0)
        return e;
    struct vl_client *cl = &L->client[L->nclient - 1];
    cl->tenant = tenant;
    cl->exempt = exempt;
    cl->admitted = exempt;
    return 0;
}

/* R16: gone clients are counted when a client first asks for memory, not
 * when it connects: the connection may be the process of one of them
 * coming back (a resume, which admits it without counting), and a client
 * that only looks takes nothing a gone client would keep. */
int vl_client_admit(struct vl_ledger *L, uint32_t client)
{
    struct vl_client *cl = vli_client_find(L, client);
    if (!cl)
        return vli_fail(L, -ENOENT, "no client %u", client);
    if (cl->admitted)
        return 0;
    /* A tenant has no more gone clients than there are: most admissions
     * need not count them. */
    if (L->limits.gone_per_tenant && L->ngone >= L->limits.gone_per_tenant) {
        struct vli_tenant_use u;
        tenant_use(L, cl->tenant, &u);
        if (u.gone >= L->limits.gone_per_tenant)
            return vli_fail(L, -EDQUOT, "uid %u has %u gone clients whose "
                            "processes still hold memory, its limit "
                            "(limits.gone_clients_per_user)", cl->tenant,
                            u.gone);
    }
    cl->admitted = true;
    return 0;
}

void vl_client_set_tenant(struct vl_ledger *L, uint32_t client, uint32_t tenant,
                          bool exempt)
{
    struct vl_client *cl = vli_client_find(L, client);
    if (cl) {
        cl->tenant = tenant;
        cl->exempt = exempt;
    }
}

int vl_client_add(struct vl_ledger *L, uint32_t id)
{
    if (!id)
        return vli_fail(L, -EINVAL, "client id 0 means \"no holder\"");
    if (vli_client_find(L, id))
        return vli_fail(L, -EEXIST, "client %u exists", id);
    if (ch_room(L) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    if (L->nclient == L->client_cap) {
        size_t cap = L->client_cap ? L->client_cap * 2 : 16;
        struct vl_client *v = realloc(L->client, cap * sizeof(*v));
        if (!v)
            return vli_fail(L, -ENOMEM, "out of memory");
        L->client = v;
        L->client_cap = cap;
    }
    struct vl_client *cl = &L->client[L->nclient++];
    *cl = (struct vl_client){.id = id, .exempt = true, .admitted = true};
    ch_insert(L, id, L->nclient - 1);
    for (uint32_t di = 0; di < VL_MAX_DEVICES; di++)
        cl->hfirst[di] = VL_NONE;
    return 0;
}

/* R11, R13: the connection is gone but the process may live and still map
 * what it holds: its chunks are quarantined, its address ranges and ad-hoc
 * stage ids held, until the reap (or a resume). */
int vl_client_disconnect(struct vl_ledger *L, uint32_t client,
                         struct vl_fxlist *fx)
{
    struct vl_client *cl = vli_client_find(L, client);
    if (!cl)
        return vli_fail(L, -ENOENT, "no client %u", client);
    /* Its regions are those of stages it owns: one that owns none (vramctl,
     * an engine before it asks) walks neither. A quarantine makes no
     * effects. */
    if (cl->stages)
        vli_drop_regions(L, client, VL_NONE, true, fx);
    /* R11: chunks held outside regions (recalled ones already unmapped from
     * the ledger's view) are quarantined too: the client's own list, so
     * the cost is what it holds, not the device. */
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        for (uint32_t k = cl->hfirst[di]; k != VL_NONE; k = d->chunks[k].hnext) {
            struct vl_chunk *c = &d->chunks[k];
            if (c->state != VL_QUARANTINED) {
                vli_set_cat(d, c, VL_CAT_NONE);
                vli_set_state(d, c, VL_QUARANTINED);
            }
        }
    }
    for (uint32_t i = 0; cl->stages && i < L->nstage; i++) {
        struct vl_stage *s = &L->stage[i];
        if (!s->used || s->owner != client)
            continue;
        if (s->configured) {
            vli_stage_reset(L, s);
        } else { /* its id waits for the process (R13) */
            vli_stage_set_owner(L, s, 0);
            s->held_by = client;
            cl->holds_ids = true;
        }
    }
    /* Every chunk it held is quarantined now. */
    cl->quarantined_bytes += cl->held_bytes;
    cl->held_bytes = 0;
    cl->gone = true;
    L->ngone++;
    return 0;
}

/* R11: the process can no longer touch its memory: only now do its
 * quarantined chunks go free (scrubbed by DROP), its ranges and ids too. */
int vl_client_reap(struct vl_ledger *L, uint32_t client, struct vl_fxlist *fx)
{
    struct vl_client *cl = vli_client_find(L, client);
    if (!cl)
        return vli_fail(L, -ENOENT, "no client %u", client);
    if (!cl->gone)
        return vli_fail(L, -EBUSY, "client %u is still connected", client);
    /* A drop for each chunk it holds at most (its own, not the device's
     * quarantine). */
    if (vli_fx_reserve(fx, cl->chunks) < 0)
        return vli_fail(L, -ENOMEM, "out of memory");
    /* Its own list (freeing a chunk takes it off: the next is read
     * first). */
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        for (uint32_t k = cl->hfirst[di], next; k != VL_NONE; k = next) {
            next = d->chunks[k].hnext;
            if (d->chunks[k].state == VL_QUARANTINED)
                vli_to_free(L, d, k, fx);
        }
    }
    /* Its held ranges count in its address space: none, none held. */
    for (size_t i = 0; cl->va_bytes && i < L->nva_hold;) {
        struct vl_va_hold *h = &L->va_hold[i];
        if (h->client != client) {
            i++;
            continue;
        }
        vli_va_release(L, h->base, h->size);
        vli_note_va_give(L, h->tag);
        vli_client_va(L, h->client, -(int64_t)h->size);
        *h = L->va_hold[--L->nva_hold];
    }
    for (uint32_t i = 0; cl->holds_ids && i < L->nstage; i++)
        if (L->stage[i].used && !L->stage[i].configured &&
            !L->stage[i].owner && L->stage[i].held_by == client)
            vli_stage_reset(L, &L->stage[i]);
    /* R17: its process can no longer map a set; one it was writing is
     * dropped. */
    vli_weights_client_gone(L, client, fx);
    L->ngone--;
    client_remove(L, (size_t)(cl - L->client));
    return 0;
}
