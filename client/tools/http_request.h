/* SPDX-License-Identifier: Apache-2.0 */
/* The head of one HTTP/1.x request, parsed from bytes as they arrive, with
 * no system calls (vramctl metrics --listen reads them; the unit test feeds
 * it whatever it likes). Lenient where RFC 9112 lets a server be (bare LF
 * line ends, empty lines before the request), strict where leniency is a
 * request-smuggling or crash risk (whitespace before a colon, folded
 * lines, control characters, conflicting lengths). */
#ifndef VRAM_TOOLS_HTTP_REQUEST_H
#define VRAM_TOOLS_HTTP_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tool_http_request {
    char method[16];
    /* The path of the target, without its query ("/metrics"); "*" for the
     * asterisk form. */
    char path[1024];
    int minor;         /* HTTP/1.minor */
    bool keep_alive;   /* what the version and Connection say */
    bool has_body;     /* Content-Length above 0, or Transfer-Encoding */
    size_t head_bytes; /* the bytes of buf the head takes (its blank line
                          included) */
};

/* Parses the request head at the start of buf (len bytes). Returns 1 and
 * fills *out when the head is complete, 0 when more bytes are needed (and
 * nothing seen so far is wrong), or a negative errno, with *why (when not
 * NULL) set to a static text naming the fault:
 *   -E2BIG            the head does not end within max_head bytes (431)
 *   -ENAMETOOLONG     the target's path is longer than path holds (414)
 *   -EPROTONOSUPPORT  an HTTP version other than 1.x (505)
 *   -EINVAL           anything else malformed (400)
 * Faults are found as soon as the bytes that show them arrive, not only
 * when the head is complete. */
int tool_http_parse(const char *buf, size_t len, size_t max_head,
                    struct tool_http_request *out, const char **why);

/* The response status for one of tool_http_parse's errors. */
int tool_http_status_for(int err);
/* "OK", "Not Found", ...: the reason phrase of a status this tool sends. */
const char *tool_http_reason(int status);

#endif
