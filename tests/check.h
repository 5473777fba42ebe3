/* SPDX-License-Identifier: Apache-2.0 */
/* Minimal assertions for the test programs: a failed CHECK prints where and
 * why, and the program exits non-zero at the end (or at once with REQUIRE). */
#ifndef VRAM_TEST_CHECK_H
#define VRAM_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

/* One pair of counters per program, shared by every file that includes this
 * header (the harness's checks count too): weak definitions merge. */
__attribute__((weak)) int check_failures;
__attribute__((weak)) int check_count;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        check_count++;                                                         \
        if (!(cond)) {                                                         \
            check_failures++;                                                  \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__,   \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)

#define REQUIRE(cond, ...)                                                     \
    do {                                                                       \
        int require_ok_ = !!(cond);                                            \
        CHECK(require_ok_, __VA_ARGS__);                                       \
        if (!require_ok_)                                                      \
            exit(1);                                                           \
    } while (0)

#define CHECK_EQ_U(a, b)                                                       \
    CHECK((unsigned long long)(a) == (unsigned long long)(b),                  \
          "%s = %llu, expected %s = %llu", #a, (unsigned long long)(a), #b,    \
          (unsigned long long)(b))

static inline int check_report(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
