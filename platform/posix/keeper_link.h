/* SPDX-License-Identifier: Apache-2.0 */
/* vramd's side of its holder (holder_posix.c): finding it at its socket and
 * making sure it is ours, starting one, and the requests of keeper_wire.h.
 * keeper_posix.c decides when. */
#ifndef VRAM_PLATFORM_POSIX_KEEPER_LINK_H
#define VRAM_PLATFORM_POSIX_KEEPER_LINK_H

#include <stddef.h>
#include <stdint.h>

struct vpx_link {
    int fd;             /* -1 when not connected */
    int64_t pid;        /* the holder's, by the kernel's word */
    unsigned max, held; /* what its HELLO said */
};

/* Connects to the holder at path and says hello: 0 when connected, 1 when
 * no holder runs there (no socket, or one nobody listens on), or a negative
 * errno with why: -EPERM (the socket, or the process serving it, is
 * another user's), -EEXIST (something else is at path), -EBUSY (it serves
 * another vramd), -EPROTO (not a holder of this version). */
int vpx_link_connect(struct vpx_link *l, const char *path, char *why,
                     size_t whylen);
/* Starts a holder (the program at holder) for path, keeping at most max
 * handles, and waits until it listens: 0, or a negative errno with why. */
int vpx_link_spawn(const char *holder, const char *path, unsigned max,
                   char *why, size_t whylen);
/* The holder program: holder_path when given, else beside this executable,
 * else ../libexec/vramd/ from it. 0 with out written, or -ENOENT with why. */
int vpx_link_holder_path(const char *holder_path, char *out, size_t len,
                         char *why, size_t whylen);

/* Asks for everything the holder keeps: fn gets each name and its fd (its
 * own from then on, whatever fn returns; after fn fails, the rest are
 * closed). 0 with *count, or a negative errno with why (what
 * came before the failure went to fn already). */
int vpx_link_list(struct vpx_link *l,
                  int (*fn)(void *arg, const char *name, int fd), void *arg,
                  size_t *count, char *why, size_t whylen);
/* PUT and REMOVE: 0, the holder's refusal (a negative errno), or a failure
 * of the link (-EPIPE, -ETIMEDOUT, -EPROTO) with why. */
int vpx_link_put(struct vpx_link *l, const char *name, int fd, char *why,
                 size_t whylen);
int vpx_link_remove(struct vpx_link *l, const char *name, char *why,
                    size_t whylen);
void vpx_link_close(struct vpx_link *l);

#endif
