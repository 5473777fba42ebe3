/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl metrics --listen: an HTTP/1.1 endpoint that serves the metrics
 * exposition at GET /metrics, reading vramd's status for each scrape (the
 * connection to vramd is kept, and made again after vramd restarted). While
 * vramd cannot be read, a scrape gets 503 with why in its body and keeps
 * being served. */
#ifndef VRAM_TOOLS_METRICS_HTTP_H
#define VRAM_TOOLS_METRICS_HTTP_H

#include <stdint.h>
#include <stdio.h>

/* Where to listen, from "ADDR:PORT": an IPv4 address, an IPv6 one in
 * brackets ("[::1]:8726"), "localhost", or nothing (":8726": every IPv4
 * interface). Port 0 takes a free port. */
struct tool_listen_addr {
    char host[64];
    uint16_t port;
};

/* 0, or -EINVAL when spec is not of that form. */
int tool_listen_parse(const char *spec, struct tool_listen_addr *out);

/* Serves until SIGINT or SIGTERM, then returns 0. Once listening, writes
 * one line naming the address it is bound to ("serving
 * http://127.0.0.1:8726/metrics ...") to announce, which tells a caller
 * that asked for port 0 the port it got. A negative errno when it cannot
 * listen (with the reason on stderr). */
int tool_metrics_serve(const struct tool_listen_addr *addr, const char *socket,
                       FILE *announce);

#endif
