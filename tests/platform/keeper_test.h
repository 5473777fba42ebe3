/* SPDX-License-Identifier: Apache-2.0 */
/* What the keeper's tests share: memfds with bytes of their own (some
 * sealed), checked where they come back; a temporary directory; becoming
 * another user. */
#ifndef VRAM_TEST_KEEPER_TEST_H
#define VRAM_TEST_KEEPER_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/check.h"

#define KT_PAGE 4096
#define KT_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

/* The bytes of memfd number i: its size (1 to 3 pages) and content. */
static inline size_t kt_size(unsigned i)
{
    return KT_PAGE * (1 + i % 3);
}

static inline unsigned char kt_byte(unsigned i, size_t j)
{
    return (unsigned char)(i * 131 + j * 7 + (j >> 12));
}

/* A memfd with memfd i's bytes; sealed against any change when sealed. */
static inline int kt_memfd(unsigned i, bool sealed)
{
    int fd = memfd_create("kt", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(fd >= 0, "memfd_create: %s", strerror(errno));
    size_t n = kt_size(i);
    unsigned char *b = malloc(n);
    REQUIRE(b, "malloc");
    for (size_t j = 0; j < n; j++)
        b[j] = kt_byte(i, j);
    REQUIRE(pwrite(fd, b, n, 0) == (ssize_t)n, "pwrite: %s", strerror(errno));
    free(b);
    if (sealed)
        REQUIRE(fcntl(fd, F_ADD_SEALS, KT_SEALS) == 0, "seal: %s",
                strerror(errno));
    return fd;
}

/* Whether fd holds memfd i's bytes, sealed as said; why on failure. */
static inline bool kt_check(int fd, unsigned i, bool sealed, char *why,
                            size_t len)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || (size_t)st.st_size != kt_size(i)) {
        snprintf(why, len, "size %lld, expected %zu", (long long)st.st_size,
                 kt_size(i));
        return false;
    }
    int seals = fcntl(fd, F_GET_SEALS);
    if ((seals & KT_SEALS) != (sealed ? KT_SEALS : 0)) {
        snprintf(why, len, "seals 0x%x", seals);
        return false;
    }
    if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC)) {
        snprintf(why, len, "not close-on-exec");
        return false;
    }
    size_t n = kt_size(i);
    unsigned char *b = malloc(n);
    bool ok = b && pread(fd, b, n, 0) == (ssize_t)n;
    for (size_t j = 0; ok && j < n; j++)
        if (b[j] != kt_byte(i, j)) {
            snprintf(why, len, "byte %zu is %u, expected %u", j, b[j],
                     kt_byte(i, j));
            ok = false;
        }
    free(b);
    if (!ok && !why[0])
        snprintf(why, len, "cannot read it");
    return ok;
}

/* A directory of its own, mode 0755 (other users may pass through),
 * removed when the process that made it exits, however it exits (a
 * failed REQUIRE too; not its forked children). */
static char kt_dir_made[64];
static pid_t kt_dir_owner;

static inline void kt_rmdir(void)
{
    if (getpid() != kt_dir_owner || !kt_dir_made[0])
        return;
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", kt_dir_made);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", kt_dir_made);
    kt_dir_made[0] = '\0';
}

static inline void kt_tmpdir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/vram-keeper-XXXXXX");
    REQUIRE(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    REQUIRE(chmod(dir, 0755) == 0, "chmod");
    snprintf(kt_dir_made, sizeof(kt_dir_made), "%s", dir);
    kt_dir_owner = getpid();
    atexit(kt_rmdir);
}

static inline void kt_become(uid_t uid)
{
    REQUIRE(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(uid) == 0,
            "become uid %u", (unsigned)uid);
}

#endif
