/* SPDX-License-Identifier: Apache-2.0 */
/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the state file's
 * checksum: its Hamming distance is better than CRC-32's at the block sizes
 * the file uses, and it is what hardware computes should that be wanted. */
#ifndef VRAMD_STATE_CRC32C_H
#define VRAMD_STATE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc (0 to start) over n bytes at p: vd_crc32c(0, "123456789",
 * 9) is 0xE3069283. */
uint32_t vd_crc32c(uint32_t crc, const void *p, size_t n);

#endif
