/* SPDX-License-Identifier: Apache-2.0 */
/* The API layer's connections (connect.c): connecting, hello, and again
 * after the connection broke. */
#ifndef VRAM_CLIENT_CONNECT_H
#define VRAM_CLIENT_CONNECT_H

#include <stdbool.h>
#include <stddef.h>

#include "client/include/vram.h"

/* Hello on the current connection: the version agreed, the mapper for the
 * daemon's backend chosen (error: where the caller wants the message). */
int vc_hello(vram_client *c, char *error, size_t error_len);
bool vc_can_reconnect(const vram_client *c);
/* Connects again (with backoff, up to reconnect_ms), says hello and takes
 * back what this client holds (resume). Emits RECONNECTED. */
int vc_reconnect(vram_client *c);

#endif
