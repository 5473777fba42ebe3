/* SPDX-License-Identifier: Apache-2.0 */
/* The keeper under a service manager (platform/keeper.h,
 * platform/linux/keeper_fdstore_linux.c, platform/posix/passed.c), against
 * a NOTIFY_SOCKET listener of the test's own: each put is one datagram that
 * carries exactly "FDSTORE=1\nFDNAME=<name>\nFDPOLL=0" and the handle as
 * SCM_RIGHTS; a removal is "FDSTOREREMOVE=1\nFDNAME=<name>" alone; a
 * refused put or remove sends nothing. The start-up side: this program
 * again, exec'd with LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES and fds at
 * 3..: a socket named vramd.socket and stored memfds. The listener takes
 * its socket and the keeper the rest by name (in either order), with
 * their bytes; what is not the keeper's is closed (and removed from the
 * store when its name is bad); every fd is close-on-exec and the variables
 * are gone. vp_listen_activated as before: one socket without names;
 * garbage refused.
 *
 *   test_keeper_fdstore                 the test
 *   test_keeper_fdstore child MODE      a child with passed fds (below)
 *   test_keeper_fdstore service DIR     the service of test_keeper_systemd.sh */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "platform/handle.h"
#include "platform/keeper.h"
#include "tests/platform/keeper_test.h"
#include "platform/listener.h"
#include "platform/proc.h"
#include "platform/service.h"

static char dir[64], notify_path[96];
static int notify_fd = -1;
static const char *self;

/* ---- the service manager's side ---------------------------------------- */

/* The notify socket's next datagram: its text and its fds (0 when none
 * arrives within ms). */
static int notify_recv(char *text, size_t len, int *fds, int maxfds, int *nfds,
                       int ms)
{
    *nfds = 0;
    text[0] = '\0';
    struct pollfd p = {.fd = notify_fd, .events = POLLIN};
    if (poll(&p, 1, ms) != 1)
        return 0;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * 8)];
    } ctl;
    struct iovec iov = {.iov_base = text, .iov_len = len - 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
    ssize_t n = recvmsg(notify_fd, &msg, MSG_CMSG_CLOEXEC);
    REQUIRE(n >= 0, "recvmsg: %s", strerror(errno));
    REQUIRE(!(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)), "a datagram cut short");
    text[n] = '\0';
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (*nfds < maxfds)
                fds[(*nfds)++] = fd;
            else
                close(fd);
        }
    }
    return 1;
}

static void notify_open(const char *path)
{
    if (notify_fd >= 0)
        close(notify_fd);
    notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    socklen_t len;
    if (path[0] == '@') {
        memcpy(sa.sun_path + 1, path + 1, strlen(path) - 1);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
    } else {
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        len = sizeof(sa);
        unlink(path);
    }
    REQUIRE(notify_fd >= 0 && bind(notify_fd, (struct sockaddr *)&sa, len) == 0,
            "bind %s: %s", path, strerror(errno));
    setenv("NOTIFY_SOCKET", path, 1);
}

static bool same_file(int a, int b)
{
    struct stat x, y;
    return fstat(a, &x) == 0 && fstat(b, &y) == 0 && x.st_dev == y.st_dev &&
           x.st_ino == y.st_ino;
}

/* A put of memfd i under name: the one datagram it sends, checked. */
static void put_checked(struct vp_keeper *k, const char *name, unsigned i)
{
    int fd = kt_memfd(i, i % 2);
    char why[256];
    int e = vp_keeper_put(k, name, (vp_handle){fd}, why, sizeof(why));
    CHECK(e == 0, "put %s: %d %s", name, e, why);
    CHECK(fcntl(fd, F_GETFD) >= 0, "the caller's handle was taken");
    char text[256], want[128], w[128] = "";
    int fds[8], nfds;
    CHECK(notify_recv(text, sizeof(text), fds, 8, &nfds, 2000), "no datagram "
          "for %s", name);
    snprintf(want, sizeof(want), "FDSTORE=1\nFDNAME=%s\nFDPOLL=0", name);
    CHECK(strcmp(text, want) == 0, "put %s said \"%s\"", name, text);
    CHECK(nfds == 1, "put %s sent %d fds", name, nfds);
    if (nfds >= 1) {
        CHECK(same_file(fds[0], fd), "put %s sent another file", name);
        CHECK(kt_check(fds[0], i, i % 2, w, sizeof(w)), "put %s: %s", name, w);
    }
    for (int j = 0; j < nfds; j++)
        close(fds[j]);
    close(fd);
}

static void nothing_sent(const char *what)
{
    char text[256];
    int fds[8], nfds;
    CHECK(!notify_recv(text, sizeof(text), fds, 8, &nfds, 50), "%s sent \"%s\"",
          what, text);
    for (int j = 0; j < nfds; j++)
        close(fds[j]);
}

static struct vp_keeper *open_kind(enum vp_keeper_kind kind, int *err,
                                   char *why, size_t len)
{
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/vramd.sock", dir);
    struct vp_keeper_cfg c = {.socket_path = sock, .kind = kind};
    struct vp_keeper *k = NULL;
    struct vp_keeper_entry *left = NULL;
    size_t n = 0;
    *err = vp_keeper_open(&c, &k, &left, &n, why, len);
    CHECK(*err != 0 || n == 0, "%zu left in a fresh store", n);
    vp_keeper_entries_free(left, n);
    return *err ? NULL : k;
}

static void test_protocol(const char *notify)
{
    notify_open(notify);
    setenv("FDSTORE", "6", 1);
    int e;
    char why[512];
    struct vp_keeper *k = open_kind(VP_KEEPER_AUTO, &e, why, sizeof(why));
    REQUIRE(k, "open with %s: %d %s", notify, e, why);
    struct vp_keeper_info info;
    vp_keeper_info(k, &info);
    CHECK(info.kind == VP_KEEPER_FDSTORE && info.max == 6 &&
              strstr(info.note, "$FDSTORE=6"),
          "kind %d max %u note %s", info.kind, info.max, info.note);
    put_checked(k, "w0.0", 0);
    put_checked(k, "w0.1", 1);
    int fd = kt_memfd(2, false);
    e = vp_keeper_put(k, "w0.0", (vp_handle){fd}, why, sizeof(why));
    CHECK(e == -EEXIST, "a second w0.0: %d", e);
    nothing_sent("a second w0.0");
    e = vp_keeper_put(k, "x:y", (vp_handle){fd}, why, sizeof(why));
    CHECK(e == -EINVAL, "a name with ':': %d", e);
    nothing_sent("a name with ':'");
    e = vp_keeper_remove(k, "w0.0", why, sizeof(why));
    CHECK(e == 0, "remove: %d %s", e, why);
    char text[256];
    int fds[8], nfds;
    CHECK(notify_recv(text, sizeof(text), fds, 8, &nfds, 2000) &&
              strcmp(text, "FDSTOREREMOVE=1\nFDNAME=w0.0") == 0 && nfds == 0,
          "remove said \"%s\" with %d fds", text, nfds);
    CHECK(!vp_keeper_has(k, "w0.0") && vp_keeper_has(k, "w0.1"), "what is kept");
    e = vp_keeper_remove(k, "w0.0", why, sizeof(why));
    CHECK(e == -ENOENT, "removing it again: %d", e);
    nothing_sent("a second remove");
    /* $FDSTORE is the store's size: no more than that. */
    for (unsigned i = 2; i < 7; i++) {
        char name[16];
        snprintf(name, sizeof(name), "w0.%u", i);
        put_checked(k, name, i);
    }
    e = vp_keeper_put(k, "w1.0", (vp_handle){fd}, why, sizeof(why));
    CHECK(e == -ENOSPC, "a seventh with FDSTORE=6: %d %s", e, why);
    nothing_sent("a put past $FDSTORE");
    close(fd);
    vp_keeper_close(k);

    /* Without $FDSTORE: the holder (and the note says why); asked for the
     * store, -ENOTSUP. */
    unsetenv("FDSTORE");
    k = open_kind(VP_KEEPER_AUTO, &e, why, sizeof(why));
    REQUIRE(k, "open: %d %s", e, why);
    vp_keeper_info(k, &info);
    CHECK(info.kind == VP_KEEPER_HOLDER && strstr(info.note, "$FDSTORE"),
          "kind %d, note %s", info.kind, info.note);
    vp_keeper_close(k);
    k = open_kind(VP_KEEPER_FDSTORE, &e, why, sizeof(why));
    CHECK(!k && e == -ENOTSUP && strstr(why, "FDSTORE"), "FDSTORE asked "
          "for without it: %d %s", e, why);
    unsetenv("NOTIFY_SOCKET");
    setenv("FDSTORE", "6", 1);
    k = open_kind(VP_KEEPER_FDSTORE, &e, why, sizeof(why));
    CHECK(!k && e == -ENOTSUP && strstr(why, "NOTIFY_SOCKET"), "without a "
          "manager: %d %s", e, why);
    unsetenv("FDSTORE");
}

/* ---- the start-up side ------------------------------------------------- */

struct passed {
    int fd[8];
    int n;
    const char *names;  /* LISTEN_FDNAMES; NULL: not set */
    const char *pid;    /* LISTEN_PID; NULL: the child's own */
    const char *count;  /* LISTEN_FDS; NULL: n */
};

/* Runs this program as "child MODE" with p's fds at 3.. and the
 * variables set; returns its exit status, its output in out. */
static int run_child(const char *mode, const struct passed *p, char *out,
                     size_t len)
{
    int o[2];
    REQUIRE(pipe2(o, O_CLOEXEC) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        dup2(o[1], 1);
        int high[8];
        for (int i = 0; i < p->n; i++)
            high[i] = fcntl(p->fd[i], F_DUPFD_CLOEXEC, 100);
        for (int i = 0; i < p->n; i++)
            dup2(high[i], 3 + i); /* not close-on-exec */
        char pidbuf[24], nbuf[24];
        snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
        snprintf(nbuf, sizeof(nbuf), "%d", p->n);
        setenv("LISTEN_PID", p->pid ? p->pid : pidbuf, 1);
        setenv("LISTEN_FDS", p->count ? p->count : nbuf, 1);
        if (p->names)
            setenv("LISTEN_FDNAMES", p->names, 1);
        else
            unsetenv("LISTEN_FDNAMES");
        execl(self, self, "child", mode, (char *)NULL);
        _exit(127);
    }
    close(o[1]);
    size_t got = 0;
    ssize_t r;
    while (got < len - 1 && (r = read(o[0], out + got, len - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(o[0]);
    int ws;
    waitpid(pid, &ws, 0);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

static int listening(const char *name)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%.64s/%.32s", dir, name);
    const char *path = sa.sun_path;
    unlink(path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
                listen(s, 4) == 0, "listen %s: %s", path, strerror(errno));
    return s;
}

static int plain_file(void)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/plain", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0, "open %s", path);
    return fd;
}

static void test_startup(void)
{
    notify_open(notify_path);
    setenv("FDSTORE", "16", 1);
    char out[2048], sockpath[128];
    snprintf(sockpath, sizeof(sockpath), "%s/act.sock", dir);
    int l = listening("act.sock");
    int m0 = kt_memfd(0, false), m1 = kt_memfd(1, true), m2 = kt_memfd(2, false);
    int bad = kt_memfd(3, false), dup = kt_memfd(4, false);
    struct passed p = {.fd = {l, m0, m1, m2, bad, dup}, .n = 6,
                       .names = "vramd.socket:w0.0:w0.1:w0.2:bad name:w0.1"};
    const char *modes[] = {"listener-first", "keeper-first"};
    for (int i = 0; i < 2; i++) {
        int st = run_child(modes[i], &p, out, sizeof(out));
        CHECK(st == 0, "%s: status %d: %s", modes[i], st, out);
        char want[256];
        snprintf(want, sizeof(want), "listener 1 %s\n", sockpath);
        CHECK(strstr(out, want), "%s: \"%s\"", modes[i], out);
        CHECK(strstr(out, "left 3 discarded 2\n"), "%s: \"%s\"", modes[i], out);
        /* The bad name is removed from the store; the duplicate is not
         * (that would remove the first w0.1 too). */
        char text[256];
        int fds[8], nfds;
        CHECK(notify_recv(text, sizeof(text), fds, 8, &nfds, 2000) &&
                  strcmp(text, "FDSTOREREMOVE=1\nFDNAME=bad name") == 0,
              "%s: the child said \"%s\"", modes[i], text);
        nothing_sent("the child, after its removal");
    }

    /* vp_listen_activated as before: one socket, no names. */
    p = (struct passed){.fd = {l}, .n = 1};
    int st = run_child("listener", &p, out, sizeof(out));
    char want[256];
    snprintf(want, sizeof(want), "listener 1 %s\nenv gone\n", sockpath);
    CHECK(st == 0 && strcmp(out, want) == 0, "one socket, no names: %d \"%s\"",
          st, out);
    /* Named, with no socket among them: the listener has none, the rest
     * stays for the keeper. */
    p = (struct passed){.fd = {m0}, .n = 1, .names = "w0.0"};
    st = run_child("listener", &p, out, sizeof(out));
    CHECK(st == 0 && strncmp(out, "listener 0 \n", 12) == 0, "no socket: %d \"%s\"",
          st, out);
    /* Another process's: not taken, not unset. */
    p = (struct passed){.fd = {l}, .n = 1, .pid = "1"};
    st = run_child("listener", &p, out, sizeof(out));
    CHECK(st == 0 && strcmp(out, "listener 0 \nenv kept\n") == 0,
          "LISTEN_PID of another: %d \"%s\"", st, out);
    /* Garbage. */
    int f = plain_file(), l2 = listening("act2.sock");
    struct {
        const char *what;
        struct passed p;
        int err;
    } bad_cases[] = {
        {"two fds without names", {.fd = {l, m0}, .n = 2}, -EINVAL},
        {"a file for a socket", {.fd = {f}, .n = 1}, -EINVAL},
        {"a count that is not one", {.fd = {l}, .n = 1, .count = "1x"}, -EINVAL},
        {"a pid that is not one", {.fd = {l}, .n = 1, .pid = "12ab"}, -EINVAL},
        {"names that do not match", {.fd = {l, m0}, .n = 2, .names = "a"}, -EINVAL},
        {"an fd that is not open", {.fd = {l}, .n = 1, .count = "3"}, -EBADF},
        {"two sockets", {.fd = {l, l2}, .n = 2, .names = "a.socket:b"}, -EINVAL},
        {"a .socket that is a file", {.fd = {f, m0}, .n = 2,
                                      .names = "vramd.socket:w0.0"}, -EINVAL},
    };
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        st = run_child("listener", &bad_cases[i].p, out, sizeof(out));
        char w2[32];
        snprintf(w2, sizeof(w2), "listener %d ", bad_cases[i].err);
        CHECK(st == 0 && strncmp(out, w2, strlen(w2)) == 0 &&
                  strstr(out, "env gone"),
              "%s: %d \"%s\"", bad_cases[i].what, st, out);
    }
    close(f);
    close(l2);
    close(l);
    close(m0);
    close(m1);
    close(m2);
    close(bad);
    close(dup);
}

/* ---- the children ------------------------------------------------------ */

static int child_listener(char *path, size_t len)
{
    vp_handle h = VP_NONE;
    char why[256] = "";
    path[0] = '\0';
    int r = vp_listen_activated(&h, path, len, why, sizeof(why));
    printf("listener %d %s\n", r, r < 0 ? why : path);
    if (r == 1) {
        vp_handle c;
        if (!(fcntl((int)h.v, F_GETFD) & FD_CLOEXEC) ||
            !(fcntl((int)h.v, F_GETFL) & O_NONBLOCK) || vp_accept(h, &c) != -EAGAIN)
            printf("the listener is not close-on-exec, non-blocking, listening\n");
    }
    return r;
}

static bool child_keeper(void)
{
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/vramd.sock", dir);
    struct vp_keeper_cfg c = {.socket_path = sock};
    struct vp_keeper *k;
    struct vp_keeper_entry *left;
    size_t n;
    char why[512];
    int e = vp_keeper_open(&c, &k, &left, &n, why, sizeof(why));
    if (e < 0) {
        printf("keeper %d %s\n", e, why);
        return false;
    }
    struct vp_keeper_info info;
    vp_keeper_info(k, &info);
    printf("left %zu discarded %u\n", n, info.discarded);
    bool ok = info.kind == VP_KEEPER_FDSTORE && info.held == n;
    const char *names[] = {"w0.0", "w0.1", "w0.2"};
    for (unsigned i = 0; i < 3; i++) {
        struct vp_keeper_entry *x = NULL;
        for (size_t j = 0; j < n; j++)
            if (strcmp(left[j].name, names[i]) == 0)
                x = &left[j];
        char w[128] = "";
        if (!x || !kt_check((int)x->h.v, i, i % 2, w, sizeof(w))) {
            printf("%s: %s\n", names[i], x ? w : "missing");
            ok = false;
        }
    }
    /* The keeper knows them: a second put of one is refused. */
    int fd = kt_memfd(9, false);
    if (vp_keeper_put(k, "w0.1", (vp_handle){fd}, why, sizeof(why)) != -EEXIST) {
        printf("w0.1 put again\n");
        ok = false;
    }
    close(fd);
    vp_keeper_entries_free(left, n);
    vp_keeper_close(k);
    return ok;
}

static int child(const char *mode)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    /* Past the passed fds, what this process had from its own parent (a
     * shell's, a test runner's) is not the keeper's business. */
    bool inherited[64] = {0};
    for (int fd = 9; fd < 64; fd++)
        inherited[fd] = fcntl(fd, F_GETFD) >= 0;
    char path[128];
    bool ok = true;
    if (strcmp(mode, "listener") == 0) {
        child_listener(path, sizeof(path));
        printf("env %s\n", getenv("LISTEN_FDS") || getenv("LISTEN_PID") ||
                                   getenv("LISTEN_FDNAMES")
                               ? "kept"
                               : "gone");
        return 0;
    }
    if (strcmp(mode, "keeper-first") == 0)
        ok = child_keeper();
    ok = child_listener(path, sizeof(path)) == 1 && ok;
    if (strcmp(mode, "listener-first") == 0)
        ok = child_keeper() && ok;
    if (getenv("LISTEN_FDS") || getenv("LISTEN_PID") || getenv("LISTEN_FDNAMES")) {
        printf("the LISTEN_ variables are still set\n");
        ok = false;
    }
    /* Nothing passed is left open but the listener (3), and none of it
     * (nor anything else) would reach a child. */
    for (int fd = 3; fd < 64; fd++) {
        int fl = fcntl(fd, F_GETFD);
        if (fl >= 0 && !(fl & FD_CLOEXEC) && !inherited[fd]) {
            printf("fd %d is not close-on-exec\n", fd);
            ok = false;
        }
        if (fd >= 4 && fd <= 8 && fl >= 0) {
            printf("fd %d (passed, not the listener's) is still open\n", fd);
            ok = false;
        }
    }
    return ok ? 0 : 1;
}

/* ---- the service (test_keeper_systemd.sh) ------------------------------- */

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct vp_keeper_entry *)a)->name,
                  ((const struct vp_keeper_entry *)b)->name);
}

/* Under a real service manager, at each start: takes the socket and the
 * stored handles; with none stored, stores four memfds and crashes; with
 * four, checks them, removes two and crashes; with two, checks them,
 * removes them and exits 0. Its words go to DIR/service.log. */
static int service(const char *d)
{
    char log[128];
    snprintf(log, sizeof(log), "%s/service.log", d);
    FILE *f = fopen(log, "a");
    if (!f)
        return 3;
    setvbuf(f, NULL, _IONBF, 0);
    const char *fds = getenv("LISTEN_FDS"), *names = getenv("LISTEN_FDNAMES");
    fprintf(f, "passed: LISTEN_FDS=%s LISTEN_FDNAMES=%s\n", fds ? fds : "",
            names ? names : "");
    vp_handle l = VP_NONE;
    char path[128] = "", why[512] = "";
    int r = vp_listen_activated(&l, path, sizeof(path), why, sizeof(why));
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/svc.sock", d);
    struct vp_keeper_cfg c = {.socket_path = sock, .kind = VP_KEEPER_FDSTORE};
    struct vp_keeper *k;
    struct vp_keeper_entry *left;
    size_t n;
    int e = vp_keeper_open(&c, &k, &left, &n, why, sizeof(why));
    if (e < 0) {
        fprintf(f, "keeper %d %s\n", e, why);
        return 4;
    }
    if (n)
        qsort(left, n, sizeof(*left), by_name);
    fprintf(f, "start: listener %d %s, %zu kept:", r, path, n);
    for (size_t i = 0; i < n; i++)
        fprintf(f, " %s", left[i].name);
    fprintf(f, "\n");
    bool ok = r == 1;
    for (size_t i = 0; i < n; i++) {
        unsigned idx = (unsigned)(left[i].name[3] - '0');
        char w[128] = "";
        if (strncmp(left[i].name, "w0.", 3) || idx > 3 ||
            !kt_check((int)left[i].h.v, idx, idx % 2, w, sizeof(w))) {
            fprintf(f, "%s came back wrong: %s\n", left[i].name, w);
            ok = false;
        }
    }
    vp_service_notify("READY=1");
    if (n == 0) {
        for (unsigned i = 0; i < 4; i++) {
            char name[16];
            snprintf(name, sizeof(name), "w0.%u", i);
            int fd = kt_memfd(i, i % 2);
            if ((e = vp_keeper_put(k, name, (vp_handle){fd}, why, sizeof(why))) < 0) {
                fprintf(f, "put %s: %s\n", name, why);
                ok = false;
            }
            close(fd);
        }
        fprintf(f, "stored 4, crashing\n");
    } else if (n == 4) {
        for (size_t i = 0; i < n; i++)
            if (left[i].name[3] == '1' || left[i].name[3] == '2')
                vp_keeper_remove(k, left[i].name, why, sizeof(why));
        fprintf(f, "removed w0.1 and w0.2, crashing\n");
    } else {
        for (size_t i = 0; i < n; i++)
            vp_keeper_remove(k, left[i].name, why, sizeof(why));
        fprintf(f, "%s: done\n", n == 2 ? "passed" : "failed");
        return n == 2 && ok ? 0 : 5;
    }
    if (!ok) {
        fprintf(f, "failed\n");
        return 5;
    }
    /* Let the manager take the messages before the crash. */
    usleep(200 * 1000);
    vp_proc_kill_self();
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc == 3 && strcmp(argv[1], "service") == 0)
        return service(argv[2]);
    const char *d = getenv("KT_DIR");
    if (argc == 3 && strcmp(argv[1], "child") == 0 && d) {
        snprintf(dir, sizeof(dir), "%s", d);
        return child(argv[2]);
    }
    signal(SIGPIPE, SIG_IGN);
    kt_tmpdir(dir, sizeof(dir));
    setenv("KT_DIR", dir, 1);
    snprintf(notify_path, sizeof(notify_path), "%s/notify", dir);
    test_protocol(notify_path);
    char abstract[64];
    snprintf(abstract, sizeof(abstract), "@vram-keeper-test-%.40s", dir + 17);
    test_protocol(abstract);
    test_startup();
    return check_report("test_keeper_fdstore");
}
