/* SPDX-License-Identifier: Apache-2.0 */
/* Frames into requests: the envelope, hello first, the request decoded
 * against the catalogue into its typed struct, its handler called through
 * the generated table (vd_dispatch.h), and the outcome answered once
 * (reply.c) or held (waits.c). The fault injection of the tests lives here,
 * between the ledger's commit and the first effect. */
#ifndef VRAMD_DISPATCH_H
#define VRAMD_DISPATCH_H

#include <stdint.h>

#include "proto/codec.h"
#include "daemon/core/core.h"

/* A frame from client's connection (io/). Its handles are the core's to
 * close (no request carries any). */
void vd_core_client_frame(struct vd_core *core, uint32_t client,
                          struct vw_codec_frame *f);

#endif
