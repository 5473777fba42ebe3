/* SPDX-License-Identifier: Apache-2.0 */
/* Who may connect to vramd, and who may administer it: peers are judged by
 * the kernel's word (SO_PEERCRED, SO_PEERGROUPS), never by what they say. */
#ifndef VRAMD_ACCESS_H
#define VRAMD_ACCESS_H

#include <stdbool.h>

#include "daemon/config.h"
#include "platform/peer.h"
/* Root always; then the configured allow-list, or by default the daemon's
 * own user and the members of group vramd. */
bool vd_access_connect(const struct vd_config *cfg, const struct vp_peer *p);
/* Root always; then the configured admin list. */
bool vd_access_admin(const struct vd_config *cfg, const struct vp_peer *p);
/* R17: whether p may open a weight set that uid owner wrote: its owner,
 * admins, and the access.weights list. */
bool vd_access_weights(const struct vd_config *cfg, const struct vp_peer *p,
                       uint32_t owner);

#endif
