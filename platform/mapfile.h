/* SPDX-License-Identifier: Apache-2.0 */
/* A file shared with the next daemon: the state file, mapped into memory and
 * updated in place (a store per change, nothing waits for a disk). It lives
 * beside the socket (POSIX, in /run: memory, gone at reboot) or under
 * %ProgramData% (Windows). */
#ifndef VRAM_PLATFORM_MAPFILE_H
#define VRAM_PLATFORM_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

struct vp_mapfile {
    void *map;
    size_t size;
    intptr_t h; /* the open file, -1 when none */
};

#define VP_MAPFILE_NONE ((struct vp_mapfile){NULL, 0, -1})

/* Both write *out in full, VP_MAPFILE_NONE on failure, so that
 * vp_mapfile_close is always safe after them. */

/* Creates a new file at path (replacing a leftover one), of size bytes, only
 * accessible to this user, and maps it for reading and writing. */
int vp_mapfile_create(const char *path, size_t size, struct vp_mapfile *out,
                      char *why, size_t whylen);
/* Maps an existing file read-only: 0, -ENOENT when there is none,
 * -EPERM when it is not a regular file owned by this user, or another
 * negative errno; why says what. */
int vp_mapfile_open(const char *path, struct vp_mapfile *out, char *why,
                    size_t whylen);
void vp_mapfile_close(struct vp_mapfile *m);
/* Moves from over to (atomically where the system can). */
int vp_file_rename(const char *from, const char *to);
int vp_file_remove(const char *path);
/* An identifier of the current boot (a state file from another boot knows
 * no live process); "" when unknown. */
void vp_boot_id(char out[40]);

#endif
