/* Error codes on the wire: errno names ("ENOSPC"), portable across
 * operating systems, negative errno values at each end. The names the
 * protocol uses are defined here where a C library lacks them (mingw has no
 * EDQUOT or ESTALE). */
#ifndef VRAM_PROTO_ERRNAMES_H
#define VRAM_PROTO_ERRNAMES_H

#include <errno.h>

#ifndef EDQUOT
#define EDQUOT 122
#endif
#ifndef ESTALE
#define ESTALE 116
#endif

/* The name of err (negative or not); "EIO" for one the protocol lacks. */
const char *vram_errno_name(int err);
/* The negative errno of a name; -EPROTO for an unknown one. */
int vram_errno_from_name(const char *name);

#endif
