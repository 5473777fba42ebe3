#include "peer_map.h"

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

int vd_peer_map(const struct vp_identity *id, struct vp_peer *out, char *why,
                size_t whylen)
{
    struct vp_sid system, admins;
    struct vp_identity self;
    if (vp_sid_parse("S-1-5-18", &system) < 0 ||
        vp_sid_parse("S-1-5-32-544", &admins) < 0 || vp_identity_self(&self) < 0) {
        snprintf(why, whylen, "vramd cannot read its own identity");
        return -EIO;
    }
    uint32_t uid;
    /* identity.c keeps only enabled, not deny-only groups: an
     * administrator's filtered (not elevated) token does not count. */
    if (vp_sid_equal(&id->user, &system) || has_sid(id, &admins)) {
        uid = 0;
    } else if (vp_sid_equal(&id->user, &self.user)) {
        uid = vp_self_uid();
    } else {
        char s[VP_SID_STRING_MAX] = "?";
        vp_sid_format(&id->user, s, sizeof(s));
        snprintf(why, whylen, "user %s may not use vramd: on Windows only "
                 "SYSTEM, Administrators and vramd's own user may, for now "
                 "(access lists of SIDs are not implemented)", s);
        return -EACCES;
    }
    struct vp_peer p;
    memset(&p, 0, sizeof(p));
    p.pid = id->pid;
    p.start_time = id->start_time;
    p.uid = uid;
    p.gid = (uint32_t)-1;
    p.ngroups = 0;
    *out = p;
    return 0;
}
