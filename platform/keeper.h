/* SPDX-License-Identifier: Apache-2.0 */
/* Keeping handles across vramd's own restarts.
 *
 * A weight set's memory lives as long as one handle to it does: a CUDA
 * allocation exported as a POSIX fd keeps the memory and its bytes after
 * the exporter released it and exited, and so does a host chunk's memfd.
 * vramd gives the handles of every sealed set to a keeper outside itself,
 * so that a vramd that stops, crashes or is replaced by a new binary finds
 * them again when it starts, even when no engine maps the set.
 *
 * Two keepers behind one API, chosen at open:
 *  - the service manager's file descriptor store (systemd: each handle sent
 *    to $NOTIFY_SOCKET with "FDSTORE=1", passed back at the next start in
 *    LISTEN_FDS with its name in LISTEN_FDNAMES);
 *  - else vramd's holder, vramd-holder: a small process of vramd's user
 *    that keeps the handles and does nothing else. The keeper starts it on
 *    the first put (in its own session, so a kill of vramd's process group
 *    does not reach it) and finds it again at <socket>.keeper, a socket
 *    beside vramd's that only vramd's user may use. It serves one vramd at
 *    a time, and exits once it keeps nothing and no vramd is connected.
 *  - Windows has no service manager that keeps handles: the holder
 *    (vramd-holder.exe beside vramd.exe, started detached) keeps its own
 *    duplicates, which it makes out of vramd's process, at the pipe
 *    "<vramd's pipe>.keeper" (platform/win32/keeper_win32.c); VP_KEEPER_FDSTORE
 *    is -ENOTSUP there.
 *
 * What survives what: the holder keeps everything until it is killed (or
 * the machine restarts); a vramd killed, stopped or replaced finds it all.
 * The fd store keeps it across a crash with Restart=, "systemctl restart"
 * and a package upgrade's restart (a job is queued), and on systemd 254
 * and later, with FileDescriptorStorePreserve=yes, across "systemctl stop"
 * too; on 252 a stop, or an exit without a restart (status 0, or one in
 * RestartPreventExitStatus=), empties the store.
 *
 * How vramd uses it:
 *  - at start, after taking its directory's lock (lock.h), and before or
 *    after vp_listen_activated (the two share LISTEN_FDS, in either order):
 *    vp_keeper_open. Every handle an earlier vramd put and did not remove
 *    comes back in left, by name: the caller owns those handles (the keeper
 *    keeps its own). Each is checked against the state file's record of
 *    its set: vp_keeper_remove what no set records, and drop (with a log
 *    line naming them) the sets whose handles did not all come back;
 *  - when a set is sealed: vp_keeper_put each of its allocations' handles,
 *    under names the state file records (e.g. "w<set>.<index>");
 *  - when a set is dropped or evicted: vp_keeper_remove each of its names,
 *    before its memory is scrubbed or given to anyone else: until then the
 *    keeper's copy keeps the memory alive (and a holder process counts
 *    among the processes that hold it, proc.h's vp_procs_holding);
 *  - at exit, vp_keeper_close: what is kept stays kept. To free the
 *    memory, remove the names first.
 *
 * Which keeper: VP_KEEPER_AUTO takes the fd store when vramd runs as a
 * service whose unit lets it store fds: $NOTIFY_SOCKET set and $FDSTORE a
 * count above 0. A service cannot ask the manager how many fds it may
 * store, and what it sends beyond FileDescriptorStoreMax= is dropped
 * without a word back, so it must be told: systemd 254 and later set
 * $FDSTORE to FileDescriptorStoreMax= themselves; for older ones (Debian
 * 12's 252) vramd.service sets it with Environment=FDSTORE=, equal to its
 * FileDescriptorStoreMax=. Without both, the holder; under systemd that is
 * the wrong keeper (the unit's stop kills the holder with vramd's
 * processes, KillMode=control-group), and info's note says so.
 *
 * Both keepers enforce the same limits, so what works with the holder
 * (tests, a vramd run by hand) works under systemd too: at most max
 * handles, and names of at most VP_KEEPER_NAMES_BYTES in all (systemd
 * hands the names back in one environment string, which Linux caps at
 * 128 KiB: beyond it the service could not start at all).
 *
 * Calls are synchronous and cheap: a put or remove is one datagram to the
 * service manager (no answer comes back: the store accepts in silence), or
 * one round trip to the holder (each wait bounded by VP_KEEPER_TIMEOUT_MS;
 * the first put also starts the holder, a few ms). A link to the holder
 * that breaks is made again once, and what the holder keeps listed again,
 * before a call fails. Not thread-safe: one thread uses a keeper at a
 * time. Library code: nothing is printed; errors come with a reason in
 * why. */
#ifndef VRAM_PLATFORM_KEEPER_H
#define VRAM_PLATFORM_KEEPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/handle.h"

/* A name: 1 to VP_KEEPER_NAME_MAX bytes of [A-Za-z0-9._/-], not ending in
 * ".socket" (systemd's name for a socket unit's fds, which are the
 * listener's). No ':' (LISTEN_FDNAMES's separator), no space. */
#define VP_KEEPER_NAME_MAX 64
/* The names' bytes in all (each counted with one separator). */
#define VP_KEEPER_NAMES_BYTES (120 * 1024)
/* How many handles a keeper keeps unless told otherwise. Weights come in
 * 1 GiB allocations: eight 141 GiB GPUs full of weights are about 1,130 of
 * them, and each set smaller than 1 GiB adds one more; 4,096 leaves room
 * for thousands of small sets while bounding what a runaway can pin (every
 * kept fd is one in the holder, or in PID 1, and one passed at each start).
 * vramd.service's FileDescriptorStoreMax= is the same. */
#define VP_KEEPER_DEFAULT_MAX 4096
/* How long a call waits for the holder's answer (or for a new holder to
 * be ready) before it gives up with -ETIMEDOUT. */
#define VP_KEEPER_TIMEOUT_MS 5000

enum vp_keeper_kind {
    VP_KEEPER_AUTO,    /* the fd store where the unit allows it, else the holder */
    VP_KEEPER_FDSTORE, /* the service manager's fd store, or -ENOTSUP */
    VP_KEEPER_HOLDER,  /* vramd's holder process, even under a service manager */
};

struct vp_keeper_cfg {
    /* vramd's socket: the holder listens beside it, at "<socket>.keeper",
     * and the directory's rules are the socket's (listener.h's
     * vp_listen_check_dir). On Windows, vramd's pipe (NULL: conn.h's
     * VP_DEFAULT_ENDPOINT): the holder serves "<pipe>.keeper". */
    const char *socket_path;
    /* The holder program; NULL: "vramd-holder" beside this executable,
     * else where it is installed from there (../libexec/vramd/ by
     * default). */
    const char *holder_path;
    enum vp_keeper_kind kind;
    unsigned max; /* most handles kept; 0: VP_KEEPER_DEFAULT_MAX */
};

/* A handle an earlier vramd left, by name. */
struct vp_keeper_entry {
    char name[VP_KEEPER_NAME_MAX + 1];
    vp_handle h;
};

struct vp_keeper_info {
    enum vp_keeper_kind kind; /* VP_KEEPER_FDSTORE or VP_KEEPER_HOLDER */
    unsigned max;             /* most handles it keeps (the smaller of the
                                 configured max and the store's or the
                                 holder's own limit) */
    unsigned held;            /* how many it keeps now */
    int64_t holder_pid;       /* the holder's process; 0 when none runs */
    unsigned discarded;       /* passed at start, not the keeper's: closed */
    /* Why this keeper, and what was discarded at open, in words. */
    char note[320];
};

struct vp_keeper;

/* Opens the keeper and takes back what an earlier vramd left: 0 with *out
 * and, in *left (an array of *nleft, NULL when none; the caller frees it
 * with vp_keeper_entries_free, which closes the handles still in it: set
 * an entry's h to VP_NONE to keep it), or a negative errno with why:
 * -ENOTSUP (kind FDSTORE without the environment for it), -EPERM (a
 * holder socket or process of another user; a directory others can write
 * into), -EBUSY (the holder serves another vramd), -EPROTO (something
 * that is not a holder answered, or one of another version), -EMFILE. The
 * holder is not started here: only the first put starts one. */
int vp_keeper_open(const struct vp_keeper_cfg *cfg, struct vp_keeper **out,
                   struct vp_keeper_entry **left, size_t *nleft, char *why,
                   size_t whylen);
/* Keeps a duplicate of h under name (the caller keeps h). 0, or -EINVAL (a
 * bad name; h is not a handle the keeper takes: a socket), -EEXIST (the
 * name is kept already), -ENOSPC (max handles, or the names' bytes, kept),
 * -ETIMEDOUT (the holder did not answer; whether it kept h is unknown
 * until the next call, which asks it again), -EPIPE (the holder is gone,
 * and with it every handle it kept: the keeper is empty now and starts a
 * new holder at the next put: put again what should be kept), with why. */
int vp_keeper_put(struct vp_keeper *k, const char *name, vp_handle h,
                  char *why, size_t whylen);
/* Stops keeping name: 0, -ENOENT when it is not kept, or as put. */
int vp_keeper_remove(struct vp_keeper *k, const char *name, char *why,
                     size_t whylen);
/* Whether name is kept. */
bool vp_keeper_has(const struct vp_keeper *k, const char *name);
void vp_keeper_info(const struct vp_keeper *k, struct vp_keeper_info *out);
/* Closes the keeper; what it keeps stays kept (a holder that keeps nothing
 * exits). NULL is fine. */
void vp_keeper_close(struct vp_keeper *k);

/* Whether name is one the keeper takes. */
bool vp_keeper_name_ok(const char *name);
/* "fd store", "holder". */
const char *vp_keeper_kind_name(enum vp_keeper_kind kind);
/* Frees what vp_keeper_open left, closing the handles still in it. */
void vp_keeper_entries_free(struct vp_keeper_entry *e, size_t n);

#endif
