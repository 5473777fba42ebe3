/* SPDX-License-Identifier: Apache-2.0 */
/* Exit statuses. 0 to 4 are what vramctl has always returned (the package
 * test relies on 4, the metrics timer's docs and test_http on 3); 5 came
 * with protocol versions, which before were a plain failure (1). */
#include "client/tools/exits.h"

#include <errno.h>
#include <stdbool.h>

/* The daemon and this vramctl speak different versions: no protocol
 * version in common (at hello, or frames of another one), or a request
 * the daemon does not know (ENOSYS: an older vramd). A reply that breaks
 * the protocol otherwise (EPROTO: not the catalogue, over its bounds) is a
 * daemon failing, 1, as test_reply_bounds has it: a newer field is
 * negotiated by version, never guessed from a reply. */
static bool is_protocol(int e)
{
    return e == -EPROTONOSUPPORT || e == -ENOSYS;
}

/* The connection broke or went unanswered: vramd is gone or stuck. */
static bool is_lost(int e)
{
    return e == -ECONNRESET || e == -ENOTCONN || e == -EPIPE || e == -ETIMEDOUT;
}

enum tool_exit tool_exit_connect(int e)
{
    if (e == -EACCES || e == -EPERM)
        return TOOL_EXIT_NOT_ALLOWED; /* vramd runs; this user may not use it */
    if (is_protocol(e))
        return TOOL_EXIT_PROTOCOL;
    /* Nothing listens there, the path cannot name a socket (a POSIX path
     * on Windows, one too long), or nothing answered the hello. E2BIG
     * (vramd's connection limits) and ENODEV (its backend unusable here)
     * are vramd answering: refused, 1. */
    if (e == -ENOENT || e == -ECONNREFUSED || e == -ENOTSOCK || e == -ENOTDIR ||
        e == -ENAMETOOLONG || e == -EINVAL || is_lost(e))
        return TOOL_EXIT_NO_DAEMON;
    return TOOL_EXIT_FAILED;
}

enum tool_exit tool_exit_request(int e)
{
    if (e >= 0)
        return TOOL_EXIT_OK;
    if (e == -EACCES || e == -EPERM)
        return TOOL_EXIT_NOT_ALLOWED; /* an admin command from a non-admin */
    if (is_protocol(e))
        return TOOL_EXIT_PROTOCOL;
    if (is_lost(e))
        return TOOL_EXIT_NO_DAEMON;
    return TOOL_EXIT_FAILED;
}

void tool_exit_table(FILE *f)
{
    fputs("Exit status:\n"
          "  0 success\n"
          "  1 vramd refused or failed the request (its reason on stderr), or\n"
          "    sent a reply that breaks the protocol\n"
          "  2 usage: an unknown command or option, a missing or bad value\n"
          "  3 no daemon answers at the socket: none listens there, the path\n"
          "    cannot be one, the connection broke, or no reply in --timeout\n"
          "  4 not allowed: the socket's permissions or access.allow refused\n"
          "    the connection, or an admin command from one not in access.admin\n"
          "  5 protocol mismatch: vramd speaks no protocol version vramctl does,\n"
          "    or lacks the request (an older vramd)\n"
          "Errors go to standard error, each a line beginning \"vramctl\".\n",
          f);
}
