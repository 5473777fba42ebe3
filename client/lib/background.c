/* SPDX-License-Identifier: Apache-2.0 */
/* Mapping in the background (vram_client_set_background_map, in api.c). An engine
 * registers its stages and asks for its weights' memory, then spends
 * seconds reading the weights; importing and mapping the chunks costs more
 * than creating them in-process would (an import is about 31 us on an H200,
 * a create 12 us), but it need not be on the engine's path: on a second
 * thread it overlaps the engine's own work (measured: importing 1,024
 * chunks beside a 4 GiB host-to-device copy added nothing to the copy).
 *
 * The tables say at once what will be mapped (the daemon's view), and the
 * thread only makes driver calls on its own list, so nothing it touches is
 * shared: every entry into the library (call_frame.c), and every request
 * sent (the protocol layer, through its port: events.c), waits for it
 * first and then makes the tables true, forgetting a chunk that failed. So no call, callback or event ever sees a chunk that
 * is only half there; only the engine's own kernels could, which is why
 * memory from a background call is used after vram_client_wait. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "client/lib/background.h"
#include "client/lib/chunk_table.h"
#include "client/lib/client_record.h"
#include "client/lib/mappers.h"
#include "client/lib/region_table.h"

bool vc_bg_wanted(const vram_client *c)
{
    return c->bg.enabled && c->depth == 1;
}

int vc_bg_add(vram_client *c, uint64_t chunk, vp_handle h, uint64_t addr,
              uint64_t bytes)
{
    struct vc_bg *b = &c->bg;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        struct vc_bg_item *v = realloc(b->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        b->v = v;
        b->cap = cap;
    }
    b->done++;
    b->v[b->n++] = (struct vc_bg_item){.chunk = chunk, .addr = addr,
                                       .bytes = bytes, .h = h};
    return 0;
}

/* Imports and maps every item: on the thread, or here. A failed item's
 * handle is closed and its memory released; the rest go on. */
static void work(vram_client *c)
{
    struct vc_bg *b = &c->bg;
    for (size_t i = 0; i < b->n; i++) {
        struct vc_bg_item *it = &b->v[i];
        struct vc_chunk ch = {.id = it->chunk, .h = VP_NONE};
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

static void thread_main(void *p)
{
    vram_client *c = p;
    if (c->mapper->thread_adopt)
        c->mapper->thread_adopt(c, c->bg.ctx);
    work(c);
}

void vc_bg_start(vram_client *c)
{
    struct vc_bg *b = &c->bg;
    if (!b->n || b->thread)
        return;
    b->ctx = c->mapper->thread_context ? c->mapper->thread_context(c) : NULL;
    if (vp_thread_start(&b->thread, thread_main, c) < 0) {
        b->thread = NULL;
        vc_bg_finish(c); /* no thread: the mapping is done now, here */
    }
}

void vc_bg_finish(vram_client *c)
{
    struct vc_bg *b = &c->bg;
    if (!b->n)
        return;
    char keep[sizeof(c->last_error)];
    snprintf(keep, sizeof(keep), "%s", c->last_error);
    if (b->thread) {
        vp_thread_join(b->thread);
        b->thread = NULL;
    } else {
        work(c);
    }
    for (size_t i = 0; i < b->n; i++) {
        struct vc_bg_item *it = &b->v[i];
        struct vc_chunk *ch = vc_table_get(&c->chunks, it->chunk);
        if (!ch) { /* cannot happen: nothing drops a chunk before this */
            struct vc_chunk tmp = {.h = it->h, .handle = it->handle};
            if (it->err == 0)
                c->mapper->release(c, &tmp);
            continue;
        }
        if (it->err == 0) {
            ch->h = it->h;
            ch->handle = it->handle;
            continue;
        }
        /* Not mapped: the slot is empty again and the chunk forgotten, as
         * when a reply's import fails while the call waits. */
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
    b->n = 0;
    snprintf(c->last_error, sizeof(c->last_error), "%s", keep);
}

void vc_bg_free(vram_client *c)
{
    vc_bg_finish(c);
    free(c->bg.v);
    c->bg.v = NULL;
    c->bg.cap = 0;
}
