/* SPDX-License-Identifier: Apache-2.0 */
/* The standby's policy (daemon/backends/standby.c, issue 30): its default
 * size, its size in chunks, and how long returned chunks may swell it. */
#include <stdint.h>

#include "tests/check.h"
#include "daemon/backends/standby.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

int main(void)
{
    /* The smaller of 8 GiB and 1/16 of the device; under WDDM of 512 MiB
     * and 1%. */
    CHECK_EQ_U(vd_standby_default(141 * GiB, false), 8 * GiB);
    CHECK_EQ_U(vd_standby_default(80 * GiB, false), 5 * GiB);
    CHECK_EQ_U(vd_standby_default(16 * GiB, false), 1 * GiB);
    CHECK_EQ_U(vd_standby_default(16 * GiB, true), 16 * GiB / 100);
    CHECK_EQ_U(vd_standby_default(80 * GiB, true), 512 * MiB);
    /* A share of the capacity where one is set below the device's memory:
     * an H200 capped at 8 GiB keeps 512 MiB ahead, not all 8. */
    CHECK_EQ_U(vd_standby_basis(141 * GiB, false, 0), 141 * GiB);
    CHECK_EQ_U(vd_standby_basis(141 * GiB, true, 8 * GiB), 8 * GiB);
    CHECK_EQ_U(vd_standby_basis(16 * GiB, true, 64 * GiB), 16 * GiB);
    CHECK_EQ_U(vd_standby_default(vd_standby_basis(141 * GiB, true, 8 * GiB), false),
               512 * MiB);
    /* In chunks: prefill_chunks when given, else the bytes, else the
     * default; never past the device. */
    CHECK_EQ_U(vd_standby_chunks(UINT32_MAX, 0, 141 * GiB, false, 2 * MiB, 70000),
               4096);
    CHECK_EQ_U(vd_standby_chunks(UINT32_MAX, 64 * MiB, 141 * GiB, false, 2 * MiB,
                                 70000), 32);
    CHECK_EQ_U(vd_standby_chunks(100, 64 * MiB, 141 * GiB, false, 2 * MiB, 70000),
               100);
    CHECK_EQ_U(vd_standby_chunks(UINT32_MAX, 1, 141 * GiB, false, 2 * MiB, 70000),
               0); /* "0": nothing made ahead */
    CHECK_EQ_U(vd_standby_chunks(UINT32_MAX, 0, 1 * GiB, false, 2 * MiB, 8), 8);
    /* Returned chunks stay beyond the standby until it has been idle for
     * idle_ms since the last return; then the standby alone. */
    uint64_t t = 5000000000ull, ms = 1000000u;
    CHECK_EQ_U(vd_standby_hold(32, 100, 0, t, 10000), 32);          /* none came */
    CHECK_EQ_U(vd_standby_hold(32, 100, t, t + 1 * ms, 10000), 100);
    CHECK_EQ_U(vd_standby_hold(32, 100, t, t + 9999 * ms, 10000), 100);
    CHECK_EQ_U(vd_standby_hold(32, 100, t, t + 10000 * ms, 10000), 32);
    CHECK_EQ_U(vd_standby_hold(32, 10, t, t + 1 * ms, 10000), 32);  /* below it */
    CHECK_EQ_U(vd_standby_hold(32, 100, t, t + 1 * ms, 0), 32);     /* no wait */
    return check_report("test_standby");
}
