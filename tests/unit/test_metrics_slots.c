/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics endpoint's connection slots (client/tools/metrics_slots.c):
 * at most per_peer per address and cap in all; past either, the slot idle
 * longest makes room (of the same peer for the per-address limit); busy
 * slots and those admitted in the last two turns never go, and with none
 * that may go the newcomer is refused; an IPv4 peer is not an IPv6 one.
 * Then a random walk against a model that keeps every slot in a plain
 * array: the same choices, and the limits hold throughout. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "tests/check.h"
#include "client/tools/metrics_slots.h"

#define N 256

static struct tool_slot pool[N];

static struct tool_peer v4(unsigned char last)
{
    struct tool_peer p = {.family = 4, .addr = {127, 0, 1, last}};
    return p;
}

/* Admits slot i from peer p: 0 or -EBUSY, the victim's index (or -1) in
 * *v, removed as the caller would. */
static int admit(struct tool_slots *s, int i, struct tool_peer p, int cap, int *v,
                 enum tool_slots_why *why)
{
    /* (A slot admitted twice would corrupt the lists: the test stops.) */
    REQUIRE(!pool[i].admitted, "slot %d is admitted already", i);
    memset(&pool[i], 0, sizeof(pool[i]));
    pool[i].peer = p;
    struct tool_slot *victim = NULL;
    int r = tool_slots_admit(s, &pool[i], cap, &victim, why);
    *v = victim ? (int)(victim - pool) : -1;
    if (victim)
        tool_slots_remove(s, victim);
    return r;
}

/* A new set of slots, every slot of the pool unadmitted. */
static void fresh(struct tool_slots *s, int per_peer)
{
    memset(pool, 0, sizeof(pool));
    tool_slots_init(s, per_peer);
}

static void turns(struct tool_slots *s, int n)
{
    while (n--)
        tool_slots_turn(s);
}

static void per_peer(void)
{
    struct tool_slots s;
    fresh(&s, 4);
    enum tool_slots_why why;
    int v;
    for (int i = 0; i < 4; i++)
        CHECK(admit(&s, i, v4(1), 64, &v, &why) == 0 && v == -1 && why == TOOL_SLOTS_ROOM,
              "slot %d of one peer", i);
    CHECK_EQ_U(tool_slots_of_peer(&s, &pool[0].peer), 4);
    /* A fifth in the same turn: the four came just now, none may go. */
    CHECK(admit(&s, 4, v4(1), 64, &v, &why) == -EBUSY && why == TOOL_SLOTS_PER_PEER,
          "a fifth at once is refused");
    CHECK_EQ_U(s.count, 4);
    /* Another peer is not affected. */
    CHECK(admit(&s, 5, v4(2), 64, &v, &why) == 0 && v == -1, "another peer");
    /* One turn later still not; two turns later the oldest of the peer. */
    turns(&s, 1);
    CHECK(admit(&s, 6, v4(1), 64, &v, &why) == -EBUSY, "a fifth one turn later");
    turns(&s, 1);
    CHECK(admit(&s, 6, v4(1), 64, &v, &why) == 0 && v == 0 && why == TOOL_SLOTS_PER_PEER,
          "a fifth two turns later takes the peer's oldest: %d", v);
    /* Busy slots never go: with 1, 2, 3 busy and 6 new, nothing may. */
    for (int i = 1; i < 4; i++)
        tool_slots_set_idle(&s, &pool[i], false);
    CHECK(admit(&s, 7, v4(1), 64, &v, &why) == -EBUSY, "busy and new slots stay");
    turns(&s, 2);
    CHECK(admit(&s, 7, v4(1), 64, &v, &why) == 0 && v == 6, "then the idle one: %d", v);
    /* A slot idle again is the newest idle one: 1 back to idle goes after
     * 7 (which is new again, so 1 goes). */
    tool_slots_set_idle(&s, &pool[1], true);
    turns(&s, 2);
    CHECK(admit(&s, 8, v4(1), 64, &v, &why) == 0 && v == 7, "longest idle first: %d", v);
    /* Then 1 (admitted long ago, idle since), not 8 (new). */
    CHECK(admit(&s, 9, v4(1), 64, &v, &why) == 0 && v == 1, "then 1: %d", v);
}

static void full(void)
{
    struct tool_slots s;
    fresh(&s, 4);
    enum tool_slots_why why;
    int v;
    /* 8 slots: 4 of peer 1, 4 of peer 2. */
    for (int i = 0; i < 8; i++)
        CHECK(admit(&s, i, v4((unsigned char)(1 + i / 4)), 8, &v, &why) == 0 && v == -1,
              "slot %d", i);
    CHECK(admit(&s, 8, v4(9), 8, &v, &why) == -EBUSY && why == TOOL_SLOTS_FULL,
          "full, all new: refused");
    turns(&s, 2);
    /* Slot 0 was idle longest, unless busy: make 0 and 1 busy. */
    tool_slots_set_idle(&s, &pool[0], false);
    tool_slots_set_idle(&s, &pool[1], false);
    CHECK(admit(&s, 8, v4(9), 8, &v, &why) == 0 && v == 2 && why == TOOL_SLOTS_FULL,
          "full: the longest idle goes, of any peer: %d", v);
    /* A peer at its limit when full takes its own, not the oldest. */
    turns(&s, 2);
    CHECK(admit(&s, 9, v4(2), 8, &v, &why) == 0 && v == 4 && why == TOOL_SLOTS_PER_PEER,
          "its own oldest: %d", v);
    /* 0 idle again: now the newest idle, so 3 goes before it. */
    tool_slots_set_idle(&s, &pool[0], true);
    turns(&s, 2);
    CHECK(admit(&s, 10, v4(9), 8, &v, &why) == 0 && v == 3, "3 before 0: %d", v);
    /* A cap lowered below the count: still one out for one in. */
    turns(&s, 2);
    CHECK(admit(&s, 11, v4(9), 4, &v, &why) == 0 && v >= 0 && s.count == 8,
          "cap below the count: %d, %d", v, s.count);
    /* Removing is NULL-tolerant and a no-op for a slot not admitted. */
    tool_slots_remove(&s, NULL);
    struct tool_slot stray = {0};
    tool_slots_remove(&s, &stray);
    CHECK_EQ_U(s.count, 8);
}

static void families(void)
{
    struct tool_slots s;
    fresh(&s, 1);
    enum tool_slots_why why;
    int v;
    struct tool_peer a = v4(1), b = {.family = 6}, u = {0};
    memcpy(b.addr, a.addr, 4); /* the same bytes, another family */
    CHECK(admit(&s, 0, a, 64, &v, &why) == 0, "v4");
    CHECK(admit(&s, 1, b, 64, &v, &why) == 0, "v6 with the same first bytes");
    CHECK(admit(&s, 2, u, 64, &v, &why) == 0, "unknown");
    CHECK(admit(&s, 3, u, 64, &v, &why) == -EBUSY, "unknown peers are one peer");
    /* Bytes past an IPv4 address do not count. */
    struct tool_peer a2 = a;
    a2.addr[10] = 7;
    CHECK(admit(&s, 4, a2, 64, &v, &why) == -EBUSY, "v4 compares 4 bytes");
}

/* A model: every slot's peer, whether idle, when admitted and when last
 * made idle (a counter), in arrays. */
static struct {
    bool in, idle;
    int peer;
    uint64_t born, idled;
} m[N];

static int model_victim(uint64_t turn, int peer, bool per_peer)
{
    int best = -1;
    for (int i = 0; i < N; i++)
        if (m[i].in && m[i].idle && turn - m[i].born >= 2 &&
            (!per_peer || m[i].peer == peer) && (best < 0 || m[i].idled < m[best].idled))
            best = i;
    return best;
}

static void random_walk(void)
{
    struct tool_slots s;
    fresh(&s, 4);
    memset(m, 0, sizeof(m));
    uint64_t x = 0x9e3779b97f4a7c15ull, clock = 0;
    const int cap = 24, peers = 12;
    int admitted = 0, victims = 0, refused = 0;
    for (int step = 0; step < 200000; step++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int i = (int)(x % N), op = (int)((x >> 20) % 10);
        if (op < 4 && !m[i].in) {
            int peer = (int)((x >> 32) % peers), count = 0, of_peer = 0;
            for (int k = 0; k < N; k++)
                if (m[k].in) {
                    count++;
                    of_peer += m[k].peer == peer;
                }
            int want = -2; /* -2: room, -1: refused, else the victim */
            if (of_peer >= 4)
                want = model_victim(s.turn, peer, true);
            else if (count >= cap)
                want = model_victim(s.turn, peer, false);
            enum tool_slots_why why;
            int v;
            int r = admit(&s, i, v4((unsigned char)(1 + peer)), cap, &v, &why);
            admitted += r == 0;
            victims += r == 0 && v >= 0;
            refused += r < 0;
            if (want == -1) {
                CHECK(r == -EBUSY, "step %d: admitted, the model refuses", step);
            } else {
                CHECK(r == 0 && v == (want == -2 ? -1 : want),
                      "step %d: r %d victim %d, the model's %d", step, r, v, want);
                if (r == 0) {
                    if (v >= 0)
                        m[v].in = false;
                    m[i].in = m[i].idle = true;
                    m[i].peer = peer;
                    m[i].born = s.turn;
                    m[i].idled = ++clock;
                }
            }
        } else if (op < 6 && m[i].in) {
            bool idle = (x >> 40) & 1;
            tool_slots_set_idle(&s, &pool[i], idle);
            if (idle && !m[i].idle)
                m[i].idled = ++clock;
            m[i].idle = idle;
        } else if (op == 6 && m[i].in) {
            tool_slots_remove(&s, &pool[i]);
            m[i].in = false;
        } else if (op >= 7) {
            tool_slots_turn(&s);
        }
        int count = 0;
        for (int k = 0; k < N; k++)
            count += m[k].in;
        if (s.count != count || count > cap) {
            CHECK(0, "step %d: %d slots, the model %d (cap %d)", step, s.count, count,
                  cap);
            return;
        }
    }
    /* The walk met every case often. */
    CHECK(admitted > 1000 && victims > 1000 && refused > 1000,
          "random walk: %d admitted, %d of them with a victim, %d refused", admitted,
          victims, refused);
    printf("random walk: %d admitted, %d of them with a victim, %d refused\n", admitted,
           victims, refused);
}

int main(void)
{
    per_peer();
    full();
    families();
    random_walk();
    return check_report("test_metrics_slots");
}
