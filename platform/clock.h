/* SPDX-License-Identifier: Apache-2.0 */
/* Clocks and sleeping. */
#ifndef VRAM_PLATFORM_CLOCK_H
#define VRAM_PLATFORM_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* A monotonic clock. */
uint64_t vp_now_ns(void);
int64_t vp_now_ms(void);
/* Wall-clock time: milliseconds since 1970 (UTC). */
int64_t vp_unix_ms(void);
/* The local wall-clock time as "HH:MM:SS.mmm", for log lines. */
void vp_wall_time(char *buf, size_t len);
void vp_sleep_ms(int ms);

#endif
