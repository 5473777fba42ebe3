/* SPDX-License-Identifier: Apache-2.0 */
/* vram_weights_list: every weight set of the daemon, as vramctl weights
 * shows them. The reply may come in several frames (the daemon splits a
 * long list); vc_call merges them into one array. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client/lib/call.h"
#include "client/lib/call_frame.h"
#include "client/lib/client_record.h"
#include "client/lib/error.h"
#include "proto/hexkey.h"

static int state_of(const char *s)
{
    static const char *const names[] = {
        [VRAM_WEIGHTS_WRITING] = "writing",
        [VRAM_WEIGHTS_SEALED] = "sealed",
        [VRAM_WEIGHTS_CACHED] = "cached",
    };
    for (int i = 0; s && i < (int)(sizeof(names) / sizeof(names[0])); i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

static int entry_of(vram_client *c, const struct vw_t_weights_entry *w,
                    struct vram_weights_entry *o)
{
    int state = state_of(w->state);
    /* The catalogue bounds the name to 64 bytes: the decoder refused more. */
    if (state < 0 || strlen(w->name) > VRAM_WEIGHTS_NAME_MAX)
        return vc_set_error(c, -EPROTO, "weight set %u: state '%.15s' or its "
                            "name is not what this libvram knows", w->id,
                            w->state ? w->state : "");
    memset(o, 0, sizeof(*o));
    if (vw_hex_decode(w->key, o->key, VRAM_WEIGHTS_KEY_BYTES) < 0)
        return vc_set_error(c, -EPROTO, "weight set %u: its key is not %d "
                            "bytes of hex", w->id, VRAM_WEIGHTS_KEY_BYTES);
    o->id = w->id;
    o->device = w->device;
    snprintf(o->name, sizeof(o->name), "%s", w->name);
    o->bytes = w->bytes;
    o->alloc_bytes = w->alloc_bytes;
    o->allocs = w->allocs;
    o->state = (enum vram_weights_state)state;
    o->writer = w->has_writer ? w->writer : 0;
    o->users = w->users;
    o->owner_uid = w->owner;
    o->keep = w->keep ? 1 : 0;
    o->created_ms = w->created_ms;
    o->sealed_ms = w->has_sealed_ms ? w->sealed_ms : 0;
    o->last_use_ms = w->last_use_ms;
    return 0;
}

static int do_list(vram_client *c, struct vram_weights_entry *out, size_t max)
{
    if (!out && max)
        return vc_set_error(c, -EINVAL, "no room for %llu entries",
                            (unsigned long long)max);
    struct vw_req_weights_list m = {0};
    struct vw_rep_weights_list rep;
    struct vw_arena a = {0};
    int e = vc_call(c, VW_REQ_WEIGHTS_LIST, &m, &rep, &a);
    /* Every entry is read first, those past max too: a set this library
     * cannot read fails the call, whatever room the caller gave, and out
     * is written only once all of them could be. */
    struct vram_weights_entry tmp;
    for (size_t i = 0; e == 0 && i < rep.sets.n; i++)
        e = entry_of(c, &rep.sets.v[i], &tmp);
    for (size_t i = 0; e == 0 && i < rep.sets.n && i < max; i++)
        entry_of(c, &rep.sets.v[i], &out[i]);
    /* At most 4,096 (the catalogue's bound, checked as the frames were
     * merged). */
    int n = e < 0 ? e : (int)rep.sets.n;
    vw_arena_free(&a);
    return n;
}

int vram_weights_list(vram_client *c, struct vram_weights_entry *out,
                      size_t max)
{
    vc_enter(c);
    return vc_leave(c, do_list(c, out, max));
}
