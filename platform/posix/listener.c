/* The listening socket on POSIX. */
#include "listener.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

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
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    if (!pid || !fds)
        return 0;
    if (strtol(pid, NULL, 10) != (long)getpid())
        return 0; /* meant for another process */
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    if (strtol(fds, NULL, 10) != 1) {
        snprintf(why, whylen, "socket activation passed %s sockets; vramd "
                 "takes exactly one", fds);
        return -EINVAL;
    }
    int fd = 3, type = 0, listening = 0;
    socklen_t len = sizeof(type);
    struct sockaddr_un sa;
    socklen_t salen = sizeof(sa);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
        type != SOCK_STREAM ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 ||
        !listening || getsockname(fd, (struct sockaddr *)&sa, &salen) < 0 ||
        sa.sun_family != AF_UNIX) {
        snprintf(why, whylen, "the activated fd 3 is not a listening Unix "
                 "stream socket");
        return -EINVAL;
    }
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (sa.sun_path[0])
        snprintf(path, pathlen, "%.*s", (int)sizeof(sa.sun_path), sa.sun_path);
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
