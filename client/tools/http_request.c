/* SPDX-License-Identifier: Apache-2.0 */
/* An HTTP/1.x request head parser (RFC 9112), stateless: each call parses
 * the bytes from the start again, so a partial head costs nothing to keep
 * and its faults are found in the bytes that show them. A head is at most
 * a few KiB, so parsing again is cheap. */
#include "client/tools/http_request.h"

#include <errno.h>
#include <string.h>

#define MAX_HEADERS 100

/* tchar of RFC 9110: the characters of methods and header names. */
static bool tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A header value's characters: visible ASCII, space, tab, and bytes above
 * 0x7f (obs-text). */
static bool vchar_or_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || (c > 0x20 && c != 0x7f);
}

static int fail(const char **why, int e, const char *text)
{
    if (why)
        *why = text;
    return e;
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool name_is(const char *s, size_t n, const char *name)
{
    if (strlen(name) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (lower(s[i]) != name[i])
            return false;
    return true;
}

/* The request line, complete (n bytes, no line end) or not (its first n
 * bytes so far). 1 when complete and valid, 0 when valid so far. */
static int request_line(const char *s, size_t n, bool complete,
                        struct tool_http_request *rq, const char **why)
{
    size_t i = 0, m = 0;
    while (i < n && s[i] != ' ') {
        if (!tchar((unsigned char)s[i]))
            return fail(why, -EINVAL, "the method is not a token");
        i++;
    }
    m = i;
    if (m >= sizeof(rq->method))
        return fail(why, -EINVAL, "the method is too long");
    if (i == n)
        return complete ? fail(why, -EINVAL, "the request line has no target") : 0;
    if (m == 0)
        return fail(why, -EINVAL, "the request line has no method");
    size_t t0 = ++i;
    while (i < n && s[i] != ' ') {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f)
            return fail(why, -EINVAL, "the target holds a character URIs do not");
        i++;
    }
    size_t t1 = i;
    if (i == n)
        return complete ? fail(why, -EINVAL, "the request line has no HTTP version")
                        : 0;
    if (t1 == t0)
        return fail(why, -EINVAL, "the request line has no target");
    i++;
    static const char proto[] = "HTTP/";
    size_t v = n - i;
    for (size_t k = 0; k < v && k < 5; k++)
        if (s[i + k] != proto[k])
            return fail(why, -EINVAL, "the request line does not end in HTTP/x.y");
    if (v > 5 && !(s[i + 5] >= '0' && s[i + 5] <= '9'))
        return fail(why, -EINVAL, "the HTTP version is not a number");
    if (v > 6 && s[i + 6] != '.')
        return fail(why, -EINVAL, "the HTTP version is not x.y");
    if (v > 7 && !(s[i + 7] >= '0' && s[i + 7] <= '9'))
        return fail(why, -EINVAL, "the HTTP version is not x.y");
    if (v > 8)
        return fail(why, -EINVAL, "the request line does not end after its version");
    if (!complete)
        return 0;
    if (v != 8)
        return fail(why, -EINVAL, "the request line does not end in HTTP/x.y");
    if (s[i + 5] != '1')
        return fail(why, -EPROTONOSUPPORT, "only HTTP/1.x is served");

    /* The target's path: origin form, absolute form or "*". */
    const char *t = s + t0;
    size_t tn = t1 - t0, p0 = 0;
    if (tn == 1 && t[0] == '*') {
        p0 = 0;
    } else if (t[0] != '/') {
        size_t sch = tn >= 7 && name_is(t, 7, "http://")    ? 7
                     : tn >= 8 && name_is(t, 8, "https://") ? 8
                                                             : 0;
        if (!sch)
            return fail(why, -EINVAL, "the target is neither a path nor a URL");
        p0 = sch;
        while (p0 < tn && t[p0] != '/' && t[p0] != '?' && t[p0] != '#')
            p0++;
        if (p0 == sch)
            return fail(why, -EINVAL, "the URL has no host");
    }
    size_t p1 = p0;
    while (p1 < tn && t[p1] != '?' && t[p1] != '#')
        p1++;
    if (p1 - p0 >= sizeof(rq->path))
        return fail(why, -ENAMETOOLONG, "the target's path is too long");
    memcpy(rq->method, s, m);
    rq->method[m] = '\0';
    if (p1 == p0) { /* a URL without a path, or only a query */
        strcpy(rq->path, "/");
    } else {
        memcpy(rq->path, t + p0, p1 - p0);
        rq->path[p1 - p0] = '\0';
    }
    rq->minor = s[i + 7] - '0';
    return 1;
}

/* What the headers said so far. */
struct heads {
    int hosts;
    bool close, keep, te, has_cl;
    unsigned long long cl;
    int count;
};

/* Connection: a comma-separated list of options. */
static void connection(const char *v, size_t n, struct heads *h)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t a = i;
        while (i < n && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
            i++;
        if (name_is(v + a, i - a, "close"))
            h->close = true;
        else if (name_is(v + a, i - a, "keep-alive"))
            h->keep = true;
    }
}

/* One header line, complete or as far as it came. 1 when complete and
 * taken, 0 when valid so far. */
static int header_line(const char *s, size_t n, bool complete, struct heads *h,
                       const char **why)
{
    if (n && (s[0] == ' ' || s[0] == '\t'))
        return fail(why, -EINVAL, "a folded header line (obsolete, refused)");
    size_t i = 0;
    while (i < n && s[i] != ':') {
        if (!tchar((unsigned char)s[i]))
            return fail(why, -EINVAL, i && (s[i] == ' ' || s[i] == '\t')
                                          ? "whitespace before a header's colon"
                                          : "a header name is not a token");
        i++;
    }
    if (i == n)
        return complete ? fail(why, -EINVAL, "a header line without a colon") : 0;
    if (i == 0)
        return fail(why, -EINVAL, "a header without a name");
    size_t name = i++;
    for (size_t k = i; k < n; k++)
        if (!vchar_or_ws((unsigned char)s[k]))
            return fail(why, -EINVAL, "a control character in a header value");
    if (!complete)
        return 0;
    if (++h->count > MAX_HEADERS)
        return fail(why, -E2BIG, "more than 100 header lines");
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    size_t end = n;
    while (end > i && (s[end - 1] == ' ' || s[end - 1] == '\t'))
        end--;
    const char *v = s + i;
    size_t vn = end - i;
    if (name_is(s, name, "host")) {
        h->hosts++;
    } else if (name_is(s, name, "connection")) {
        connection(v, vn, h);
    } else if (name_is(s, name, "transfer-encoding")) {
        h->te = true;
    } else if (name_is(s, name, "content-length")) {
        unsigned long long cl = 0;
        if (vn == 0 || vn > 18)
            return fail(why, -EINVAL, "Content-Length is not a length");
        for (size_t k = 0; k < vn; k++) {
            if (v[k] < '0' || v[k] > '9')
                return fail(why, -EINVAL, "Content-Length is not a length");
            cl = cl * 10 + (unsigned)(v[k] - '0');
        }
        if (h->has_cl && h->cl != cl)
            return fail(why, -EINVAL, "two Content-Lengths that differ");
        h->has_cl = true;
        h->cl = cl;
    }
    return 1;
}

int tool_http_parse(const char *buf, size_t len, size_t max_head,
                    struct tool_http_request *out, const char **why)
{
    struct tool_http_request rq;
    memset(&rq, 0, sizeof(rq));
    struct heads h = {0};
    size_t lim = len < max_head ? len : max_head;
    size_t i = 0;
    /* Empty lines before the request line may be ignored (RFC 9112 2.2). */
    while (i < lim && (buf[i] == '\n' || (buf[i] == '\r' && i + 1 < lim &&
                                          buf[i + 1] == '\n')))
        i += buf[i] == '\r' ? 2 : 1;
    bool first = true;
    while (i < lim) {
        /* One line: up to LF; a CR is only allowed right before it. */
        size_t a = i, e = i;
        while (e < lim && buf[e] != '\n') {
            unsigned char c = (unsigned char)buf[e];
            if (c == '\r' && e + 1 < lim && buf[e + 1] != '\n')
                return fail(why, -EINVAL, "a CR that does not end a line");
            if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
                return fail(why, -EINVAL, "a control character in the request head");
            e++;
        }
        bool complete = e < lim;
        size_t n = e - a;
        if (complete && n && buf[e - 1] == '\r')
            n--;
        else if (!complete && n && buf[e - 1] == '\r')
            n--; /* its LF may come next */
        int r;
        if (first) {
            r = request_line(buf + a, n, complete, &rq, why);
        } else if (complete && n == 0) {
            /* The blank line: the head is whole. */
            if (rq.minor >= 1 && h.hosts == 0)
                return fail(why, -EINVAL, "an HTTP/1.1 request without Host");
            if (h.hosts > 1)
                return fail(why, -EINVAL, "more than one Host");
            if (h.te && h.has_cl)
                return fail(why, -EINVAL, "both Transfer-Encoding and Content-Length");
            rq.keep_alive = !h.close && (rq.minor >= 1 || h.keep);
            rq.has_body = h.te || (h.has_cl && h.cl > 0);
            rq.head_bytes = e + 1;
            *out = rq;
            return 1;
        } else {
            r = header_line(buf + a, n, complete, &h, why);
        }
        if (r < 0)
            return r;
        if (!complete)
            break;
        first = false;
        i = e + 1;
    }
    if (len >= max_head)
        return fail(why, -E2BIG, "the request head is larger than this server takes");
    return 0;
}

int tool_http_status_for(int err)
{
    switch (err) {
    case -E2BIG: return 431;
    case -ENAMETOOLONG: return 414;
    case -EPROTONOSUPPORT: return 505;
    default: return 400;
    }
}

const char *tool_http_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}
