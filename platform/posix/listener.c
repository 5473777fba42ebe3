/* SPDX-License-Identifier: Apache-2.0 */
/* The listening socket on POSIX. */
#include "platform/listener.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "platform/posix/passed.h"

int vp_listen_check_dir(const char *path, char *why, size_t whylen)
{
    char tmp[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    snprintf(tmp, sizeof(tmp), "%s", path);
    char *dir = dirname(tmp);
    struct stat st;
    if (lstat(dir, &st) < 0) {
        if (errno != ENOENT || mkdir(dir, 0755) < 0) {
            int e = -errno;
            snprintf(why, whylen, "socket directory %s: %s", dir, strerror(errno));
            return e;
        }
        return 1;
    }
    if (S_ISLNK(st.st_mode)) {
        /* /var/run is a link to /run on most systems: the one link taken. */
        if (strcmp(dir, "/var/run") != 0 || stat(dir, &st) < 0) {
            snprintf(why, whylen, "socket directory %s is a symbolic link; "
                     "refusing", dir);
            return -ELOOP;
        }
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, whylen, "socket directory %s is not a directory", dir);
        return -ENOTDIR;
    }
    /* Whoever may write into the directory could replace the socket or the
     * state file, or take the directory's name for a daemon of their own:
     * only this user (and root) may. A sticky bit does not help: it stops
     * deletions, not someone making the names first. */
    uid_t me = geteuid();
    if (st.st_uid != me && st.st_uid != 0) {
        snprintf(why, whylen, "socket directory %s belongs to uid %u, not to "
                 "vramd's user (uid %u) or root; refusing", dir,
                 (unsigned)st.st_uid, (unsigned)me);
        return -EPERM;
    }
    if ((st.st_mode & S_IWOTH) || ((st.st_mode & S_IWGRP) && st.st_gid != getegid())) {
        snprintf(why, whylen, "socket directory %s can be written by other "
                 "users (mode %04o); refusing: use a directory only vramd's "
                 "user can write, such as /run/vramd", dir,
                 (unsigned)(st.st_mode & 07777));
        return -EPERM;
    }
    return 0;
}

int vp_listen(const struct vp_listen_cfg *cfg, vp_handle *out, char *why,
              size_t whylen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(cfg->path) >= sizeof(sa.sun_path)) {
        snprintf(why, whylen, "socket path %s is longer than %zu bytes",
                 cfg->path, sizeof(sa.sun_path) - 1);
        return -ENAMETOOLONG;
    }
    struct stat st;
    if (lstat(cfg->path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(why, whylen, "%s exists and is not a socket; refusing to "
                     "replace it", cfg->path);
            return -EEXIST;
        }
        unlink(cfg->path); /* stale: the caller holds the lock */
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        int e = -errno;
        snprintf(why, whylen, "socket: %s", strerror(errno));
        return e;
    }
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", cfg->path);
    mode_t old = umask(0177); /* opened up below, once the group is right */
    int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    int e = 0;
    if (r < 0) {
        e = -errno;
        snprintf(why, whylen, "cannot listen on %s: %s", cfg->path,
                 strerror(errno));
        goto fail;
    }
    if (cfg->group && cfg->group[0]) {
        struct group *g = getgrnam(cfg->group);
        if (!g || chown(cfg->path, (uid_t)-1, g->gr_gid) < 0) {
            snprintf(why, whylen, "cannot give %s to group %s: %s", cfg->path,
                     cfg->group, g ? strerror(errno) : "no such group");
            e = -EPERM;
            goto fail_unlink;
        }
    }
    if (chmod(cfg->path, cfg->mode) < 0 || listen(fd, 128) < 0) {
        e = -errno;
        snprintf(why, whylen, "cannot listen on %s: %s", cfg->path,
                 strerror(errno));
        goto fail_unlink;
    }
    out->v = fd;
    return 0;
fail_unlink:
    unlink(cfg->path);
fail:
    close(fd);
    return e;
}

int vp_listen_activated(vp_handle *out, char *path, size_t pathlen, char *why,
                        size_t whylen)
{
    int n = vpx_passed_load(why, whylen);
    if (n <= 0)
        return n;
    size_t pick = 0, found = 0;
    if (!vpx_passed_named()) {
        /* An activator that names nothing (not systemd, which always
         * does): every fd is the listener's, and there must be one. */
        if (n != 1) {
            snprintf(why, whylen, "socket activation passed %d fds without "
                     "names; vramd takes exactly one socket", n);
            return -EINVAL;
        }
        found = vpx_passed_fd(0) >= 0;
    } else {
        /* Named (systemd): the socket unit's fd is the listener's, and the
         * fd store's handles that come with it are the keeper's. */
        for (size_t i = 0; i < (size_t)n; i++) {
            if (vpx_passed_fd(i) < 0 || !vpx_passed_is_socket(i))
                continue;
            if (found++ == 0)
                pick = i;
            else {
                snprintf(why, whylen, "the service manager passed more than "
                         "one socket (%s and %s); vramd takes exactly one",
                         vpx_passed_name(pick), vpx_passed_name(i));
                return -EINVAL;
            }
        }
    }
    if (!found)
        return 0; /* none (or taken already) */
    int fd = vpx_passed_fd(pick);
    if (!vpx_listening_unix_stream(fd)) {
        snprintf(why, whylen, "the activated fd %d%s%s%s is not a listening "
                 "Unix stream socket", fd, vpx_passed_named() ? " (" : "",
                 vpx_passed_name(pick), vpx_passed_named() ? ")" : "");
        return -EINVAL;
    }
    struct sockaddr_un sa;
    socklen_t salen = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &salen) < 0) {
        int e = -errno;
        snprintf(why, whylen, "the activated socket: %s", strerror(errno));
        return e;
    }
    vpx_passed_take(pick);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (salen > offsetof(struct sockaddr_un, sun_path) && sa.sun_path[0])
        snprintf(path, pathlen, "%.*s",
                 (int)(salen - offsetof(struct sockaddr_un, sun_path)),
                 sa.sun_path);
    out->v = fd;
    return 1;
}

int vp_accept(vp_handle l, vp_handle *out)
{
    int fd;
    do {
        fd = accept4((int)l.v, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    out->v = fd;
    return 0;
}

void vp_listen_close(vp_handle *l, const char *path, bool remove_path)
{
    if (!vp_ok(*l))
        return;
    vp_close(l);
    if (remove_path && path && path[0])
        unlink(path);
}
