/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl weights: the list of weight sets, read through libvram's
 * vram_weights_list, shown as a table or re-encoded in the catalogue's
 * terms for --json. */
#include "client/tools/weights_view.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/tools/table.h"
#include "proto/text.h"
#include "client/tools/textbuf.h"
#include "proto/units.h"

int tool_weights_fetch(vram_client *c, struct tool_weights *out, char *why,
                       size_t why_len)
{
    /* Sets made between the count and the read: read again with room for
     * them. It ends: vramd lists at most 4,096. */
    size_t cap = 64;
    struct vram_weights_entry *v = NULL;
    for (;;) {
        struct vram_weights_entry *nv = realloc(v, cap * sizeof(*v));
        if (!nv) {
            free(v);
            if (why)
                snprintf(why, why_len, "out of memory");
            return -ENOMEM;
        }
        v = nv;
        int n = vram_weights_list(c, v, cap);
        if (n < 0) {
            free(v);
            if (why)
                snprintf(why, why_len, "weights failed: %s",
                         vram_client_last_error(c));
            return n;
        }
        if ((size_t)n <= cap) {
            out->v = v;
            out->n = (size_t)n;
            return 0;
        }
        cap = (size_t)n;
    }
}

void tool_weights_free(struct tool_weights *w)
{
    if (!w)
        return;
    free(w->v);
    w->v = NULL;
    w->n = 0;
}

const char *tool_weights_state_name(enum vram_weights_state s)
{
    switch (s) {
    case VRAM_WEIGHTS_WRITING: return "writing";
    case VRAM_WEIGHTS_SEALED: return "sealed";
    case VRAM_WEIGHTS_CACHED: return "cached";
    }
    return "?";
}

const char *tool_age(char *buf, size_t len, int64_t now_ms, uint64_t then_ms)
{
    if (!then_ms) {
        snprintf(buf, len, "-");
        return buf;
    }
    /* A clock set back since: it was just now. */
    unsigned long long s = now_ms > 0 && (uint64_t)now_ms > then_ms
                               ? ((uint64_t)now_ms - then_ms) / 1000 : 0;
    if (s < 60)
        snprintf(buf, len, "%llus ago", s);
    else if (s < 3600)
        snprintf(buf, len, "%llum ago", s / 60);
    else if (s < 86400)
        snprintf(buf, len, "%lluh ago", s / 3600);
    else
        snprintf(buf, len, "%llud ago", s / 86400);
    return buf;
}

static void key_hex(const uint8_t *key, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", key[i]);
}

void tool_weights_wire(const struct vram_weights_entry *e,
                       char key[2 * VRAM_WEIGHTS_KEY_BYTES + 1],
                       struct vw_t_weights_entry *out)
{
    key_hex(e->key, VRAM_WEIGHTS_KEY_BYTES, key);
    *out = (struct vw_t_weights_entry){
        .id = e->id, .name = e->name, .device = e->device, .bytes = e->bytes,
        .alloc_bytes = e->alloc_bytes, .allocs = e->allocs, .key = key,
        .state = tool_weights_state_name(e->state),
        .has_writer = e->writer != 0, .writer = e->writer, .users = e->users,
        .keep = e->keep != 0, .owner = e->owner_uid, .created_ms = e->created_ms,
        .has_sealed_ms = e->state != VRAM_WEIGHTS_WRITING,
        .sealed_ms = e->sealed_ms, .last_use_ms = e->last_use_ms};
}

/* A set's name as a cell: escaped, whole. */
struct name_cell {
    char s[VW_TEXT_ESCAPED(VRAM_WEIGHTS_NAME_MAX + 1)];
};

static const char *name_of(const struct vram_weights_entry *e,
                           struct name_cell *c)
{
    return tool_peer_cell(e->name, "-", 0, c->s, sizeof(c->s));
}

void tool_weights_table(const struct tool_weights *w, bool legend,
                        int64_t now_ms)
{
    int namew = 4; /* "NAME" */
    struct name_cell name;
    for (size_t i = 0; i < w->n; i++) {
        int len = (int)strlen(name_of(&w->v[i], &name));
        if (len > namew)
            namew = len;
    }
    if (legend)
        tool_row("%-*s %-6s %-10s %-10s %-11s %-8s %-7s %-5s %-6s %-9s %-4s %s",
                 namew, "NAME", "DEVICE", "SIZE", "ALLOC-SIZE", "ALLOCATIONS",
                 "KEY", "STATE", "USERS", "WRITER", "OWNER-UID", "KEEP",
                 "LAST-USE");
    for (size_t i = 0; i < w->n; i++) {
        const struct vram_weights_entry *e = &w->v[i];
        char size[32], alloc[32], key[9], writer[16] = "-", age[32];
        key_hex(e->key, 4, key); /* a prefix tells sets apart */
        if (e->writer)
            snprintf(writer, sizeof(writer), "%u", e->writer);
        tool_row("%-*s %-6u %-10s %-10s %-11u %-8s %-7s %-5u %-6s %-9u %-4s %s",
                 namew, name_of(e, &name), e->device,
                 vw_size_format(e->bytes, size, sizeof(size)),
                 vw_size_format(e->alloc_bytes, alloc, sizeof(alloc)),
                 e->allocs, key, tool_weights_state_name(e->state), e->users,
                 writer, e->owner_uid, e->keep ? "yes" : "no",
                 tool_age(age, sizeof(age), now_ms, e->last_use_ms));
    }
}
