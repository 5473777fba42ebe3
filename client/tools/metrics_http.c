/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics endpoint: a small HTTP/1.1 server on libuv. Each connection
 * takes one request at a time (pipelined ones wait in its buffer); a head
 * is at most MAX_HEAD bytes and must come within HEAD_MS; an idle
 * keep-alive connection goes after IDLE_MS. Scrapes that arrive while a
 * status fetch runs are answered by that fetch, so vramd sees one status
 * request however many scrapers there are. Nothing a peer sends can make
 * the server stop: a bad request gets its status and the connection is
 * closed, and the server goes on.
 *
 * Nor can peers keep the scraper out by holding connections: one peer
 * address gets PER_PEER of the MAX_CONNS slots, and a connection that
 * finds no room takes the slot of the one that has been idle longest (no
 * request being served: never sent one, sending its head, between
 * keep-alive requests, or lingering after the answer), of its own peer
 * when its peer is the one at its limit (metrics_slots.c). A scraper sends
 * its request at once and is served; what holds a slot without a request
 * is pushed out by whoever comes next. */
#include "client/tools/metrics_http.h"
#include "client/tools/metrics_slots.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "client/tools/fetcher.h"
#include "client/tools/http_request.h"
#include "client/tools/metrics_text.h"
#include "platform/platform.h"
#include "client/tools/textbuf.h"

/* The bounds (docs/metrics.md and README, Security, say the same). A
 * scrape takes one connection for a few milliseconds; these leave room
 * for many scrapers and bound what anyone else can hold. */
#define MAX_HEAD 8192        /* bytes of a request head */
#define MAX_CONNS 64         /* connections served at once */
#define PER_PEER 4           /* of them from one peer address */
#define HEAD_MS 5000         /* to send a whole head: from the accept for a
                                connection's first request, from its first
                                byte for a kept-alive one's next */
#define IDLE_MS 10000        /* a keep-alive connection without a request */
#define BUSY_MS 60000        /* to fetch and to take a response */
#define LINGER_MS 2000       /* after our FIN, for the peer's */
/* Handles kept free for everything but connections (stdio, the loop's
 * own, the connection to vramd, libuv's spare for accepting when out of
 * fds): with a low fd limit, fewer connections are served, so that
 * accepting never runs out of fds (libuv would then drop every waiting
 * connection). 14 are in use with the connection to vramd and none from
 * peers (measured on Linux), so there is room to spare. */
#define FD_RESERVE 32
/* Connections the kernel holds for us while we are not accepting (a pause,
 * or no CPU for a while under a flood): one that finds the queue full has
 * its SYN dropped and tries again after 1 s. Linux caps it at somaxconn
 * (4096 by default). */
#define BACKLOG 1024
#define TELL_MS 10000        /* at most one line a while about turning
                                connections away */

/* A response body, shared by every connection a fetch answers. */
struct body {
    int refs;
    size_t len;
    char data[];
};

static struct body *body_new(const char *text, size_t len)
{
    struct body *b = malloc(sizeof(*b) + len + 1);
    if (!b)
        return NULL;
    b->refs = 1;
    b->len = len;
    memcpy(b->data, text, len);
    b->data[len] = '\0';
    return b;
}

static void body_unref(struct body *b)
{
    if (b && --b->refs == 0)
        free(b);
}

enum conn_state {
    C_IDLE,     /* between requests (a pipelined one may be buffered) */
    C_HEAD,     /* part of a head buffered */
    C_WAITING,  /* a scrape waits for the fetch */
    C_WRITING,  /* a response is being written */
    C_DRAINING, /* our side is shut; the peer's bytes are dropped */
};

struct server;

struct conn {
    struct tool_slot slot; /* first: a slot is its connection */
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shut;
    struct server *srv;
    struct conn *wait_next;        /* waiting for the fetch */
    enum conn_state state;
    bool reading, closing, close_after;
    bool fresh;                    /* no request yet: HEAD_MS runs from the
                                      accept */
    int open_handles;
    struct tool_http_request rq;
    size_t len;
    char buf[MAX_HEAD];
};

struct response {
    uv_write_t w;
    struct conn *c;
    struct body *body;
    size_t head_len;
    char head[384];
};

struct server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_signal_t sigint, sigterm;
    uv_check_t turns;   /* counts the loop's turns for the slots */
    uv_idle_t spin;     /* keeps the turns coming in a pause (take_pending) */
    int pending;        /* connections libuv took that wait for a slot */
    uv_timer_t tell;    /* the next line about connections turned away */
    struct tool_fetcher *fetcher;
    struct tool_slots slots;
    struct conn *waiting, **waiting_tail;
    bool stopping;
    /* Connections turned away (refused, or closed to make room) since the
     * last line about them, and when that was. */
    unsigned long refused, evicted;
    uint64_t told_ms;
    bool told_once;
    char last_peer[64];
    int cap, cap_told; /* connections at once now, and as last logged */
    const char *last_why;
    int up; /* -1 not known yet, 0 down, 1 up: logged when it changes */
    const char *socket;
};

static void conn_close(struct conn *c);
static void conn_process(struct conn *c);

static void conn_handle_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->open_handles > 0)
        return;
    free(c);
}

static void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    struct server *s = c->srv;
    /* Out of the wait list, if there. */
    for (struct conn **p = &s->waiting; *p; p = &(*p)->wait_next)
        if (*p == c) {
            *p = c->wait_next;
            if (!*p)
                s->waiting_tail = p;
            break;
        }
    tool_slots_remove(&s->slots, &c->slot);
    uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
}

/* A connection is idle (it may go to make room for another) while no
 * request of it is being served. */
static void set_state(struct conn *c, enum conn_state st)
{
    c->state = st;
    tool_slots_set_idle(&c->srv->slots, &c->slot,
                        st == C_IDLE || st == C_HEAD || st == C_DRAINING);
}

static void on_timer(uv_timer_t *t);

static void arm(struct conn *c, uint64_t ms)
{
    uv_timer_start(&c->timer, on_timer, ms, 0);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct conn *c = h->data;
    (void)hint;
    if (c->state == C_DRAINING) {
        /* Dropped: read into the start of the buffer. */
        *buf = uv_buf_init(c->buf, sizeof(c->buf));
        return;
    }
    *buf = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len));
}

static void read_stop(struct conn *c)
{
    if (c->reading)
        uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

static void read_start(struct conn *c)
{
    if (!c->reading && !c->closing &&
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
        c->reading = true;
}

static void on_shutdown(uv_shutdown_t *rq, int status)
{
    struct conn *c = rq->data;
    if (status < 0 || c->closing) {
        conn_close(c);
        return;
    }
    /* Reading on until the peer's FIN (or LINGER_MS) keeps what it sent
     * after our response from turning our close into a reset, which could
     * destroy the response before the peer read it. */
    set_state(c, C_DRAINING);
    c->len = 0;
    arm(c, LINGER_MS);
    read_start(c);
}

static void on_written(uv_write_t *w, int status)
{
    struct response *r = (struct response *)w;
    struct conn *c = r->c;
    body_unref(r->body);
    free(r);
    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (c->close_after) {
        read_stop(c);
        c->shut.data = c;
        if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
            conn_close(c);
        return;
    }
    /* Ready for the next request, which may be buffered already. */
    size_t used = c->rq.head_bytes;
    memmove(c->buf, c->buf + used, c->len - used);
    c->len -= used;
    set_state(c, C_IDLE);
    arm(c, IDLE_MS);
    read_start(c);
    conn_process(c);
}

/* Sends a response: status line, headers, and body (not for HEAD). */
static void respond(struct conn *c, int status, const char *type,
                    const char *extra, struct body *b, bool head_only)
{
    struct response *r = calloc(1, sizeof(*r));
    if (!r) {
        conn_close(c);
        return;
    }
    int n = snprintf(r->head, sizeof(r->head),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Cache-Control: no-store\r\n%sConnection: %s\r\n\r\n",
                     status, tool_http_reason(status), type, b->len,
                     extra ? extra : "", c->close_after ? "close" : "keep-alive");
    if (n < 0 || (size_t)n >= sizeof(r->head)) {
        free(r);
        conn_close(c);
        return;
    }
    r->head_len = (size_t)n;
    r->c = c;
    r->body = b;
    b->refs++;
    uv_buf_t bufs[2] = {uv_buf_init(r->head, (unsigned)r->head_len),
                        uv_buf_init(b->data, (unsigned)b->len)};
    set_state(c, C_WRITING);
    arm(c, BUSY_MS);
    /* No more reading until the response is out: a pipelined request
     * stays in the kernel meanwhile (what the peer sends is bounded by
     * its buffers, not ours). */
    read_stop(c);
    if (uv_write(&r->w, (uv_stream_t *)&c->tcp, bufs, head_only ? 1 : 2,
                 on_written) < 0) {
        body_unref(b);
        free(r);
        conn_close(c);
    }
}

/* A short text answer (errors, 404, 405). */
static void respond_text(struct conn *c, int status, const char *extra,
                         const char *fmt, const char *arg, bool head_only)
{
    char text[512];
    int n = snprintf(text, sizeof(text), fmt, status, tool_http_reason(status),
                     arg ? arg : "");
    struct body *b = body_new(text, n < 0 ? 0 : (size_t)n < sizeof(text) ? (size_t)n
                                                                  : sizeof(text) - 1);
    if (!b) {
        conn_close(c);
        return;
    }
    respond(c, status, "text/plain; charset=utf-8", extra, b, head_only);
    body_unref(b);
}

static void fetch_start(struct server *s);

static void conn_process(struct conn *c)
{
    if (c->closing || (c->state != C_IDLE && c->state != C_HEAD) || c->len == 0)
        return;
    const char *why = NULL;
    struct tool_http_request rq;
    int r = tool_http_parse(c->buf, c->len, MAX_HEAD, &rq, &why);
    if (r == 0) {
        if (c->len == sizeof(c->buf)) { /* cannot happen: parse says E2BIG */
            conn_close(c);
            return;
        }
        /* The head's deadline runs from the accept (a first request) or
         * from its first byte (the next one on a kept connection): more
         * bytes do not extend it, so a peer sending a byte now and then is
         * not served. */
        if (c->state == C_IDLE && !c->fresh)
            arm(c, HEAD_MS);
        set_state(c, C_HEAD);
        return;
    }
    c->fresh = false;
    if (r < 0) {
        /* The rest of the stream cannot be framed: answer and close. */
        c->close_after = true;
        respond_text(c, tool_http_status_for(r), NULL, "%d %s: %s\n", why, false);
        return;
    }
    c->rq = rq;
    /* A body is not read: the connection ends after the answer. */
    c->close_after = !rq.keep_alive || rq.has_body;
    bool head = strcmp(rq.method, "HEAD") == 0;
    if (strcmp(rq.path, "/metrics") != 0) {
        respond_text(c, 404, NULL, "%d %s: %sonly /metrics is served here\n", "",
                     head);
        return;
    }
    if (!head && strcmp(rq.method, "GET") != 0) {
        respond_text(c, 405, "Allow: GET, HEAD\r\n",
                     "%d %s: %s/metrics takes GET and HEAD\n", "", false);
        return;
    }
    set_state(c, C_WAITING);
    arm(c, BUSY_MS);
    read_stop(c);
    c->wait_next = NULL;
    *c->srv->waiting_tail = c;
    c->srv->waiting_tail = &c->wait_next;
    fetch_start(c->srv);
}

/* A head that stays incomplete, a fetch or write that takes too long, an
 * idle keep-alive connection or a lingering one: the end. */
static void on_timer(uv_timer_t *t)
{
    struct conn *c = t->data;
    if (c->state == C_HEAD) {
        c->close_after = true;
        respond_text(c, 408, NULL, "%d %s: %sthe request head did not come in time\n",
                     "", false);
        return;
    }
    conn_close(c);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    struct conn *c = st->data;
    (void)buf;
    if (n == 0 || c->closing)
        return;
    if (n < 0) { /* the peer went (EOF included), or the buffer is full */
        conn_close(c);
        return;
    }
    if (c->state == C_DRAINING)
        return;
    c->len += (size_t)n;
    conn_process(c);
}

static void log_up(struct server *s, int up, const char *why)
{
    if (s->up == up)
        return;
    if (up)
        fprintf(stderr, "vramctl metrics: reading vramd on %s\n", s->socket);
    else
        fprintf(stderr, "vramctl metrics: vramd is not readable: %s (scrapes "
                "answer vramd_up 0 until it is)\n", why);
    s->up = up;
}

static void on_fetched(struct tool_fetcher *f, void *ud)
{
    struct server *s = ud;
    const struct tool_snapshot *snap = NULL;
    const char *why = NULL;
    int e = tool_fetcher_result(f, &snap, &why);
    struct tool_text t = {0};
    int status = 200;
    if (e == 0) {
        tool_metrics_render(&t, &snap->st, tool_fetcher_seconds(f));
        log_up(s, 1, NULL);
    } else {
        /* 200 all the same, as exporters answer when what they read is
         * down: the scraper stores vramd_up 0 (a 503 stores nothing). */
        tool_metrics_render_down(&t, why);
        log_up(s, 0, why);
    }
    size_t len = 0;
    char *text = tool_text_take(&t, &len);
    struct body *b = text ? body_new(text, len) : NULL;
    free(text);
    /* Everyone waiting gets this fetch's answer. */
    struct conn *c = s->waiting;
    s->waiting = NULL;
    s->waiting_tail = &s->waiting;
    while (c) {
        struct conn *next = c->wait_next;
        c->wait_next = NULL;
        if (!b) {
            conn_close(c);
        } else {
            respond(c, status, TOOL_METRICS_CONTENT_TYPE, NULL, b,
                    strcmp(c->rq.method, "HEAD") == 0);
        }
        c = next;
    }
    body_unref(b);
}

static void fetch_start(struct server *s)
{
    if (s->stopping || !s->waiting || tool_fetcher_busy(s->fetcher))
        return;
    if (tool_fetcher_start(s->fetcher) < 0)
        on_fetched(s->fetcher, s); /* answers vramd_up 0 with the reason */
}

static void free_handle(uv_handle_t *h)
{
    free(h);
}

/* A connection there is no memory for is still taken and closed at once:
 * libuv stops watching a listener whose last connection was left
 * unaccepted. */
static void reject(uv_stream_t *l)
{
    struct server *s = l->data;
    uv_tcp_t *h = malloc(sizeof(*h));
    if (!h || uv_tcp_init(s->loop, h) < 0) {
        free(h);
        return;
    }
    uv_accept(l, (uv_stream_t *)h);
    uv_close((uv_handle_t *)h, free_handle);
}

static struct conn *conn_of(struct tool_slot *x)
{
    return (struct conn *)(void *)((char *)x - offsetof(struct conn, slot));
}

/* The peer's address, an IPv4-mapped IPv6 one as its IPv4 address. */
static void peer_of(uv_tcp_t *t, struct tool_peer *p)
{
    static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    struct sockaddr_storage ss;
    int n = sizeof(ss);
    memset(p, 0, sizeof(*p));
    if (uv_tcp_getpeername(t, (struct sockaddr *)&ss, &n) != 0)
        return;
    if (ss.ss_family == AF_INET) {
        p->family = 4;
        memcpy(p->addr, &((const struct sockaddr_in *)&ss)->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        const unsigned char *a = ((const struct sockaddr_in6 *)&ss)->sin6_addr.s6_addr;
        if (memcmp(a, v4mapped, sizeof(v4mapped)) == 0) {
            p->family = 4;
            memcpy(p->addr, a + 12, 4);
        } else {
            p->family = 6;
            memcpy(p->addr, a, 16);
        }
    }
}

/* How many connections may be served at once: MAX_CONNS, or fewer where
 * the limit on open files would not leave FD_RESERVE for the rest. Read
 * at each connection: libvram raises the soft limit to the hard one when
 * it first connects to vramd. */
static int conn_cap(struct server *s)
{
    uint64_t lim = vp_handle_limit();
    int cap = lim >= (uint64_t)FD_RESERVE + MAX_CONNS ? MAX_CONNS
              : lim > (uint64_t)FD_RESERVE + 1        ? (int)(lim - FD_RESERVE)
                                                       : 1;
    s->cap = cap;
    if (cap < MAX_CONNS && cap != s->cap_told) {
        fprintf(stderr, "vramctl metrics: serving at most %d connections at once "
                "(the limit on open files is %llu)\n", cap, (unsigned long long)lim);
        s->cap_told = cap;
    }
    return cap;
}

/* One line now and then about connections turned away, so that an
 * operator learns of a flood without a line per connection. */
static void tell_now(struct server *s)
{
    if (!s->refused && !s->evicted)
        return;
    fprintf(stderr, "vramctl metrics: too many connections: %lu refused, %lu idle "
            "ones closed to make room (at most %d per address and %d in all; the "
            "last for %s, %s)\n", s->refused, s->evicted, PER_PEER, s->cap,
            s->last_peer, s->last_why);
    s->refused = s->evicted = 0;
    s->told_ms = uv_now(s->loop);
    s->told_once = true;
}

static void on_tell(uv_timer_t *t)
{
    tell_now(t->data);
}

/* p: the peer whose connection came; refused: it was (or else another
 * was closed to make room). */
static void turned_away(struct server *s, const struct tool_peer *p, bool refused,
                        enum tool_slots_why why)
{
    if (refused)
        s->refused++;
    else
        s->evicted++;
    s->last_why = why == TOOL_SLOTS_PER_PEER ? "which had its limit"
                  : why == TOOL_SLOTS_FULL   ? "with every slot taken"
                                             : "out of fds";
    int af = p->family == 4 ? AF_INET : AF_INET6;
    if (!p->family || uv_inet_ntop(af, p->addr, s->last_peer, sizeof(s->last_peer)) != 0)
        snprintf(s->last_peer, sizeof(s->last_peer), "an unknown address");
    if (uv_is_active((uv_handle_t *)&s->tell))
        return;
    uint64_t now = uv_now(s->loop);
    if (!s->told_once || now - s->told_ms >= TELL_MS)
        tell_now(s);
    else
        uv_timer_start(&s->tell, on_tell, s->told_ms + TELL_MS - now, 0);
}

static void accept_one(struct server *s);
static void on_spin(uv_idle_t *h);

/* Takes the connections libuv has for us while there is a slot for each,
 * free or one that may go. Otherwise accepting pauses: libuv stops
 * watching the listener while a connection it took waits for us
 * (uv_accept starts it again), and the others wait in the backlog instead
 * of being turned away. A pause ends at the end of a turn of the loop that
 * made room: the slots were all serving requests (their ends are events),
 * or all idle ones came in the last two turns (an idle handle keeps the
 * turns coming, for those two turns). */
static void take_pending(struct server *s)
{
    while (s->pending > 0 && !s->stopping) {
        if (s->slots.count >= conn_cap(s) && !tool_slots_oldest_idle(&s->slots)) {
            if (s->slots.idle_head)
                uv_idle_start(&s->spin, on_spin);
            else
                uv_idle_stop(&s->spin);
            return;
        }
        s->pending--;
        accept_one(s);
    }
    uv_idle_stop(&s->spin);
}

static void on_spin(uv_idle_t *h)
{
    (void)h; /* only there to keep the loop from blocking in a pause */
}

static void on_turn(uv_check_t *h)
{
    struct server *s = h->data;
    tool_slots_turn(&s->slots);
    if (s->pending)
        take_pending(s);
}

static void on_connection(uv_stream_t *l, int status)
{
    struct server *s = l->data;
    if (s->stopping)
        return;
    if (status < 0) {
        /* Out of fds even for libuv's spare one (with it, libuv closes what
         * waits and does not call here): an idle connection goes, so that
         * the accept libuv tries next finds an fd instead of spinning. */
        struct tool_slot *v = tool_slots_oldest_idle(&s->slots);
        if ((status == UV_EMFILE || status == UV_ENFILE) && v) {
            turned_away(s, &v->peer, false, TOOL_SLOTS_ROOM);
            conn_close(conn_of(v));
        }
        return;
    }
    /* One on POSIX (libuv waits for us before it accepts another); on
     * Windows, as many as it had accepts outstanding. */
    s->pending++;
    take_pending(s);
}

static void accept_one(struct server *s)
{
    uv_stream_t *l = (uv_stream_t *)&s->listener;
    struct conn *c = calloc(1, sizeof(*c));
    if (!c) {
        reject(l);
        return;
    }
    if (uv_tcp_init(s->loop, &c->tcp) < 0) {
        free(c);
        reject(l);
        return;
    }
    uv_timer_init(s->loop, &c->timer);
    c->srv = s;
    c->tcp.data = c->timer.data = c;
    c->open_handles = 2;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    peer_of(&c->tcp, &c->slot.peer);
    struct tool_slot *victim = NULL;
    enum tool_slots_why why;
    if (tool_slots_admit(&s->slots, &c->slot, conn_cap(s), &victim, &why) < 0) {
        /* Its peer's slots all serve requests, or came just now. */
        turned_away(s, &c->slot.peer, true, why);
        conn_close(c);
        return;
    }
    if (victim) {
        turned_away(s, &c->slot.peer, false, why);
        conn_close(conn_of(victim));
    }
    c->fresh = true;
    set_state(c, C_IDLE);
    arm(c, HEAD_MS);
    read_start(c);
}

static void stop(struct server *s)
{
    if (s->stopping)
        return;
    s->stopping = true;
    uv_close((uv_handle_t *)&s->listener, NULL);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->turns, NULL);
    uv_close((uv_handle_t *)&s->spin, NULL);
    tell_now(s);
    uv_close((uv_handle_t *)&s->tell, NULL);
    while (s->slots.all)
        conn_close(conn_of(s->slots.all));
    tool_fetcher_free(s->fetcher); /* goes once a running fetch ends */
    s->fetcher = NULL;
}

static void on_signal(uv_signal_t *h, int sig)
{
    (void)sig;
    stop(h->data);
}

int tool_listen_parse(const char *spec, struct tool_listen_addr *out)
{
    struct tool_listen_addr a;
    memset(&a, 0, sizeof(a));
    const char *colon;
    if (spec[0] == '[') {
        const char *end = strchr(spec, ']');
        if (!end || end[1] != ':' || (size_t)(end - spec - 1) >= sizeof(a.host) ||
            end == spec + 1)
            return -EINVAL;
        memcpy(a.host, spec + 1, (size_t)(end - spec - 1));
        colon = end + 1;
    } else {
        colon = strrchr(spec, ':');
        if (!colon || (size_t)(colon - spec) >= sizeof(a.host) ||
            memchr(spec, ':', (size_t)(colon - spec)))
            return -EINVAL; /* an IPv6 address needs its brackets */
        memcpy(a.host, spec, (size_t)(colon - spec));
        if (!a.host[0])
            strcpy(a.host, "0.0.0.0");
        else if (strcmp(a.host, "localhost") == 0)
            strcpy(a.host, "127.0.0.1");
    }
    const char *p = colon + 1;
    unsigned long port = 0;
    if (!*p || strlen(p) > 5)
        return -EINVAL;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        port = port * 10 + (unsigned long)(*p - '0');
    }
    if (port > 65535)
        return -EINVAL;
    struct sockaddr_in6 s6;
    struct sockaddr_in s4;
    if (uv_ip4_addr(a.host, 0, &s4) != 0 && uv_ip6_addr(a.host, 0, &s6) != 0)
        return -EINVAL;
    a.port = (uint16_t)port;
    *out = a;
    return 0;
}

/* The address the listener got, as "127.0.0.1:8726" or "[::1]:8726". */
static void bound_name(uv_tcp_t *l, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    int n = sizeof(ss);
    char host[64] = "?";
    int port = 0;
    bool v6 = false;
    if (uv_tcp_getsockname(l, (struct sockaddr *)&ss, &n) == 0) {
        if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
            uv_ip6_name(a, host, sizeof(host));
            port = ntohs(a->sin6_port);
            v6 = true;
        } else {
            const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
            uv_ip4_name(a, host, sizeof(host));
            port = ntohs(a->sin_port);
        }
    }
    snprintf(buf, len, v6 ? "[%s]:%d" : "%s:%d", host, port);
}

int tool_metrics_serve(const struct tool_listen_addr *addr, const char *socket,
                       FILE *announce)
{
    /* A peer that goes while its response is written must not end us. */
    vp_process_init();
    uv_loop_t loop;
    int e = uv_loop_init(&loop);
    if (e < 0) {
        fprintf(stderr, "vramctl metrics: %s\n", uv_strerror(e));
        return e;
    }
    struct server s = {.loop = &loop, .up = -1, .socket = socket, .cap = MAX_CONNS};
    s.waiting_tail = &s.waiting;
    tool_slots_init(&s.slots, PER_PEER);
    struct tool_fetcher_options fo = {.socket = socket, .name = "vramctl-metrics",
                                      .timeout_ms = 10000, .done = on_fetched,
                                      .ud = &s};
    if ((e = tool_fetcher_new(&loop, &fo, &s.fetcher)) < 0) {
        fprintf(stderr, "vramctl metrics: %s\n", vram_strerror(e));
        uv_loop_close(&loop);
        return e;
    }
    union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
    } sa;
    if (uv_ip4_addr(addr->host, addr->port, &sa.in) != 0 &&
        uv_ip6_addr(addr->host, addr->port, &sa.in6) != 0) {
        fprintf(stderr, "vramctl metrics: '%s' is not an address\n", addr->host);
        e = -EINVAL;
        goto out;
    }
    uv_tcp_init(&loop, &s.listener);
    s.listener.data = &s;
    uv_signal_init(&loop, &s.sigint);
    uv_signal_init(&loop, &s.sigterm);
    s.sigint.data = s.sigterm.data = &s;
    uv_check_init(&loop, &s.turns);
    uv_idle_init(&loop, &s.spin);
    uv_timer_init(&loop, &s.tell);
    s.turns.data = s.tell.data = &s;
    /* libuv sets SO_REUSEADDR, so a restart finds the port free at once. */
    if ((e = uv_tcp_bind(&s.listener, &sa.sa, 0)) < 0 ||
        (e = uv_listen((uv_stream_t *)&s.listener, BACKLOG, on_connection)) < 0) {
        fprintf(stderr, "vramctl metrics: cannot listen on %s:%u: %s\n",
                addr->host, addr->port, uv_strerror(e));
        stop(&s);
        uv_run(&loop, UV_RUN_DEFAULT);
        goto out;
    }
    uv_check_start(&s.turns, on_turn);
    uv_signal_start(&s.sigint, on_signal, SIGINT);
    uv_signal_start(&s.sigterm, on_signal, SIGTERM);
    char name[96];
    bound_name(&s.listener, name, sizeof(name));
    if (announce) {
        fprintf(announce, "vramctl metrics: serving http://%s/metrics for vramd "
                "on %s\n", name, socket);
        fflush(announce);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    e = 0;
out:
    if (!s.stopping)
        tool_fetcher_free(s.fetcher);
    /* Every handle is closed and the last fetch has ended: uv_run returned
     * with nothing left to do. */
    uv_loop_close(&loop);
    return e;
}
