/* The daemon's lock on POSIX: flock on a file only this user can open. */
#include "lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

int vp_lock_take(const char *path, vp_handle *out, char *why, size_t whylen)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        int e = -errno;
        snprintf(why, whylen, "lock file %s: %s", path, strerror(errno));
        return e;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno == EWOULDBLOCK ? -EADDRINUSE : -errno;
        snprintf(why, whylen, "lock %s is held", path);
        close(fd);
        return e;
    }
    out->v = fd;
    return 0;
}
