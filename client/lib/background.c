/* SPDX-License-Identifier: Apache-2.0 */
/* Mapping in the background (vram_client_set_background_map, in api.c). An engine
 * registers its stages and asks for its weights' memory, then spends
 * seconds reading the weights; importing and mapping the chunks costs more
 * than creating them in-process would (an import is about 31 us on an H200,
 * a create 12 us), but it need not be on the engine's path: on a second
 * thread it overlaps the engine's own work (measured: importing 1,024
 * chunks beside a 4 GiB host-to-device copy added nothing to the copy).
 *
 * Nor need vramd's own work be on it: chunks beyond its standby are made
 * when a grant asks for them (about 47 ms for 1,024 on an H200), and a
 * call that waited for that reply would wait for the making. So a grow
 * (vram_region_grow, vram_kv_reserve, vram_expert_request) sends its
 * request and returns VRAM_PENDING at once; this thread reads the reply
 * when it comes, its handles with it, and imports and maps its new chunks.
 * This needs no change to the protocol: the reply is the one a blocking
 * call reads, on another thread. (vramd answering the standby's part first
 * and streaming the rest would have needed replies applied in parts, and
 * gains nothing here: the engine no longer waits for any part.)
 *
 * The thread touches only the connection (no other call uses it until the
 * thread is joined), the protocol's reply fields, its own list and the
 * driver; it reads the region and chunk tables, never writes them. Every
 * entry into the library (call_frame.c), and every request sent (the
 * protocol layer, through its port: events.c), waits for it first and then
 * makes the tables true: the events that came before the reply are handed
 * up in their order (the thread keeps them, it calls nobody back), the
 * reply's chunks are put in the tables, what is left of the reply (moves
 * of held chunks, a stage's figures) is applied by the caller's function,
 * and a chunk that failed is forgotten. So no call, callback or event ever
 * sees a chunk that is only half there; only the engine's own kernels
 * could, which is why memory from a background call is used after
 * vram_client_wait. A recall that comes meanwhile is answered then, as a
 * blocking call answers it after its reply. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/background.h"
#include "client/lib/chunk_table.h"
#include "client/lib/client_record.h"
#include "client/lib/error.h"
#include "client/lib/mappers.h"
#include "proto/msg.h"
#include "client/lib/protocol.h"
#include "client/lib/region_table.h"

struct vc_bg_reply {
    int type;
    vc_bg_done_fn done;
    char call[32];
    union vw_rep_any rep;
    struct vw_arena arena;
    bool received;   /* the thread read it (or gave up) */
    int err;         /* vc_rpc_await's */
    bool refused;    /* err is the daemon's refusal: its map stands */
    char why[512];   /* last_error then */
};

bool vc_bg_wanted(const vram_client *c)
{
    return c->bg.enabled && c->depth == 1 && !c->bg.finishing;
}

static struct vc_bg_item *new_item(struct vc_bg *b)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        struct vc_bg_item *v = realloc(b->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        b->v = v;
        b->cap = cap;
    }
    return &b->v[b->n++];
}

int vc_bg_add(vram_client *c, const struct vc_chunk *ch, vp_handle h,
              uint64_t addr, uint64_t bytes)
{
    struct vc_bg_item *it = new_item(&c->bg);
    if (!it)
        return -ENOMEM;
    c->bg.done++;
    *it = (struct vc_bg_item){.chunk = ch->id, .addr = addr, .bytes = bytes,
                              .h = h, .device = ch->device};
    return 0;
}

int vc_bg_request(vram_client *c, int type, const void *req,
                  vc_bg_done_fn done, const char *call)
{
    vc_bg_finish(c); /* one at a time (nothing is under way at depth 1) */
    int e = vc_bg_failure(c);
    if (e < 0)
        return e;
    struct vc_bg_reply *r = calloc(1, sizeof(*r));
    if (!r)
        return vc_set_error(c, -ENOMEM, "out of memory");
    if ((e = vc_rpc_send(c, type, req)) < 0) {
        free(r);
        return e;
    }
    r->type = type;
    r->done = done;
    snprintf(r->call, sizeof(r->call), "%s", call);
    c->bg.reply = r;
    return VRAM_PENDING;
}

int vc_bg_failure(vram_client *c)
{
    struct vc_bg *b = &c->bg;
    if (!b->report || b->err >= 0)
        return 0;
    b->report = false;
    return vc_set_error(c, b->err, "%s", b->msg);
}

static void note_failure(struct vc_bg *b, int e, const char *msg)
{
    if (!b->err) {
        b->err = e;
        snprintf(b->msg, sizeof(b->msg), "%s", msg);
    }
    b->report = true;
}

/* ---- on the thread ------------------------------------------------------- */

/* Imports and maps every item (once: nothing is added while the thread
 * runs): on the thread, or here. A
 * failed item's handle is closed and its memory released; the rest go on. */
static void work(vram_client *c)
{
    struct vc_bg *b = &c->bg;
    for (size_t i = 0; i < b->n; i++) {
        struct vc_bg_item *it = &b->v[i];
        struct vc_chunk ch = {.id = it->chunk, .h = VP_NONE, .device = it->device};
        int e = c->mapper->import(c, &ch, it->h, it->bytes);
        if (e < 0) {
            vp_close(&it->h); /* a failed import does not take it */
        } else if ((e = c->mapper->map(c, &ch, it->addr, it->bytes)) < 0) {
            c->mapper->release(c, &ch);
            it->h = VP_NONE;
        } else {
            it->h = ch.h;
            it->handle = ch.handle;
        }
        if (e < 0 && !b->err) {
            /* The mapper wrote why into last_error; nothing else reads it
             * while the thread runs. */
            b->err = e;
            snprintf(b->msg, sizeof(b->msg), "%s", c->last_error);
        }
        it->err = e;
    }
}

struct cand {
    uint64_t key;
    size_t i; /* in c->pend */
};

static int by_key(const void *x, const void *y)
{
    uint64_t a = ((const struct cand *)x)->key, b = ((const struct cand *)y)->key;
    return a < b ? -1 : a > b;
}

/* Marks in skip the entries of v whose key another one shares. */
static void mark_twins(struct cand *v, size_t n, unsigned char *skip)
{
    qsort(v, n, sizeof(*v), by_key);
    for (size_t k = 1; k < n; k++)
        if (v[k].key == v[k - 1].key)
            skip[v[k].i] = skip[v[k - 1].i] = 1;
}

/* The reply's new chunks, taken from c->pend as items to map at their
 * slots. Only those that cannot go wrong in the tables are: a known region,
 * a slot in range and empty now, a chunk not held, neither shared with
 * another entry. The rest (moves of held chunks, and anything odd) stay in
 * c->pend for the finish to apply as a blocking call would, errors and
 * all. Reads the tables only. */
static void take(vram_client *c)
{
    size_t n = c->npend;
    struct cand *slots = malloc((n + 1) * sizeof(*slots));
    struct cand *ids = malloc((n + 1) * sizeof(*ids));
    unsigned char *skip = calloc(n + 1, 1);
    size_t k = 0;
    for (size_t i = 0; slots && ids && skip && i < n; i++) {
        struct pending_map *p = &c->pend[i];
        struct vc_region *r = vp_ok(p->h) ? vc_region_get(c, p->region) : NULL;
        if (!r || p->slot >= r->lanes * r->stride_slots ||
            r->slot_chunk[p->slot] != UINT64_MAX ||
            vc_table_get(&c->chunks, p->chunk)) {
            skip[i] = 1;
            continue;
        }
        slots[k] = (struct cand){(uint64_t)p->region << 32 | p->slot, i};
        ids[k++] = (struct cand){p->chunk, i};
    }
    if (!slots || !ids || !skip)
        k = 0; /* all left to the finish */
    mark_twins(slots, k, skip);
    mark_twins(ids, k, skip);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        struct pending_map *p = &c->pend[i];
        struct vc_bg_item *it = skip && !skip[i] ? new_item(&c->bg) : NULL;
        if (!it) {
            c->pend[kept++] = *p;
            continue;
        }
        struct vc_region *r = vc_region_get(c, p->region);
        *it = (struct vc_bg_item){.chunk = p->chunk,
                                  .addr = vc_slot_addr(r, p->slot),
                                  .bytes = r->chunk_bytes, .h = p->h,
                                  .device = r->device, .adopt = true,
                                  .region = p->region, .slot = p->slot};
    }
    c->npend = kept;
    free(slots);
    free(ids);
    free(skip);
}

/* Reads the reply the call sent its request for (when there is one and it
 * was not read yet), then maps what it and the call brought. */
static void run(vram_client *c)
{
    struct vc_bg *b = &c->bg;
    struct vc_bg_reply *r = b->reply;
    if (r && !r->received) {
        r->received = true;
        r->err = vc_rpc_await(c, &r->rep, &r->arena, &r->refused);
        if (r->err < 0)
            snprintf(r->why, sizeof(r->why), "%s", c->last_error);
        if (r->err == 0 || r->refused)
            take(c); /* even a refused reply may carry chunks mapped */
        else
            vc_clear_pending(c); /* nothing of it is applied */
    }
    work(c);
}

static void thread_main(void *p)
{
    vram_client *c = p;
    if (c->mapper->thread_adopt)
        c->mapper->thread_adopt(c, c->bg.ctx);
    run(c);
}

void vc_bg_start(vram_client *c)
{
    struct vc_bg *b = &c->bg;
    if ((!b->n && !b->reply) || b->thread || b->finishing)
        return;
    b->ctx = c->mapper->thread_context ? c->mapper->thread_context(c) : NULL;
    if (vp_thread_start(&b->thread, thread_main, c) < 0) {
        b->thread = NULL;
        vc_bg_finish(c); /* no thread: the work is done now, here */
    }
}

/* ---- back on the caller's thread ----------------------------------------- */

/* A chunk mapped from a call's reply (already in the tables): its handle
 * recorded, or, when it failed, its slot emptied and the chunk forgotten,
 * as when a reply's import fails while the call waits. */
static void settle_item(vram_client *c, struct vc_bg_item *it)
{
    struct vc_bg *b = &c->bg;
    struct vc_chunk *ch = vc_table_get(&c->chunks, it->chunk);
    if (!ch) { /* cannot happen: nothing drops a chunk before this */
        struct vc_chunk tmp = {.h = it->h, .handle = it->handle};
        if (it->err == 0)
            c->mapper->release(c, &tmp);
        return;
    }
    if (it->err == 0) {
        ch->h = it->h;
        ch->handle = it->handle;
        return;
    }
    if (b->done)
        b->done--;
    struct vc_region *r = vc_region_get(c, ch->region);
    if (r) {
        r->slot_chunk[ch->slot] = UINT64_MAX;
        r->mapped--;
    }
    vc_table_del(&c->chunks, it->chunk);
    c->tables_changed = true;
}

/* A chunk of a reply the thread read, put in the tables where it is
 * mapped. Nothing changed the tables since the thread looked at them but
 * the events before the reply, which only take chunks away. */
static void adopt_item(vram_client *c, struct vc_bg_item *it)
{
    if (it->err < 0)
        return; /* released by the thread; vramd's reply is all it knew */
    struct vc_region *r = vc_region_get(c, it->region);
    struct vc_chunk ch = {.id = it->chunk, .h = it->h, .handle = it->handle,
                          .device = it->device, .region = it->region,
                          .slot = it->slot};
    int e = r && r->slot_chunk[it->slot] == UINT64_MAX
                ? vc_table_put(&c->chunks, &ch) : -EPROTO;
    if (e < 0) { /* (a slot taken: it was not ours to unmap) */
        if (e == -ENOMEM)
            c->mapper->unmap(c, &ch, it->addr, it->bytes);
        c->mapper->release(c, &ch);
        it->err = vc_set_error(c, e, "chunk %llu of a background reply could "
                               "not be recorded", (unsigned long long)it->chunk);
        if (!c->bg.err) {
            c->bg.err = it->err;
            snprintf(c->bg.msg, sizeof(c->bg.msg), "%s", c->last_error);
        }
        return;
    }
    r->slot_chunk[it->slot] = it->chunk;
    r->mapped++;
    c->bg.done++;
    c->tables_changed = true;
}

void vc_bg_finish(vram_client *c)
{
    struct vc_bg *b = &c->bg;
    if ((!b->n && !b->reply) || b->finishing)
        return;
    b->finishing = true;
    char keep[sizeof(c->last_error)];
    snprintf(keep, sizeof(keep), "%s", c->last_error);
    if (b->thread) {
        vp_thread_join(b->thread);
        b->thread = NULL;
    } else {
        run(c);
    }
    for (size_t i = 0; i < b->n; i++)
        if (!b->v[i].adopt)
            settle_item(c, &b->v[i]);
    struct vc_bg_reply *r = b->reply;
    if (r) {
        b->reply = NULL;
        /* What came before the reply, in its order, then the reply. */
        vc_rpc_deliver(c);
        for (size_t i = 0; i < b->n; i++)
            if (b->v[i].adopt)
                adopt_item(c, &b->v[i]);
        int e = r->err;
        char why[sizeof(c->last_error)];
        snprintf(why, sizeof(why), "%s", r->why);
        if (r->err == 0 || r->refused) {
            int e2 = r->done(c, r->type, &r->rep, r->err);
            if (e == 0 && e2 < 0) {
                e = e2;
                snprintf(why, sizeof(why), "%s", c->last_error);
            }
            if (r->err == 0)
                vw_close_handles(vw_requests[r->type].rep, &r->rep);
        } else {
            (void)r->done(c, r->type, NULL, e); /* no reply: told, no more */
        }
        vc_clear_pending(c); /* what done left (nothing, normally) */
        if (e < 0) {
            char msg[sizeof(b->msg)];
            snprintf(msg, sizeof(msg), "%.31s in the background: %.440s", r->call,
                     why);
            note_failure(b, e, msg);
        }
        vw_arena_free(&r->arena);
        free(r);
    }
    for (size_t i = 0; i < b->n; i++)
        if (b->v[i].err < 0)
            b->report = true; /* the next call says so too */
    b->n = 0;
    vc_send_releases(c); /* those the events' recalls asked for */
    b->finishing = false;
    snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
}

void vc_bg_free(vram_client *c)
{
    vc_bg_finish(c);
    free(c->bg.v);
    c->bg.v = NULL;
    c->bg.cap = 0;
}
