/* SPDX-License-Identifier: Apache-2.0 */
/* Byte strings in hex, as the protocol and the configuration carry weight
 * sets' 32-byte keys: shared by the daemon, its configuration, libvram and
 * vramctl. */
#ifndef VW_PROTO_HEXKEY_H
#define VW_PROTO_HEXKEY_H

#include <stddef.h>
#include <stdint.h>

/* Exactly 2n hex digits (either case) into n bytes: 0, or -EINVAL (out
 * untouched) for anything else, NULL included. */
int vw_hex_decode(const char *hex, uint8_t *out, size_t n);
/* n bytes as 2n lower-case hex digits and a NUL into out. */
void vw_hex_encode(const uint8_t *in, size_t n, char *out);

#endif
