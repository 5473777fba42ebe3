/* SPDX-License-Identifier: Apache-2.0 */
/* What the benchmarks (vram-bench, vram-bench-scale) share: the clock,
 * sleeping, sorting samples, and whole reads and writes of a pipe or
 * socket. Each is one program, so these are static inline here. */
#ifndef VRAM_BENCH_UTIL_H
#define VRAM_BENCH_UTIL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
}

/* For qsort of doubles. */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* All n bytes read (wr false) or written, through EINTR: 0, or -1 at an
 * error or end of file. */
static inline int full_io(int fd, void *buf, size_t n, bool wr)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = wr ? write(fd, p, n) : read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

#endif
