/* Sizes in human units, shared by the daemon's configuration and vramctl. */
#ifndef VRAM_PROTO_UNITS_H
#define VRAM_PROTO_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* "2MiB", "1.5 MiB", "16GiB", "512KiB", "4096", "1TiB" (also K/M/G/T and KB/MB/GB
 * as binary units). Returns 0 or -EINVAL, -ERANGE; *out written on success. */
int vram_size_parse(const char *s, uint64_t *out);
/* Formats bytes as "16 GiB", "1.5 MiB", "512 B"; returns buf. */
char *vram_size_format(uint64_t bytes, char *buf, size_t len);

#endif
