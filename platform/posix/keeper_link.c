/* SPDX-License-Identifier: Apache-2.0 */
/* vramd's side of its holder. */
#include "platform/posix/keeper_link.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "platform/keeper_names.h"
#include "platform/posix/keeper_wire.h"
#include "platform/proc.h"
#include "platform/posix/sockcred.h"

/* Where the holder is installed, from vramd's directory (CMake says). */
#ifndef VRAM_BIN_TO_HOLDER
#define VRAM_BIN_TO_HOLDER "../libexec/vramd"
#endif

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int vpx_link_connect(struct vpx_link *l, const char *path, char *why,
                     size_t whylen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(why, whylen, "the keeper's socket %s is longer than %zu "
                 "bytes", path, sizeof(sa.sun_path) - 1);
        return -ENAMETOOLONG;
    }
    struct stat st;
    if (lstat(path, &st) < 0) {
        if (errno == ENOENT)
            return 1;
        int e = -errno;
        snprintf(why, whylen, "the keeper's socket %s: %s", path,
                 strerror(errno));
        return e;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(why, whylen, "%s exists and is not a socket; refusing it as "
                 "the keeper's", path);
        return -EEXIST;
    }
    uid_t me = geteuid();
    if (st.st_uid != me) {
        snprintf(why, whylen, "the keeper's socket %s belongs to uid %u, not "
                 "to vramd's user (uid %u); refusing it", path,
                 (unsigned)st.st_uid, (unsigned)me);
        return -EPERM;
    }
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) {
        int e = -errno;
        snprintf(why, whylen, "socket: %s", strerror(errno));
        return e;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int e = 0;
    if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        e = -errno;
        close(s);
        if (e == -ECONNREFUSED || e == -ENOENT)
            return 1; /* a socket nobody listens on: its holder is gone */
        if (e == -EPROTOTYPE) {
            snprintf(why, whylen, "%s is a socket of another kind, not a "
                     "holder's; refusing it", path);
            return -EPROTO;
        }
        snprintf(why, whylen, "cannot reach the holder at %s: %s", path,
                 strerror(-e));
        return e;
    }
    int64_t pid;
    uint32_t uid;
    if ((e = vpx_sockcred(s, &pid, &uid)) < 0) {
        snprintf(why, whylen, "the holder at %s: %s", path, strerror(-e));
        goto fail;
    }
    if (uid != (uint32_t)me) {
        snprintf(why, whylen, "the process serving the keeper's socket %s "
                 "(pid %d) runs as uid %u, not as vramd's user (uid %u); "
                 "refusing it", path, (int)pid, (unsigned)uid,
                 (unsigned)me);
        e = -EPERM;
        goto fail;
    }
    struct timeval tv = {.tv_sec = VP_KEEPER_TIMEOUT_MS / 1000,
                         .tv_usec = (VP_KEEPER_TIMEOUT_MS % 1000) * 1000};
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if ((e = vpx_krec_send(s, VPX_K_HELLO, 0, 0, NULL, -1)) < 0) {
        close(s);
        return 1; /* it went away at once: a holder that was exiting */
    }
    struct vpx_krec r;
    int fd;
    char w[160] = "";
    e = vpx_krec_recv(s, &r, &fd, VP_KEEPER_TIMEOUT_MS, w, sizeof(w));
    if (fd >= 0)
        close(fd);
    if (e == -ECONNRESET) {
        /* A holder closes what it accepted without a word only when it is
         * exiting, which it does only once it keeps nothing. */
        close(s);
        return 1;
    }
    if (e < 0) {
        snprintf(why, whylen, "the holder at %s (pid %d) did not say hello: "
                 "%s", path, (int)pid, e == -ETIMEDOUT ? "no answer" : w);
        goto fail;
    }
    if (r.op == VPX_K_ERR && r.arg == -EBUSY) {
        snprintf(why, whylen, "the holder at %s (pid %d) serves another vramd "
                 "(pid %u)", path, (int)pid, (unsigned)r.arg2);
        e = -EBUSY;
        goto fail;
    }
    if (r.version != VPX_KEEPER_VERSION ||
        (r.op == VPX_K_ERR && r.arg == -EPROTO)) {
        snprintf(why, whylen, "the holder at %s (pid %d) speaks the keeper's "
                 "protocol version %u, this vramd version %u", path,
                 (int)pid, (unsigned)r.version, VPX_KEEPER_VERSION);
        e = -EPROTO;
        goto fail;
    }
    if (r.op != VPX_K_OK) {
        e = r.op == VPX_K_ERR && r.arg < 0 ? r.arg : -EPROTO;
        snprintf(why, whylen, "the holder at %s (pid %d) refused vramd: %s",
                 path, (int)pid, strerror(-e));
        goto fail;
    }
    l->fd = s;
    l->pid = pid;
    l->held = r.arg > 0 ? (unsigned)r.arg : 0;
    l->max = r.arg2;
    return 0;
fail:
    close(s);
    return e;
}

int vpx_link_holder_path(const char *holder_path, char *out, size_t len,
                         char *why, size_t whylen)
{
    if (holder_path && holder_path[0]) {
        if ((size_t)snprintf(out, len, "%s", holder_path) >= len) {
            snprintf(why, whylen, "the holder's path is too long");
            return -ENAMETOOLONG;
        }
        return 0;
    }
    char exe[PATH_MAX];
    int e = vp_self_exe(exe, sizeof(exe));
    if (e < 0) {
        snprintf(why, whylen, "cannot find this program's path: %s",
                 strerror(-e));
        return e;
    }
    const char *dir = dirname(exe);
    char beside[PATH_MAX + 32], libexec[PATH_MAX + 64];
    snprintf(beside, sizeof(beside), "%s/vramd-holder", dir);
    snprintf(libexec, sizeof(libexec), "%s/" VRAM_BIN_TO_HOLDER "/vramd-holder",
             dir);
    const char *found = access(beside, X_OK) == 0    ? beside
                        : access(libexec, X_OK) == 0 ? libexec
                                                     : NULL;
    if (!found) {
        snprintf(why, whylen, "no holder program: neither %s nor %s", beside,
                 libexec);
        return -ENOENT;
    }
    if ((size_t)snprintf(out, len, "%s", found) >= len) {
        snprintf(why, whylen, "the holder's path is too long");
        return -ENAMETOOLONG;
    }
    return 0;
}

/* Reads the holder's word on its start ("ok PID" or "error ERRNO TEXT")
 * until its end, or until the deadline. */
static int read_status(int fd, char *buf, size_t len)
{
    size_t got = 0;
    int64_t end = now_ms() + VP_KEEPER_TIMEOUT_MS;
    for (;;) {
        int64_t left = end - now_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int k = poll(&p, 1, (int)left);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        if (k == 0)
            return -ETIMEDOUT;
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        got += (size_t)n;
        if (got == len - 1)
            break;
    }
    buf[got] = '\0';
    return 0;
}

int vpx_link_spawn(const char *holder, const char *path, unsigned max,
                   char *why, size_t whylen)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        int e = -errno;
        snprintf(why, whylen, "pipe: %s", strerror(errno));
        return e;
    }
    /* The holder finds its end at fd 3 (dup2 onto itself would keep it
     * close-on-exec). */
    if (p[1] == 3) {
        int moved = fcntl(p[1], F_DUPFD_CLOEXEC, 4);
        if (moved < 0) {
            int e = -errno;
            snprintf(why, whylen, "fcntl: %s", strerror(errno));
            close(p[0]);
            close(p[1]);
            return e;
        }
        close(p[1]);
        p[1] = moved;
    }
    char maxs[16];
    snprintf(maxs, sizeof(maxs), "%u", max);
    char *argv[] = {"vramd-holder", "--socket", (char *)path, "--max", maxs,
                    "--status-fd", "3", NULL};
    char *envp[] = {NULL}; /* nothing of vramd's environment */
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    /* Its own session from the start: a signal to vramd's process group
     * (a terminal's ^C, a supervisor's kill of the group) does not reach
     * it; and it reparents to init once its first process exits. */
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDWR, 0);
    posix_spawn_file_actions_adddup2(&fa, 0, 1);
    posix_spawn_file_actions_adddup2(&fa, 0, 2);
    posix_spawn_file_actions_adddup2(&fa, p[1], 3);
    sigset_t none, dflt;
    sigemptyset(&none);
    sigemptyset(&dflt);
    sigaddset(&dflt, SIGPIPE);
    sigaddset(&dflt, SIGHUP);
    sigaddset(&dflt, SIGINT);
    sigaddset(&dflt, SIGTERM);
    sigaddset(&dflt, SIGCHLD);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dflt);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int r = posix_spawn(&pid, holder, &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(p[1]);
    if (r != 0) {
        snprintf(why, whylen, "cannot start the holder %s: %s", holder,
                 strerror(r));
        close(p[0]);
        return -r;
    }
    char st[320];
    int e = read_status(p[0], st, sizeof(st));
    close(p[0]);
    if (e == -ETIMEDOUT)
        kill(pid, SIGKILL); /* its first process; a stuck start */
    int ws;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (e < 0) {
        snprintf(why, whylen, "the holder %s did not start: %s", holder,
                 e == -ETIMEDOUT ? "no word within the deadline"
                                 : strerror(-e));
        return e;
    }
    long hpid;
    if (sscanf(st, "ok %ld", &hpid) == 1)
        return 0;
    int herr = 0, off = 0;
    if (sscanf(st, "error %d %n", &herr, &off) == 1 && herr > 0) {
        st[strcspn(st, "\n")] = '\0';
        snprintf(why, whylen, "the holder %s could not start: %s", holder,
                 st + off);
        return -herr;
    }
    snprintf(why, whylen, "the holder %s did not start (it said nothing; "
             "is it the holder program?)", holder);
    return -ENOEXEC;
}

static int link_failed(struct vpx_link *l, int e, const char *w, char *why,
                       size_t whylen)
{
    if (e == -ETIMEDOUT)
        snprintf(why, whylen, "the holder (pid %lld) did not answer within "
                 "%d ms", (long long)l->pid, VP_KEEPER_TIMEOUT_MS);
    else if (e == -EPROTO)
        snprintf(why, whylen, "the holder (pid %lld) said something else: %s",
                 (long long)l->pid, w);
    else {
        snprintf(why, whylen, "the holder (pid %lld) is gone: %s",
                 (long long)l->pid, strerror(-e));
        e = -EPIPE;
    }
    vpx_link_close(l);
    return e;
}

static int request(struct vpx_link *l, uint16_t op, const char *name, int fd,
                   char *why, size_t whylen)
{
    int e = vpx_krec_send(l->fd, op, 0, 0, name, fd);
    if (e < 0)
        return link_failed(l, e, "", why, whylen);
    struct vpx_krec r;
    int rfd;
    char w[160] = "";
    e = vpx_krec_recv(l->fd, &r, &rfd, VP_KEEPER_TIMEOUT_MS, w, sizeof(w));
    if (rfd >= 0)
        close(rfd);
    if (e < 0)
        return link_failed(l, e, w, why, whylen);
    if (r.op == VPX_K_OK)
        return 0;
    if (r.op == VPX_K_ERR && r.arg < 0) {
        const char *say = vpx_names_refusal(r.arg);
        snprintf(why, whylen, "the holder refused %s: %s", name,
                 say[0] ? say : strerror(-r.arg));
        return r.arg;
    }
    return link_failed(l, -EPROTO, "an answer of another kind", why, whylen);
}

int vpx_link_put(struct vpx_link *l, const char *name, int fd, char *why,
                 size_t whylen)
{
    return request(l, VPX_K_PUT, name, fd, why, whylen);
}

int vpx_link_remove(struct vpx_link *l, const char *name, char *why,
                    size_t whylen)
{
    return request(l, VPX_K_REMOVE, name, -1, why, whylen);
}

int vpx_link_list(struct vpx_link *l,
                  int (*fn)(void *arg, const char *name, int fd), void *arg,
                  size_t *count, char *why, size_t whylen)
{
    int e = vpx_krec_send(l->fd, VPX_K_LIST, 0, 0, NULL, -1);
    if (e < 0)
        return link_failed(l, e, "", why, whylen);
    size_t n = 0;
    int fn_err = 0;
    char fn_why[64] = "";
    for (;;) {
        struct vpx_krec r;
        int fd;
        char w[160] = "";
        e = vpx_krec_recv(l->fd, &r, &fd, VP_KEEPER_TIMEOUT_MS, w, sizeof(w));
        if (e < 0)
            return link_failed(l, e, w, why, whylen);
        if (r.op == VPX_K_END) {
            if (fd >= 0)
                close(fd);
            if (r.arg < 0 || (size_t)r.arg != n)
                return link_failed(l, -EPROTO, "a list of another length",
                                   why, whylen);
            break;
        }
        if (r.op != VPX_K_ENTRY || fd < 0 || !vp_keeper_name_ok(r.name)) {
            if (fd >= 0)
                close(fd);
            return link_failed(l, -EPROTO, "a list entry without a handle or "
                               "a name", why, whylen);
        }
        n++;
        if (fn_err) {
            close(fd);
            continue;
        }
        int fe = fn(arg, r.name, fd);
        if (fe < 0) {
            fn_err = fe;
            snprintf(fn_why, sizeof(fn_why), "%s", strerror(-fe));
        }
    }
    if (fn_err) {
        snprintf(why, whylen, "taking back what the holder keeps: %s", fn_why);
        return fn_err;
    }
    *count = n;
    return 0;
}

void vpx_link_close(struct vpx_link *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
}
