/* SPDX-License-Identifier: Apache-2.0 */
/* peer.h on Windows: its uid and gid shape is POSIX's, and Windows names
 * users and groups by SIDs (identity.h). Each SID gets a number of vramd's
 * own here (vp_sid_id), so the core's access lists and per-user limits
 * work on SIDs unchanged: the configuration's account names and SID
 * strings resolve to those numbers (vp_user_id, vp_group_id), and a
 * connecting client's user and listed groups get theirs (peer_map.c, for
 * endpoint_win32.c's vp_link_peer). Connections are identified with
 * vp_identity_of_pipe, not with vp_peer_of. */
#include "platform/peer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "platform/win32/identity.h"

/* A SID's number comes from its bytes: FNV-1a folded to 30 bits above
 * VP_SID_ID_BASE. So the same SID has the same number in every vramd
 * process: the state file keeps each client's uid (for its per-user limits
 * and whether it is an administrator) across a restart, and numbers given
 * in order of first sight would name someone else after one. Two SIDs
 * whose hashes meet (for ten users, about one chance in 10^8) take the
 * next free number, in order of first sight.
 *
 * Append-only: a number, once given, names its SID for good. Locked, so
 * that callers need not agree on one thread (the configuration is read
 * before the loop runs, clients are numbered on it). */
#define ID_SPAN 0x40000000u /* 2^30 numbers from VP_SID_ID_BASE */

static SRWLOCK ids_lock = SRWLOCK_INIT;
static struct sid_num {
    struct vp_sid sid;
    uint32_t id;
} ids[VP_SID_IDS_MAX];
static uint32_t nids;

static uint32_t sid_hash(const struct vp_sid *sid)
{
    uint32_t h = 2166136261u;
    for (uint8_t i = 0; i < sid->len; i++)
        h = (h ^ sid->b[i]) * 16777619u;
    return (h ^ (h >> 30)) % ID_SPAN;
}

static bool id_taken(uint32_t id)
{
    for (uint32_t i = 0; i < nids; i++)
        if (ids[i].id == id)
            return true;
    return false;
}

int vp_sid_id(const struct vp_sid *sid, bool add, uint32_t *out)
{
    if (!sid || !sid->len)
        return -EINVAL;
    int e = -ENOENT;
    AcquireSRWLockExclusive(&ids_lock);
    for (uint32_t i = 0; i < nids; i++)
        if (vp_sid_equal(&ids[i].sid, sid)) {
            *out = ids[i].id;
            e = 0;
            goto out;
        }
    if (!add)
        goto out;
    if (nids >= VP_SID_IDS_MAX) {
        e = -ENOSPC;
        goto out;
    }
    uint32_t off = sid_hash(sid);
    while (id_taken(VP_SID_ID_BASE + off))
        off = (off + 1) % ID_SPAN;
    ids[nids].sid = *sid;
    ids[nids].id = VP_SID_ID_BASE + off;
    *out = ids[nids++].id;
    e = 0;
out:
    ReleaseSRWLockExclusive(&ids_lock);
    return e;
}

int vp_id_sid(uint32_t id, struct vp_sid *out)
{
    int e = -ENOENT;
    AcquireSRWLockShared(&ids_lock);
    for (uint32_t i = 0; i < nids; i++)
        if (ids[i].id == id) {
            *out = ids[i].sid;
            e = 0;
            break;
        }
    ReleaseSRWLockShared(&ids_lock);
    return e;
}

int vp_peer_of(vp_handle c, struct vp_peer *out)
{
    (void)c;
    (void)out;
    return -ENOSYS; /* vp_identity_of_pipe */
}

int vp_peer_pin(vp_handle c, const struct vp_peer *p, vp_handle *pin,
                uint64_t *start_time)
{
    (void)c;
    (void)p;
    (void)pin;
    (void)start_time;
    return -ENOSYS; /* the pin comes with vp_identity_of_pipe */
}

uint32_t vp_self_uid(void)
{
    struct vp_identity *me = malloc(sizeof(*me)); /* 9 KiB of groups */
    uint32_t id = (uint32_t)-2; /* matches nobody */
    if (me && vp_identity_self(me) == 0)
        vp_sid_id(&me->user, true, &id);
    free(me);
    return id;
}

/* A SID string, or an account of the kind asked, numbered. */
static int account_id(const char *name, bool group, uint32_t *out)
{
    struct vp_sid sid;
    enum vp_account_kind kind;
    if (!name || !name[0])
        return -ENOENT;
    if ((name[0] == 'S' || name[0] == 's') && name[1] == '-') {
        if (vp_sid_parse(name, &sid) < 0)
            return -ENOENT;
    } else if (vp_account_lookup(name, &sid, &kind) < 0 ||
               kind != (group ? VP_ACCOUNT_GROUP : VP_ACCOUNT_USER)) {
        return -ENOENT;
    }
    return vp_sid_id(&sid, true, out) < 0 ? -ENOENT : 0;
}

int vp_user_id(const char *name, uint32_t *uid)
{
    return account_id(name, false, uid);
}

int vp_group_id(const char *name, uint32_t *gid)
{
    return account_id(name, true, gid);
}

bool vp_ids_numeric(void)
{
    return false;
}

void vp_user_describe(uint32_t uid, char *buf, size_t len)
{
    struct vp_sid sid;
    char s[VP_SID_STRING_MAX];
    if (uid == 0)
        snprintf(buf, len, "SYSTEM or an administrator");
    else if (vp_id_sid(uid, &sid) == 0 && vp_sid_format(&sid, s, sizeof(s)) == 0)
        snprintf(buf, len, "user %s", s);
    else
        snprintf(buf, len, "user number %u", (unsigned)uid);
}
