/* SPDX-License-Identifier: Apache-2.0 */
/* Sizes in human units, shared by the daemon's configuration and vramctl. */
#ifndef VW_PROTO_UNITS_H
#define VW_PROTO_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* "2MiB", "1.5 MiB", "16GiB", "512KiB", "4096", "4096B", "1TiB": binary
 * units only. Returns 0, -EINVAL, -ERANGE, or -EDOM for a decimal or bare
 * unit (KB, MB, GB, TB, K, M, G, T): "16GB" is 16 * 10^9 bytes to some and
 * 16 GiB to others, so it is refused rather than guessed. *out is written
 * on success only. */
int vw_size_parse(const char *s, uint64_t *out);
/* The binary spelling of a size vw_size_parse refused with -EDOM, as a
 * suggestion: "12G" and "12 GB" give "12GiB". 0, or -EINVAL for any other
 * text; buf is written on success only. */
int vw_size_binary(const char *s, char *buf, size_t len);
/* What is wrong with a size vw_size_parse refused with err, in words. */
const char *vw_size_why(int err);
/* Formats bytes as "16 GiB", "1.5 MiB", "512 B"; returns buf. */
char *vw_size_format(uint64_t bytes, char *buf, size_t len);

#endif
