/* SPDX-License-Identifier: Apache-2.0 */
/* Names that no other run takes, for what a Windows test makes: its run
 * directory, pipes, services, accounts. Not the pid: wine's pids repeat
 * from run to run (each wineserver counts again from the start), so a
 * directory, pipe or process left by an earlier run, or a second copy of
 * the suite running beside this one, would meet the same name. 64 bits
 * from the system's random generator (BCryptGenRandom, found at run time:
 * no import library for the tests to link). Include after <windows.h>. */
#ifndef VRAM_TEST_UNIQUE_H
#define VRAM_TEST_UNIQUE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <wchar.h>

typedef LONG(WINAPI *wt_gen_random_fn)(void *, PUCHAR, ULONG, ULONG);

/* 64 random bits; a test that cannot have them ends (exit 1, saying why):
 * a name that might repeat is what this is here to prevent. */
static inline uint64_t wt_random64(void)
{
    static wt_gen_random_fn gen;
    if (!gen) {
        HMODULE m = LoadLibraryW(L"bcrypt.dll");
        gen = m ? (wt_gen_random_fn)(void (*)(void))GetProcAddress(m, "BCryptGenRandom")
                : NULL;
    }
    uint64_t v = 0;
    /* 2: BCRYPT_USE_SYSTEM_PREFERRED_RNG (no algorithm handle). */
    LONG st = gen ? gen(NULL, (PUCHAR)&v, sizeof(v), 2) : -1;
    if (st != 0) {
        fprintf(stderr, "no random bits for a unique name (BCryptGenRandom: %s, "
                "status 0x%lx)\n", gen ? "failed" : "not found", (unsigned long)st);
        exit(1);
    }
    return v;
}

/* "PREFIX-<16 hex digits>". */
static inline void wt_unique(char *buf, size_t len, const char *prefix)
{
    snprintf(buf, len, "%s-%016llx", prefix, (unsigned long long)wt_random64());
}

static inline void wt_unique_w(wchar_t *buf, size_t len, const wchar_t *prefix)
{
    _snwprintf(buf, len, L"%ls-%016llx", prefix, (unsigned long long)wt_random64());
    buf[len - 1] = 0;
}

#endif
