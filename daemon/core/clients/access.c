/* SPDX-License-Identifier: Apache-2.0 */
/* Judging peers against the configuration's allow and admin lists. */
#include "daemon/core/clients/access.h"

static bool in_list(const struct vd_access_list *l, const struct vp_peer *p)
{
    for (uint32_t i = 0; i < l->nuids; i++)
        if (l->uids[i] == p->uid)
            return true;
    for (uint32_t i = 0; i < l->ngids; i++) {
        if (l->gids[i] == p->gid)
            return true;
        for (int k = 0; k < p->ngroups; k++)
            if (l->gids[i] == p->groups[k])
                return true;
    }
    return false;
}

bool vd_access_connect(const struct vd_config *cfg, const struct vp_peer *p)
{
    if (p->uid == 0)
        return true;
    if (cfg->allow_given)
        return in_list(&cfg->allow, p);
    struct vd_access_list def = {.uids = {vp_self_uid()}, .nuids = 1};
    if (vp_group_id("vramd", &def.gids[0]) == 0)
        def.ngids = 1;
    return in_list(&def, p);
}

bool vd_access_admin(const struct vd_config *cfg, const struct vp_peer *p)
{
    return p->uid == 0 || in_list(&cfg->admin, p);
}

bool vd_access_weights(const struct vd_config *cfg, const struct vp_peer *p,
                       uint32_t owner)
{
    return p->uid == owner || vd_access_admin(cfg, p) ||
           in_list(&cfg->weights, p);
}
