/* SPDX-License-Identifier: Apache-2.0 */
/* Living as a system service: the service manager's readiness protocol,
 * where the log goes, and the process's start-up. */
#ifndef VRAM_PLATFORM_SERVICE_H
#define VRAM_PLATFORM_SERVICE_H

#include <stdbool.h>

/* Sends state ("READY=1\nSTATUS=...") to the service manager
 * ($NOTIFY_SOCKET); nothing happens without one. 0 or a negative errno. */
int vp_service_notify(const char *state);
/* Whether stderr is the journal's stream (then log lines carry "<N>"
 * priority prefixes instead of timestamps). */
bool vp_stderr_is_journal(void);
/* Once at start: writes to a peer that went away fail with EPIPE instead of
 * ending the process. */
void vp_process_init(void);
/* Whether path names something that exists. */
bool vp_path_exists(const char *path);
/* Whether standard output is a terminal. */
bool vp_stdout_is_tty(void);
/* Calls fn (async-signal-safe work only) on ^C or a termination request. */
void vp_on_interrupt(void (*fn)(int));

#endif
