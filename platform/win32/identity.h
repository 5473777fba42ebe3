/* SPDX-License-Identifier: Apache-2.0 */
/* Who is at the other end of a named pipe, by the system's word (Windows:
 * the pipe client's token, GetNamedPipeClientProcessId, the process's
 * start time), never by what the peer says; account names and SIDs; and
 * the access lists that judge peers by them. The client's side too: which
 * process serves the pipe it opened.
 *
 * Identities are security identifiers (SIDs), kept in their binary form and
 * compared byte for byte. A Unix user or group fits the same type as the
 * SIDs Samba gives them (S-1-22-1-uid, S-1-22-2-gid), so this header could
 * serve POSIX too; for now only platform/win32/ implements it (peer.h is the
 * POSIX side's, with uids and gids). */
#ifndef VRAM_PLATFORM_IDENTITY_H
#define VRAM_PLATFORM_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/handle.h"

/* SECURITY_MAX_SID_SIZE: 8 bytes of header, 15 sub-authorities of 4. */
#define VP_SID_BYTES 68
/* "S-1-" and up to 15 sub-authorities of 10 digits, with room to spare. */
#define VP_SID_STRING_MAX 192
/* Groups kept of a peer's token; a token with more is marked truncated (an
 * access list that names a group beyond these refuses the peer: fail
 * closed). */
#define VP_ID_MAX_GROUPS 128
/* Entries of one access list. */
#define VP_ACCESS_MAX 64

struct vp_sid {
    uint8_t len; /* bytes used in b; 0: none */
    uint8_t b[VP_SID_BYTES];
};

struct vp_identity {
    int64_t pid;
    /* When the process started (Windows: its creation time, 100 ns units
     * since 1601): with pid it names one process for good. */
    uint64_t start_time;
    uint32_t session; /* the client's session (Terminal Services) */
    struct vp_sid user;
    /* The token's groups that grant access: enabled, not deny-only, no
     * integrity label. */
    struct vp_sid groups[VP_ID_MAX_GROUPS];
    int ngroups;
    bool groups_truncated;
};

/* Who opened the pipe instance c, connected at connected_at (the listener's
 * vp_pipe_conn.connected_at; 0: now): the user and groups of the token the
 * client opened the pipe with, its process id and start time. A process
 * that started after connected_at cannot be the one that connected: its pid
 * was reused, and that is refused (-ESRCH), as is a client whose process
 * has exited (-ESRCH). The user of the process that
 * pid names must be the token's (-EPERM otherwise: a pipe opened by one
 * user and passed to another's process).
 *
 * With pin non-NULL, *pin gets a handle to that process (liveness,
 * quarantine, vp_proc_kill, and pushing handles into it, platform/win32/push.h);
 * the caller closes it. Writes *out (and *pin) only on success; why says
 * what failed. */
int vp_identity_of_pipe(vp_handle c, uint64_t connected_at,
                        struct vp_identity *out, vp_handle *pin, char *why,
                        size_t whylen);
/* This process's identity. */
int vp_identity_self(struct vp_identity *out);
/* The system's clock in start_time's units (for connected_at). */
uint64_t vp_identity_now(void);

bool vp_sid_equal(const struct vp_sid *a, const struct vp_sid *b);
/* "S-1-5-32-544" to a SID: 0 or -EINVAL. */
int vp_sid_parse(const char *s, struct vp_sid *out);
/* The SID as "S-1-...": 0, or -ENOSPC when len is too small. */
int vp_sid_format(const struct vp_sid *sid, char *buf, size_t len);

enum vp_account_kind {
    VP_ACCOUNT_USER = 1,
    VP_ACCOUNT_GROUP, /* a domain or local group, an alias, a well-known group */
    VP_ACCOUNT_OTHER, /* a computer, a domain, a label */
};
/* An account ("alice", "HOST\\alice", "Administrators", "BUILTIN\\Users")
 * by the system's account database (LookupAccountNameW): 0, -ENOENT when
 * there is none of that name, -EINVAL for a name that is no account name
 * (empty, not UTF-8). kind may be NULL. */
int vp_account_lookup(const char *name, struct vp_sid *out,
                      enum vp_account_kind *kind);

/* SIDs as numbers of peer.h's shape (struct vp_peer's uid and groups,
 * vp_user_id, vp_group_id, vp_self_uid), which the core's access lists and
 * per-user limits compare. Each SID gets its number the first time it is
 * named (by the configuration, or as a connecting user), and keeps it for
 * the life of the process. The number is the SID's hash (peer_win32.c), so it is
 * the same in the vramd that runs after a restart, whose state file holds
 * its clients' numbers. Numbers lie in [VP_SID_ID_BASE, 2 * VP_SID_ID_BASE):
 * never root's 0, nor -1.
 * vp_sid_id: 0 and *out; -ENOENT when sid has no number and add is false
 * (a group no list names stays unnumbered); -ENOSPC when VP_SID_IDS_MAX
 * SIDs have numbers already. vp_id_sid: the SID of a number, or -ENOENT. */
#define VP_SID_ID_BASE 0x40000000u
#define VP_SID_IDS_MAX 4096
int vp_sid_id(const struct vp_sid *sid, bool add, uint32_t *out);
int vp_id_sid(uint32_t id, struct vp_sid *out);

/* Who may connect (or administer): users and groups, by SID. */
struct vp_access_list {
    struct vp_sid sids[VP_ACCESS_MAX];
    int n;
};

/* Adds one entry: a SID string ("S-1-5-32-545"), or an account or group
 * name, resolved now. 0, -ENOENT (no such account; why names it), -EINVAL,
 * -ENOSPC (the list is full). */
int vp_access_add(struct vp_access_list *l, const char *entry, char *why,
                  size_t whylen);
/* Whether id's user, or one of its groups, is on the list. A truncated
 * group list matches only by the groups it kept. */
bool vp_access_allows(const struct vp_access_list *l,
                      const struct vp_identity *id);

/* The client's side: the id of the process serving the pipe c was dialled
 * on (GetNamedPipeServerProcessId). */
int vp_conn_server_pid(vp_handle c, int64_t *pid);
/* vp_dial (platform/conn.h), then refuses (-EPERM, the connection closed)
 * a server whose process is not expected_pid (the service's, from the
 * service manager): a pipe of the same name made by someone else first is
 * never talked to. */
int vp_dial_server(const char *path, int64_t expected_pid, vp_handle *out,
                   char *why, size_t whylen);

#endif
