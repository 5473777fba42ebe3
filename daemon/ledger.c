/* The ledger's rules. See ledger.h for the model; the rules, in order:
 *
 * 1. Pools. Each device is capacity / chunk_bytes chunks. A free chunk has no
 *    holder; a held chunk has exactly one (a client) and, while mapped, one
 *    (region, slot).
 * 2. Admission. A configured stage reserves its whole KV window (native
 *    context, every lane rounded up to whole chunks) plus its fixed
 *    reservations; the sum over a device's stages must fit its capacity.
 *    Reserved but not granted memory is "promised"; ad-hoc regions only use
 *    free memory beyond every promise. Two promises are "hard", always kept
 *    as free chunks, because nothing could be recalled for them in time:
 *    fixed reservations, and the window of a no-loan stage (rule 7). So
 *    registering a stage and growing its fixed regions never wait (except
 *    for quarantine).
 * 3. KV target. prompt + output tokens, rounded up to the growth step from
 *    the initial window, clamped to the native context; per lane rounded up
 *    to whole chunks.
 * 4. Native-context guarantee. kv + loans + promised == window for every
 *    configured stage, and per device free + pool loans + quarantined >=
 *    promised: a KV grow is always covered, first by free chunks of the
 *    stage's window, then by moving its own loans (same client: no fd is
 *    sent), then by recalling pool loans of other stages on the device.
 * 5. Loans. A stage lends its window's unused part less the headroom kept
 *    unlent to its own expert region. Pool loans (beyond the stage's own
 *    window) exist only when the device's policy says lend_unreserved: they
 *    take memory no stage reserved, and the KV window of lending stages no
 *    client has registered. A registered stage's window is never lent to
 *    another stage; pool loans it finds there at registration are recalled
 *    as its KV grows into them (registration maps what is free of its
 *    initial window, the first KV reserve the rest).
 * 6. Hold. A grow that needs other clients' recalls changes nothing, issues
 *    the recalls and answers -EAGAIN; the daemon retries it as chunks come
 *    back, up to the stage's hold bound.
 * 7. No-loan safety. A stage whose policy forbids lending, or whose window
 *    beyond the initial KV cannot back even one expert slot (plus the
 *    headroom), gets its whole window mapped at registration, and keeps it.
 * 8. Trim. After a request, KV beyond the target goes back to expert loans
 *    (moved, no fd) as far as the loan rule allows, the rest is released
 *    (unmapped by the client, then given back); nothing is trimmed for a
 *    stage that keeps its window or is under no-loan safety. A KV budget is
 *    a prefix of each lane: a reserve waits (-EAGAIN) while chunks inside
 *    it are still being unmapped after a trim.
 * 9. Slots. Expert slots are numbered in the expert region; a claim names a
 *    layer, which must lie in the stage's layer range, and backed slots that
 *    no other layer owns.
 * 10. Foreign chunks. A chunk only ever goes to a region of its own device.
 * 11. Quarantine. When a client disconnects its chunks are quarantined until
 *    its process is gone (vl_client_reap); a recalled chunk is never given to
 *    anyone else before its holder released it or was reaped. Quarantined
 *    chunks of a configured stage stand for its promise until the reap; the
 *    stage can't be registered again before.
 * 12. Capacity at run time. Lowering a device's capacity withholds free
 *    chunks (none moves); it must leave room for what is in use, what the
 *    stages reserve and every hard promise. Raising it stops at the size the
 *    device had at start.
 * 13. Restart. Whatever a client's process holds stays its own while the
 *    process lives, whether vramd or the connection went away. A client
 *    that disconnects leaves a gone client behind: its chunks quarantined,
 *    its address ranges and ad-hoc stage ids held. A restarted vramd
 *    rebuilds the same from its state file (vl_restore). When the process
 *    connects again it may resume (vl_client_resume): the same stage,
 *    region and chunk ids at the same addresses and slots; what it does not
 *    declare is freed, what cannot be placed stays quarantined until the
 *    process is gone. Nothing a live process may still map is granted to
 *    anyone else. The declaration is what the process maps, which is behind
 *    the ledger when a reply died with vramd: a configured stage's chunk
 *    may come back in its KV or its loans whichever it counted as (a move
 *    the process never heard of), never across anything else.
 */
#include "ledger.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_LAYER_NONE 0xffffu

static int fail(struct vl_ledger *L, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->why, sizeof(L->why), fmt, ap);
    va_end(ap);
    return err;
}

const char *vl_why(const struct vl_ledger *L)
{
    return L->why;
}

const char *vl_state_name(int s)
{
    static const char *n[] = {"free", "granted", "loaned", "recalling",
                              "quarantined"};
    return s >= 0 && s < VL_NSTATES ? n[s] : "?";
}

const char *vl_kind_name(int k)
{
    static const char *n[] = {"kv", "expert", "fixed", "draft_kv"};
    return k >= 0 && k < VL_NKINDS ? n[k] : "?";
}

int vl_kind_parse(const char *s)
{
    for (int k = 0; s && k < VL_NKINDS; k++)
        if (strcmp(s, vl_kind_name(k)) == 0)
            return k;
    return -EINVAL;
}

/* ---- effects ---------------------------------------------------------- */

static int fx_push(struct vl_fxlist *fx, struct vl_fx e)
{
    if (!fx)
        return 0;
    if (fx->n == fx->cap) {
        size_t cap = fx->cap ? fx->cap * 2 : 64;
        struct vl_fx *v = realloc(fx->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        fx->v = v;
        fx->cap = cap;
    }
    fx->v[fx->n++] = e;
    return 0;
}

void vl_fx_clear(struct vl_fxlist *fx)
{
    if (fx)
        fx->n = 0;
}

void vl_fx_free(struct vl_fxlist *fx)
{
    if (!fx)
        return;
    free(fx->v);
    fx->v = NULL;
    fx->n = fx->cap = 0;
}

/* Effects are appended while state changes; a failed push (out of memory)
 * would leave the daemon unaware of a change, so reserve room up front. */
static int fx_reserve(struct vl_fxlist *fx, size_t more)
{
    if (!fx || fx->n + more <= fx->cap)
        return 0;
    size_t cap = fx->cap ? fx->cap : 64;
    while (cap < fx->n + more)
        cap *= 2;
    struct vl_fx *v = realloc(fx->v, cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    fx->v = v;
    fx->cap = cap;
    return 0;
}

/* ---- lookups ---------------------------------------------------------- */

static struct vl_device *dev_get(struct vl_ledger *L, uint32_t id)
{
    for (uint32_t i = 0; i < L->ndev; i++)
        if (L->dev[i].cfg.id == id)
            return &L->dev[i];
    return NULL;
}

static uint32_t dev_index(struct vl_ledger *L, const struct vl_device *d)
{
    return (uint32_t)(d - L->dev);
}

struct vl_region *vl_region_find(struct vl_ledger *L, uint32_t id)
{
    for (size_t i = 0; i < L->nregion; i++)
        if (L->region[i]->id == id)
            return L->region[i];
    return NULL;
}

struct vl_client *vl_client_find(struct vl_ledger *L, uint32_t id)
{
    for (size_t i = 0; i < L->nclient; i++)
        if (L->client[i].id == id)
            return &L->client[i];
    return NULL;
}

static struct vl_stage *stage_get(struct vl_ledger *L, uint32_t id)
{
    if (id >= VL_MAX_STAGES || !L->stage[id].used)
        return NULL;
    return &L->stage[id];
}

static struct vl_chunk *chunk_get(struct vl_ledger *L, uint64_t id,
                                  struct vl_device **d_out, uint32_t *idx_out)
{
    uint32_t di = (uint32_t)(id >> 32), idx = (uint32_t)id;
    if (di >= L->ndev || idx >= L->dev[di].nchunks)
        return NULL;
    if (d_out)
        *d_out = &L->dev[di];
    if (idx_out)
        *idx_out = idx;
    return &L->dev[di].chunks[idx];
}

/* ---- the observer (rule 13) -------------------------------------------- */

/* r: the region the chunk was just placed in (NULL when it is free or
 * quarantined), so that a grant never looks a region up. */
static void note_chunk(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
                       const struct vl_region *r)
{
    if (!L->obs.chunk)
        return;
    struct vl_chunk *c = &d->chunks[idx];
    uint16_t st = VL_QSTAGE_NONE;
    uint8_t cat = c->cat;
    if (c->state == VL_QUARANTINED) {
        st = c->qstage;
        cat = c->qcat;
    } else if (r && r->stage < VL_MAX_STAGES && L->stage[r->stage].configured) {
        st = (uint16_t)r->stage;
    }
    L->obs.chunk(L->obs.ctx, dev_index(L, d), idx, c->holder, st, cat);
}

/* A quarantined chunk stands for a configured stage's promise (rule 11),
 * and keeps what it counted as: a resumed stage (rule 13) gets these very
 * chunks back, so its hard promise must not change meanwhile. */
static void qstage_set(struct vl_ledger *L, struct vl_chunk *c, uint32_t stage,
                       int cat)
{
    c->qstage = (uint16_t)stage;
    c->qcat = (uint8_t)cat;
    L->stage[stage].quarantined++;
    L->stage[stage].q_fixed += cat == VL_CAT_FIXED;
}

static void qstage_clear(struct vl_ledger *L, struct vl_chunk *c)
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

static uint32_t note_va_take(struct vl_ledger *L, uint32_t region,
                             uint32_t client, uint64_t base, uint64_t size)
{
    return L->obs.va_take ? L->obs.va_take(L->obs.ctx, region, client, base,
                                           size)
                          : 0;
}

static void note_va_give(struct vl_ledger *L, uint32_t tag)
{
    if (L->obs.va_give)
        L->obs.va_give(L->obs.ctx, tag);
}

static void note_stage(struct vl_ledger *L, uint32_t stage, uint32_t client)
{
    if (L->obs.stage)
        L->obs.stage(L->obs.ctx, stage, client);
}

/* ---- chunk state ------------------------------------------------------ */

static void set_state(struct vl_device *d, struct vl_chunk *c, int st)
{
    d->count[c->state]--;
    c->state = (uint8_t)st;
    d->count[st]++;
}

static uint32_t *cat_counter(struct vl_device *d, int cat)
{
    switch (cat) {
    case VL_CAT_FIXED: return &d->fixed;
    case VL_CAT_KV: return &d->kv;
    case VL_CAT_LOAN: return &d->loaned;
    default: return NULL;
    }
}

/* By the region's kind, for ad-hoc stages too (status reports an ad-hoc
 * expert region's chunks as loaned bytes, though they are not recallable). */
static int cat_of_kind(const struct vl_region *r)
{
    switch (r->kind) {
    case VL_KV: return VL_CAT_KV;
    case VL_EXPERT: return VL_CAT_LOAN;
    default: return VL_CAT_FIXED;
    }
}

static uint32_t *stage_counter(struct vl_stage *s, const struct vl_region *r)
{
    switch (r->kind) {
    case VL_KV: return &s->kv_chunks;
    case VL_EXPERT: return &s->loan_chunks;
    default: return &s->fixed_chunks;
    }
}

static void set_cat(struct vl_device *d, struct vl_chunk *c, int cat)
{
    uint32_t *p = cat_counter(d, c->cat);
    if (p)
        (*p)--;
    c->cat = (uint8_t)cat;
    p = cat_counter(d, cat);
    if (p)
        (*p)++;
}

/* Detaches a chunk from its region slot, keeping counters right. */
static void unplace(struct vl_ledger *L, struct vl_chunk *c)
{
    if (!c->region)
        return;
    struct vl_region *r = vl_region_find(L, c->region);
    if (r) {
        r->slot_chunk[c->slot] = VL_CHUNK_NONE;
        r->used--;
        uint32_t lane = c->slot / r->stride_slots, i = c->slot % r->stride_slots;
        uint64_t *lc = r->slot_chunk + (size_t)lane * r->stride_slots;
        r->lane_count[lane]--;
        if (i < r->lane_lo[lane])
            r->lane_lo[lane] = i;
        while (r->lane_hi[lane] > 0 && lc[r->lane_hi[lane] - 1] == VL_CHUNK_NONE)
            r->lane_hi[lane]--;
        struct vl_stage *s = stage_get(L, r->stage);
        if (s) {
            (*stage_counter(s, r))--;
            if (c->state == VL_RECALLING && r->kind == VL_EXPERT)
                s->recalling--;
        }
    }
    c->region = 0;
    c->slot = 0;
}

static void place(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
                  struct vl_region *r, uint32_t slot, int state)
{
    struct vl_chunk *c = &d->chunks[idx];
    unplace(L, c);
    set_state(d, c, state);
    set_cat(d, c, cat_of_kind(r));
    c->holder = r->client;
    c->region = r->id;
    c->slot = slot;
    r->slot_chunk[slot] = vl_chunk_id(dev_index(L, d), idx);
    r->used++;
    uint32_t lane = slot / r->stride_slots, i = slot % r->stride_slots;
    uint64_t *lc = r->slot_chunk + (size_t)lane * r->stride_slots;
    r->lane_count[lane]++;
    if (i + 1 > r->lane_hi[lane])
        r->lane_hi[lane] = i + 1;
    while (r->lane_lo[lane] < r->lane_slots[lane] &&
           lc[r->lane_lo[lane]] != VL_CHUNK_NONE)
        r->lane_lo[lane]++;
    struct vl_stage *s = stage_get(L, r->stage);
    if (s)
        (*stage_counter(s, r))++;
    note_chunk(L, d, idx, r);
}

/* Free chunks that may be handed out: a lowered capacity withholds some. */
static uint32_t dev_free(const struct vl_device *d)
{
    return d->nfree > d->withheld ? d->nfree - d->withheld : 0;
}

static uint32_t take_free(struct vl_device *d)
{
    return d->free_stack[--d->nfree];
}

/* A chunk leaves its holder for good. The backend scrubs it (DROP) before
 * anyone else can be granted it. */
static void to_free(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
                    struct vl_fxlist *fx)
{
    struct vl_chunk *c = &d->chunks[idx];
    uint32_t holder = c->holder;
    unplace(L, c);
    struct vl_client *cl = vl_client_find(L, holder);
    if (cl && cl->chunks)
        cl->chunks--;
    qstage_clear(L, c);
    set_cat(d, c, VL_CAT_NONE);
    set_state(d, c, VL_FREE);
    c->holder = 0;
    d->free_stack[d->nfree++] = idx;
    note_chunk(L, d, idx, NULL);
    fx_push(fx, (struct vl_fx){.kind = VL_FX_DROP, .client = holder,
                               .chunk = vl_chunk_id(dev_index(L, d), idx)});
}

/* ---- stage arithmetic -------------------------------------------------- */

/* Without overflow for any a (a + b - 1 wraps near UINT64_MAX). */
static uint64_t div_up(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

static uint32_t sub0(uint32_t a, uint32_t b)
{
    return a > b ? a - b : 0;
}

uint64_t vl_kv_target_tokens(const struct vl_stage_cfg *cfg, uint64_t tokens)
{
    uint64_t native = cfg->native_context;
    uint64_t t = cfg->initial_tokens;
    if (tokens >= native || t >= native)
        return native; /* rounding up can only land beyond it */
    if (tokens > t) {
        uint64_t step = cfg->step_tokens ? cfg->step_tokens : 1;
        uint64_t k = div_up(tokens - t, step);
        if (k > (native - t) / step)
            return native; /* k steps overshoot it (and might wrap) */
        t += k * step;
    }
    return t;
}

uint32_t vl_lane_chunks(const struct vl_stage_cfg *cfg, uint32_t lane,
                        uint64_t tokens, uint64_t chunk_bytes)
{
    return (uint32_t)div_up(tokens * cfg->lane_bytes_per_token[lane],
                            chunk_bytes);
}

/* Window memory of a configured stage that is neither KV nor lent. */
static uint32_t window_free(const struct vl_stage *s)
{
    uint32_t used = s->kv_chunks + s->loan_chunks;
    return s->configured && used < s->window_chunks ? s->window_chunks - used
                                                    : 0;
}

static uint32_t fixed_free(const struct vl_stage *s)
{
    return s->fixed_chunks < s->fixed_reserved
               ? s->fixed_reserved - s->fixed_chunks
               : 0;
}

/* Loans beyond the stage's own window: these came from the pool. */
static uint32_t pool_loans(const struct vl_stage *s)
{
    uint32_t room = s->window_chunks > s->kv_chunks
                        ? s->window_chunks - s->kv_chunks
                        : 0;
    return s->loan_chunks > room ? s->loan_chunks - room : 0;
}

/* What a configured stage reserved and was not granted yet. */
static uint32_t stage_full(const struct vl_stage *s)
{
    return window_free(s) + fixed_free(s);
}

/* Quarantined chunks of a stage's old owner stand for its promise until the
 * reap (the stage can't be registered before). */
static uint32_t stage_credit(const struct vl_stage *s)
{
    uint32_t f = stage_full(s);
    return s->quarantined < f ? s->quarantined : f;
}

/* The promise that must be free chunks now, because nothing could be
 * recalled for it in time: fixed reservations (fixed regions grow at once),
 * and the window of a no-loan stage (mapped whole at registration). */
static uint32_t stage_hard(const struct vl_stage *s)
{
    /* Quarantined chunks cover it as they will when given back: fixed ones
     * the fixed part, the others the window part. */
    uint32_t qw = s->quarantined - s->q_fixed;
    return sub0(fixed_free(s), s->q_fixed) +
           (s->no_loan ? sub0(window_free(s), qw) : 0);
}

/* The promise free chunks and recallable pool loans must cover; never less
 * than the hard part (quarantined pool loans may outnumber the promise). */
static uint32_t stage_need(const struct vl_stage *s)
{
    uint32_t n = stage_full(s) - stage_credit(s), h = stage_hard(s);
    return n > h ? n : h;
}

/* What pool loans must leave free: everything promised, except the window
 * of a lending stage no client has registered, under lend_unreserved. */
static uint32_t stage_claim(const struct vl_device *d, const struct vl_stage *s)
{
    return s->owner || !d->cfg.lend_unreserved ? stage_need(s) : stage_hard(s);
}

struct promises {
    uint32_t hard, need, claim;
};

static struct promises dev_promises(struct vl_ledger *L,
                                    const struct vl_device *d)
{
    struct promises p = {0, 0, 0};
    for (uint32_t i = 0; i < VL_MAX_STAGES; i++) {
        struct vl_stage *s = &L->stage[i];
        if (!s->used || !s->configured || s->cfg.device != d->cfg.id)
            continue;
        p.hard += stage_hard(s);
        p.need += stage_need(s);
        p.claim += stage_claim(d, s);
    }
    return p;
}

/* Free chunks no promise needs: ad-hoc regions, KV beyond the window. */
static uint32_t dev_unpromised(struct vl_ledger *L, struct vl_device *d)
{
    return sub0(dev_free(d), dev_promises(L, d).need);
}

/* Free chunks pool loans may take. */
static uint32_t dev_unclaimed(struct vl_ledger *L, struct vl_device *d)
{
    return sub0(dev_free(d), dev_promises(L, d).claim);
}

/* Free chunks stage s may take for its KV window or its own loans: all but
 * the hard promises of other stages and its own fixed one. */
static uint32_t free_for_window(struct vl_ledger *L, struct vl_device *d,
                                const struct vl_stage *s)
{
    struct promises p = dev_promises(L, d);
    return sub0(dev_free(d), p.hard - stage_hard(s) + fixed_free(s));
}

/* Free chunks stage s may take for its fixed regions. */
static uint32_t free_for_fixed(struct vl_ledger *L, struct vl_device *d,
                               const struct vl_stage *s)
{
    struct promises p = dev_promises(L, d);
    uint32_t h = stage_hard(s);
    return sub0(dev_free(d), p.hard - h + sub0(h, fixed_free(s)));
}

/* Expert slots fully backed by the loaned prefix of the expert region. */
uint32_t vl_expert_slots_backed(const struct vl_ledger *L, uint32_t stage)
{
    struct vl_ledger *ml = (struct vl_ledger *)L;
    struct vl_stage *s = stage_get(ml, stage);
    if (!s || !s->expert_region || !s->cfg.expert_slot_bytes)
        return 0;
    struct vl_region *r = vl_region_find(ml, s->expert_region);
    if (!r)
        return 0;
    struct vl_device *d = dev_get(ml, r->device);
    uint32_t k = 0;
    while (k < r->lane_slots[0] && r->slot_chunk[k] != VL_CHUNK_NONE) {
        struct vl_chunk *c = chunk_get(ml, r->slot_chunk[k], NULL, NULL);
        if (!c || c->state != VL_LOANED)
            break;
        k++;
    }
    uint64_t b = (uint64_t)k * d->cfg.chunk_bytes / s->cfg.expert_slot_bytes;
    return b < s->nslots ? (uint32_t)b : s->nslots;
}

/* Residency changed: new version, and claims on slots no longer backed go. */
static void budget_changed(struct vl_ledger *L, struct vl_stage *s,
                           struct vl_fxlist *fx)
{
    s->residency_version++;
    uint32_t backed = vl_expert_slots_backed(L, (uint32_t)(s - L->stage));
    for (uint32_t i = backed; i < s->nslots; i++)
        s->slot_layer[i] = SLOT_LAYER_NONE;
    fx_push(fx, (struct vl_fx){.kind = VL_FX_BUDGET, .client = s->owner,
                               .stage = (uint32_t)(s - L->stage)});
}

/* ---- virtual address window ------------------------------------------- */

/* Removes [b, b + size) from free range i, which holds it. */
static int va_carve(struct vl_ledger *L, size_t i, uint64_t b, uint64_t size)
{
    struct vl_va_range *f = &L->va_free[i];
    uint64_t end = f->base + f->size, head = b - f->base;
    if (head == 0) {
        f->base += size;
        f->size -= size;
    } else if (b + size == end) {
        f->size = head;
    } else {
        struct vl_va_range *v = realloc(L->va_free, (L->nva_free + 1) *
                                                        sizeof(*v));
        if (!v)
            return -ENOMEM;
        L->va_free = v;
        f = &L->va_free[i];
        memmove(f + 2, f + 1, (L->nva_free - i - 1) * sizeof(*f));
        L->nva_free++;
        f[1].base = b + size;
        f[1].size = end - (b + size);
        f->size = head;
    }
    return 0;
}

static int va_alloc(struct vl_ledger *L, uint64_t size, uint64_t align,
                    uint64_t *out)
{
    for (size_t i = 0; i < L->nva_free; i++) {
        struct vl_va_range *f = &L->va_free[i];
        uint64_t b = (f->base + align - 1) / align * align;
        if (b < f->base || b - f->base > f->size || f->size - (b - f->base) < size)
            continue;
        int e = va_carve(L, i, b, size);
        if (e == 0)
            *out = b;
        return e;
    }
    return -ENOSPC;
}

/* The free range that holds all of [base, base + size), or -1. */
static ssize_t va_find(const struct vl_ledger *L, uint64_t base, uint64_t size)
{
    for (size_t i = 0; i < L->nva_free; i++) {
        const struct vl_va_range *f = &L->va_free[i];
        if (size && base >= f->base && size <= f->size &&
            base - f->base <= f->size - size)
            return (ssize_t)i;
    }
    return -1;
}

static void va_release(struct vl_ledger *L, uint64_t base, uint64_t size)
{
    size_t i = 0;
    while (i < L->nva_free && L->va_free[i].base < base)
        i++;
    struct vl_va_range *v = realloc(L->va_free, (L->nva_free + 1) * sizeof(*v));
    if (!v)
        return; /* leaks address space, never memory */
    L->va_free = v;
    memmove(v + i + 1, v + i, (L->nva_free - i) * sizeof(*v));
    v[i] = (struct vl_va_range){base, size};
    L->nva_free++;
    if (i + 1 < L->nva_free && v[i].base + v[i].size == v[i + 1].base) {
        v[i].size += v[i + 1].size;
        memmove(v + i + 1, v + i + 2, (L->nva_free - i - 2) * sizeof(*v));
        L->nva_free--;
    }
    if (i > 0 && v[i - 1].base + v[i - 1].size == v[i].base) {
        v[i - 1].size += v[i].size;
        memmove(v + i, v + i + 1, (L->nva_free - i - 1) * sizeof(*v));
        L->nva_free--;
    }
}

/* Takes exactly [base, base + size) out of the free ranges; -EBUSY when
 * any of it is taken. */
static int va_take_exact(struct vl_ledger *L, uint64_t base, uint64_t size)
{
    ssize_t i = va_find(L, base, size);
    return i < 0 ? -EBUSY : va_carve(L, (size_t)i, base, size);
}

static int hold_add(struct vl_ledger *L, const struct vl_va_hold *h)
{
    struct vl_va_hold *v = realloc(L->va_hold, (L->nva_hold + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    L->va_hold = v;
    v[L->nva_hold++] = *h;
    return 0;
}

/* ---- set-up ------------------------------------------------------------ */

int vl_init(struct vl_ledger *L, const struct vl_device_cfg *devs, uint32_t ndev,
            uint64_t va_base, uint64_t va_size)
{
    memset(L, 0, sizeof(*L));
    if (ndev == 0 || ndev > VL_MAX_DEVICES)
        return fail(L, -EINVAL, "between 1 and %d devices", VL_MAX_DEVICES);
    L->next_region_id = 1;
    for (uint32_t i = 0; i < ndev; i++) {
        struct vl_device *d = &L->dev[i];
        d->cfg = devs[i];
        if (!d->cfg.chunk_bytes || d->cfg.capacity_bytes < d->cfg.chunk_bytes) {
            uint32_t id = d->cfg.id;
            vl_fini(L);
            return fail(L, -EINVAL, "device %u: capacity below one chunk", id);
        }
        /* Chunk ids carry the index in 32 bits, lookups go by id. */
        if (d->cfg.capacity_bytes / d->cfg.chunk_bytes >= UINT32_MAX) {
            uint32_t id = d->cfg.id;
            vl_fini(L);
            return fail(L, -EINVAL, "device %u: more than 2^32 chunks", id);
        }
        for (uint32_t j = 0; j < i; j++)
            if (L->dev[j].cfg.id == d->cfg.id) {
                uint32_t id = d->cfg.id;
                vl_fini(L);
                return fail(L, -EEXIST, "device %u defined twice", id);
            }
        d->nchunks = (uint32_t)(d->cfg.capacity_bytes / d->cfg.chunk_bytes);
        d->chunks = calloc(d->nchunks, sizeof(*d->chunks));
        d->free_stack = malloc(d->nchunks * sizeof(uint32_t));
        if (!d->chunks || !d->free_stack) {
            L->ndev = i + 1;
            vl_fini(L);
            return fail(L, -ENOMEM, "out of memory");
        }
        for (uint32_t k = 0; k < d->nchunks; k++) {
            d->free_stack[k] = d->nchunks - 1 - k; /* low indexes first */
            d->chunks[k].qstage = VL_QSTAGE_NONE;
        }
        d->nfree = d->nchunks;
        d->count[VL_FREE] = d->nchunks;
        L->ndev = i + 1;
    }
    L->va_free = malloc(sizeof(*L->va_free));
    if (!L->va_free) {
        vl_fini(L);
        return fail(L, -ENOMEM, "out of memory");
    }
    L->va_free[0] = (struct vl_va_range){va_base, va_size};
    L->nva_free = 1;
    L->va_base = va_base;
    L->va_size = va_size;
    return 0;
}

static void region_free(struct vl_region *r)
{
    if (r) {
        free(r->slot_chunk);
        free(r);
    }
}

void vl_fini(struct vl_ledger *L)
{
    if (!L)
        return;
    for (uint32_t i = 0; i < L->ndev; i++) {
        free(L->dev[i].chunks);
        free(L->dev[i].free_stack);
    }
    for (size_t i = 0; i < L->nregion; i++)
        region_free(L->region[i]);
    for (uint32_t i = 0; i < VL_MAX_STAGES; i++)
        free(L->stage[i].slot_layer);
    free(L->region);
    free(L->client);
    free(L->va_free);
    free(L->va_hold);
    memset(L, 0, sizeof(*L));
}

int vl_stage_configure(struct vl_ledger *L, const struct vl_stage_cfg *cfg)
{
    if (cfg->id >= VL_MAX_STAGES)
        return fail(L, -EINVAL, "stage id %u: at most %d", cfg->id,
                    VL_MAX_STAGES - 1);
    if (L->stage[cfg->id].used)
        return fail(L, -EEXIST, "stage %u defined twice", cfg->id);
    struct vl_device *d = dev_get(L, cfg->device);
    if (!d)
        return fail(L, -ENODEV, "stage %u: no device %u", cfg->id, cfg->device);
    if (cfg->lanes == 0 || cfg->lanes > VL_MAX_LANES)
        return fail(L, -EINVAL, "stage %u: between 1 and %d KV lanes", cfg->id,
                    VL_MAX_LANES);
    if (cfg->last_layer < cfg->first_layer || cfg->last_layer >= SLOT_LAYER_NONE)
        return fail(L, -EINVAL, "stage %u: bad layer range %u-%u", cfg->id,
                    cfg->first_layer, cfg->last_layer);
    if (!cfg->native_context || !cfg->expert_slot_bytes)
        return fail(L, -EINVAL, "stage %u: native context and expert slot "
                    "size must be positive", cfg->id);
    if (cfg->nfixed > VL_MAX_FIXED)
        return fail(L, -EINVAL, "stage %u: at most %d fixed reservations",
                    cfg->id, VL_MAX_FIXED);

    struct vl_stage s = {.used = true, .configured = true, .cfg = *cfg};
    uint64_t cb = d->cfg.chunk_bytes;
    uint64_t window = 0;
    for (uint32_t l = 0; l < cfg->lanes; l++) {
        uint64_t bpt = cfg->lane_bytes_per_token[l];
        if (!bpt || bpt > UINT64_MAX / cfg->native_context)
            return fail(L, -EINVAL, "stage %u: lane %u: %llu bytes per token "
                        "(must be positive, and the native context's bytes "
                        "must fit 64 bits)", cfg->id, l,
                        (unsigned long long)bpt);
        uint64_t lc = div_up(cfg->native_context * bpt, cb);
        if (lc > d->nchunks)
            return fail(L, -ENOSPC, "stage %u: KV lane %u alone (%llu MiB) "
                        "does not fit device %u", cfg->id, l,
                        (unsigned long long)(lc * cb >> 20), d->cfg.id);
        s.lane_window[l] = (uint32_t)lc;
        window += lc;
    }
    uint64_t fixed = 0;
    for (uint32_t f = 0; f < cfg->nfixed; f++) {
        const struct vl_fixed_cfg *fc = &cfg->fixed[f];
        if (fc->kind != VL_FIXED && fc->kind != VL_DRAFT_KV)
            return fail(L, -EINVAL, "stage %u: fixed reservation %u must be "
                        "of kind fixed or draft_kv", cfg->id, f);
        if (!fc->bytes)
            return fail(L, -EINVAL, "stage %u: fixed reservation %u is empty",
                        cfg->id, f);
        fixed += div_up(fc->bytes, cb);
    }
    if (window + fixed + d->reserved > vl_capacity(d))
        return fail(L, -ENOSPC,
                    "stage %u: KV window %llu MiB + fixed %llu MiB does not fit "
                    "device %u (%llu MiB left to reserve)",
                    cfg->id, (unsigned long long)(window * cb >> 20),
                    (unsigned long long)(fixed * cb >> 20), d->cfg.id,
                    (unsigned long long)((uint64_t)(vl_capacity(d) - d->reserved) *
                                         cb >> 20));
    uint64_t ebytes = cfg->expert_region_bytes ? cfg->expert_region_bytes
                                               : d->cfg.capacity_bytes;
    if (ebytes / cb >= UINT32_MAX)
        return fail(L, -EINVAL, "stage %u: expert region of %llu bytes is "
                    "too large", cfg->id, (unsigned long long)ebytes);
    s.window_chunks = (uint32_t)window;
    s.fixed_reserved = (uint32_t)fixed;
    s.headroom_chunks = (uint32_t)div_up(cfg->headroom_bytes, cb);
    /* No-loan safety (rule 7), decided once: the window beyond the initial KV
     * must back the headroom and at least one expert slot. */
    uint32_t initial = 0;
    for (uint32_t l = 0; l < cfg->lanes; l++)
        initial += vl_lane_chunks(cfg, l, vl_kv_target_tokens(cfg, 0), cb);
    uint64_t lendable = (uint64_t)(s.window_chunks - initial) * cb;
    uint64_t keep = (uint64_t)s.headroom_chunks * cb;
    s.no_loan = !cfg->lend || lendable < keep + cfg->expert_slot_bytes ||
                keep + cfg->expert_slot_bytes < keep;
    s.register_chunks = s.no_loan ? s.window_chunks : initial;
    s.nslots = (uint32_t)(ebytes / cfg->expert_slot_bytes);
    s.slot_layer = malloc((s.nslots ? s.nslots : 1) * sizeof(uint16_t));
    if (!s.slot_layer)
        return fail(L, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < s.nslots; i++)
        s.slot_layer[i] = SLOT_LAYER_NONE;
    d->reserved += s.window_chunks + s.fixed_reserved;
    L->stage[cfg->id] = s;
    return 0;
}

/* Capacity at run time: withheld chunks stay free and out of reach, so no
 * chunk has to move. Lowering must leave room for what is in use, what the
 * stages reserve, and every promise; raising stops at the size the device
 * had when vramd started. */
int vl_device_set_capacity(struct vl_ledger *L, uint32_t device, uint64_t bytes,
                           bool dry_run)
{
    struct vl_device *d = dev_get(L, device);
    if (!d)
        return fail(L, -ENODEV, "no device %u", device);
    uint64_t cb = d->cfg.chunk_bytes;
    uint64_t want = bytes / cb;
    if (want > d->nchunks)
        return fail(L, -E2BIG, "device %u: at most %llu MiB (its size when vramd "
                    "started)", device, (unsigned long long)(d->nchunks * cb >> 20));
    uint32_t in_use = d->nchunks - d->nfree;
    if (want < in_use)
        return fail(L, -EBUSY, "device %u: %llu MiB are in use", device,
                    (unsigned long long)((uint64_t)in_use * cb >> 20));
    if (want < d->reserved)
        return fail(L, -EBUSY, "device %u: its stages reserve %llu MiB",
                    device, (unsigned long long)((uint64_t)d->reserved * cb >> 20));
    uint32_t withheld = d->nchunks - (uint32_t)want;
    struct promises p = dev_promises(L, d);
    uint32_t free_after = d->nfree - withheld;
    if (free_after < p.hard)
        return fail(L, -EBUSY, "device %u: %llu MiB are promised to stages' "
                    "fixed and registered KV memory", device,
                    (unsigned long long)((uint64_t)p.hard * cb >> 20));
    if (dry_run)
        return 0;
    uint32_t old = d->withheld;
    d->withheld = withheld;
    if (vl_check(L) < 0) { /* a promise would go uncovered */
        char why[256];
        snprintf(why, sizeof(why), "%s", L->why);
        d->withheld = old;
        return fail(L, -EBUSY, "device %u: %s", device, why);
    }
    return 0;
}

/* ---- clients ----------------------------------------------------------- */

int vl_client_add(struct vl_ledger *L, uint32_t id)
{
    if (!id)
        return fail(L, -EINVAL, "client id 0 means \"no holder\"");
    if (vl_client_find(L, id))
        return fail(L, -EEXIST, "client %u exists", id);
    if (L->nclient == L->client_cap) {
        size_t cap = L->client_cap ? L->client_cap * 2 : 16;
        struct vl_client *v = realloc(L->client, cap * sizeof(*v));
        if (!v)
            return fail(L, -ENOMEM, "out of memory");
        L->client = v;
        L->client_cap = cap;
    }
    L->client[L->nclient++] = (struct vl_client){.id = id};
    return 0;
}

/* A region goes; its address range is free again, or with hold still
 * reserved by its (gone) client's process (rule 13). */
static void region_drop(struct vl_ledger *L, struct vl_region *r, bool hold)
{
    struct vl_va_hold h = {.client = r->client, .region = r->id,
                           .base = r->base, .size = r->va_bytes, .tag = r->tag};
    if (!hold || hold_add(L, &h) < 0) {
        va_release(L, r->base, r->va_bytes);
        note_va_give(L, r->tag);
    }
    for (size_t i = 0; i < L->nregion; i++)
        if (L->region[i] == r) {
            L->region[i] = L->region[--L->nregion];
            break;
        }
    region_free(r);
}

static void stage_reset(struct vl_ledger *L, struct vl_stage *s)
{
    if (!s->configured) {
        free(s->slot_layer);
        memset(s, 0, sizeof(*s));
        note_stage(L, (uint32_t)(s - L->stage), 0);
        return;
    }
    s->owner = 0;
    s->keep_window = false;
    s->kv_region = s->expert_region = 0;
    memset(s->fixed_region, 0, sizeof(s->fixed_region));
    s->kv_needed_bytes = 0;
    s->kv_peak_tokens = 0;
    for (uint32_t i = 0; i < s->nslots; i++)
        s->slot_layer[i] = SLOT_LAYER_NONE;
    (void)L;
}

/* Every region of client (or of one stage of it when stage != VL_NONE):
 * chunks go free (released) or quarantined (holder gone), regions go. */
static void drop_regions(struct vl_ledger *L, uint32_t client, uint32_t stage,
                         bool quarantine, struct vl_fxlist *fx)
{
    for (size_t i = 0; i < L->nregion;) {
        struct vl_region *r = L->region[i];
        if (r->client != client || (stage != VL_NONE && r->stage != stage)) {
            i++;
            continue;
        }
        struct vl_device *d = dev_get(L, r->device);
        for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++) {
            uint64_t id = r->slot_chunk[k];
            if (id == VL_CHUNK_NONE)
                continue;
            uint32_t idx = (uint32_t)id;
            struct vl_chunk *c = &d->chunks[idx];
            if (quarantine) {
                struct vl_stage *qs = stage_get(L, r->stage);
                unplace(L, c);
                set_cat(d, c, VL_CAT_NONE);
                set_state(d, c, VL_QUARANTINED);
                if (qs && qs->configured) /* it stands for its promise */
                    qstage_set(L, c, r->stage, cat_of_kind(r));
            } else {
                to_free(L, d, idx, fx);
            }
        }
        region_drop(L, r, quarantine); /* swaps the last region into i */
    }
}

int vl_client_disconnect(struct vl_ledger *L, uint32_t client,
                         struct vl_fxlist *fx)
{
    struct vl_client *cl = vl_client_find(L, client);
    if (!cl)
        return fail(L, -ENOENT, "no client %u", client);
    if (fx_reserve(fx, VL_MAX_STAGES) < 0)
        return fail(L, -ENOMEM, "out of memory");
    drop_regions(L, client, VL_NONE, true, fx);
    /* Chunks held outside regions (recalled ones already unmapped from the
     * ledger's view) are quarantined too. */
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        for (uint32_t k = 0; k < d->nchunks; k++) {
            struct vl_chunk *c = &d->chunks[k];
            if (c->holder == client && c->state != VL_QUARANTINED &&
                c->state != VL_FREE) {
                set_cat(d, c, VL_CAT_NONE);
                set_state(d, c, VL_QUARANTINED);
            }
        }
    }
    for (uint32_t i = 0; i < VL_MAX_STAGES; i++) {
        struct vl_stage *s = &L->stage[i];
        if (!s->used || s->owner != client)
            continue;
        if (s->configured) {
            stage_reset(L, s);
        } else { /* its id waits for the process (rule 13) */
            s->owner = 0;
            s->held_by = client;
        }
    }
    cl->gone = true;
    return 0;
}

int vl_client_reap(struct vl_ledger *L, uint32_t client, struct vl_fxlist *fx)
{
    struct vl_client *cl = vl_client_find(L, client);
    if (!cl)
        return fail(L, -ENOENT, "no client %u", client);
    if (!cl->gone)
        return fail(L, -EBUSY, "client %u is still connected", client);
    size_t q = 0;
    for (uint32_t di = 0; di < L->ndev; di++)
        q += L->dev[di].count[VL_QUARANTINED];
    if (fx_reserve(fx, q) < 0)
        return fail(L, -ENOMEM, "out of memory");
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        for (uint32_t k = 0; k < d->nchunks; k++)
            if (d->chunks[k].holder == client &&
                d->chunks[k].state == VL_QUARANTINED)
                to_free(L, d, k, fx);
    }
    for (size_t i = 0; i < L->nva_hold;) {
        struct vl_va_hold *h = &L->va_hold[i];
        if (h->client != client) {
            i++;
            continue;
        }
        va_release(L, h->base, h->size);
        note_va_give(L, h->tag);
        *h = L->va_hold[--L->nva_hold];
    }
    for (uint32_t i = 0; i < VL_MAX_STAGES; i++)
        if (L->stage[i].used && !L->stage[i].configured &&
            !L->stage[i].owner && L->stage[i].held_by == client)
            stage_reset(L, &L->stage[i]);
    *cl = L->client[--L->nclient];
    return 0;
}

/* ---- regions ----------------------------------------------------------- */

struct geometry {
    uint64_t lane_stride, total, va_bytes, unit;
};

static int region_geometry(struct vl_ledger *L, const struct vl_device *d,
                           uint32_t lanes, const uint32_t *lane_slots,
                           struct geometry *g)
{
    uint64_t cb = d->cfg.chunk_bytes;
    uint32_t stride = 0;
    for (uint32_t l = 0; l < lanes; l++)
        if (lane_slots[l] > stride)
            stride = lane_slots[l];
    if (stride == 0)
        return fail(L, -EINVAL, "a region needs at least one chunk per lane");
    uint64_t align = cb > (2u << 20) ? cb : (2u << 20);
    g->lane_stride = ((uint64_t)stride * cb + align - 1) / align * align;
    g->total = (uint64_t)lanes * g->lane_stride;
    /* The address space a client reserves: whole alignment units, so that a
     * region is never a small reservation (the CUDA driver serves those from
     * its own pool and ignores the address) and never overlaps the next. */
    g->unit = L->region_align > align ? L->region_align : align;
    g->va_bytes = div_up(g->total, g->unit) * g->unit;
    return 0;
}

/* A new region, at a free address (base 0) with the next id (id 0), or at
 * the address and with the id a resuming client had (rule 13). */
static int region_new_at(struct vl_ledger *L, uint32_t client,
                         struct vl_stage *s, int kind, uint32_t lanes,
                         const uint32_t *lane_slots, uint64_t base, uint32_t id,
                         struct vl_region **out)
{
    struct vl_device *d = dev_get(L, s->cfg.device);
    uint64_t cb = d->cfg.chunk_bytes;
    struct geometry g;
    int ge = region_geometry(L, d, lanes, lane_slots, &g);
    if (ge < 0)
        return ge;
    uint64_t lane_stride = g.lane_stride, total = g.total, va_bytes = g.va_bytes,
             unit = g.unit;

    struct vl_region *r = calloc(1, sizeof(*r));
    if (!r)
        return fail(L, -ENOMEM, "out of memory");
    r->stride_slots = (uint32_t)(lane_stride / cb);
    r->slot_chunk = malloc((size_t)lanes * r->stride_slots * sizeof(uint64_t));
    if (!r->slot_chunk) {
        free(r);
        return fail(L, -ENOMEM, "out of memory");
    }
    if (L->nregion == L->region_cap) {
        size_t cap = L->region_cap ? L->region_cap * 2 : 16;
        struct vl_region **v = realloc(L->region, cap * sizeof(*v));
        if (!v) {
            region_free(r);
            return fail(L, -ENOMEM, "out of memory");
        }
        L->region = v;
        L->region_cap = cap;
    }
    int e = base ? va_take_exact(L, base, va_bytes)
                 : va_alloc(L, va_bytes, unit, &r->base);
    if (e < 0) {
        region_free(r);
        if (base)
            return fail(L, e, "address %#llx (+%llu MiB) is taken",
                        (unsigned long long)base,
                        (unsigned long long)(va_bytes >> 20));
        return fail(L, e, "no room for %llu MiB in the address window",
                    (unsigned long long)(total >> 20));
    }
    if (base)
        r->base = base;
    for (size_t k = 0; k < (size_t)lanes * r->stride_slots; k++)
        r->slot_chunk[k] = VL_CHUNK_NONE;
    if (id) {
        r->id = id;
        if (id >= L->next_region_id && id < UINT32_MAX)
            L->next_region_id = id + 1;
    } else {
        r->id = L->next_region_id++;
    }
    r->client = client;
    r->stage = (uint32_t)(s - L->stage);
    r->kind = (uint8_t)kind;
    r->device = s->cfg.device;
    r->lane_stride = lane_stride;
    r->va_bytes = va_bytes;
    r->lanes = lanes;
    memcpy(r->lane_slots, lane_slots, lanes * sizeof(uint32_t));
    r->fixed_index = VL_NONE;
    r->tag = note_va_take(L, r->id, client, r->base, r->va_bytes);
    L->region[L->nregion++] = r;
    *out = r;
    return 0;
}

static int region_new(struct vl_ledger *L, uint32_t client, struct vl_stage *s,
                      int kind, uint32_t lanes, const uint32_t *lane_slots,
                      struct vl_region **out)
{
    return region_new_at(L, client, s, kind, lanes, lane_slots, 0, 0, out);
}

static uint32_t lane_used(const struct vl_region *r, uint32_t lane)
{
    return r->lane_count[lane];
}

/* Lowest empty slot of a lane, or VL_NONE. */
static uint32_t lane_first_empty(const struct vl_region *r, uint32_t lane)
{
    for (uint32_t i = r->lane_lo[lane]; i < r->lane_slots[lane]; i++) {
        uint32_t k = lane * r->stride_slots + i;
        if (r->slot_chunk[k] == VL_CHUNK_NONE)
            return k;
    }
    return VL_NONE;
}

/* Highest occupied slot of a lane holding a chunk in state st, or VL_NONE. */
static uint32_t lane_last_in(struct vl_ledger *L, const struct vl_region *r,
                             uint32_t lane, int st)
{
    for (uint32_t i = r->lane_hi[lane]; i-- > 0;) {
        uint32_t k = lane * r->stride_slots + i;
        if (r->slot_chunk[k] == VL_CHUNK_NONE)
            continue;
        struct vl_chunk *c = chunk_get(L, r->slot_chunk[k], NULL, NULL);
        if (c->state == st)
            return k;
    }
    return VL_NONE;
}

int vl_region_create(struct vl_ledger *L, uint32_t client, uint32_t stage,
                     int kind, uint64_t lane_bytes, uint32_t lanes,
                     uint32_t *region_out)
{
    struct vl_stage *s = stage_get(L, stage);
    if (!s || s->owner != client)
        return fail(L, -ENOENT, "stage %u is not yours", stage);
    if (kind < 0 || kind >= VL_NKINDS)
        return fail(L, -EINVAL, "kind must be kv, expert, fixed or draft_kv");
    if (s->configured)
        return fail(L, -EPERM, "stage %u is configured: its regions are made "
                    "at registration", stage);
    if (lanes == 0 || lanes > VL_MAX_LANES)
        return fail(L, -E2BIG, "lanes must be 1..%d", VL_MAX_LANES);
    struct vl_device *d = dev_get(L, s->cfg.device);
    uint64_t cb = d->cfg.chunk_bytes;
    if (lane_bytes == 0 || lane_bytes > d->cfg.capacity_bytes)
        return fail(L, -E2BIG, "region lane of %llu bytes: must be 1..%llu "
                    "(the device's capacity)", (unsigned long long)lane_bytes,
                    (unsigned long long)d->cfg.capacity_bytes);
    uint32_t slots[VL_MAX_LANES];
    for (uint32_t l = 0; l < lanes; l++)
        slots[l] = (uint32_t)div_up(lane_bytes, cb);
    struct vl_region *r;
    int e = region_new(L, client, s, kind, lanes, slots, &r);
    if (e < 0)
        return e;
    *region_out = r->id;
    return 0;
}

static struct vl_region *own_region(struct vl_ledger *L, uint32_t client,
                                    uint32_t region)
{
    struct vl_region *r = vl_region_find(L, region);
    return r && r->client == client ? r : NULL;
}

/* Grants free chunks to the first empty slots of each lane. The caller has
 * checked that enough are free. */
static void grant_lanes(struct vl_ledger *L, struct vl_region *r,
                        const uint32_t *per_lane, int state,
                        struct vl_fxlist *fx)
{
    struct vl_device *d = dev_get(L, r->device);
    struct vl_client *cl = vl_client_find(L, r->client);
    for (uint32_t l = 0; l < r->lanes; l++)
        for (uint32_t n = 0; n < per_lane[l]; n++) {
            uint32_t slot = lane_first_empty(r, l);
            uint32_t idx = take_free(d);
            place(L, d, idx, r, slot, state);
            if (cl)
                cl->chunks++;
            fx_push(fx, (struct vl_fx){.kind = VL_FX_MAP, .client = r->client,
                                       .chunk = vl_chunk_id(dev_index(L, d), idx),
                                       .region = r->id, .slot = slot,
                                       .stage = r->stage});
        }
}

int vl_region_grow(struct vl_ledger *L, uint32_t client, uint32_t region,
                   uint32_t n, struct vl_fxlist *fx)
{
    struct vl_region *r = own_region(L, client, region);
    if (!r)
        return fail(L, -ENOENT, "region %u is not yours", region);
    struct vl_stage *s = stage_get(L, r->stage);
    if (s->configured && (r->kind == VL_KV || r->kind == VL_EXPERT))
        return fail(L, -EPERM, "region %u: the %s region of a configured stage "
                    "grows through %s", region, vl_kind_name(r->kind),
                    r->kind == VL_KV ? "kv_reserve" : "expert_request");
    uint32_t per_lane[VL_MAX_LANES];
    uint64_t total = 0;
    for (uint32_t l = 0; l < r->lanes; l++) {
        uint32_t used = lane_used(r, l);
        if (n > r->lane_slots[l] - used)
            return fail(L, -E2BIG, "region %u lane %u: %u chunks asked, room "
                        "for %u", region, l, n, r->lane_slots[l] - used);
        per_lane[l] = n;
        total += n;
    }
    struct vl_device *d = dev_get(L, r->device);
    /* A fixed region of a configured stage draws on its reservation (a hard
     * promise: free unless quarantine elsewhere broke it), an ad-hoc region
     * on what no promise needs. Never more than is free. */
    uint64_t avail = s->configured ? free_for_fixed(L, d, s)
                                   : dev_unpromised(L, d);
    if (s->configured && total > fixed_free(s))
        return fail(L, -EDQUOT, "region %u: %llu chunks asked, %u left of the "
                    "stage's fixed reservation", region,
                    (unsigned long long)total, fixed_free(s));
    if (total > avail)
        return fail(L, -ENOSPC, "device %u: %llu chunks asked, %llu available",
                    d->cfg.id, (unsigned long long)total,
                    (unsigned long long)avail);
    if (fx_reserve(fx, total) < 0)
        return fail(L, -ENOMEM, "out of memory");
    grant_lanes(L, r, per_lane, VL_GRANTED, fx);
    if (s->configured)
        s->grants_total += total;
    return 0;
}

int vl_region_release(struct vl_ledger *L, uint32_t client, uint32_t region,
                      struct vl_fxlist *fx)
{
    struct vl_region *r = own_region(L, client, region);
    if (!r)
        return fail(L, -ENOENT, "region %u is not yours", region);
    struct vl_stage *s = stage_get(L, r->stage);
    if (s->configured)
        return fail(L, -EPERM, "region %u belongs to configured stage %u: "
                    "release the stage", region, r->stage);
    if (fx_reserve(fx, r->used) < 0)
        return fail(L, -ENOMEM, "out of memory");
    struct vl_device *d = dev_get(L, r->device);
    for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++)
        if (r->slot_chunk[k] != VL_CHUNK_NONE)
            to_free(L, d, (uint32_t)r->slot_chunk[k], fx);
    region_drop(L, r, false);
    return 0;
}

int vl_chunk_check_region(struct vl_ledger *L, uint64_t chunk, uint32_t region)
{
    struct vl_device *d = NULL;
    if (!chunk_get(L, chunk, &d, NULL))
        return fail(L, -ENOENT, "no chunk %llu", (unsigned long long)chunk);
    struct vl_region *r = vl_region_find(L, region);
    if (!r)
        return fail(L, -ENOENT, "no region %u", region);
    if (d->cfg.id != r->device)
        return fail(L, -EXDEV, "foreign chunk: chunk %llu belongs to device "
                    "%u, region %u to device %u", (unsigned long long)chunk,
                    d->cfg.id, region, r->device);
    return 0;
}

int vl_chunk_move(struct vl_ledger *L, uint32_t client, uint64_t chunk,
                  uint32_t region, uint32_t slot, struct vl_fxlist *fx)
{
    struct vl_device *d = NULL;
    uint32_t idx = 0;
    struct vl_chunk *c = chunk_get(L, chunk, &d, &idx);
    if (!c || c->holder != client || c->state != VL_GRANTED || !c->region)
        return fail(L, -ENOENT, "chunk %llu is not a granted chunk of yours",
                    (unsigned long long)chunk);
    struct vl_region *r = own_region(L, client, region);
    if (!r)
        return fail(L, -ENOENT, "region %u is not yours", region);
    int e = vl_chunk_check_region(L, chunk, region);
    if (e < 0)
        return e;
    struct vl_region *from = vl_region_find(L, c->region);
    struct vl_stage *sf = stage_get(L, from->stage), *st = stage_get(L, r->stage);
    if (sf->configured || st->configured)
        return fail(L, -EPERM, "the regions of configured stages are arranged "
                    "by kv_reserve, kv_trim and expert_request");
    if (slot >= r->lanes * r->stride_slots ||
        slot % r->stride_slots >= r->lane_slots[slot / r->stride_slots])
        return fail(L, -EINVAL, "slot %u is outside region %u", slot, region);
    if (r->slot_chunk[slot] != VL_CHUNK_NONE)
        return fail(L, -EBUSY, "slot %u of region %u is taken", slot, region);
    if (fx_reserve(fx, 1) < 0)
        return fail(L, -ENOMEM, "out of memory");
    place(L, d, idx, r, slot, VL_GRANTED);
    fx_push(fx, (struct vl_fx){.kind = VL_FX_MOVE, .client = client,
                               .chunk = chunk, .region = region, .slot = slot,
                               .stage = r->stage});
    return 0;
}

int vl_chunks_release(struct vl_ledger *L, uint32_t client,
                      const uint64_t *ids, size_t n, struct vl_fxlist *fx)
{
    for (size_t i = 0; i < n; i++) {
        struct vl_chunk *c = chunk_get(L, ids[i], NULL, NULL);
        if (!c || c->holder != client ||
            (c->state != VL_GRANTED && c->state != VL_LOANED &&
             c->state != VL_RECALLING))
            return fail(L, -ENOENT, "chunk %llu is not held by you",
                        (unsigned long long)ids[i]);
        for (size_t j = 0; j < i; j++)
            if (ids[j] == ids[i])
                return fail(L, -EINVAL, "chunk %llu listed twice",
                            (unsigned long long)ids[i]);
    }
    if (fx_reserve(fx, 2 * n) < 0)
        return fail(L, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        struct vl_device *d = NULL;
        uint32_t idx = 0;
        struct vl_chunk *c = chunk_get(L, ids[i], &d, &idx);
        struct vl_region *r = c->region ? vl_region_find(L, c->region) : NULL;
        bool loan = r && r->kind == VL_EXPERT && c->state != VL_GRANTED;
        to_free(L, d, idx, fx);
        if (loan) {
            struct vl_stage *s = stage_get(L, r->stage);
            if (s)
                budget_changed(L, s, fx);
        }
    }
    return 0;
}

/* ---- stages ------------------------------------------------------------ */

int vl_stage_register_adhoc(struct vl_ledger *L, uint32_t client,
                            uint32_t device, uint32_t first, uint32_t last,
                            uint32_t *stage_out)
{
    struct vl_client *cl = vl_client_find(L, client);
    if (!cl || cl->gone)
        return fail(L, -ENOENT, "no connected client %u", client);
    if (!dev_get(L, device))
        return fail(L, -ENODEV, "no device %u", device);
    if (last < first || last >= SLOT_LAYER_NONE)
        return fail(L, -EINVAL, "bad layer range %u-%u", first, last);
    /* Ad-hoc stages take ids from the top, away from configured ones. */
    for (uint32_t i = VL_MAX_STAGES; i-- > 0;) {
        struct vl_stage *s = &L->stage[i];
        if (s->used)
            continue;
        memset(s, 0, sizeof(*s));
        s->used = true;
        s->cfg.id = i;
        s->cfg.device = device;
        s->cfg.first_layer = first;
        s->cfg.last_layer = last;
        s->owner = client;
        note_stage(L, i, client);
        *stage_out = i;
        return 0;
    }
    return fail(L, -E2BIG, "all %d stages are in use", VL_MAX_STAGES);
}

int vl_stage_register(struct vl_ledger *L, uint32_t client, uint32_t stage,
                      bool keep_window, struct vl_fxlist *fx)
{
    struct vl_stage *s = stage_get(L, stage);
    if (!s || !s->configured)
        return fail(L, -ENOENT, "no configured stage %u", stage);
    struct vl_client *cl = vl_client_find(L, client);
    if (!cl || cl->gone)
        return fail(L, -ENOENT, "no connected client %u", client);
    if (s->owner)
        return fail(L, -EEXIST, "stage %u is owned by client %u", stage,
                    s->owner);
    struct vl_device *d = dev_get(L, s->cfg.device);
    uint64_t cb = d->cfg.chunk_bytes;
    if (s->quarantined)
        return fail(L, -EAGAIN, "stage %u: %u chunks of its previous owner "
                    "are still quarantined", stage, s->quarantined);

    /* No-loan safety (decided at configuration): how much KV to map now.
     * A no-loan window is a hard promise, always free (but for quarantine
     * elsewhere); the initial window of a lending stage may have been lent
     * as pool loans while it had no owner: then what is free now is mapped,
     * the rest comes with the first KV reserve (recalled, with hold). */
    uint64_t tokens = s->no_loan ? s->cfg.native_context
                                 : s->cfg.initial_tokens;
    uint32_t need = 0, per_lane[VL_MAX_LANES];
    uint32_t avail = free_for_window(L, d, s);
    for (uint32_t l = 0; l < s->cfg.lanes; l++) {
        per_lane[l] = vl_lane_chunks(&s->cfg, l,
                                     vl_kv_target_tokens(&s->cfg, tokens), cb);
        if (!s->no_loan && per_lane[l] > avail - need)
            per_lane[l] = avail - need;
        need += per_lane[l];
    }
    if (need > avail)
        return fail(L, -EAGAIN, "stage %u: %u chunks needed for its KV "
                    "window, %u free (the rest is quarantined)", stage, need,
                    avail);
    if (fx_reserve(fx, need) < 0)
        return fail(L, -ENOMEM, "out of memory");

    struct vl_region *kv = NULL, *ex = NULL;
    uint32_t one[1] = {s->nslots ? (uint32_t)div_up((uint64_t)s->nslots *
                                               s->cfg.expert_slot_bytes, cb)
                                 : 1};
    s->owner = client;
    int e = region_new(L, client, s, VL_KV, s->cfg.lanes, s->lane_window, &kv);
    if (e < 0)
        goto undo;
    s->kv_region = kv->id;
    e = region_new(L, client, s, VL_EXPERT, 1, one, &ex);
    if (e < 0)
        goto undo;
    s->expert_region = ex->id;
    for (uint32_t f = 0; f < s->cfg.nfixed; f++) {
        struct vl_region *fr = NULL;
        uint32_t slots[1] = {(uint32_t)div_up(s->cfg.fixed[f].bytes, cb)};
        e = region_new(L, client, s, s->cfg.fixed[f].kind, 1, slots, &fr);
        if (e < 0)
            goto undo;
        fr->fixed_index = f;
        s->fixed_region[f] = fr->id;
    }
    s->keep_window = keep_window;
    grant_lanes(L, kv, per_lane, VL_GRANTED, fx);
    s->grants_total += need;
    s->kv_peak_tokens = vl_kv_target_tokens(&s->cfg, tokens);
    s->kv_needed_bytes = 0;
    return 0;
undo:
    drop_regions(L, client, stage, false, NULL);
    stage_reset(L, s);
    return e;
}

int vl_stage_release(struct vl_ledger *L, uint32_t client, uint32_t stage,
                     struct vl_fxlist *fx)
{
    struct vl_stage *s = stage_get(L, stage);
    if (!s || s->owner != client)
        return fail(L, -ENOENT, "stage %u is not yours", stage);
    size_t held = 0;
    for (size_t i = 0; i < L->nregion; i++)
        if (L->region[i]->stage == stage)
            held += L->region[i]->used;
    if (fx_reserve(fx, held + 1) < 0)
        return fail(L, -ENOMEM, "out of memory");
    drop_regions(L, client, stage, false, fx);
    stage_reset(L, s);
    return 0;
}

static int own_stage(struct vl_ledger *L, uint32_t client, uint32_t stage,
                     struct vl_stage **out)
{
    struct vl_stage *s = stage_get(L, stage);
    if (!s || s->owner != client)
        return fail(L, -ENOENT, "stage %u is not yours", stage);
    if (!s->configured)
        return fail(L, -EPERM, "stage %u is ad-hoc: KV budgets and loans need "
                    "a configured stage", stage);
    *out = s;
    return 0;
}

/* ---- KV budgets and loans ---------------------------------------------- */

/* Moves the highest loaned chunk of the stage's expert region into slot of
 * region dst (same client: the client remaps the handle it holds). */
static void move_last_loan(struct vl_ledger *L, struct vl_stage *s,
                           struct vl_region *dst, uint32_t slot,
                           struct vl_fxlist *fx)
{
    struct vl_region *ex = vl_region_find(L, s->expert_region);
    uint32_t k = lane_last_in(L, ex, 0, VL_LOANED);
    struct vl_device *d = NULL;
    uint32_t idx = 0;
    chunk_get(L, ex->slot_chunk[k], &d, &idx);
    place(L, d, idx, dst, slot, VL_GRANTED);
    fx_push(fx, (struct vl_fx){.kind = VL_FX_MOVE, .client = dst->client,
                               .chunk = vl_chunk_id(dev_index(L, d), idx),
                               .region = dst->id, .slot = slot});
}

static uint32_t stage_loaned_now(const struct vl_stage *s)
{
    return s->loan_chunks - s->recalling;
}

int vl_kv_reserve(struct vl_ledger *L, uint32_t client, uint32_t stage,
                  uint64_t prompt, uint64_t output, uint32_t *recalled_out,
                  struct vl_fxlist *fx)
{
    struct vl_stage *s = NULL;
    int e = own_stage(L, client, stage, &s);
    if (e < 0)
        return e;
    if (prompt > UINT32_MAX || output > UINT32_MAX)
        return fail(L, -E2BIG, "token counts above 2^32");
    struct vl_device *d = dev_get(L, s->cfg.device);
    struct vl_region *kv = vl_region_find(L, s->kv_region);
    uint64_t cb = d->cfg.chunk_bytes;
    uint64_t want = prompt + output;
    if (want > s->cfg.native_context)
        return fail(L, -E2BIG, "stage %u: %llu tokens exceed the native "
                    "context of %llu", stage, (unsigned long long)want,
                    (unsigned long long)s->cfg.native_context);
    uint64_t target = vl_kv_target_tokens(&s->cfg, want);

    /* The budget is the first t slots of each lane: every empty one among
     * them is needed. One still being unmapped after a trim can't count as
     * mapped, nor be refilled before its holder gives it back. */
    uint32_t per_lane[VL_MAX_LANES], need = 0, unmapping = 0;
    uint64_t needed_bytes = 0;
    for (uint32_t l = 0; l < s->cfg.lanes; l++) {
        uint32_t t = vl_lane_chunks(&s->cfg, l, target, cb);
        per_lane[l] = 0;
        for (uint32_t i = 0; i < t; i++) {
            uint64_t id = kv->slot_chunk[(size_t)l * kv->stride_slots + i];
            if (id == VL_CHUNK_NONE)
                per_lane[l]++;
            else if (chunk_get(L, id, NULL, NULL)->state == VL_RECALLING)
                unmapping++;
        }
        need += per_lane[l];
        needed_bytes += want * s->cfg.lane_bytes_per_token[l];
    }
    if (unmapping)
        return fail(L, -EAGAIN, "stage %u: %u KV chunks inside the request's "
                    "budget are still being unmapped after a trim; retry "
                    "once they are released", stage, unmapping);

    /* Sources, in order: free chunks of the stage's own window, its own loans
     * (moved), then pool loans of other stages on this device (recalled). */
    uint32_t from_free = window_free(s);
    uint32_t avail = free_for_window(L, d, s);
    if (from_free > avail)
        from_free = avail;
    if (from_free > need)
        from_free = need;
    uint32_t own = stage_loaned_now(s);
    uint32_t from_own = need - from_free < own ? need - from_free : own;
    uint32_t short_by = need - from_free - from_own;
    /* Free memory no promise needs also serves (e.g. while the stage's own
     * loans are being recalled). */
    if (short_by) {
        uint32_t extra = dev_unpromised(L, d);
        uint32_t left = dev_free(d) - from_free;
        if (extra > left)
            extra = left;
        uint32_t use = extra < short_by ? extra : short_by;
        from_free += use;
        short_by -= use;
    }

    if (short_by) {
        /* Ask for pool loans back; chunks already on their way count. */
        uint32_t pending = d->count[VL_RECALLING];
        uint32_t ask = short_by > pending ? short_by - pending : 0;
        if (fx_reserve(fx, ask + VL_MAX_STAGES) < 0)
            return fail(L, -ENOMEM, "out of memory");
        for (uint32_t i = 0; i < VL_MAX_STAGES && ask; i++) {
            struct vl_stage *o = &L->stage[i];
            if (!o->used || o == s || o->cfg.device != s->cfg.device ||
                !o->expert_region)
                continue;
            uint32_t excess = pool_loans(o);
            excess = excess > o->recalling ? excess - o->recalling : 0;
            struct vl_region *ex = vl_region_find(L, o->expert_region);
            bool changed = false;
            while (excess && ask) {
                uint32_t k = lane_last_in(L, ex, 0, VL_LOANED);
                if (k == VL_NONE)
                    break;
                struct vl_device *cd = NULL;
                uint32_t idx = 0;
                struct vl_chunk *c = chunk_get(L, ex->slot_chunk[k], &cd, &idx);
                set_state(cd, c, VL_RECALLING);
                o->recalling++;
                o->recalls_total++;
                fx_push(fx, (struct vl_fx){.kind = VL_FX_UNMAP,
                                           .client = c->holder,
                                           .chunk = ex->slot_chunk[k],
                                           .region = ex->id, .slot = k,
                                           .stage = i});
                excess--;
                ask--;
                changed = true;
            }
            if (changed)
                budget_changed(L, o, fx);
        }
        return fail(L, -EAGAIN, "stage %u: %u chunks must come back from "
                    "other clients' recalls or quarantine first", stage,
                    short_by);
    }

    if (fx_reserve(fx, need + 1) < 0)
        return fail(L, -ENOMEM, "out of memory");
    /* Free chunks first, then moves, lane by lane. */
    uint32_t take_free_left = from_free, moved = 0;
    struct vl_client *cl = vl_client_find(L, client);
    for (uint32_t l = 0; l < s->cfg.lanes; l++)
        for (uint32_t n = 0; n < per_lane[l]; n++) {
            uint32_t slot = lane_first_empty(kv, l);
            if (take_free_left) {
                uint32_t idx = take_free(d);
                place(L, d, idx, kv, slot, VL_GRANTED);
                if (cl)
                    cl->chunks++;
                fx_push(fx, (struct vl_fx){.kind = VL_FX_MAP, .client = client,
                                           .chunk = vl_chunk_id(dev_index(L, d), idx),
                                           .region = kv->id, .slot = slot,
                                           .stage = stage});
                take_free_left--;
            } else {
                move_last_loan(L, s, kv, slot, fx);
                moved++;
            }
        }
    if (moved) {
        s->recalls_total += moved;
        budget_changed(L, s, fx);
    }
    s->grants_total += need;
    s->kv_needed_bytes = needed_bytes;
    if (target > s->kv_peak_tokens)
        s->kv_peak_tokens = target;
    if (recalled_out)
        *recalled_out = moved;
    return 0;
}

/* Loans the stage may still take from its own window. */
static uint32_t window_lendable(const struct vl_stage *s)
{
    if (!s->cfg.lend)
        return 0;
    uint32_t used = s->kv_chunks + s->loan_chunks + s->headroom_chunks;
    return used < s->window_chunks ? s->window_chunks - used : 0;
}

static uint32_t expert_room(struct vl_ledger *L, struct vl_stage *s)
{
    struct vl_region *ex = vl_region_find(L, s->expert_region);
    return ex->lane_slots[0] - lane_used(ex, 0);
}

int vl_kv_trim(struct vl_ledger *L, uint32_t client, uint32_t stage,
               uint64_t tokens, struct vl_fxlist *fx)
{
    struct vl_stage *s = NULL;
    int e = own_stage(L, client, stage, &s);
    if (e < 0)
        return e;
    s->kv_needed_bytes = 0;
    if (s->keep_window || s->no_loan)
        return 0; /* the window stays mapped (rules 7 and 8) */
    struct vl_device *d = dev_get(L, s->cfg.device);
    struct vl_region *kv = vl_region_find(L, s->kv_region);
    struct vl_region *ex = vl_region_find(L, s->expert_region);
    uint64_t target = vl_kv_target_tokens(&s->cfg, tokens);
    /* The surplus: granted chunks beyond the target's prefix. Chunks already
     * being unmapped after an earlier trim are on their way out. */
    uint32_t surplus[VL_MAX_LANES], total = 0;
    for (uint32_t l = 0; l < s->cfg.lanes; l++) {
        uint32_t t = vl_lane_chunks(&s->cfg, l, target, d->cfg.chunk_bytes);
        surplus[l] = 0;
        for (uint32_t i = t; i < kv->lane_slots[l]; i++) {
            uint64_t id = kv->slot_chunk[(size_t)l * kv->stride_slots + i];
            if (id != VL_CHUNK_NONE &&
                chunk_get(L, id, NULL, NULL)->state == VL_GRANTED)
                surplus[l]++;
        }
        total += surplus[l];
    }
    if (!total)
        return 0;
    if (fx_reserve(fx, total + 1) < 0)
        return fail(L, -ENOMEM, "out of memory");
    struct vl_client *cl = vl_client_find(L, client);
    /* Lending is judged after the surplus leaves KV. */
    uint32_t lend = 0;
    if (s->cfg.lend && !(cl && cl->delinquent)) {
        uint32_t used = (s->kv_chunks - total) + s->loan_chunks +
                        s->headroom_chunks;
        lend = used < s->window_chunks ? s->window_chunks - used : 0;
        uint32_t room = expert_room(L, s);
        if (lend > room)
            lend = room;
        if (lend > total)
            lend = total;
    }
    uint32_t lent = 0;
    for (uint32_t l = s->cfg.lanes; l-- > 0;)
        for (uint32_t n = 0; n < surplus[l]; n++) {
            uint32_t k = lane_last_in(L, kv, l, VL_GRANTED);
            struct vl_device *cd = NULL;
            uint32_t idx = 0;
            struct vl_chunk *c = chunk_get(L, kv->slot_chunk[k], &cd, &idx);
            if (lent < lend) {
                uint32_t slot = lane_first_empty(ex, 0);
                place(L, cd, idx, ex, slot, VL_LOANED);
                fx_push(fx, (struct vl_fx){.kind = VL_FX_MOVE, .client = client,
                                           .chunk = vl_chunk_id(dev_index(L, cd), idx),
                                           .region = ex->id, .slot = slot,
                                           .stage = stage});
                lent++;
            } else {
                /* Released: stays in its slot, recalling, until the client
                 * answers with chunk_release. */
                set_state(cd, c, VL_RECALLING);
                fx_push(fx, (struct vl_fx){.kind = VL_FX_UNMAP, .client = client,
                                           .chunk = kv->slot_chunk[k],
                                           .region = kv->id, .slot = k,
                                           .stage = stage});
            }
        }
    if (lent)
        budget_changed(L, s, fx);
    return 0;
}

int vl_expert_request(struct vl_ledger *L, uint32_t client, uint32_t stage,
                      uint64_t max_bytes, struct vl_fxlist *fx)
{
    struct vl_stage *s = NULL;
    int e = own_stage(L, client, stage, &s);
    if (e < 0)
        return e;
    struct vl_client *cl = vl_client_find(L, client);
    if (cl && cl->delinquent)
        return fail(L, -EPERM, "client %u missed a recall deadline: no new "
                    "loans", client);
    struct vl_device *d = dev_get(L, s->cfg.device);
    uint64_t cb = d->cfg.chunk_bytes;
    uint32_t n = window_lendable(s);
    uint32_t avail = free_for_window(L, d, s);
    if (n > avail)
        n = avail;
    if (d->cfg.lend_unreserved) {
        /* Pool loans. The stage's own free window is claimed (by it), so the
         * two parts don't overlap. */
        n += dev_unclaimed(L, d);
        if (n > dev_free(d))
            n = dev_free(d);
    }
    if (max_bytes && n > max_bytes / cb)
        n = (uint32_t)(max_bytes / cb);
    uint32_t room = expert_room(L, s);
    if (n > room)
        n = room;
    if (!n)
        return 0;
    if (fx_reserve(fx, n + 1) < 0)
        return fail(L, -ENOMEM, "out of memory");
    struct vl_region *ex = vl_region_find(L, s->expert_region);
    uint32_t per_lane[1] = {n};
    grant_lanes(L, ex, per_lane, VL_LOANED, fx);
    s->grants_total += n;
    budget_changed(L, s, fx);
    return 0;
}

int vl_expert_claim(struct vl_ledger *L, uint32_t client, uint32_t stage,
                    uint32_t layer, const uint32_t *slots, size_t n)
{
    struct vl_stage *s = NULL;
    int e = own_stage(L, client, stage, &s);
    if (e < 0)
        return e;
    if (layer < s->cfg.first_layer || layer > s->cfg.last_layer)
        return fail(L, -EPERM, "layer %u is outside stage %u's layers %u-%u",
                    layer, stage, s->cfg.first_layer, s->cfg.last_layer);
    uint32_t backed = vl_expert_slots_backed(L, stage);
    for (size_t i = 0; i < n; i++) {
        if (slots[i] >= backed)
            return fail(L, -EINVAL, "slot %u is not backed (%u slots are)",
                        slots[i], backed);
        uint16_t o = s->slot_layer[slots[i]];
        if (o != SLOT_LAYER_NONE && o != layer)
            return fail(L, -EBUSY, "slot %u belongs to layer %u", slots[i], o);
    }
    for (size_t i = 0; i < n; i++)
        s->slot_layer[slots[i]] = (uint16_t)layer;
    return 0;
}

void vl_recall_missed(struct vl_ledger *L, uint32_t client)
{
    struct vl_client *cl = vl_client_find(L, client);
    if (cl) {
        cl->delinquent = true;
        cl->missed_recalls++;
    }
}

/* ---- restart (rule 13) -------------------------------------------------- */

int vl_restore(struct vl_ledger *L, const uint32_t *clients, size_t nclients,
               const struct vl_restore_chunk *chunks, size_t nchunks,
               const struct vl_va_hold *va, size_t nva,
               const uint32_t *adhoc_stage_holder)
{
    if (L->nclient || L->nregion || L->nva_hold)
        return fail(L, -EBUSY, "restore into a ledger already in use");
    for (size_t i = 0; i < nclients; i++) {
        int e = vl_client_add(L, clients[i]);
        if (e < 0)
            return e;
        vl_client_find(L, clients[i])->gone = true;
    }
    for (size_t i = 0; i < nchunks; i++) {
        struct vl_device *d = NULL;
        uint32_t idx = 0;
        struct vl_chunk *c = chunk_get(L, chunks[i].chunk, &d, &idx);
        struct vl_client *cl = vl_client_find(L, chunks[i].client);
        if (!c || !cl)
            return fail(L, -EINVAL, "chunk %llu of client %u: no such %s",
                        (unsigned long long)chunks[i].chunk, chunks[i].client,
                        c ? "client" : "chunk");
        if (c->state != VL_FREE)
            return fail(L, -EINVAL, "chunk %llu is held twice",
                        (unsigned long long)chunks[i].chunk);
        set_state(d, c, VL_QUARANTINED);
        c->holder = cl->id;
        cl->chunks++;
        /* It stands for a configured stage's promise only where that stage
         * still is, on this chunk's device (the configuration may have
         * changed between the two daemons). */
        uint16_t st = chunks[i].stage;
        if (st < VL_MAX_STAGES && L->stage[st].configured &&
            L->stage[st].cfg.device == d->cfg.id) {
            qstage_set(L, c, st, chunks[i].cat);
        }
        note_chunk(L, d, idx, NULL);
    }
    /* The free stacks again, low indexes on top as at start. */
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        d->nfree = 0;
        for (uint32_t k = d->nchunks; k-- > 0;)
            if (d->chunks[k].state == VL_FREE)
                d->free_stack[d->nfree++] = k;
        if (d->withheld > d->nfree)
            d->withheld = d->nfree;
    }
    for (size_t i = 0; i < nva; i++) {
        struct vl_va_hold h = va[i];
        if (!vl_client_find(L, h.client))
            return fail(L, -EINVAL, "address range of unknown client %u",
                        h.client);
        int e = va_take_exact(L, h.base, h.size);
        if (e < 0)
            return fail(L, -EINVAL, "address range %#llx+%llu of client %u: "
                        "outside the window or held twice",
                        (unsigned long long)h.base,
                        (unsigned long long)h.size, h.client);
        h.tag = note_va_take(L, h.region, h.client, h.base, h.size);
        if (hold_add(L, &h) < 0)
            return fail(L, -ENOMEM, "out of memory");
        if (h.region >= L->next_region_id && h.region < UINT32_MAX)
            L->next_region_id = h.region + 1;
    }
    for (uint32_t i = 0; adhoc_stage_holder && i < VL_MAX_STAGES; i++) {
        uint32_t who = adhoc_stage_holder[i];
        struct vl_stage *s = &L->stage[i];
        if (!who || !vl_client_find(L, who) || s->used)
            continue; /* a configured stage now: its id is not ad-hoc */
        s->used = true;
        s->cfg.id = i;
        s->held_by = who;
        note_stage(L, i, who);
    }
    return 0;
}

/* Which fixed reservation of configured stage s a declared region is: the
 * first of its kind and size not taken yet. */
static uint32_t fixed_match(const struct vl_stage *s, const struct vl_device *d,
                            const struct vl_resume_region *rr, uint32_t taken)
{
    for (uint32_t f = 0; f < s->cfg.nfixed; f++)
        if (!(taken & (1u << f)) && s->cfg.fixed[f].kind == rr->kind &&
            rr->lanes == 1 &&
            rr->lane_slots[0] == div_up(s->cfg.fixed[f].bytes,
                                        d->cfg.chunk_bytes))
            return f;
    return VL_NONE;
}

/* The gone clients the resuming process was: from, and others of the same
 * process (a resume that broke half-way leaves its chunks under two ids). */
static bool of_process(const struct vl_resume *rs, uint32_t client)
{
    if (client && client == rs->from)
        return true;
    for (size_t i = 0; client && i < rs->nalso; i++)
        if (rs->also[i] == client)
            return true;
    return false;
}

/* Declared stages by id (resume_judge fills the index first). */
static int32_t *rs_stage_at;

static struct vl_resume_stage *rs_stage(struct vl_resume *rs, uint32_t id)
{
    if (rs_stage_at)
        return id < VL_MAX_STAGES && rs_stage_at[id] >= 0
                   ? &rs->stages[rs_stage_at[id]]
                   : NULL;
    for (size_t i = 0; i < rs->nstages; i++)
        if (rs->stages[i].id == id)
            return &rs->stages[i];
    return NULL;
}

/* The hold of one of the process's gone clients on exactly this range. */
static struct vl_va_hold *held_range(struct vl_ledger *L,
                                     const struct vl_resume *rs, uint64_t base,
                                     uint64_t size)
{
    for (size_t i = 0; i < L->nva_hold; i++)
        if (of_process(rs, L->va_hold[i].client) && L->va_hold[i].base == base &&
            L->va_hold[i].size == size)
            return &L->va_hold[i];
    return NULL;
}

/* A region id is taken by a live region, or held for another process. */
static bool region_id_taken(struct vl_ledger *L, const struct vl_resume *rs,
                            uint32_t id)
{
    if (vl_region_find(L, id))
        return true;
    for (size_t i = 0; i < L->nva_hold; i++)
        if (L->va_hold[i].region == id && !of_process(rs, L->va_hold[i].client))
            return true;
    return false;
}

/* Working state of one resume: per declared region, the region made ready
 * before anything changes; declared regions by id. */
struct resume_work {
    struct vl_region **pre;
    struct vl_region **made; /* per declared region, once adopted */
    uint32_t *by_id; /* indexes of rs->regions, sorted by id */
    int32_t stage_at[VL_MAX_STAGES]; /* index in rs->stages, or -1 */
    uint8_t *seen[VL_MAX_DEVICES];
};

static struct vl_resume *sort_rs; /* qsort has no context argument */

static int by_region_id(const void *a, const void *b)
{
    uint32_t x = sort_rs->regions[*(const uint32_t *)a].id;
    uint32_t y = sort_rs->regions[*(const uint32_t *)b].id;
    return x < y ? -1 : x > y;
}

static int find_region(const struct vl_resume *rs, const struct resume_work *w,
                       uint32_t id)
{
    size_t lo = 0, hi = rs->nregions;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t x = rs->regions[w->by_id[mid]].id;
        if (x == id)
            return (int)w->by_id[mid];
        if (x < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static void work_free(struct vl_ledger *L, struct vl_resume *rs,
                      struct resume_work *w)
{
    for (size_t i = 0; w->pre && i < rs->nregions; i++)
        region_free(w->pre[i]);
    free(w->pre);
    free(w->made);
    free(w->by_id);
    for (uint32_t d = 0; d < L->ndev; d++)
        free(w->seen[d]);
    rs_stage_at = NULL;
}

/* A configured stage's chunk comes back as what it counted as, or across
 * the stage's KV and its loans: a kv_reserve (loan to KV) or a kv_trim (KV
 * to loan) that vramd committed but whose reply died with it leaves the
 * process mapping the chunk where it was before, and the mapping is where
 * its data is. That crossing changes none of the stage's promises: KV plus
 * loans stays the same, KV stays inside the window (the KV region holds no
 * more), and pool loans are what exceeds the window, so no recallable loan
 * becomes KV (a no-loan stage's window_free, its hard promise, is the
 * window less KV and loans: the same). Fixed chunks never move. */
static bool comes_back_as(const struct vl_chunk *c, int kind)
{
    int cat = cat_of_kind(&(struct vl_region){.kind = (uint8_t)kind});
    return c->qcat == cat ||
           ((c->qcat == VL_CAT_KV || c->qcat == VL_CAT_LOAN) &&
            (cat == VL_CAT_KV || cat == VL_CAT_LOAN));
}

/* Phase one: what of the declaration can be taken back (sets lost), and
 * everything the second phase will need allocated. Changes no state. */
static int resume_judge(struct vl_ledger *L, struct vl_resume *rs,
                        struct resume_work *w)
{
    for (size_t i = 0; i < rs->nstages; i++) {
        struct vl_resume_stage *st = &rs->stages[i];
        st->lost = 0;
        for (size_t j = 0; j < i; j++)
            if (rs->stages[j].id == st->id)
                return fail(L, -EINVAL, "stage %u declared twice", st->id);
        if (st->id >= VL_MAX_STAGES) {
            st->lost = -EINVAL;
            continue;
        }
        struct vl_stage *s = &L->stage[st->id];
        if (st->configured) {
            if (!s->used || !s->configured)
                st->lost = -ENOENT; /* no longer in the configuration */
            else if (s->owner)
                st->lost = -EEXIST;
        } else if (s->used && (s->configured || s->owner ||
                               !of_process(rs, s->held_by))) {
            st->lost = -EEXIST; /* its id went to someone else */
        } else if (!dev_get(L, st->device) || st->last_layer < st->first_layer ||
                   st->last_layer >= SLOT_LAYER_NONE) {
            st->lost = -EINVAL;
        }
    }
    /* A configured stage's quarantine must all be the process's. */
    uint32_t qmine[VL_MAX_STAGES] = {0};
    for (uint32_t di = 0; di < L->ndev; di++)
        for (uint32_t k = 0; k < L->dev[di].nchunks; k++) {
            struct vl_chunk *c = &L->dev[di].chunks[k];
            if (c->qstage != VL_QSTAGE_NONE && of_process(rs, c->holder))
                qmine[c->qstage]++;
        }
    for (size_t i = 0; i < rs->nstages; i++) {
        struct vl_resume_stage *st = &rs->stages[i];
        if (!st->lost && st->configured &&
            L->stage[st->id].quarantined != qmine[st->id])
            st->lost = -EBUSY;
    }

    for (uint32_t i = 0; i < VL_MAX_STAGES; i++)
        w->stage_at[i] = -1;
    for (size_t i = 0; i < rs->nstages; i++)
        if (rs->stages[i].id < VL_MAX_STAGES)
            w->stage_at[rs->stages[i].id] = (int32_t)i;
    rs_stage_at = w->stage_at;
    w->pre = calloc(rs->nregions + 1, sizeof(*w->pre));
    w->made = calloc(rs->nregions + 1, sizeof(*w->made));
    w->by_id = malloc((rs->nregions + 1) * sizeof(*w->by_id));
    if (!w->pre || !w->made || !w->by_id)
        return fail(L, -ENOMEM, "out of memory");
    for (size_t i = 0; i < rs->nregions; i++)
        w->by_id[i] = (uint32_t)i;
    sort_rs = rs;
    qsort(w->by_id, rs->nregions, sizeof(*w->by_id), by_region_id);
    for (size_t i = 1; i < rs->nregions; i++)
        if (rs->regions[w->by_id[i]].id == rs->regions[w->by_id[i - 1]].id)
            return fail(L, -EINVAL, "region %u declared twice",
                        rs->regions[w->by_id[i]].id);

    uint32_t fixed_taken[VL_MAX_STAGES] = {0};
    uint8_t have_kv[VL_MAX_STAGES] = {0}, have_ex[VL_MAX_STAGES] = {0};
    for (size_t i = 0; i < rs->nregions; i++) {
        struct vl_resume_region *rr = &rs->regions[i];
        rr->lost = 0;
        struct vl_resume_stage *st = rs_stage(rs, rr->stage);
        if (!st)
            return fail(L, -EINVAL, "region %u: stage %u is not declared",
                        rr->id, rr->stage);
        if (st->lost) {
            rr->lost = st->lost;
            continue;
        }
        struct vl_device *d = dev_get(L, st->configured
                                             ? L->stage[st->id].cfg.device
                                             : st->device);
        bool sane = rr->kind >= 0 && rr->kind < VL_NKINDS && rr->id &&
                    rr->id < UINT32_MAX && rr->lanes &&
                    rr->lanes <= VL_MAX_LANES;
        /* An ad-hoc lane is at most the device (as region_create says); a
         * configured stage's regions are checked against its configuration
         * below. */
        uint64_t most = st->configured ? UINT32_MAX
                                       : div_up(d->cfg.capacity_bytes,
                                                d->cfg.chunk_bytes);
        for (uint32_t l = 0; sane && l < rr->lanes; l++)
            sane = rr->lane_slots[l] && rr->lane_slots[l] <= most;
        struct geometry g;
        if (!sane) {
            rr->lost = -EINVAL;
        } else if (region_id_taken(L, rs, rr->id)) {
            rr->lost = -EEXIST;
        } else if (region_geometry(L, d, rr->lanes, rr->lane_slots, &g) < 0 ||
                   g.lane_stride != rr->lane_stride ||
                   g.va_bytes != rr->va_bytes || rr->base % g.unit) {
            rr->lost = -ESTALE; /* not what this vramd would make */
        } else if (!held_range(L, rs, rr->base, rr->va_bytes) &&
                   va_find(L, rr->base, rr->va_bytes) < 0) {
            rr->lost = -EADDRINUSE;
        }
        for (size_t j = 0; !rr->lost && j < i; j++) { /* two on one range */
            struct vl_resume_region *o = &rs->regions[j];
            if (!o->lost && rr->base < o->base + o->va_bytes &&
                o->base < rr->base + rr->va_bytes)
                rr->lost = -EADDRINUSE;
        }
        if (rr->lost || !st->configured)
            continue;
        /* A configured stage's regions are what its configuration makes. */
        struct vl_stage *s = &L->stage[st->id];
        bool ok = false;
        if (rr->kind == VL_KV) {
            ok = !have_kv[st->id]++ && rr->lanes == s->cfg.lanes &&
                 !memcmp(rr->lane_slots, s->lane_window,
                         rr->lanes * sizeof(uint32_t));
        } else if (rr->kind == VL_EXPERT) {
            uint32_t one = s->nslots ? (uint32_t)div_up((uint64_t)s->nslots *
                                                   s->cfg.expert_slot_bytes,
                                               d->cfg.chunk_bytes)
                                     : 1;
            ok = !have_ex[st->id]++ && rr->lanes == 1 &&
                 rr->lane_slots[0] == one;
        } else {
            uint32_t f = fixed_match(s, d, rr, fixed_taken[st->id]);
            ok = f != VL_NONE;
            if (ok)
                fixed_taken[st->id] |= 1u << f;
        }
        if (!ok)
            rr->lost = -ESTALE; /* the configuration changed */
    }
    /* A configured stage comes back whole or not at all. */
    for (size_t i = 0; i < rs->nstages; i++) {
        struct vl_resume_stage *st = &rs->stages[i];
        if (st->lost || !st->configured)
            continue;
        struct vl_stage *s = &L->stage[st->id];
        uint32_t all = s->cfg.nfixed >= 32 ? UINT32_MAX
                                           : (1u << s->cfg.nfixed) - 1;
        if (have_kv[st->id] != 1 || have_ex[st->id] != 1 ||
            fixed_taken[st->id] != all)
            st->lost = -ESTALE;
        for (size_t j = 0; !st->lost && j < rs->nregions; j++)
            if (rs->regions[j].stage == st->id && rs->regions[j].lost)
                st->lost = rs->regions[j].lost;
    }
    /* The regions that come back, made now (nothing may fail later). */
    for (size_t i = 0; i < rs->nregions; i++) {
        struct vl_resume_region *rr = &rs->regions[i];
        struct vl_resume_stage *st = rs_stage(rs, rr->stage);
        if (!rr->lost && st->lost)
            rr->lost = st->lost;
        if (rr->lost)
            continue;
        struct vl_device *d = dev_get(L, st->configured
                                             ? L->stage[st->id].cfg.device
                                             : st->device);
        struct vl_region *r = calloc(1, sizeof(*r));
        size_t slots = (size_t)rr->lanes * (rr->lane_stride / d->cfg.chunk_bytes);
        if (r)
            r->slot_chunk = malloc((slots ? slots : 1) * sizeof(uint64_t));
        if (!r || !r->slot_chunk) {
            free(r);
            return fail(L, -ENOMEM, "out of memory");
        }
        for (size_t k = 0; k < slots; k++)
            r->slot_chunk[k] = VL_CHUNK_NONE;
        r->stride_slots = (uint32_t)(rr->lane_stride / d->cfg.chunk_bytes);
        w->pre[i] = r;
    }

    /* Chunks: the process's, each once, in a slot of its region, and where
     * it counted before (a configured stage's chunk of one kind may not turn
     * into another's, or an ad-hoc region's). */
    for (uint32_t di = 0; di < L->ndev; di++)
        if (!(w->seen[di] = calloc(L->dev[di].nchunks + 1, 1)))
            return fail(L, -ENOMEM, "out of memory");
    rs->lost_chunks = 0;
    for (size_t i = 0; i < rs->nchunks; i++) {
        struct vl_resume_chunk *rc = &rs->chunks[i];
        struct vl_device *d = NULL;
        uint32_t idx = 0;
        struct vl_chunk *c = chunk_get(L, rc->chunk, &d, &idx);
        int ri = find_region(rs, w, rc->region);
        if (ri < 0)
            return fail(L, -EINVAL, "chunk %llu: region %u is not declared",
                        (unsigned long long)rc->chunk, rc->region);
        struct vl_resume_region *rr = &rs->regions[ri];
        struct vl_resume_stage *st = rs_stage(rs, rr->stage);
        rc->lost = 0;
        if (!c || c->state != VL_QUARANTINED || !of_process(rs, c->holder))
            rc->lost = -ENOENT;
        else if (w->seen[dev_index(L, d)][idx] & 2)
            rc->lost = -EEXIST; /* declared twice */
        else if (rr->lost)
            rc->lost = rr->lost;
        else if (d->cfg.id != (st->configured ? L->stage[st->id].cfg.device
                                              : st->device))
            rc->lost = -EXDEV;
        else if (st->configured ? c->qstage != st->id ||
                                      !comes_back_as(c, rr->kind)
                                : c->qstage != VL_QSTAGE_NONE)
            rc->lost = -EINVAL; /* it was not that stage's, or not that kind */
        else {
            struct vl_region *r = w->pre[ri];
            uint32_t stride = r->stride_slots;
            if (rc->slot >= rr->lanes * stride ||
                rc->slot % stride >= rr->lane_slots[rc->slot / stride])
                rc->lost = -EINVAL;
            else if (r->slot_chunk[rc->slot] != VL_CHUNK_NONE)
                rc->lost = -EEXIST; /* two chunks in one slot */
            else
                r->slot_chunk[rc->slot] = rc->chunk; /* cleared before use */
        }
        /* 1: the process says it has it (not freed); 2: it goes back. */
        if (c && of_process(rs, c->holder) && c->state == VL_QUARANTINED)
            w->seen[dev_index(L, d)][idx] |= rc->lost ? 1 : 3;
        rs->lost_chunks += rc->lost != 0;
    }
    for (size_t i = 0; i < rs->nregions; i++)
        if (w->pre[i]) {
            size_t n = (size_t)rs->regions[i].lanes * w->pre[i]->stride_slots;
            for (size_t k = 0; k < n; k++)
                w->pre[i]->slot_chunk[k] = VL_CHUNK_NONE;
        }
    /* A configured stage comes back whole: if a chunk of it the process
     * declared cannot be placed, it would stay quarantined outside the
     * stage while the stage's promise counted on it. Then the stage stays
     * away, all of it quarantined, until the process exits. */
    bool partial[VL_MAX_STAGES] = {false};
    for (uint32_t di = 0; di < L->ndev; di++)
        for (uint32_t k = 0; k < L->dev[di].nchunks; k++) {
            struct vl_chunk *c = &L->dev[di].chunks[k];
            /* Declared but not placed; or not declared and not from's (so
             * not freed either: another gone client of the process). */
            bool kept = w->seen[di][k] == 1 ||
                        (w->seen[di][k] == 0 && c->holder != rs->from &&
                         of_process(rs, c->holder));
            if (kept && c->qstage != VL_QSTAGE_NONE &&
                rs_stage(rs, c->qstage) && !rs_stage(rs, c->qstage)->lost)
                partial[c->qstage] = true;
        }
    for (size_t i = 0; i < rs->nstages; i++)
        if (rs->stages[i].id < VL_MAX_STAGES && partial[rs->stages[i].id])
            rs->stages[i].lost = -EBUSY;
    for (size_t i = 0; i < rs->nregions; i++) {
        struct vl_resume_region *rr = &rs->regions[i];
        if (rr->lost || !partial[rr->stage])
            continue;
        rr->lost = -EBUSY;
        region_free(w->pre[i]);
        w->pre[i] = NULL;
    }
    for (size_t i = 0; i < rs->nchunks; i++) {
        struct vl_resume_chunk *rc = &rs->chunks[i];
        int ri = find_region(rs, w, rc->region);
        if (rc->lost || !rs->regions[ri].lost)
            continue;
        rc->lost = rs->regions[ri].lost;
        rs->lost_chunks++;
        w->seen[rc->chunk >> 32][(uint32_t)rc->chunk] = 1; /* kept, not placed */
    }
    /* Room in the ledger's arrays, so the second phase cannot fail. */
    size_t nreg = 0;
    for (size_t i = 0; i < rs->nregions; i++)
        nreg += w->pre[i] != NULL;
    if (L->nregion + nreg > L->region_cap) {
        size_t cap = L->nregion + nreg + 16;
        struct vl_region **v = realloc(L->region, cap * sizeof(*v));
        if (!v)
            return fail(L, -ENOMEM, "out of memory");
        L->region = v;
        L->region_cap = cap;
    }
    struct vl_va_range *v = realloc(L->va_free, (L->nva_free + nreg + 1) *
                                                    sizeof(*v));
    if (!v)
        return fail(L, -ENOMEM, "out of memory");
    L->va_free = v;
    return 0;
}

/* A declared region comes back: at its address (its hold's record moves to
 * the new client in place, so a crash never leaves the range unrecorded),
 * with its id. */
static struct vl_region *region_adopt(struct vl_ledger *L, uint32_t client,
                                      struct vl_resume *rs,
                                      const struct vl_resume_region *rr,
                                      struct vl_region *r)
{
    struct vl_stage *s = &L->stage[rr->stage];
    struct vl_va_hold *h = held_range(L, rs, rr->base, rr->va_bytes);
    if (h) {
        r->tag = h->tag;
        if (L->obs.va_move)
            L->obs.va_move(L->obs.ctx, h->tag, rr->id, client);
        *h = L->va_hold[--L->nva_hold];
    } else {
        va_take_exact(L, rr->base, rr->va_bytes); /* judged free, room made */
        r->tag = note_va_take(L, rr->id, client, rr->base, rr->va_bytes);
    }
    r->id = rr->id;
    if (r->id >= L->next_region_id && r->id < UINT32_MAX)
        L->next_region_id = r->id + 1;
    r->client = client;
    r->stage = rr->stage;
    r->kind = (uint8_t)rr->kind;
    r->device = s->cfg.device;
    r->base = rr->base;
    r->lane_stride = rr->lane_stride;
    r->va_bytes = rr->va_bytes;
    r->lanes = rr->lanes;
    memcpy(r->lane_slots, rr->lane_slots, rr->lanes * sizeof(uint32_t));
    r->fixed_index = VL_NONE;
    L->region[L->nregion++] = r;
    return r;
}

int vl_client_resume(struct vl_ledger *L, uint32_t client, struct vl_resume *rs,
                     struct vl_fxlist *fx)
{
    struct vl_client *cl = vl_client_find(L, client);
    struct vl_client *from = vl_client_find(L, rs->from);
    if (!cl || cl->gone)
        return fail(L, -ENOENT, "no connected client %u", client);
    if (!from || !from->gone || from->resumed)
        return fail(L, -ENOENT, "client %u is not a gone client that can be "
                    "resumed", rs->from);
    for (size_t i = 0; i < rs->nalso; i++) {
        struct vl_client *o = vl_client_find(L, rs->also[i]);
        if (!o || !o->gone || rs->also[i] == client)
            return fail(L, -EINVAL, "client %u is not a gone client",
                        rs->also[i]);
    }
    if (rs->nstages > VL_MAX_STAGES || rs->nregions > 65536)
        return fail(L, -EINVAL, "%zu stages and %zu regions declared: at most "
                    "%d and 65536", rs->nstages, rs->nregions, VL_MAX_STAGES);
    if (cl->chunks)
        return fail(L, -EBUSY, "resume before anything else: this client "
                    "already holds %u chunks", cl->chunks);
    for (uint32_t i = 0; i < VL_MAX_STAGES; i++)
        if (L->stage[i].used && L->stage[i].owner == client)
            return fail(L, -EBUSY, "resume before anything else: this client "
                        "already owns stage %u", i);
    struct resume_work w = {0};
    int e = resume_judge(L, rs, &w);
    if (e == 0 && fx_reserve(fx, from->chunks) < 0)
        e = fail(L, -ENOMEM, "out of memory");
    if (e < 0) {
        work_free(L, rs, &w);
        return e;
    }

    /* Chunks of from it does not declare: its process does not have them
     * (those of its other gone clients stay theirs). */
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        for (uint32_t k = 0; k < d->nchunks; k++)
            if (d->chunks[k].holder == from->id &&
                d->chunks[k].state == VL_QUARANTINED && !(w.seen[di][k] & 1))
                to_free(L, d, k, fx);
    }
    /* Stages. */
    for (size_t i = 0; i < rs->nstages; i++) {
        struct vl_resume_stage *st = &rs->stages[i];
        if (st->lost)
            continue;
        struct vl_stage *s = &L->stage[st->id];
        if (st->configured) {
            s->owner = client;
            s->keep_window = st->keep_window;
            s->kv_peak_tokens = 0;
            s->kv_needed_bytes = 0;
        } else {
            free(s->slot_layer);
            memset(s, 0, sizeof(*s));
            s->used = true;
            s->cfg.id = st->id;
            s->cfg.device = st->device;
            s->cfg.first_layer = st->first_layer;
            s->cfg.last_layer = st->last_layer;
            s->owner = client;
            note_stage(L, st->id, client);
        }
    }
    /* Regions. */
    for (size_t i = 0; i < rs->nregions; i++) {
        struct vl_resume_region *rr = &rs->regions[i];
        if (rr->lost || !w.pre[i])
            continue;
        struct vl_region *r = region_adopt(L, client, rs, rr, w.pre[i]);
        w.pre[i] = NULL; /* the ledger's now */
        w.made[i] = r;
        struct vl_stage *s = &L->stage[rr->stage];
        if (!s->configured)
            continue;
        if (rr->kind == VL_KV) {
            s->kv_region = r->id;
        } else if (rr->kind == VL_EXPERT) {
            s->expert_region = r->id;
        } else {
            uint32_t taken = 0;
            for (uint32_t f = 0; f < s->cfg.nfixed; f++)
                if (s->fixed_region[f])
                    taken |= 1u << f;
            uint32_t f = fixed_match(s, dev_get(L, s->cfg.device), rr, taken);
            if (f != VL_NONE) { /* judged: always one */
                r->fixed_index = f;
                s->fixed_region[f] = r->id;
            }
        }
    }
    /* Chunks, in their slots. */
    for (size_t i = 0; i < rs->nchunks; i++) {
        struct vl_resume_chunk *rc = &rs->chunks[i];
        if (rc->lost)
            continue;
        struct vl_device *d = NULL;
        uint32_t idx = 0;
        struct vl_chunk *c = chunk_get(L, rc->chunk, &d, &idx);
        struct vl_region *r = w.made[find_region(rs, &w, rc->region)];
        struct vl_client *h = vl_client_find(L, c->holder);
        qstage_clear(L, c);
        if (h && h->chunks)
            h->chunks--;
        struct vl_stage *s = stage_get(L, r->stage);
        place(L, d, idx, r, rc->slot,
              s->configured && r->kind == VL_EXPERT ? VL_LOANED : VL_GRANTED);
        cl->chunks++;
    }
    /* Chunks left with the process's gone clients no longer stand for a
     * stage that is owned again. */
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        for (uint32_t k = 0; k < d->nchunks; k++) {
            struct vl_chunk *c = &d->chunks[k];
            if (c->qstage == VL_QSTAGE_NONE || !of_process(rs, c->holder) ||
                !L->stage[c->qstage].owner)
                continue;
            qstage_clear(L, c);
            note_chunk(L, d, k, NULL);
        }
    }
    /* Expert slot claims, where their slots are backed again. */
    for (size_t i = 0; i < rs->nclaims; i++) {
        const struct vl_resume_claim *k = &rs->claims[i];
        struct vl_stage *s = stage_get(L, k->stage);
        if (!s || s->owner != client || !s->configured ||
            k->layer < s->cfg.first_layer || k->layer > s->cfg.last_layer ||
            k->slot >= vl_expert_slots_backed(L, k->stage))
            continue;
        s->slot_layer[k->slot] = (uint16_t)k->layer;
    }
    for (size_t i = 0; i < rs->nstages; i++)
        if (!rs->stages[i].lost && rs->stages[i].configured)
            L->stage[rs->stages[i].id].residency_version++;
    from->resumed = true;
    work_free(L, rs, &w);
    return 0;
}

/* ---- invariants -------------------------------------------------------- */

static int check_chunks(struct vl_ledger *L, uint32_t *held,
                        uint32_t *qstage)
{
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        uint32_t cnt[VL_NSTATES] = {0}, cat[VL_CAT_LOAN + 1] = {0};
        for (uint32_t k = 0; k < d->nchunks; k++) {
            struct vl_chunk *c = &d->chunks[k];
            if (c->state >= VL_NSTATES || c->cat > VL_CAT_LOAN)
                return fail(L, -EFAULT, "device %u chunk %u: bad state or "
                            "category", d->cfg.id, k);
            cnt[c->state]++;
            cat[c->cat]++;
            bool is_held = c->state != VL_FREE;
            if (is_held != (c->holder != 0))
                return fail(L, -EFAULT, "device %u chunk %u: %s with holder %u",
                            d->cfg.id, k, vl_state_name(c->state), c->holder);
            if (is_held) {
                size_t ci = 0;
                while (ci < L->nclient && L->client[ci].id != c->holder)
                    ci++;
                if (ci == L->nclient)
                    return fail(L, -EFAULT, "device %u chunk %u: held by "
                                "unknown client %u", d->cfg.id, k, c->holder);
                held[ci]++;
                if (L->client[ci].gone && c->state != VL_QUARANTINED)
                    return fail(L, -EFAULT, "device %u chunk %u: %s, held by "
                                "gone client %u", d->cfg.id, k,
                                vl_state_name(c->state), c->holder);
            }
            if ((c->state == VL_FREE || c->state == VL_QUARANTINED) &&
                (c->region || c->cat != VL_CAT_NONE))
                return fail(L, -EFAULT, "device %u chunk %u: %s but mapped",
                            d->cfg.id, k, vl_state_name(c->state));
            if (c->state != VL_FREE && c->state != VL_QUARANTINED &&
                (!c->region || c->cat == VL_CAT_NONE))
                return fail(L, -EFAULT, "device %u chunk %u: %s but in no "
                            "region", d->cfg.id, k, vl_state_name(c->state));
            if (c->qstage != VL_QSTAGE_NONE) {
                if (c->state != VL_QUARANTINED || c->qstage >= VL_MAX_STAGES ||
                    !L->stage[c->qstage].configured)
                    return fail(L, -EFAULT, "device %u chunk %u: %s, counted "
                                "as quarantine of stage %u", d->cfg.id, k,
                                vl_state_name(c->state), c->qstage);
                qstage[c->qstage]++;
                qstage[VL_MAX_STAGES + c->qstage] += c->qcat == VL_CAT_FIXED;
            } else if (c->qcat) {
                return fail(L, -EFAULT, "device %u chunk %u: a quarantine "
                            "category without a stage", d->cfg.id, k);
            }
            if (c->region) {
                struct vl_region *r = vl_region_find(L, c->region);
                if (!r || c->slot >= r->lanes * r->stride_slots ||
                    r->slot_chunk[c->slot] != vl_chunk_id(di, k))
                    return fail(L, -EFAULT, "device %u chunk %u: region %u slot "
                                "%u does not point back", d->cfg.id, k,
                                c->region, c->slot);
                if (r->client != c->holder)
                    return fail(L, -EFAULT, "device %u chunk %u: two holders "
                                "(%u, region of %u)", d->cfg.id, k, c->holder,
                                r->client);
                if (r->device != d->cfg.id)
                    return fail(L, -EFAULT, "chunk %u of device %u in a region "
                                "of device %u", k, d->cfg.id, r->device);
                if (c->cat != cat_of_kind(r))
                    return fail(L, -EFAULT, "device %u chunk %u: wrong category",
                                d->cfg.id, k);
                struct vl_stage *rs = stage_get(L, r->stage);
                bool loan = rs && rs->configured && r->kind == VL_EXPERT;
                if (c->state == VL_LOANED && !loan)
                    return fail(L, -EFAULT, "device %u chunk %u: loaned outside "
                                "a stage's expert region", d->cfg.id, k);
                if (c->state == VL_GRANTED && loan)
                    return fail(L, -EFAULT, "device %u chunk %u: granted in a "
                                "stage's expert region", d->cfg.id, k);
            }
        }
        for (int st = 0; st < VL_NSTATES; st++)
            if (cnt[st] != d->count[st])
                return fail(L, -EFAULT, "device %u: %u %s chunks counted as %u",
                            d->cfg.id, cnt[st], vl_state_name(st), d->count[st]);
        if (cat[VL_CAT_FIXED] != d->fixed || cat[VL_CAT_KV] != d->kv ||
            cat[VL_CAT_LOAN] != d->loaned)
            return fail(L, -EFAULT, "device %u: category counters drifted",
                        d->cfg.id);
        if (d->withheld > cnt[VL_FREE])
            return fail(L, -EFAULT, "device %u: %u chunks withheld, %u free",
                        d->cfg.id, d->withheld, cnt[VL_FREE]);
        if ((uint64_t)d->fixed + d->kv + d->loaned + cnt[VL_FREE] - d->withheld +
                cnt[VL_QUARANTINED] != vl_capacity(d))
            return fail(L, -EFAULT, "device %u: fixed %u + kv %u + loaned %u + "
                        "free %u + quarantined %u != capacity %u", d->cfg.id,
                        d->fixed, d->kv, d->loaned, cnt[VL_FREE] - d->withheld,
                        cnt[VL_QUARANTINED], vl_capacity(d));
        if (d->nfree != cnt[VL_FREE])
            return fail(L, -EFAULT, "device %u: free stack holds %u, %u free",
                        d->cfg.id, d->nfree, cnt[VL_FREE]);
        for (uint32_t i = 0; i < d->nfree; i++)
            if (d->free_stack[i] >= d->nchunks ||
                d->chunks[d->free_stack[i]].state != VL_FREE)
                return fail(L, -EFAULT, "device %u: entry %u of the free stack "
                            "is not a free chunk", d->cfg.id, i);
        if (d->reserved > vl_capacity(d))
            return fail(L, -EFAULT, "device %u: reservations exceed capacity",
                        d->cfg.id);
    }
    return 0;
}

static int check_regions(struct vl_ledger *L)
{
    for (size_t i = 0; i < L->nregion; i++) {
        struct vl_region *r = L->region[i];
        uint32_t used = 0;
        struct vl_client *cl = vl_client_find(L, r->client);
        struct vl_stage *s = stage_get(L, r->stage);
        if (!cl || cl->gone || !s || s->owner != r->client)
            return fail(L, -EFAULT, "region %u: client %u or its stage %u is "
                        "gone", r->id, r->client, r->stage);
        for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++) {
            if (r->slot_chunk[k] == VL_CHUNK_NONE)
                continue;
            if (k % r->stride_slots >= r->lane_slots[k / r->stride_slots])
                return fail(L, -EFAULT, "region %u: slot %u beyond its lane",
                            r->id, k);
            struct vl_chunk *c = chunk_get(L, r->slot_chunk[k], NULL, NULL);
            if (!c || c->region != r->id || c->slot != k)
                return fail(L, -EFAULT, "region %u slot %u: chunk does not "
                            "point back", r->id, k);
            used++;
        }
        if (used != r->used)
            return fail(L, -EFAULT, "region %u: %u used, counted %u", r->id,
                        used, r->used);
        for (uint32_t l = 0; l < r->lanes; l++) {
            const uint64_t *lc = r->slot_chunk + (size_t)l * r->stride_slots;
            uint32_t n = 0, first_empty = r->lane_slots[l], hi = 0;
            for (uint32_t k = 0; k < r->stride_slots; k++) {
                if (lc[k] == VL_CHUNK_NONE) {
                    if (first_empty == r->lane_slots[l] && k < first_empty)
                        first_empty = k;
                    continue;
                }
                n++;
                hi = k + 1;
            }
            if (n != r->lane_count[l] || r->lane_lo[l] > first_empty ||
                r->lane_hi[l] != hi)
                return fail(L, -EFAULT, "region %u lane %u: hints drifted "
                            "(count %u/%u, lo %u > %u, hi %u/%u)", r->id, l,
                            n, r->lane_count[l], r->lane_lo[l], first_empty,
                            r->lane_hi[l], hi);
        }
        uint64_t a0 = r->base, a1 = r->base + r->va_bytes;
        if (a0 < L->va_base || a1 > L->va_base + L->va_size || a1 <= a0)
            return fail(L, -EFAULT, "region %u: outside the address window",
                        r->id);
        for (size_t j = i + 1; j < L->nregion; j++) {
            struct vl_region *o = L->region[j];
            uint64_t b0 = o->base, b1 = o->base + o->va_bytes;
            if (a0 < b1 && b0 < a1)
                return fail(L, -EFAULT, "regions %u and %u overlap", r->id,
                            o->id);
            if (r->id == o->id)
                return fail(L, -EFAULT, "two regions with id %u", r->id);
        }
    }
    return 0;
}

/* Address ranges held for gone clients' processes (rule 13). */
static int check_holds(struct vl_ledger *L)
{
    for (size_t i = 0; i < L->nva_hold; i++) {
        struct vl_va_hold *h = &L->va_hold[i];
        struct vl_client *cl = vl_client_find(L, h->client);
        if (!cl || !cl->gone)
            return fail(L, -EFAULT, "address range %#llx held for client %u, "
                        "which is not gone", (unsigned long long)h->base,
                        h->client);
        uint64_t a0 = h->base, a1 = h->base + h->size;
        if (a0 < L->va_base || a1 > L->va_base + L->va_size || a1 <= a0)
            return fail(L, -EFAULT, "held range %#llx: outside the address "
                        "window", (unsigned long long)a0);
        for (size_t j = 0; j < L->nregion; j++) {
            struct vl_region *o = L->region[j];
            if (a0 < o->base + o->va_bytes && o->base < a1)
                return fail(L, -EFAULT, "held range %#llx overlaps region %u",
                            (unsigned long long)a0, o->id);
        }
        for (size_t j = i + 1; j < L->nva_hold; j++) {
            struct vl_va_hold *o = &L->va_hold[j];
            if (a0 < o->base + o->size && o->base < a1)
                return fail(L, -EFAULT, "held ranges %#llx and %#llx overlap",
                            (unsigned long long)a0,
                            (unsigned long long)o->base);
        }
        for (size_t j = 0; j < L->nva_free; j++) {
            struct vl_va_range *f = &L->va_free[j];
            if (f->size && a0 < f->base + f->size && f->base < a1)
                return fail(L, -EFAULT, "held range %#llx is also free",
                            (unsigned long long)a0);
        }
    }
    for (uint32_t i = 0; i < VL_MAX_STAGES; i++) {
        struct vl_stage *s = &L->stage[i];
        if (!s->used || s->configured || s->owner)
            continue;
        struct vl_client *cl = vl_client_find(L, s->held_by);
        if (!cl || !cl->gone)
            return fail(L, -EFAULT, "ad-hoc stage %u has no owner and no gone "
                        "client holds it", i);
    }
    return 0;
}

static int check_stages(struct vl_ledger *L, const uint32_t *qstage)
{
    for (uint32_t i = 0; i < VL_MAX_STAGES; i++) {
        struct vl_stage *s = &L->stage[i];
        if (!s->used)
            continue;
        if (s->owner) {
            struct vl_client *cl = vl_client_find(L, s->owner);
            if (!cl || cl->gone)
                return fail(L, -EFAULT, "stage %u: owner %u is gone", i,
                            s->owner);
        }
        uint32_t kv = 0, loan = 0, fixed = 0, rec = 0;
        for (size_t j = 0; j < L->nregion; j++) {
            struct vl_region *r = L->region[j];
            if (r->stage != i)
                continue;
            uint32_t *p = r->kind == VL_KV ? &kv : r->kind == VL_EXPERT ? &loan : &fixed;
            *p += r->used;
            if (r->kind == VL_EXPERT)
                for (uint32_t k = 0; k < r->lanes * r->stride_slots; k++)
                    if (r->slot_chunk[k] != VL_CHUNK_NONE &&
                        chunk_get(L, r->slot_chunk[k], NULL, NULL)->state ==
                            VL_RECALLING)
                        rec++;
        }
        if (kv != s->kv_chunks || loan != s->loan_chunks ||
            fixed != s->fixed_chunks || rec != s->recalling)
            return fail(L, -EFAULT, "stage %u: counters drifted (kv %u/%u, "
                        "loans %u/%u, fixed %u/%u, recalling %u/%u)", i, kv,
                        s->kv_chunks, loan, s->loan_chunks, fixed,
                        s->fixed_chunks, rec, s->recalling);
        if (qstage[i] != s->quarantined ||
            qstage[VL_MAX_STAGES + i] != s->q_fixed)
            return fail(L, -EFAULT, "stage %u: %u quarantined chunks (%u "
                        "fixed), counted %u (%u)", i, qstage[i],
                        qstage[VL_MAX_STAGES + i], s->quarantined, s->q_fixed);
        if (!s->configured)
            continue;
        if (s->quarantined && s->owner)
            return fail(L, -EFAULT, "stage %u: registered while its old "
                        "chunks are quarantined", i);
        /* The native-context guarantee: KV never outgrows the window, and
         * fixed regions never their reservation. */
        if (s->kv_chunks > s->window_chunks)
            return fail(L, -EFAULT, "stage %u: KV %u chunks over its window %u",
                        i, s->kv_chunks, s->window_chunks);
        if (s->fixed_chunks > s->fixed_reserved)
            return fail(L, -EFAULT, "stage %u: fixed %u chunks over its "
                        "reservation %u", i, s->fixed_chunks, s->fixed_reserved);
        /* Claims only on backed slots, by layers of the stage. */
        uint32_t backed = vl_expert_slots_backed(L, i);
        for (uint32_t k = 0; k < s->nslots; k++) {
            uint16_t o = s->slot_layer[k];
            if (o == SLOT_LAYER_NONE)
                continue;
            if (k >= backed || o < s->cfg.first_layer || o > s->cfg.last_layer)
                return fail(L, -EFAULT, "stage %u: slot %u claimed by layer %u "
                            "(%u slots backed, layers %u-%u)", i, k, o, backed,
                            s->cfg.first_layer, s->cfg.last_layer);
        }
    }
    /* Promises (rules 2 and 4), per device. */
    for (uint32_t di = 0; di < L->ndev; di++) {
        struct vl_device *d = &L->dev[di];
        struct promises p = dev_promises(L, d);
        uint64_t full = 0, pool = 0;
        for (uint32_t i = 0; i < VL_MAX_STAGES; i++) {
            struct vl_stage *s = &L->stage[i];
            if (s->used && s->configured && s->cfg.device == d->cfg.id) {
                full += stage_full(s);
                pool += pool_loans(s);
            }
        }
        if (dev_free(d) < p.hard)
            return fail(L, -EFAULT, "device %u: %u chunks free, %u promised "
                        "hard", d->cfg.id, dev_free(d), p.hard);
        if ((uint64_t)dev_free(d) + pool + d->count[VL_QUARANTINED] < full)
            return fail(L, -EFAULT, "device %u: free %u + pool loans %llu + "
                        "quarantined %u do not cover the %llu chunks promised",
                        d->cfg.id, dev_free(d), (unsigned long long)pool,
                        d->count[VL_QUARANTINED], (unsigned long long)full);
    }
    return 0;
}

int vl_check(struct vl_ledger *L)
{
    uint32_t qstage[2 * VL_MAX_STAGES] = {0};
    uint32_t *held = calloc(L->nclient ? L->nclient : 1, sizeof(*held));
    if (!held)
        return fail(L, -ENOMEM, "out of memory");
    int e = check_chunks(L, held, qstage);
    for (size_t ci = 0; e == 0 && ci < L->nclient; ci++)
        if (held[ci] != L->client[ci].chunks)
            e = fail(L, -EFAULT, "client %u holds %u chunks, counted %u",
                     L->client[ci].id, held[ci], L->client[ci].chunks);
    free(held);
    if (e == 0)
        e = check_regions(L);
    if (e == 0)
        e = check_holds(L);
    if (e == 0)
        e = check_stages(L, qstage);
    return e;
}
