/* SPDX-License-Identifier: Apache-2.0 */
/* The state file on POSIX: a shared mapping of a file only this user owns.
 * The boot's identifier is each OS's own (platform/linux/mapfile_linux.c). */
#include "platform/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int vp_mapfile_create(const char *path, size_t size, struct vp_mapfile *out,
                      char *why, size_t whylen)
{
    *out = (struct vp_mapfile){.map = NULL, .size = 0, .h = -1};
    unlink(path);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
        int e = -errno;
        snprintf(why, whylen, "%s: %s", path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
        return e;
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int e = -errno;
        snprintf(why, whylen, "%s: mmap: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return e;
    }
    *out = (struct vp_mapfile){.map = m, .size = size, .h = fd};
    return 0;
}

int vp_mapfile_open(const char *path, struct vp_mapfile *out, char *why,
                    size_t whylen)
{
    *out = (struct vp_mapfile){.map = NULL, .size = 0, .h = -1};
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        int e = -errno;
        snprintf(why, whylen, "%s: %s", path, strerror(errno));
        return e;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid()) {
        close(fd);
        snprintf(why, whylen, "%s is not a regular file of this user", path);
        return -EPERM;
    }
    if (sb.st_size == 0) {
        close(fd);
        *out = (struct vp_mapfile){.map = NULL, .size = 0, .h = -1};
        return 0;
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        int e = -errno;
        snprintf(why, whylen, "%s: mmap: %s", path, strerror(errno));
        return e;
    }
    *out = (struct vp_mapfile){.map = m, .size = (size_t)sb.st_size, .h = -1};
    return 0;
}

void vp_mapfile_close(struct vp_mapfile *m)
{
    if (!m)
        return;
    if (m->map)
        munmap(m->map, m->size);
    if (m->h >= 0)
        close((int)m->h);
    *m = (struct vp_mapfile){.map = NULL, .size = 0, .h = -1};
}

int vp_file_rename(const char *from, const char *to)
{
    return rename(from, to) < 0 ? -errno : 0;
}

int vp_file_remove(const char *path)
{
    return unlink(path) < 0 ? -errno : 0;
}
