/* SPDX-License-Identifier: Apache-2.0 */
/* Who gets a connection slot of the metrics endpoint: at most a few
 * connections per peer address and a fixed number in all, and when a new
 * one finds no room, the connection that has been idle longest goes to make
 * it. Pure bookkeeping, no sockets: metrics_http.c embeds a slot in each of
 * its connections and asks here whom to close; the unit test drives it
 * directly. */
#ifndef VRAM_TOOLS_METRICS_SLOTS_H
#define VRAM_TOOLS_METRICS_SLOTS_H

#include <stdbool.h>
#include <stdint.h>

/* A peer's address: IPv4 (an IPv4-mapped IPv6 address counts as its IPv4
 * one), IPv6, or unknown (family 0: all unknown peers are one). */
struct tool_peer {
    unsigned char family; /* 0, 4 or 6 */
    unsigned char addr[16];
};

struct tool_slot {
    struct tool_slot *prev, *next;           /* every slot */
    struct tool_slot *idle_prev, *idle_next; /* idle ones, longest idle first */
    struct tool_peer peer;
    uint64_t born; /* the turn it was admitted in */
    bool admitted, idle;
};

struct tool_slots {
    struct tool_slot *all;
    struct tool_slot *idle_head, *idle_tail;
    int count;
    int per_peer; /* at most this many slots per peer address */
    uint64_t turn;
};

/* Why tool_slots_admit closed (or refused) a connection. */
enum tool_slots_why {
    TOOL_SLOTS_ROOM,     /* there was room */
    TOOL_SLOTS_PER_PEER, /* its peer had per_peer slots already */
    TOOL_SLOTS_FULL,     /* cap slots were taken */
};

void tool_slots_init(struct tool_slots *s, int per_peer);

/* Admits slot n (not yet admitted; its peer set) when at most cap slots
 * would then be taken in all and at most per_peer of its peer. Where that
 * leaves no room, the slot that has been idle longest (of the same peer
 * when the peer is over its limit) makes room: *victim is set to it, for
 * the caller to close (and remove). Slots admitted in this turn or the one
 * before are not taken as victims: their requests may not have been read
 * yet. Returns 0 with n admitted (idle) and *victim set or NULL, or -EBUSY
 * when no slot may go for it (then n is not admitted). *why says which
 * limit was met. */
int tool_slots_admit(struct tool_slots *s, struct tool_slot *n, int cap,
                     struct tool_slot **victim, enum tool_slots_why *why);

/* The slot that has been idle longest and may be taken as a victim (not
 * admitted in this turn or the one before), or NULL. */
struct tool_slot *tool_slots_oldest_idle(const struct tool_slots *s);

/* Marks a slot idle (no request being served: it may go to make room) or
 * busy. A slot that becomes idle is the newest idle one; one that is idle
 * already keeps its place. */
void tool_slots_set_idle(struct tool_slots *s, struct tool_slot *x, bool idle);

/* Removes an admitted slot (its connection closed); NULL-tolerant, and a
 * no-op for a slot not admitted. */
void tool_slots_remove(struct tool_slots *s, struct tool_slot *x);

/* One turn of the event loop ended. */
void tool_slots_turn(struct tool_slots *s);

/* How many admitted slots belong to peer p. */
int tool_slots_of_peer(const struct tool_slots *s, const struct tool_peer *p);

#endif
