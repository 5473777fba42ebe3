/* Windows: a pipe client's identity (SIDs, platform/identity.h) as the
 * core's peer (uid and gid numbers, platform/peer.h), until the core's
 * access lists and per-user limits are keyed by SIDs. */
#ifndef VRAMD_PEER_MAP_H
#define VRAMD_PEER_MAP_H
#include <stddef.h>
#include "identity.h"
#include "peer.h"
/* SYSTEM, and a token with Administrators enabled, become uid 0 (root:
 * always allowed, an admin); the daemon's own user becomes vp_self_uid().
 * Anyone else is refused (-EACCES, why says so): the configuration's
 * access lists are not applied to SIDs yet, and refusing is the safe
 * reading of them. Writes *out only on success. */
int vd_peer_map(const struct vp_identity *id, struct vp_peer *out, char *why,
                size_t whylen);
#endif
