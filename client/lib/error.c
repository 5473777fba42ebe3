/* Errors: the last one's message, and what each code means to an engine. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "errnames.h"
#include "internal.h"

int vc_set_error(vram_client *c, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
    va_end(ap);
    return err;
}

const char *vram_strerror(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
    case EPROTONOSUPPORT: return "protocol version mismatch";
    case EXDEV: return "foreign chunk (belongs to another device)";
    case EDQUOT: return "over the client's quota";
    case EADDRINUSE: return "the region's address is in use in this process";
    case ETIMEDOUT: return "timed out (a hold bound or the request timeout)";
    case ECONNREFUSED: return "no daemon is listening on the socket";
    default: return strerror(err);
    }
}

const char *vram_client_last_error(const vram_client *c)
{
    return c ? c->last_error : "";
}
