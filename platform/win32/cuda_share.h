/* SPDX-License-Identifier: Apache-2.0 */
/* Who may hold a CUDA chunk's Win32 handle (CU_MEM_HANDLE_TYPE_WIN32).
 * cuMemCreate takes, in CUmemAllocationProp.win32HandleMetaData, an
 * OBJECT_ATTRIBUTES whose security descriptor the allocation's shareable
 * object gets (cuda.h: it "defines the scope of which exported allocations
 * may be transferred to other processes"). The driver needs it alive across
 * each cuMemCreate, so vramd builds one at start and keeps it.
 *
 * The descriptor grants full access to SYSTEM, Administrators and vramd's
 * own user (when that is not SYSTEM, as under --console), and nothing to
 * anyone else: the object has no name, so no one can open it, and a client
 * gets a handle only as vramd duplicates one into its process
 * (platform/win32/push.h, VP_PUSH_SAME), which does not consult the descriptor.
 * Whether the driver also checks it when a client of another user imports
 * the handle can only be learnt on a Windows GPU machine (docs/windows.md).
 *
 * Windows only, and kept free of <windows.h> so that code above platform/
 * can include it (as "win32/cuda_share.h", under _WIN32). */
#ifndef VRAM_WIN32_CUDA_SHARE_H
#define VRAM_WIN32_CUDA_SHARE_H

#include <stddef.h>

#include "platform/win32/identity.h"

/* "D:P(A;;GA;;;SY)(A;;GA;;;BA)(A;;GA;;;<self>)", the last ACE left out when
 * self is SYSTEM. self NULL: this process's user. 0, -ENOSPC when len is
 * too small, or what reading this process's token failed with. */
int vpw_cuda_sddl(const struct vp_sid *self, char *buf, size_t len);

/* An OBJECT_ATTRIBUTES (no name, no attributes, no root) holding the
 * descriptor that sddl (NULL: vpw_cuda_sddl(NULL)) describes. Writes *out
 * only on success; why says what failed. */
struct vpw_cuda_share;
int vpw_cuda_share_create(const char *sddl, struct vpw_cuda_share **out,
                          char *why, size_t whylen);
/* What goes in win32HandleMetaData: the OBJECT_ATTRIBUTES, valid until
 * vpw_cuda_share_free. */
void *vpw_cuda_share_meta(const struct vpw_cuda_share *s);
/* The SDDL it was made from, for the log. */
const char *vpw_cuda_share_sddl(const struct vpw_cuda_share *s);
void vpw_cuda_share_free(struct vpw_cuda_share *s); /* NULL-tolerant */

#endif
