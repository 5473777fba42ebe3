/* SPDX-License-Identifier: Apache-2.0 */
/* What every layer of libvram uses: the last error's message (error.c). */
#ifndef VRAM_CLIENT_ERROR_H
#define VRAM_CLIENT_ERROR_H

#include "client/include/vram.h"

/* Writes the message into last_error; returns err. */
int vc_set_error(vram_client *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
