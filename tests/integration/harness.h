/* SPDX-License-Identifier: Apache-2.0 */
/* Integration test harness: the real vramd on a temporary socket, real
 * client processes (fork), and checks on the daemon's log and fds. */
#ifndef VRAM_TEST_HARNESS_H
#define VRAM_TEST_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "tests/check.h"
#include "client/include/vram.h"

struct daemon {
    pid_t pid;
    char dir[128];
    char sock[160];
    char log[160];
    char config[160];
    int base_fds; /* fds of the daemon when idle, chunks excluded */
    int exit_status; /* when it exited during start: its status (signals
                        as 128 + the number) */
};

/* A name no other run takes: "PREFIX-<16 hex digits>", 64 bits from the
 * kernel's random generator. Not the pid: pids are reused, and
 * scripts/soak.sh runs two copies of the suite side by side. */
void unique_name(char *buf, size_t len, const char *prefix);

/* Starts vramd with config (JSON text, or NULL for the built-in default)
 * and extra arguments. Waits until it accepts connections. */
int daemon_start(struct daemon *d, const char *config, const char *const *args);
/* Starts vramd again in the same directory, on the same socket (after
 * daemon_kill or daemon_stop); its log is appended. -ECHILD, with
 * d->exit_status, when it exits instead. */
int daemon_restart(struct daemon *d, const char *config, const char *const *args);
/* SIGTERM, wait, and check a clean exit (0). Returns its exit status. */
int daemon_stop(struct daemon *d);
void daemon_kill(struct daemon *d);
int daemon_fd_count(const struct daemon *d);
/* The status object (caller deletes), through a ctl connection. */
cJSON *daemon_status(const struct daemon *d);
bool daemon_log_contains(const struct daemon *d, const char *needle);
/* Waits up to ms for the log to contain needle. */
bool daemon_log_wait(const struct daemon *d, const char *needle, int ms);
/* Checks that, with no client holding anything, the daemon holds no chunk fd
 * and no more fds than right after start. */
void daemon_check_no_leaks(const struct daemon *d);

vram_client *connect_client(const struct daemon *d, const char *name);

/* Runs fn(arg) in a child process; its return value is the exit status. */
pid_t spawn(int (*fn)(const struct daemon *, void *), const struct daemon *d,
            void *arg);
int wait_child(pid_t pid);

/* A device's field from a status object. */
uint64_t status_dev(const cJSON *st, int dev, const char *key);
const cJSON *status_stage(const cJSON *st, uint32_t stage);
uint64_t json_u64(const cJSON *o, const char *key);
/* Polls status until dev's key equals want (or ms pass). */
bool wait_dev_value(const struct daemon *d, int dev, const char *key,
                    uint64_t want, int ms);

/* A pipe-based rendezvous between parent and child. */
struct rendezvous {
    int to_child[2], to_parent[2];
};
void rv_init(struct rendezvous *r);
void rv_send(int fd, uint64_t v);
uint64_t rv_recv(int fd);

/* Fills a chunk-sized area with a pattern derived from tag; checks it. */
void fill_pattern(void *p, size_t n, uint64_t tag);
bool check_pattern(const void *p, size_t n, uint64_t tag);

/* A raw connection (no library), one frame out, the next frame in (NULL on
 * EOF or after ms). */
int raw_connect(const struct daemon *d);
void raw_send(int fd, const char *json);
cJSON *raw_recv(int fd, int ms);

#define MIB (1024ull * 1024)
#define GIB (1024ull * MIB)

#endif
