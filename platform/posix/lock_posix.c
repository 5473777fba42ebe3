/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's lock on POSIX: flock on the socket's directory. */
#include "platform/lock.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

int vp_lock_take(const char *socket_path, vp_handle *out, char *dir_out,
                 size_t dirlen, char *why, size_t whylen)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", socket_path);
    const char *dir = dirname(tmp);
    snprintf(dir_out, dirlen, "%s", dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        int e = -errno;
        snprintf(why, whylen, "cannot lock directory %s: %s", dir, strerror(errno));
        return e;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno == EWOULDBLOCK ? -EADDRINUSE : -errno;
        snprintf(why, whylen, "directory %s is locked by another process", dir);
        close(fd);
        return e;
    }
    out->v = fd;
    return 0;
}
