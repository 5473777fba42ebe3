/* SPDX-License-Identifier: Apache-2.0 */
/* vramd-holder: keeps vramd's handles while vramd is not there, and does
 * nothing else (keeper.h says why and when vramd starts it).
 *
 *   vramd-holder --socket PATH [--max N] [--status-fd FD] [--grace-ms MS]
 *
 * It listens at PATH (a seqpacket socket, mode 0600, in a directory only
 * its user may write into), serves one vramd of its own user at a time
 * (keeper_wire.h), and exits once it keeps nothing and no vramd is
 * connected (or when no vramd came within the grace period after its
 * start). It goes into the background itself, in its own session: the
 * process vramd started exits once the holder listens, after the holder's
 * word ("ok PID" or "error ERRNO TEXT") went to the status fd. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "platform/handle.h"
#include "platform/keeper_names.h"
#include "platform/posix/keeper_wire.h"
#include "platform/listener.h"
#include "platform/posix/sockcred.h"

#define HELLO_MS 5000
#define GRACE_MS 10000
#define SEND_MS 5000
/* Connections being refused: each is answered after its HELLO (closing
 * one with its HELLO unread would reset it, and the peer would see the
 * reset, not the reason), or dropped after REFUSE_MS. */
#define REFUSING 8
#define REFUSE_MS 1000

static struct {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    dev_t dev;
    ino_t ino;
    int listener;
    int client;     /* -1 when none */
    pid_t client_pid;
    bool hello;     /* the client said hello */
    int64_t due;    /* its hello's deadline */
    int64_t accept_after; /* out of fds: accept again from then on */
    struct vpx_names kept;
    int status_fd;
    struct refusal {
        int fd; /* -1 when free */
        int32_t err;
        uint32_t arg2;
        int64_t due;
    } refusing[REFUSING];
} h = {.listener = -1, .client = -1, .status_fd = -1};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The word on the start, to whoever started it; once. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char buf[320];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(buf))
        n = sizeof(buf) - 1;
    int fd = h.status_fd >= 0 ? h.status_fd : 2;
    ssize_t w = write(fd, buf, (size_t)n);
    (void)w;
    if (h.status_fd >= 0) {
        close(h.status_fd);
        h.status_fd = -1;
    }
}

static void close_value(int64_t v)
{
    close((int)v);
}

/* Removes the socket only while it is still the one this holder made. */
static void leave(int status)
{
    struct stat st;
    if (h.listener >= 0 && lstat(h.path, &st) == 0 && st.st_dev == h.dev &&
        st.st_ino == h.ino)
        unlink(h.path);
    if (h.listener >= 0)
        close(h.listener);
    if (h.client >= 0)
        close(h.client);
    vpx_names_clear(&h.kept, close_value);
    vpx_names_fini(&h.kept);
    exit(status);
}

static int listen_at(const char *path, char *why, size_t whylen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(why, whylen, "%s is longer than %zu bytes", path,
                 sizeof(sa.sun_path) - 1);
        return -ENAMETOOLONG;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int e = vp_listen_check_dir(path, why, whylen);
    if (e < 0)
        return e;
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) {
            snprintf(why, whylen, "%s exists and is not a socket of this "
                     "user; refusing to replace it", path);
            return -EEXIST;
        }
        int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (s < 0) {
            e = -errno;
            snprintf(why, whylen, "socket: %s", strerror(errno));
            return e;
        }
        int c = connect(s, (struct sockaddr *)&sa, sizeof(sa));
        e = c < 0 ? errno : 0;
        close(s);
        if (c == 0 || e != ECONNREFUSED) {
            snprintf(why, whylen, "a holder already serves %s", path);
            return -EADDRINUSE;
        }
        unlink(path); /* nobody listens: its holder is gone */
    }
    int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l < 0) {
        e = -errno;
        snprintf(why, whylen, "socket: %s", strerror(errno));
        return e;
    }
    mode_t old = umask(0177); /* 0600: vramd's user only */
    int r = bind(l, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    /* listen() comes after the fork, in the process that stays: a client
     * is told the pid of the process that listened (vpx_sockcred). */
    if (r < 0 || lstat(path, &st) < 0) {
        e = -errno;
        snprintf(why, whylen, "cannot listen at %s: %s", path, strerror(errno));
        close(l);
        return e;
    }
    h.dev = st.st_dev;
    h.ino = st.st_ino;
    h.listener = l;
    return 0;
}

static void drop_client(void)
{
    if (h.client >= 0)
        close(h.client);
    h.client = -1;
    h.hello = false;
}

static int reply(uint16_t op, int32_t arg, uint32_t arg2)
{
    return vpx_krec_send(h.client, op, arg, arg2, NULL, -1);
}

/* One record from the client: 0 to go on, < 0 to drop it. */
static int serve(const struct vpx_krec *r, int fd)
{
    if (!h.hello) {
        if (r->op != VPX_K_HELLO)
            return -EPROTO;
        if (r->version != VPX_KEEPER_VERSION) {
            reply(VPX_K_ERR, -EPROTO, VPX_KEEPER_VERSION);
            return -EPROTO;
        }
        h.hello = true;
        return reply(VPX_K_OK, (int32_t)h.kept.n, h.kept.max);
    }
    int e;
    switch (r->op) {
    case VPX_K_PUT:
        if (fd < 0)
            return reply(VPX_K_ERR, -EINVAL, 0);
        e = vpx_names_add(&h.kept, r->name, fd);
        if (e < 0) {
            close(fd);
            return reply(VPX_K_ERR, e, 0);
        }
        return reply(VPX_K_OK, 0, 0);
    case VPX_K_REMOVE: {
        int64_t v;
        e = vpx_names_del(&h.kept, r->name, &v);
        if (e < 0)
            return reply(VPX_K_ERR, e, 0);
        close((int)v);
        return reply(VPX_K_OK, 0, 0);
    }
    case VPX_K_LIST: {
        uint32_t n = 0;
        for (size_t i = 0; i < h.kept.cap; i++) {
            const struct vpx_name_slot *s = &h.kept.slot[i];
            if (!s->name[0])
                continue;
            if ((e = vpx_krec_send(h.client, VPX_K_ENTRY, 0, 0, s->name,
                                   (int)s->v)) < 0)
                return e;
            n++;
        }
        return vpx_krec_send(h.client, VPX_K_END, (int32_t)n, 0, NULL, -1);
    }
    default:
        return -EPROTO;
    }
}

static void on_client(void)
{
    for (;;) {
        struct vpx_krec r;
        int fd;
        char w[160];
        int e = vpx_krec_recv(h.client, &r, &fd, 0, w, sizeof(w));
        if (e == -EAGAIN)
            return;
        if (e == 0 && fd >= 0 && r.op != VPX_K_PUT) {
            close(fd); /* a handle nobody asked for */
            fd = -1;
        }
        if (e == 0)
            e = serve(&r, fd);
        if (e < 0) {
            drop_client(); /* whatever it did, what is kept stays kept */
            return;
        }
    }
}

/* Whether the current client's connection is still open. */
static bool client_alive(void)
{
    struct pollfd p = {.fd = h.client, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 0;
}

/* Answers c with err once it said hello, closing it then. */
static void refuse(int c, int32_t err, uint32_t arg2)
{
    struct refusal *slot = &h.refusing[0];
    for (int i = 0; i < REFUSING; i++) {
        if (h.refusing[i].fd < 0) {
            slot = &h.refusing[i];
            break;
        }
        if (h.refusing[i].due < slot->due)
            slot = &h.refusing[i];
    }
    if (slot->fd >= 0)
        close(slot->fd); /* the oldest goes without its answer */
    *slot = (struct refusal){.fd = c, .err = err, .arg2 = arg2,
                             .due = now_ms() + REFUSE_MS};
}

static void on_refusing(int i)
{
    struct refusal *r = &h.refusing[i];
    struct vpx_krec rec;
    int fd;
    char w[160];
    int e = vpx_krec_recv(r->fd, &rec, &fd, 0, w, sizeof(w));
    if (e == -EAGAIN)
        return;
    if (fd >= 0)
        close(fd);
    if (e == 0)
        vpx_krec_send(r->fd, VPX_K_ERR, r->err, r->arg2, NULL, -1);
    /* What else it sent unasked would reset it on close: read it all. */
    while (vpx_krec_recv(r->fd, &rec, &fd, 0, w, sizeof(w)) != -EAGAIN &&
           fd >= 0)
        close(fd);
    close(r->fd);
    r->fd = -1;
}

static void on_accept(void)
{
    for (;;) {
        int c = accept4(h.listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
            /* Out of fds: stop accepting a while rather than spin. */
            if (errno == EMFILE || errno == ENFILE)
                h.accept_after = now_ms() + 100;
            return;
        }
        int64_t pid;
        uint32_t uid;
        struct timeval tv = {.tv_sec = SEND_MS / 1000};
        setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (vpx_sockcred(c, &pid, &uid) < 0 || uid != (uint32_t)geteuid()) {
            /* Another user: the socket's mode keeps them out, and should
             * that fail, this does. */
            refuse(c, -EPERM, 0);
            continue;
        }
        if (h.client >= 0 && client_alive()) {
            /* One vramd at a time: a second one is another daemon's. */
            refuse(c, -EBUSY, (uint32_t)h.client_pid);
            continue;
        }
        drop_client();
        /* Blocking from here: replies wait (up to SEND_MS) for room. */
        fcntl(c, F_SETFL, fcntl(c, F_GETFL) & ~O_NONBLOCK);
        h.client = c;
        h.client_pid = (pid_t)pid;
        h.hello = false;
        h.due = now_ms() + HELLO_MS;
    }
}

static void usage(void)
{
    say("error %d usage: vramd-holder --socket PATH [--max N] "
        "[--status-fd FD] [--grace-ms MS]\n", EINVAL);
    exit(2);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    long max = VP_KEEPER_DEFAULT_MAX, grace = GRACE_MS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!v)
            usage();
        i++;
        if (strcmp(a, "--socket") == 0)
            path = v;
        else if (strcmp(a, "--max") == 0)
            max = strtol(v, &end, 10);
        else if (strcmp(a, "--status-fd") == 0)
            h.status_fd = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--grace-ms") == 0)
            grace = strtol(v, &end, 10);
        else
            usage();
        if (end && (*end || end == v))
            usage();
    }
    if (h.status_fd >= 0 && fcntl(h.status_fd, F_SETFD, FD_CLOEXEC) < 0)
        h.status_fd = -1;
    if (!path || max <= 0 || max > INT32_MAX || grace < 0)
        usage();
    signal(SIGPIPE, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    /* What kept handles need: the soft limit lifted, and room left. */
    vp_raise_handle_limit();
    uint64_t limit = vp_handle_limit();
    if (limit < 64) {
        say("error %d only %llu fds may be open\n", EMFILE,
            (unsigned long long)limit);
        return 1;
    }
    if ((uint64_t)max + 32 > limit)
        max = (long)(limit - 32);
    vpx_names_init(&h.kept, (unsigned)max);
    /* Its own path, whatever the directory it runs in later. */
    if (path[0] == '/') {
        snprintf(h.path, sizeof(h.path), "%s", path);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd)) ||
            (size_t)snprintf(h.path, sizeof(h.path), "%s/%s", cwd, path) >=
                sizeof(h.path)) {
            say("error %d %s: too long a path\n", ENAMETOOLONG, path);
            return 1;
        }
    }
    char why[256];
    int e = listen_at(h.path, why, sizeof(why));
    if (e < 0) {
        say("error %d %s\n", -e, why);
        return 1;
    }
    setsid(); /* a no-op where the starter made it a session already */
    pid_t pid = fork();
    if (pid < 0) {
        e = errno;
        say("error %d fork: %s\n", e, strerror(e));
        leave(1);
    }
    if (pid > 0)
        _exit(0); /* the starter reaps this one; init gets the holder */
    if (listen(h.listener, 8) < 0) {
        e = errno;
        say("error %d cannot listen at %s: %s\n", e, h.path, strerror(e));
        leave(1);
    }
    if (chdir("/") < 0) {
        /* Nothing depends on it but not pinning a directory. */
    }
    say("ok %ld\n", (long)getpid());
    for (int i = 0; i < REFUSING; i++)
        h.refusing[i].fd = -1;
    int64_t idle_until = now_ms() + grace;
    for (;;) {
        int64_t now = now_ms();
        bool accepting = now >= h.accept_after;
        struct pollfd p[2 + REFUSING] = {
            {.fd = accepting ? h.listener : -1, .events = POLLIN},
            {.fd = h.client, .events = POLLIN}};
        int timeout = -1;
        for (int i = 0; i < REFUSING; i++) {
            p[2 + i] = (struct pollfd){.fd = h.refusing[i].fd, .events = POLLIN};
            if (h.refusing[i].fd >= 0 &&
                (timeout < 0 || h.refusing[i].due - now < timeout))
                timeout = h.refusing[i].due > now ? (int)(h.refusing[i].due - now)
                                                  : 0;
        }
        int t2 = -1;
        if (h.client < 0 && h.kept.n == 0)
            t2 = idle_until > now ? (int)(idle_until - now) : 0;
        else if (h.client >= 0 && !h.hello)
            t2 = h.due > now ? (int)(h.due - now) : 0;
        if (!accepting && (t2 < 0 || h.accept_after - now < t2))
            t2 = (int)(h.accept_after - now);
        if (t2 >= 0 && (timeout < 0 || t2 < timeout))
            timeout = t2;
        int k = poll(p, 2 + REFUSING, timeout);
        if (k < 0 && errno != EINTR)
            leave(1);
        now = now_ms();
        for (int i = 0; i < REFUSING; i++) {
            if (h.refusing[i].fd < 0)
                continue;
            if (k > 0 && p[2 + i].revents)
                on_refusing(i);
            if (h.refusing[i].fd >= 0 && now >= h.refusing[i].due) {
                close(h.refusing[i].fd);
                h.refusing[i].fd = -1;
            }
        }
        if (h.client >= 0 && !h.hello && now >= h.due)
            drop_client();
        bool had_client = h.client >= 0;
        if (k > 0 && h.client >= 0 && p[1].revents)
            on_client();
        if (k > 0 && (p[0].revents & POLLIN))
            on_accept();
        if (h.client < 0 && h.kept.n == 0 && (had_client || now >= idle_until))
            leave(0); /* nothing kept, nobody to keep it for */
    }
}
