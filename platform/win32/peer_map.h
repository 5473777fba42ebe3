/* SPDX-License-Identifier: Apache-2.0 */
/* A pipe client's identity (SIDs, identity.h) as the daemon's peer (the
 * numbers of platform/peer.h), which the core's access lists (access.allow,
 * access.admin: account names and SIDs, numbered as the configuration is
 * read) and per-user limits judge: what endpoint_win32.c's vp_link_peer gives. */
#ifndef VRAM_PLATFORM_WIN32_PEER_MAP_H
#define VRAM_PLATFORM_WIN32_PEER_MAP_H
#include <stddef.h>
#include "platform/win32/identity.h"
#include "platform/peer.h"
/* SYSTEM, and a token with Administrators enabled, become uid 0 (root:
 * always allowed, an admin, no per-user bound). Anyone else gets their
 * user's number (vp_sid_id) and the numbers of those of their groups that
 * a list names; whether they may connect is the core's decision. Writes
 * *out only on success: -ENOSPC (why says so) when the user cannot be
 * numbered. */
int vpw_peer_map(const struct vp_identity *id, struct vp_peer *out, char *why,
                 size_t whylen);
#endif
