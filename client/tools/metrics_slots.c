/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics endpoint's connection slots. Every walk here is over the
 * admitted slots, at most the endpoint's cap (64): a new connection costs
 * that many comparisons at most, whatever the number of peers trying. */
#include "client/tools/metrics_slots.h"

#include <errno.h>
#include <string.h>

/* A slot admitted in this turn of the loop or the one before has not had
 * its first bytes read yet (they are read in the turn after the accept, if
 * they came by then): taking it would let a burst of connections push out
 * a scraper before it could even send its request. */
#define GRACE_TURNS 2

void tool_slots_init(struct tool_slots *s, int per_peer)
{
    memset(s, 0, sizeof(*s));
    s->per_peer = per_peer;
}

static bool same_peer(const struct tool_peer *a, const struct tool_peer *b)
{
    size_t n = a->family == 4 ? 4 : a->family == 6 ? 16 : 0;
    return a->family == b->family && memcmp(a->addr, b->addr, n) == 0;
}

static bool may_go(const struct tool_slots *s, const struct tool_slot *x)
{
    return s->turn - x->born >= GRACE_TURNS;
}

int tool_slots_of_peer(const struct tool_slots *s, const struct tool_peer *p)
{
    int n = 0;
    for (const struct tool_slot *x = s->all; x; x = x->next)
        n += same_peer(&x->peer, p);
    return n;
}

static struct tool_slot *oldest_idle(const struct tool_slots *s,
                                     const struct tool_peer *p)
{
    for (struct tool_slot *x = s->idle_head; x; x = x->idle_next)
        if (may_go(s, x) && (!p || same_peer(&x->peer, p)))
            return x;
    return NULL;
}

struct tool_slot *tool_slots_oldest_idle(const struct tool_slots *s)
{
    return oldest_idle(s, NULL);
}

static void idle_unlink(struct tool_slots *s, struct tool_slot *x)
{
    if (x->idle_prev)
        x->idle_prev->idle_next = x->idle_next;
    else
        s->idle_head = x->idle_next;
    if (x->idle_next)
        x->idle_next->idle_prev = x->idle_prev;
    else
        s->idle_tail = x->idle_prev;
    x->idle_prev = x->idle_next = NULL;
    x->idle = false;
}

void tool_slots_set_idle(struct tool_slots *s, struct tool_slot *x, bool idle)
{
    if (!x->admitted || x->idle == idle)
        return;
    if (!idle) {
        idle_unlink(s, x);
        return;
    }
    x->idle = true;
    x->idle_next = NULL;
    x->idle_prev = s->idle_tail;
    if (s->idle_tail)
        s->idle_tail->idle_next = x;
    else
        s->idle_head = x;
    s->idle_tail = x;
}

int tool_slots_admit(struct tool_slots *s, struct tool_slot *n, int cap,
                     struct tool_slot **victim, enum tool_slots_why *why)
{
    struct tool_slot *v = NULL;
    enum tool_slots_why w = TOOL_SLOTS_ROOM;
    if (tool_slots_of_peer(s, &n->peer) >= s->per_peer) {
        w = TOOL_SLOTS_PER_PEER;
        v = oldest_idle(s, &n->peer);
    } else if (s->count >= cap) {
        w = TOOL_SLOTS_FULL;
        v = oldest_idle(s, NULL);
    }
    *why = w;
    if (w != TOOL_SLOTS_ROOM && !v)
        return -EBUSY;
    n->born = s->turn;
    n->admitted = true;
    n->idle = false;
    n->prev = NULL;
    n->next = s->all;
    if (s->all)
        s->all->prev = n;
    s->all = n;
    s->count++;
    tool_slots_set_idle(s, n, true);
    *victim = v;
    return 0;
}

void tool_slots_remove(struct tool_slots *s, struct tool_slot *x)
{
    if (!x || !x->admitted)
        return;
    if (x->idle)
        idle_unlink(s, x);
    if (x->prev)
        x->prev->next = x->next;
    else
        s->all = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
    x->admitted = false;
    s->count--;
}

void tool_slots_turn(struct tool_slots *s)
{
    s->turn++;
}
