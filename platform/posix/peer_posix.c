/* SPDX-License-Identifier: Apache-2.0 */
/* peer.h's accounts on POSIX: users and groups by name (the password and
 * group databases), and uids as numbers of the system's own. Who is at the
 * other end of a connection is each system's (platform/linux/
 * peer_linux.c: SO_PEERCRED, SO_PEERGROUPS, SO_PEERPIDFD). */
#include "platform/peer.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <pwd.h>
#include <unistd.h>

uint32_t vp_self_uid(void)
{
    return (uint32_t)geteuid();
}

int vp_user_id(const char *name, uint32_t *uid)
{
    struct passwd *pw = name ? getpwnam(name) : NULL;
    if (!pw)
        return -ENOENT;
    *uid = pw->pw_uid;
    return 0;
}

int vp_group_id(const char *name, uint32_t *gid)
{
    struct group *gr = name ? getgrnam(name) : NULL;
    if (!gr)
        return -ENOENT;
    *gid = gr->gr_gid;
    return 0;
}

bool vp_ids_numeric(void)
{
    return true;
}

void vp_user_describe(uint32_t uid, char *buf, size_t len)
{
    snprintf(buf, len, "uid %u", (unsigned)uid);
}
