/* SPDX-License-Identifier: Apache-2.0 */
/* The port the core answers through (core.h's struct vd_port): each call
 * goes to the session it names (session.h), on POSIX and Windows alike. */
#ifndef VRAMD_IO_PORT_H
#define VRAMD_IO_PORT_H

#include "daemon/core/core.h"

struct vd_io;

/* For vd_core_init. */
struct vd_port vd_io_port(struct vd_io *io);

#endif
