/* SPDX-License-Identifier: Apache-2.0 */
/* The attack suite's checks: after each attack the daemon must still serve
 * a newcomer, hold about the fds and memory it held before, and account
 * for every chunk exactly once (with VRAMD_CHECK_INVARIANTS the daemon
 * itself aborts on a chunk with two holders; status's figures must add
 * up). */
#ifndef VRAM_TEST_ATTACK_H
#define VRAM_TEST_ATTACK_H

#include "tests/integration/harness.h"

/* Under AddressSanitizer freed memory is held back (its quarantine) and
 * RSS says nothing about leaks: the RSS checks are the plain build's. */
#if defined(__SANITIZE_ADDRESS__)
#define ATTACK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTACK_ASAN 1
#endif
#endif
#ifndef ATTACK_ASAN
#define ATTACK_ASAN 0
#endif

struct attack_base {
    int fds;
    long rss_kib;
};

/* The daemon's VmRSS in KiB, or -1. */
long daemon_rss_kib(const struct daemon *d);
/* Its CPU time (user + system) so far, in ms, or -1. */
long daemon_cpu_ms(const struct daemon *d);
/* Lines of the daemon's log that contain needle. */
int daemon_log_count(const struct daemon *d, const char *needle);

void attack_baseline(const struct daemon *d, struct attack_base *b);
/* After the attack `what`: still running, a newcomer is served (connect,
 * ping, a grow and its release), fds back within 4 of the baseline (after
 * up to 3 s), RSS within rss_slack_kib, and the devices' figures add up. */
void attack_after(const struct daemon *d, const struct attack_base *b,
                  const char *what, long rss_slack_kib);

/* Runs vramd with args (after the binary's name, NULL-terminated) and waits
 * up to ms for it to exit: its exit status (128 + signal when killed), or
 * -1 when it was still running (then killed). Its output goes to out. */
int vramd_run(const char *const *args, char *out, size_t len, int ms);

/* Raw sockets that stay open: n connections (fds returned in fds). */
int raw_connect_many(const struct daemon *d, int *fds, int n);

#endif
