/* SPDX-License-Identifier: Apache-2.0 */
/* Clocks on Windows: the performance counter (monotonic, and not moved by
 * changes to the wall clock) and the local time of day. */
#include "platform/clock.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <stdio.h>

uint64_t vp_now_ns(void)
{
    LARGE_INTEGER c, f;
    /* Both succeed on every Windows since XP; the frequency is fixed at
     * boot. Whole seconds and the remainder apart, so that ticks times 10^9
     * does not overflow after a few days' uptime at a 10 MHz counter. */
    QueryPerformanceCounter(&c);
    QueryPerformanceFrequency(&f);
    uint64_t t = (uint64_t)c.QuadPart, hz = (uint64_t)f.QuadPart;
    return t / hz * 1000000000ull + t % hz * 1000000000ull / hz;
}

int64_t vp_now_ms(void)
{
    return (int64_t)(vp_now_ns() / 1000000u);
}

int64_t vp_unix_ms(void)
{
    FILETIME ft;
    GetSystemTimeAsFileTime(&ft); /* 100 ns since 1601 */
    uint64_t t = ((uint64_t)ft.dwHighDateTime << 32) | ft.dwLowDateTime;
    return (int64_t)(t / 10000u) - 11644473600000ll;
}

void vp_wall_time(char *buf, size_t len)
{
    SYSTEMTIME st;
    GetLocalTime(&st);
    snprintf(buf, len, "%02u:%02u:%02u.%03u", (unsigned)st.wHour,
             (unsigned)st.wMinute, (unsigned)st.wSecond,
             (unsigned)st.wMilliseconds);
}

void vp_sleep_ms(int ms)
{
    Sleep(ms > 0 ? (DWORD)ms : 0);
}
