/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP request head parser of vramctl metrics --listen
 * (client/tools/http_request.c): what it takes, what it refuses and with
 * which status, that every prefix of a good head asks for more and of a bad
 * one never passes, and that random bytes are refused or wait, never read
 * past what was given (each input is a heap block of its exact size, so the
 * sanitizer build sees a byte too far). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "client/tools/http_request.h"

#define MAX 8192

static int parse(const char *s, size_t n, struct tool_http_request *rq,
                 const char **why)
{
    char *copy = malloc(n ? n : 1);
    REQUIRE(copy, "out of memory");
    memcpy(copy, s, n);
    int r = tool_http_parse(copy, n, MAX, rq, why);
    free(copy);
    return r;
}

/* A good head: complete at its end (with these fields), and every prefix
 * of it asks for more. */
static void good(const char *s, const char *method, const char *path, int minor,
                 bool keep, bool body)
{
    size_t n = strlen(s);
    struct tool_http_request rq;
    const char *why = "none";
    for (size_t k = 0; k < n; k++) {
        int r = parse(s, k, &rq, &why);
        CHECK(r == 0, "prefix %zu of %s: %d (%s)", k, s, r, why);
    }
    memset(&rq, 0x5a, sizeof(rq));
    int r = parse(s, n, &rq, &why);
    CHECK(r == 1, "%s: %d (%s)", s, r, why);
    if (r != 1)
        return;
    CHECK(strcmp(rq.method, method) == 0, "%s: method %s", s, rq.method);
    CHECK(strcmp(rq.path, path) == 0, "%s: path %s", s, rq.path);
    CHECK(rq.minor == minor, "%s: minor %d", s, rq.minor);
    CHECK(rq.keep_alive == keep, "%s: keep-alive %d", s, rq.keep_alive);
    CHECK(rq.has_body == body, "%s: body %d", s, rq.has_body);
    CHECK(rq.head_bytes == n, "%s: head %zu of %zu", s, rq.head_bytes, n);
}

/* A bad head: refused with err (status), and no prefix of it passes. */
static void bad(const char *s, size_t n, int err, int status)
{
    struct tool_http_request rq;
    memset(&rq, 0x5a, sizeof(rq));
    struct tool_http_request before = rq;
    const char *why = NULL;
    int r = parse(s, n, &rq, &why);
    CHECK(r == err, "%.60s: %d, expected %d", s, r, err);
    CHECK(why && why[0], "%.60s: no reason", s);
    CHECK(tool_http_status_for(r) == status, "%.60s: status %d", s,
          tool_http_status_for(r));
    CHECK(memcmp(&rq, &before, sizeof(rq)) == 0, "%.60s: out written on failure", s);
    for (size_t k = 0; k < n; k++) {
        r = parse(s, k, &rq, &why);
        CHECK(r == 0 || r == err, "prefix %zu of %.60s: %d", k, s, r);
    }
}
#define BAD(lit, err, status) bad(lit, sizeof(lit) - 1, err, status)

int main(void)
{
    good("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/metrics", 1, true, false);
    good("HEAD /metrics?a=b HTTP/1.1\r\nHost: x\r\n\r\n", "HEAD", "/metrics", 1, true,
         false);
    good("GET /metrics HTTP/1.0\r\n\r\n", "GET", "/metrics", 0, false, false);
    good("GET /metrics HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", "GET", "/metrics",
         0, true, false);
    good("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n", "GET",
         "/metrics", 1, false, false);
    good("GET /metrics HTTP/1.1\nHost: x\n\n", "GET", "/metrics", 1, true, false);
    good("\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/", 1, true, false);
    good("GET http://h:8726/metrics#f HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/metrics",
         1, true, false);
    good("GET http://h HTTP/1.1\r\nHost: h\r\n\r\n", "GET", "/", 1, true, false);
    good("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", "OPTIONS", "*", 1, true, false);
    good("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n", "POST",
         "/metrics", 1, true, true);
    good("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "POST",
         "/x", 1, true, true);
    good("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
         "GET", "/", 1, true, false);
    good("GET / HTTP/1.1\r\nHost:x\r\nX-Empty:\r\nX-8bit: caf\xc3\xa9\t \r\n\r\n", "GET",
         "/", 1, true, false);
    good("GET / HTTP/1.9\r\nHost: x\r\n\r\n", "GET", "/", 9, true, false);

    /* A pipelined second request is not part of the first's head. */
    {
        const char *two = "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\n";
        struct tool_http_request rq;
        CHECK(parse(two, strlen(two), &rq, NULL) == 1 && rq.head_bytes == 28 &&
                  strcmp(rq.path, "/a") == 0,
              "pipelined: head %zu", rq.head_bytes);
    }

    BAD("GARBAGE\r\n\r\n", -EINVAL, 400);
    BAD("GET\r\n\r\n", -EINVAL, 400);
    BAD(" GET / HTTP/1.1\r\n", -EINVAL, 400);
    BAD("GET  / HTTP/1.1\r\n", -EINVAL, 400);
    BAD("GET / HTTP/1.1 \r\n", -EINVAL, 400);
    BAD("GET / http/1.1\r\n", -EINVAL, 400);
    BAD("GET / HTTP/1.x\r\n", -EINVAL, 400);
    BAD("GET / HTTP/11\r\n", -EINVAL, 400);
    BAD("G(T / HTTP/1.1\r\n", -EINVAL, 400);
    BAD("GET metrics HTTP/1.1\r\n", -EINVAL, 400);
    BAD("GET http:// HTTP/1.1\r\n", -EINVAL, 400);
    BAD("GET /\x7f HTTP/1.1\r\n", -EINVAL, 400);
    BAD("GET /\xe9 HTTP/1.1\r\n", -EINVAL, 400);
    BAD("GETTINGTOOLONGMETHOD / HTTP/1.1\r\n", -EINVAL, 400);
    BAD("GET / HTTP/2.0\r\nHost: x\r\n\r\n", -EPROTONOSUPPORT, 505);
    BAD("GET / HTTP/0.9\r\n", -EPROTONOSUPPORT, 505);
    BAD("GET / HTTP/1.1\r\n\r\n", -EINVAL, 400); /* no Host */
    BAD("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", -EINVAL, 400);
    BAD("GET / HTTP/1.1\r\nHost: a\r\nNo colon\r\n\r\n", -EINVAL, 400);
    BAD("GET / HTTP/1.1\r\nHost : a\r\n\r\n", -EINVAL, 400);
    BAD("GET / HTTP/1.1\r\n: a\r\n\r\n", -EINVAL, 400);
    BAD("GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", -EINVAL, 400);
    BAD("GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", -EINVAL, 400);
    BAD("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", -EINVAL, 400);
    BAD("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        -EINVAL, 400);
    BAD("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", -EINVAL, 400);
    BAD("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
        -EINVAL, 400);
    BAD("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked"
        "\r\n\r\n", -EINVAL, 400);
    BAD("\x16\x03\x01\x00", -EINVAL, 400); /* TLS at a plain port: at once */
    {
        static const char nul[] = "GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n";
        bad(nul, sizeof(nul) - 1, -EINVAL, 400);
    }

    /* Too large: a head that does not end within the bound. */
    {
        static char big[MAX + 100];
        int n = snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nHost: a\r\nX: ");
        memset(big + n, 'a', sizeof(big) - (size_t)n);
        struct tool_http_request rq;
        CHECK(parse(big, MAX - 1, &rq, NULL) == 0, "below the bound: more");
        CHECK(parse(big, MAX, &rq, NULL) == -E2BIG, "at the bound: E2BIG");
        CHECK(tool_http_status_for(-E2BIG) == 431, "431");
        char many[4096] = "GET / HTTP/1.1\r\nHost: a\r\n";
        for (int i = 0; i < 120; i++)
            strcat(many, "X: y\r\n");
        strcat(many, "\r\n");
        CHECK(parse(many, strlen(many), &rq, NULL) == -E2BIG, "120 headers");
        char path[1200] = "GET /";
        memset(path + 5, 'p', 1100);
        strcpy(path + 1105, " HTTP/1.1\r\nHost: a\r\n\r\n");
        CHECK(parse(path, strlen(path), &rq, NULL) == -ENAMETOOLONG, "a long path");
        CHECK(tool_http_status_for(-ENAMETOOLONG) == 414, "414");
    }

    /* Random bytes, and random bytes after a good request line: never a
     * crash or a read past the end; a head is accepted only with its
     * blank line. */
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 20000; i++) {
        char buf[600];
        size_t n = 0, pre = 0;
        if (i % 2) {
            static const char line[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
            pre = sizeof(line) - 1;
            memcpy(buf, line, pre);
        }
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t len = pre + (size_t)(x % (sizeof(buf) - pre));
        for (n = pre; n < len; n++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* Mostly printable, with line ends, colons and spaces. */
            static const char alphabet[] = "\r\n: \tGETHOST/aZ.1\x00\x7f\xff";
            buf[n] = x % 4 ? alphabet[x % (sizeof(alphabet) - 1)] : (char)(x >> 8);
        }
        struct tool_http_request rq;
        const char *why = NULL;
        int r = parse(buf, n, &rq, &why);
        CHECK(r == 0 || r == 1 || (r < 0 && why), "random input %d: %d", i, r);
        if (r == 1)
            CHECK(rq.head_bytes <= n && rq.head_bytes >= 4 &&
                      buf[rq.head_bytes - 1] == '\n',
                  "random input %d: head of %zu", i, rq.head_bytes);
    }
    CHECK(strcmp(tool_http_reason(431), "Request Header Fields Too Large") == 0, "reason");
    return check_report("test_http_request");
}
