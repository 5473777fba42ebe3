/* SPDX-License-Identifier: Apache-2.0 */
/* A fake vramd, for what the tools and libvram do with a hostile or huge
 * daemon's replies: a real process speaking the real wire format
 * (proto/frame.h headers, JSON payloads) on a temporary socket. It answers
 * hello and ping as vramd does, and status and weights_list with the
 * frames the test's function writes (a reply that never ends, 65,536
 * clients, names with control bytes). One thread per connection, so a client that stops
 * reading holds up only its own. Also here: running a tool as a child
 * process, with its output, exit status, wall time and peak RSS. */
#ifndef VRAM_TEST_FAKE_VRAMD_H
#define VRAM_TEST_FAKE_VRAMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct fake_conn;

/* Sends one frame of len bytes of payload: 0, or -1 once the peer is gone
 * (then stop sending). */
int fake_send(struct fake_conn *c, const char *payload, size_t len);
/* The status request's id, as the reply's frames must name it. */
typedef void (*fake_status_fn)(struct fake_conn *c, uint64_t id, void *ud);
/* What fn answers: "status" or "weights_list". */
const char *fake_request_type(const struct fake_conn *c);

struct fake_vramd {
    pid_t pid;
    char dir[128];
    char sock[160];
};

/* Starts the fake in a child process (fn runs there, on the connection's
 * thread, once per status or weights_list request); returns once it
 * listens. */
int fake_vramd_start(struct fake_vramd *f, fake_status_fn fn, void *ud);
/* Kills it (its pid) and removes its folder. NULL-tolerant. */
void fake_vramd_stop(struct fake_vramd *f);

/* A tool run to its end. */
struct tool_run {
    int status;          /* exit status; 128 + N for signal N; -1 not run */
    bool killed;         /* still running at the deadline: killed */
    long maxrss_kib;     /* its peak resident memory (getrusage of the child) */
    double seconds;      /* wall time */
    char *out, *err;     /* what it wrote (NUL-terminated; free them) */
    size_t out_len, err_len;
};

/* Runs argv (argv[0] a path) with stdin from /dev/null, waiting at most
 * deadline_ms. With as_limit (bytes, 0: none), its address space is capped
 * there, so a runaway stays a failed check rather than taking the
 * machine's memory. */
int tool_run(const char *const *argv, int deadline_ms, size_t as_limit,
             struct tool_run *r);
void tool_run_free(struct tool_run *r);

/* Starts argv in the background with its stdout on a pipe (*out_fd). */
pid_t tool_start(const char *const *argv, size_t as_limit, int *out_fd);
/* Waits for pid (killing it with SIGKILL past deadline_ms): its status
 * (as tool_run's) and peak RSS. */
int tool_wait(pid_t pid, int deadline_ms, long *maxrss_kib);

/* One HTTP GET of path on 127.0.0.1:port, reading to the end: the status
 * code (0: no answer within deadline_ms) and the body (free it). */
int http_get(int port, const char *path, int deadline_ms, char **body,
             size_t *body_len);

/* Whether the process runs under AddressSanitizer, whose shadow memory
 * and quarantine say nothing of a program's own peak RSS. */
bool under_asan(void);

#endif
