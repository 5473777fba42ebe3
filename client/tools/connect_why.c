/* SPDX-License-Identifier: Apache-2.0 */
/* The connect failure in words. libvram's own text for a missing daemon
 * ends in vram_strerror(-ENOENT), which is vramd's meaning of the code
 * ("no such stage, region, chunk or socket, or not yours") and reads as
 * nonsense to someone who only ran vramctl status; so that case is said
 * here, and the library's text kept for the others (it names the socket
 * and, for a refusal, vramd's reason). */
#include "client/tools/connect_why.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "client/include/vram.h"

void tool_connect_why(char *buf, size_t len, int e, const char *socket,
                      const char *lib_error)
{
    if (e == -ENOENT || e == -ECONNREFUSED) {
        /* The environment's value even when --socket was given: a
         * mismatch between the two is a common cause. */
        const char *env = getenv("VRAM_SOCKET");
        if (env)
            snprintf(buf, len, "no vramd at %s (is it running? VRAM_SOCKET=%s)",
                     socket, env[0] ? env : "\"\"");
        else
            snprintf(buf, len, "no vramd at %s (is it running? VRAM_SOCKET unset)",
                     socket);
    } else if (lib_error && lib_error[0]) {
        snprintf(buf, len, "%s", lib_error);
    } else {
        snprintf(buf, len, "cannot talk to vramd at %s: %s", socket, vram_strerror(e));
    }
}
