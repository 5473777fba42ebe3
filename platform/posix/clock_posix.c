/* SPDX-License-Identifier: Apache-2.0 */
/* Clocks on POSIX. */
#include "platform/clock.h"

#include <stdio.h>
#include <time.h>

uint64_t vp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t vp_now_ms(void)
{
    return (int64_t)(vp_now_ns() / 1000000u);
}

int64_t vp_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void vp_wall_time(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    char when[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03ld", when, ts.tv_nsec / 1000000);
}

void vp_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0)
        ;
}
