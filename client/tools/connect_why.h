/* SPDX-License-Identifier: Apache-2.0 */
/* What vramctl says when it cannot connect to vramd: one line, the same
 * for every command, for top's banner and for the metrics' vramd_up 0. */
#ifndef VRAM_TOOLS_CONNECT_WHY_H
#define VRAM_TOOLS_CONNECT_WHY_H

#include <stddef.h>

/* Writes into buf why vram_client_connect(socket) failed with e (< 0);
 * lib_error is the text it filled in (opt.error; may be empty). With no
 * vramd there: "no vramd at SOCKET (is it running? VRAM_SOCKET=VALUE)", or
 * "VRAM_SOCKET unset", so a socket taken from the wrong place shows. */
void tool_connect_why(char *buf, size_t len, int e, const char *socket,
                      const char *lib_error);

#endif
