/* SPDX-License-Identifier: Apache-2.0 */
/* Errors: the last one's message, and what each code means to an engine. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto/errnames.h"
#include "client/lib/client_record.h"
#include "client/lib/error.h"

int vc_set_error(vram_client *c, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
    va_end(ap);
    return err;
}

/* What each code means coming from vramd (vram.h lists which call returns
 * which): the C library's words are about files and processes
 * ("Argument list too long" for E2BIG). */
const char *vram_strerror(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
    case 0: return "success";
    case EPROTONOSUPPORT: return "protocol version mismatch";
    case EPROTO: return "protocol error: a malformed frame or message";
    case ENOSYS: return "unknown request (the daemon is older than this library)";
    case EINVAL: return "invalid argument: a field missing, of the wrong type "
                        "or out of range";
    case EPERM: return "not allowed (not your stage, a layer outside the stage, "
                       "an ad-hoc stage, not an admin, or no new loans after a "
                       "missed recall)";
    case EACCES: return "permission denied: not authorised by vramd or the "
                        "socket";
    case ENOENT: return "no such stage, region, chunk or socket, or not yours";
    case EEXIST: return "already registered (by you or another client)";
    case ENOSPC: return "not enough memory on the device, or no room in the "
                        "address window";
    case EAGAIN: return "would have to wait for recalls or quarantine (ask with "
                        "hold, or again later)";
    case ETIMEDOUT: return "timed out (the stage's hold bound, or the request "
                           "timeout)";
    case EXDEV: return "foreign chunk (belongs to another device)";
    case E2BIG: return "over a limit (a count, or the stage's native context)";
    case EDQUOT: return "over the client's quota";
    case EBUSY: return "busy: memory still mapped or in use, a slot owned by "
                       "another layer, or too many requests held";
    case ENODEV: return "no such device, or its backend is not usable here";
    case EALREADY: return "already done (resumed, or started)";
    case ESTALE: return "the daemon's configuration changed since";
    case EADDRINUSE: return "the address is in use in this process, or another "
                            "vramd holds the socket";
    case EIO: return "the backend (GPU driver) failed";
    case ECONNREFUSED: return "no daemon is listening on the socket";
    case ECONNRESET: return "the connection to vramd broke";
    case ENOTCONN: return "not connected to vramd";
    default: return strerror(err);
    }
}

const char *vram_client_last_error(const vram_client *c)
{
    return c ? c->last_error : "";
}
