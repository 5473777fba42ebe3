/* SPDX-License-Identifier: Apache-2.0 */
#include "platform/win32/peer_map.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static bool has_sid(const struct vp_identity *id, const struct vp_sid *sid)
{
    if (vp_sid_equal(&id->user, sid))
        return true;
    for (int i = 0; i < id->ngroups; i++)
        if (vp_sid_equal(&id->groups[i], sid))
            return true;
    return false;
}

int vpw_peer_map(const struct vp_identity *id, struct vp_peer *out, char *why,
                 size_t whylen)
{
    struct vp_sid system, admins;
    if (vp_sid_parse("S-1-5-18", &system) < 0 ||
        vp_sid_parse("S-1-5-32-544", &admins) < 0) {
        snprintf(why, whylen, "vramd cannot parse the well-known SIDs");
        return -EIO;
    }
    struct vp_peer p;
    memset(&p, 0, sizeof(p));
    p.pid = id->pid;
    p.start_time = id->start_time;
    p.gid = (uint32_t)-1; /* a token has no primary group that matters here */
    /* identity.c keeps only enabled, not deny-only groups: an
     * administrator's filtered (not elevated) token does not count. */
    if (vp_sid_equal(&id->user, &system) || has_sid(id, &admins)) {
        p.uid = 0;
        *out = p;
        return 0;
    }
    int e = vp_sid_id(&id->user, true, &p.uid);
    if (e < 0) {
        char s[VP_SID_STRING_MAX] = "?";
        vp_sid_format(&id->user, s, sizeof(s));
        snprintf(why, whylen, "user %s cannot be numbered: vramd has seen %d "
                 "users and groups already (restart it to forget them)", s,
                 VP_SID_IDS_MAX);
        return e;
    }
    /* Only groups a list names have numbers; the others cannot match. */
    for (int i = 0; i < id->ngroups && p.ngroups < VP_MAX_GROUPS; i++) {
        uint32_t g;
        if (vp_sid_id(&id->groups[i], false, &g) == 0)
            p.groups[p.ngroups++] = g;
    }
    *out = p;
    return 0;
}
