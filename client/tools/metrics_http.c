/* The metrics endpoint: a small HTTP/1.1 server on libuv. Each connection
 * takes one request at a time (pipelined ones wait in its buffer); a head
 * is at most MAX_HEAD bytes and must come within HEAD_MS; an idle
 * keep-alive connection goes after IDLE_MS. Scrapes that arrive while a
 * status fetch runs are answered by that fetch, so vramd sees one status
 * request however many scrapers there are. Nothing a peer sends can make
 * the server stop: a bad request gets its status and the connection is
 * closed, and the server goes on. */
#include "metrics_http.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "fetcher.h"
#include "http_request.h"
#include "metrics_text.h"
#include "platform.h"
#include "textbuf.h"

#define MAX_HEAD 8192        /* bytes of a request head */
#define MAX_CONNS 64         /* connections served at once */
#define HEAD_MS 10000        /* to send a whole head, once begun */
#define IDLE_MS 60000        /* a keep-alive connection without a request */
#define BUSY_MS 60000        /* to fetch and to take a response */
#define LINGER_MS 2000       /* after our FIN, for the peer's */

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
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shut;
    struct server *srv;
    struct conn *prev, *next;      /* the server's connections */
    struct conn *wait_next;        /* waiting for the fetch */
    enum conn_state state;
    bool reading, closing, close_after;
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
    struct tool_fetcher *fetcher;
    struct conn *conns;
    struct conn *waiting, **waiting_tail;
    int nconns;
    bool stopping;
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
    if (c->prev)
        c->prev->next = c->next;
    else if (s->conns == c)
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconns--;
    uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
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
    c->state = C_DRAINING;
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
    c->state = C_IDLE;
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
    c->state = C_WRITING;
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
        /* The head's deadline runs from its first byte: more bytes do not
         * extend it (a peer sending a byte now and then is not served). */
        if (c->state == C_IDLE)
            arm(c, HEAD_MS);
        c->state = C_HEAD;
        return;
    }
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
    c->state = C_WAITING;
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
                "answer 503 until it is)\n", why);
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
        status = 503;
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
        on_fetched(s->fetcher, s); /* answers 503 with the reason */
}

static void free_handle(uv_handle_t *h)
{
    free(h);
}

/* A connection not served (too many, or no memory for its buffer) is
 * still taken and closed at once: libuv stops watching a listener whose
 * last connection was left unaccepted. */
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

static void on_connection(uv_stream_t *l, int status)
{
    struct server *s = l->data;
    if (status < 0 || s->stopping)
        return;
    struct conn *c = s->nconns < MAX_CONNS ? calloc(1, sizeof(*c)) : NULL;
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
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    c->state = C_IDLE;
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
    while (s->conns)
        conn_close(s->conns);
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

/* The address the listener got, as "127.0.0.1:9464" or "[::1]:9464". */
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
    struct server s = {.loop = &loop, .up = -1, .socket = socket};
    s.waiting_tail = &s.waiting;
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
    /* libuv sets SO_REUSEADDR, so a restart finds the port free at once. */
    if ((e = uv_tcp_bind(&s.listener, &sa.sa, 0)) < 0 ||
        (e = uv_listen((uv_stream_t *)&s.listener, 128, on_connection)) < 0) {
        fprintf(stderr, "vramctl metrics: cannot listen on %s:%u: %s\n",
                addr->host, addr->port, uv_strerror(e));
        stop(&s);
        uv_run(&loop, UV_RUN_DEFAULT);
        goto out;
    }
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
