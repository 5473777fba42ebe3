/* SPDX-License-Identifier: Apache-2.0 */
/* The keeper's holder (platform/keeper.h, platform/posix/holder_posix.c), with
 * real processes: a process puts memfds (some sealed) into the keeper and
 * is killed with SIGKILL, its whole process group with it; another process
 * opens the keeper and gets every handle back by name, bytes and seals
 * intact; removes some; the holder exits once it keeps nothing. A holder
 * that dies loses what it kept, and says so (-EPIPE), and a new one takes
 * over. Strangers are refused: a socket at the holder's path that another
 * user owns or serves, something that is not a holder, a directory others
 * may write into; another user cannot talk to the holder; a second vramd
 * is refused while one is connected. The limits: max handles, the names'
 * bytes. Needs root (to become uid 20001). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "platform/handle.h"
#include "platform/keeper.h"
#include "tests/platform/keeper_test.h"
#include "platform/posix/keeper_wire.h"
#include "platform/proc.h"

#define N 48 /* handles put by the first process */

static char dir[64];
static const char *holder_bin;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void saw(int64_t pid);

static struct vp_keeper_cfg cfg_at(const char *sock, unsigned max)
{
    return (struct vp_keeper_cfg){.socket_path = sock, .holder_path = holder_bin,
                                  .kind = VP_KEEPER_HOLDER, .max = max};
}

static void sock_in(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static void name_of(char *out, size_t len, unsigned i)
{
    snprintf(out, len, "w%u.%u", i / 8, i % 8);
}

/* Whether process pid ends within ms (a zombie counts as ended). */
static bool ends_within(int64_t pid, int ms)
{
    vp_handle pin;
    if (vp_proc_pin(pid, &pin) < 0)
        return true; /* gone already */
    struct pollfd p = {.fd = (int)pin.v, .events = POLLIN};
    int r = poll(&p, 1, ms);
    vp_close(&pin);
    return r == 1;
}

static struct vp_keeper *open_ok(const struct vp_keeper_cfg *c,
                                 struct vp_keeper_entry **left, size_t *n)
{
    struct vp_keeper *k = NULL;
    char why[512] = "";
    int e = vp_keeper_open(c, &k, left, n, why, sizeof(why));
    REQUIRE(e == 0, "vp_keeper_open(%s): %d %s", c->socket_path, e, why);
    return k;
}

static int put_memfd(struct vp_keeper *k, const char *name, unsigned i,
                     bool sealed, char *why, size_t len)
{
    int fd = kt_memfd(i, sealed);
    int e = vp_keeper_put(k, name, (vp_handle){fd}, why, len);
    close(fd); /* the keeper's copy is what must live on */
    return e;
}

/* The entry named name, or NULL. */
static struct vp_keeper_entry *find(struct vp_keeper_entry *e, size_t n,
                                    const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0)
            return &e[i];
    return NULL;
}

/* Every i in [0, N) with keep(i) is there with its bytes; nothing else. */
static void check_left(struct vp_keeper_entry *e, size_t n,
                       bool (*keep)(unsigned))
{
    size_t want = 0;
    for (unsigned i = 0; i < N; i++) {
        char name[32], why[128] = "";
        name_of(name, sizeof(name), i);
        struct vp_keeper_entry *x = find(e, n, name);
        if (!keep(i)) {
            CHECK(!x, "%s came back after its removal", name);
            continue;
        }
        want++;
        CHECK(x, "%s did not come back", name);
        if (x)
            CHECK(kt_check((int)x->h.v, i, i % 2, why, sizeof(why)),
                  "%s came back changed: %s", name, why);
    }
    CHECK_EQ_U(n, want);
}

static bool all(unsigned i)
{
    (void)i;
    return true;
}

static bool quarter(unsigned i)
{
    return i % 4 == 0;
}

/* A raw connection to the holder's socket, as uid: the holder's answer
 * to HELLO then LIST (records and fds counted), or the connect's error. */
struct raw_try {
    int connect_errno;
    int records, fds, first_op, first_arg;
};

static struct raw_try raw_as(uid_t uid, const char *path)
{
    int p[2];
    REQUIRE(pipe(p) == 0, "pipe");
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        close(p[0]);
        kt_become(uid);
        struct raw_try t = {0};
        int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            t.connect_errno = errno;
        } else {
            vpx_krec_send(s, VPX_K_HELLO, 0, 0, NULL, -1);
            for (bool listed = false;;) {
                struct vpx_krec r;
                int fd;
                char w[160];
                if (vpx_krec_recv(s, &r, &fd, 2000, w, sizeof(w)) < 0)
                    break;
                if (!t.records++) {
                    t.first_op = r.op;
                    t.first_arg = r.arg;
                }
                if (fd >= 0) {
                    t.fds++;
                    close(fd);
                }
                /* Welcomed: ask for everything. */
                if (r.op == VPX_K_OK && !listed) {
                    vpx_krec_send(s, VPX_K_LIST, 0, 0, NULL, -1);
                    listed = true;
                }
            }
        }
        ssize_t w = write(p[1], &t, sizeof(t));
        _exit(w == sizeof(t) ? 0 : 1);
    }
    close(p[1]);
    struct raw_try t;
    REQUIRE(read(p[0], &t, sizeof(t)) == sizeof(t), "the raw child's answer");
    close(p[0]);
    waitpid(pid, NULL, 0);
    return t;
}

static void test_survives_kill(void)
{
    char sock[128], kpath[160];
    sock_in(sock, sizeof(sock), "vramd.sock");
    snprintf(kpath, sizeof(kpath), "%s.keeper", sock);
    struct vp_keeper_cfg c = cfg_at(sock, 0);

    /* 1. A process (its own process group, as vramd under a supervisor)
     * puts N memfds and is killed with its group. */
    int p[2];
    REQUIRE(pipe(p) == 0, "pipe");
    double t0 = now_ms();
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        close(p[0]);
        setpgid(0, 0);
        struct vp_keeper_entry *left;
        size_t n;
        struct vp_keeper *k = open_ok(&c, &left, &n);
        if (n != 0)
            _exit(3);
        for (unsigned i = 0; i < N; i++) {
            char name[32], why[256];
            name_of(name, sizeof(name), i);
            if (put_memfd(k, name, i, i % 2, why, sizeof(why)) < 0) {
                fprintf(stderr, "put %s: %s\n", name, why);
                _exit(4);
            }
        }
        struct vp_keeper_info info;
        vp_keeper_info(k, &info);
        int64_t hp = info.holder_pid;
        if (write(p[1], &hp, sizeof(hp)) != sizeof(hp))
            _exit(5);
        pause();
        _exit(0);
    }
    close(p[1]);
    int64_t hpid = 0;
    REQUIRE(read(p[0], &hpid, sizeof(hpid)) == sizeof(hpid),
            "the first process put nothing");
    close(p[0]);
    double t_put = now_ms() - t0;
    REQUIRE(hpid > 0 && hpid != pid, "holder pid %lld", (long long)hpid);
    saw(hpid);
    struct stat st;
    REQUIRE(lstat(kpath, &st) == 0, "no holder socket at %s", kpath);
    CHECK((st.st_mode & 0777) == 0600, "holder socket mode %04o",
          (unsigned)(st.st_mode & 0777));
    CHECK(getsid((pid_t)hpid) != getsid(pid) && getpgid((pid_t)hpid) != pid,
          "the holder shares the putter's session or group");
    REQUIRE(killpg(pid, SIGKILL) == 0, "killpg");
    waitpid(pid, NULL, 0);
    CHECK(!ends_within(hpid, 200), "the holder died with the putter's group");

    /* 2. Another process takes everything back. */
    struct vp_keeper_entry *left;
    size_t n;
    t0 = now_ms();
    struct vp_keeper *k = open_ok(&c, &left, &n);
    double t_open = now_ms() - t0;
    check_left(left, n, all);
    struct vp_keeper_info info;
    vp_keeper_info(k, &info);
    CHECK(info.kind == VP_KEEPER_HOLDER, "kind %d", info.kind);
    CHECK_EQ_U(info.held, N);
    CHECK(info.holder_pid == hpid, "holder pid %lld, was %lld",
          (long long)info.holder_pid, (long long)hpid);
    printf("keeper: %d handles put in %.1f ms (a holder started), taken back "
           "in %.2f ms\n", N, t_put, t_open);

    /* Refusals, none of which changes what is kept. */
    char why[256];
    int e = put_memfd(k, "w0.0", 0, false, why, sizeof(why));
    CHECK(e == -EEXIST, "a second w0.0: %d %s", e, why);
    e = put_memfd(k, "bad name", 0, false, why, sizeof(why));
    CHECK(e == -EINVAL, "a name with a space: %d", e);
    e = put_memfd(k, "w.socket", 0, false, why, sizeof(why));
    CHECK(e == -EINVAL, "a name of a socket unit's: %d", e);
    e = put_memfd(k, "a:b", 0, false, why, sizeof(why));
    CHECK(e == -EINVAL, "a name with ':': %d", e);
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "sp");
    e = vp_keeper_put(k, "sock", (vp_handle){sv[0]}, why, sizeof(why));
    CHECK(e == -EINVAL, "a socket was kept: %d", e);
    close(sv[0]);
    close(sv[1]);
    e = vp_keeper_put(k, "closed", (vp_handle){1000000}, why, sizeof(why));
    CHECK(e == -EBADF, "a closed fd: %d", e);
    e = vp_keeper_remove(k, "nope", why, sizeof(why));
    CHECK(e == -ENOENT, "removing what is not kept: %d", e);

    /* 3. Another user: the socket's mode keeps it out, and so does the
     * holder's own check when the mode is opened up. */
    struct raw_try t = raw_as(20001, kpath);
    CHECK(t.connect_errno == EACCES, "uid 20001 connecting: %s",
          strerror(t.connect_errno));
    REQUIRE(chmod(kpath, 0666) == 0, "chmod");
    t = raw_as(20001, kpath);
    chmod(kpath, 0600);
    CHECK(t.connect_errno == 0 && t.fds == 0 && t.records == 1 &&
              t.first_op == VPX_K_ERR && t.first_arg == -EPERM,
          "uid 20001 got %d records, %d fds (first op %d arg %d)", t.records,
          t.fds, t.first_op, t.first_arg);
    /* Root speaking raw while k is connected: busy, nothing given. */
    t = raw_as(0, kpath);
    CHECK(t.fds == 0 && t.first_op == VPX_K_ERR && t.first_arg == -EBUSY,
          "a second client: %d records, %d fds, op %d arg %d", t.records,
          t.fds, t.first_op, t.first_arg);

    /* 4. A second vramd while one is connected: refused. */
    pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        struct vp_keeper *k2 = NULL;
        struct vp_keeper_entry *l2;
        size_t n2;
        char w[256];
        int r = vp_keeper_open(&c, &k2, &l2, &n2, w, sizeof(w));
        if (r != -EBUSY || !strstr(w, "serves another vramd"))
            fprintf(stderr, "second open: %d %s\n", r, w);
        _exit(r == -EBUSY && strstr(w, "serves another vramd") ? 0 : 1);
    }
    int ws;
    waitpid(pid, &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "a second vramd was not "
          "refused with -EBUSY");

    /* 5. Remove three of four, then close: the rest stays kept. */
    for (unsigned i = 0; i < N; i++) {
        if (quarter(i))
            continue;
        char name[32];
        name_of(name, sizeof(name), i);
        e = vp_keeper_remove(k, name, why, sizeof(why));
        CHECK(e == 0, "remove %s: %d %s", name, e, why);
        CHECK(!vp_keeper_has(k, name), "%s still kept", name);
    }
    vp_keeper_info(k, &info);
    CHECK_EQ_U(info.held, N / 4);
    vp_keeper_entries_free(left, n);
    vp_keeper_close(k);
    CHECK(!ends_within(hpid, 200), "the holder exited while keeping %d", N / 4);

    /* 6. Again, in yet another process's stead: the quarter, intact; then
     * nothing, and the holder goes. */
    k = open_ok(&c, &left, &n);
    check_left(left, n, quarter);
    for (size_t i = 0; i < n; i++) {
        e = vp_keeper_remove(k, left[i].name, why, sizeof(why));
        CHECK(e == 0, "remove %s: %d %s", left[i].name, e, why);
    }
    vp_keeper_entries_free(left, n);
    vp_keeper_close(k);
    CHECK(ends_within(hpid, 10000), "the holder still runs, keeping nothing");
    CHECK(lstat(kpath, &st) < 0 && errno == ENOENT,
          "the holder's socket outlived it");
    /* And with nothing kept, opening starts no holder. */
    k = open_ok(&c, &left, &n);
    CHECK(n == 0 && !left, "%zu left after the end", n);
    vp_keeper_info(k, &info);
    CHECK(info.holder_pid == 0 && lstat(kpath, &st) < 0,
          "a holder started with nothing to keep");
    vp_keeper_close(k);
}

static void test_holder_killed(void)
{
    char sock[128];
    sock_in(sock, sizeof(sock), "b.sock");
    struct vp_keeper_cfg c = cfg_at(sock, 0);
    struct vp_keeper_entry *left;
    size_t n;
    struct vp_keeper *k = open_ok(&c, &left, &n);
    char why[512];
    for (unsigned i = 0; i < 3; i++) {
        char name[32];
        name_of(name, sizeof(name), i);
        REQUIRE(put_memfd(k, name, i, false, why, sizeof(why)) == 0, "put: %s", why);
    }
    struct vp_keeper_info info;
    vp_keeper_info(k, &info);
    int64_t first = info.holder_pid;
    REQUIRE(first > 0, "no holder");
    saw(first);
    kill((pid_t)first, SIGKILL);
    REQUIRE(ends_within(first, 10000), "the holder survived SIGKILL");
    int e = put_memfd(k, "w9.0", 9, false, why, sizeof(why));
    CHECK(e == -EPIPE && strstr(why, "lost"), "a put after the holder died: "
          "%d %s", e, why);
    vp_keeper_info(k, &info);
    CHECK_EQ_U(info.held, 0);
    CHECK(!vp_keeper_has(k, "w0.0"), "w0.0 still counted as kept");
    /* The next put starts another holder. */
    e = put_memfd(k, "w9.0", 9, false, why, sizeof(why));
    CHECK(e == 0, "a put with a new holder: %d %s", e, why);
    vp_keeper_info(k, &info);
    CHECK(info.holder_pid > 0 && info.holder_pid != first && info.held == 1,
          "new holder %lld, held %u", (long long)info.holder_pid, info.held);
    int64_t second = info.holder_pid;
    saw(second);
    CHECK(vp_keeper_remove(k, "w9.0", why, sizeof(why)) == 0, "remove: %s", why);
    vp_keeper_close(k);
    CHECK(ends_within(second, 10000), "the second holder stayed, empty");
}

/* A seqpacket server at path, in a child running as uid, that answers
 * every connection's first record with reply (len bytes), or with nothing
 * when len is 0. Returns the child's pid. */
static pid_t fake_holder(const char *path, uid_t uid, const void *reply,
                         size_t len)
{
    int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    mode_t old = umask(0177);
    REQUIRE(l >= 0 && bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0,
            "bind %s: %s", path, strerror(errno));
    umask(old);
    int ready[2];
    REQUIRE(pipe(ready) == 0, "pipe");
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        close(ready[0]);
        if (uid)
            kt_become(uid);
        /* The kernel gives a connecting client the credentials of the
         * process that called listen(). */
        if (listen(l, 8) < 0)
            _exit(2);
        close(ready[1]);
        for (;;) {
            int c = accept(l, NULL, NULL);
            if (c < 0)
                continue;
            char buf[256];
            if (read(c, buf, sizeof(buf)) > 0 && len) {
                ssize_t w = write(c, reply, len);
                (void)w;
            }
            close(c);
        }
    }
    close(ready[1]);
    char b;
    REQUIRE(read(ready[0], &b, 1) == 0, "the fake holder did not listen");
    close(ready[0]);
    close(l);
    return pid;
}

static void stop(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int open_err(const char *sock, char *why, size_t len)
{
    struct vp_keeper_cfg c = cfg_at(sock, 0);
    struct vp_keeper *k = NULL;
    struct vp_keeper_entry *left = NULL;
    size_t n = 0;
    why[0] = '\0';
    int e = vp_keeper_open(&c, &k, &left, &n, why, len);
    if (e == 0) {
        vp_keeper_entries_free(left, n);
        vp_keeper_close(k);
    }
    return e;
}

static void test_strangers(void)
{
    char sock[128], kpath[160], why[512];
    /* A socket at the holder's path that another user owns. */
    sock_in(sock, sizeof(sock), "c.sock");
    snprintf(kpath, sizeof(kpath), "%s.keeper", sock);
    pid_t f = fake_holder(kpath, 0, NULL, 0);
    REQUIRE(chown(kpath, 20001, 65534) == 0, "chown");
    int e = open_err(sock, why, sizeof(why));
    CHECK(e == -EPERM && strstr(why, "uid 20001"), "another user's socket: "
          "%d %s", e, why);
    stop(f);
    /* Ours, but served by another user's process. */
    sock_in(sock, sizeof(sock), "d.sock");
    snprintf(kpath, sizeof(kpath), "%s.keeper", sock);
    f = fake_holder(kpath, 20001, NULL, 0);
    e = open_err(sock, why, sizeof(why));
    CHECK(e == -EPERM && strstr(why, "runs as uid 20001"), "another user's "
          "server: %d %s", e, why);
    stop(f);
    /* Not a socket. */
    sock_in(sock, sizeof(sock), "e.sock");
    snprintf(kpath, sizeof(kpath), "%s.keeper", sock);
    FILE *fp = fopen(kpath, "w");
    REQUIRE(fp, "fopen");
    fclose(fp);
    e = open_err(sock, why, sizeof(why));
    CHECK(e == -EEXIST, "a file at the holder's path: %d %s", e, why);
    /* Something that is not a holder of this version. */
    sock_in(sock, sizeof(sock), "f.sock");
    snprintf(kpath, sizeof(kpath), "%s.keeper", sock);
    struct vpx_krec r = {.magic = VPX_KEEPER_MAGIC, .op = VPX_K_OK,
                         .version = VPX_KEEPER_VERSION + 1};
    f = fake_holder(kpath, 0, &r, offsetof(struct vpx_krec, name));
    e = open_err(sock, why, sizeof(why));
    CHECK(e == -EPROTO && strstr(why, "version 2, this vramd version 1"),
          "a holder of another version: %d %s", e, why);
    stop(f);
    unlink(kpath);
    f = fake_holder(kpath, 0, "junk", 4);
    e = open_err(sock, why, sizeof(why));
    CHECK(e == -EPROTO, "junk for an answer: %d %s", e, why);
    stop(f);
    /* A directory other users may write into. */
    char open_dir[96];
    snprintf(open_dir, sizeof(open_dir), "%s/open", dir);
    REQUIRE(mkdir(open_dir, 0777) == 0 && chmod(open_dir, 0777) == 0, "mkdir");
    snprintf(sock, sizeof(sock), "%s/v.sock", open_dir);
    e = open_err(sock, why, sizeof(why));
    CHECK(e == -EPERM, "a directory anyone may write into: %d %s", e, why);
    /* No holder program: opening works (nothing to take back), the first
     * put says what is missing. */
    sock_in(sock, sizeof(sock), "g.sock");
    struct vp_keeper_cfg c = cfg_at(sock, 0);
    c.holder_path = "/nonexistent/vramd-holder";
    struct vp_keeper_entry *left;
    size_t n;
    struct vp_keeper *k = open_ok(&c, &left, &n);
    e = put_memfd(k, "w0.0", 0, false, why, sizeof(why));
    CHECK(e == -ENOENT && strstr(why, "/nonexistent/vramd-holder"),
          "no holder program: %d %s", e, why);
    vp_keeper_close(k);
}

static void test_limits(void)
{
    char sock[128], why[512];
    sock_in(sock, sizeof(sock), "h.sock");
    struct vp_keeper_cfg c = cfg_at(sock, 8);
    struct vp_keeper_entry *left;
    size_t n;
    struct vp_keeper *k = open_ok(&c, &left, &n);
    for (unsigned i = 0; i < 8; i++) {
        char name[32];
        name_of(name, sizeof(name), i);
        CHECK(put_memfd(k, name, i, false, why, sizeof(why)) == 0, "put %u: %s", i, why);
    }
    int e = put_memfd(k, "w1.0", 8, false, why, sizeof(why));
    CHECK(e == -ENOSPC, "a ninth handle with max 8: %d %s", e, why);
    CHECK(vp_keeper_remove(k, "w0.0", why, sizeof(why)) == 0, "remove: %s", why);
    CHECK(put_memfd(k, "w1.0", 8, false, why, sizeof(why)) == 0, "put after a "
          "remove: %s", why);
    struct vp_keeper_info info;
    vp_keeper_info(k, &info);
    saw(info.holder_pid);
    for (unsigned i = 1; i < 9; i++) {
        char name[32];
        name_of(name, sizeof(name), i);
        vp_keeper_remove(k, name, why, sizeof(why));
    }
    vp_keeper_close(k);

    /* The names' bytes: 64-byte names until the keeper is full. */
    sock_in(sock, sizeof(sock), "i.sock");
    c = cfg_at(sock, 0);
    k = open_ok(&c, &left, &n);
    unsigned put = 0;
    double t0 = now_ms();
    for (;;) {
        char name[VP_KEEPER_NAME_MAX + 1];
        snprintf(name, sizeof(name), "%064u", put);
        e = put_memfd(k, name, put, false, why, sizeof(why));
        if (e < 0)
            break;
        put++;
    }
    double t_put = now_ms() - t0;
    CHECK(e == -ENOSPC, "the end of the names' room: %d %s", e, why);
    CHECK_EQ_U(put, VP_KEEPER_NAMES_BYTES / (VP_KEEPER_NAME_MAX + 1));
    vp_keeper_close(k);
    t0 = now_ms();
    k = open_ok(&c, &left, &n);
    double t_open = now_ms() - t0;
    CHECK_EQ_U(n, put);
    char w[128] = "";
    CHECK(n > 0 && kt_check((int)left[n - 1].h.v,
                            (unsigned)strtoul(left[n - 1].name, NULL, 10),
                            false, w, sizeof(w)),
          "the last one: %s", w);
    printf("keeper: %u handles put in %.1f ms (%.1f us each), taken back by "
           "a new process in %.1f ms\n", put, t_put, t_put * 1e3 / put, t_open);
    for (size_t i = 0; i < n; i++)
        vp_keeper_remove(k, left[i].name, why, sizeof(why));
    vp_keeper_info(k, &info);
    int64_t hp = info.holder_pid;
    saw(hp);
    vp_keeper_entries_free(left, n);
    vp_keeper_close(k);
    CHECK(ends_within(hp, 10000), "the holder stayed, empty");
}

/* A holder that nobody connects to within its grace period goes. */
static void test_grace(void)
{
    char path[128];
    sock_in(path, sizeof(path), "j.sock.keeper");
    int p[2];
    REQUIRE(pipe(p) == 0, "pipe");
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        dup2(p[1], 3);
        execl(holder_bin, "vramd-holder", "--socket", path, "--grace-ms",
              "200", "--status-fd", "3", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char buf[64] = "";
    ssize_t got = read(p[0], buf, sizeof(buf) - 1);
    close(p[0]);
    waitpid(pid, NULL, 0);
    long hp = 0;
    REQUIRE(got > 0 && sscanf(buf, "ok %ld", &hp) == 1, "holder said \"%s\"", buf);
    saw(hp);
    CHECK(ends_within(hp, 10000), "a holder nobody came to stayed");
    struct stat st;
    CHECK(lstat(path, &st) < 0, "its socket stayed");
}

/* The holders seen: at the end, any a failure left running is killed,
 * and each is reaped (the test is their subreaper). */
static int64_t seen[16];
static int nseen;

static void saw(int64_t pid)
{
    for (int i = 0; i < nseen; i++)
        if (seen[i] == pid)
            return;
    if (pid > 0 && nseen < 16)
        seen[nseen++] = pid;
}

static pid_t owner;

static void reap_holders(void)
{
    if (getpid() != owner)
        return;
    for (int i = 0; i < nseen; i++) {
        if (!ends_within(seen[i], 0)) {
            fprintf(stderr, "holder %lld still runs: killed\n",
                    (long long)seen[i]);
            kill((pid_t)seen[i], SIGKILL);
        }
        waitpid((pid_t)seen[i], NULL, 0);
    }
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ; /* holders that ended unseen */
}

int main(void)
{
    if (geteuid() != 0) {
        printf("test_keeper_holder: needs root (to become uid 20001)\n");
        return 77;
    }
    holder_bin = getenv("VRAM_HOLDER_BIN");
    REQUIRE(holder_bin && holder_bin[0], "VRAM_HOLDER_BIN is not set");
    vp_raise_handle_limit();
    signal(SIGPIPE, SIG_IGN);
    /* The holders this test starts become its children once their first
     * process exits (not init's, which may not reap them here): killed at
     * the end if a failure left one running, and reaped. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    kt_tmpdir(dir, sizeof(dir));
    owner = getpid();
    atexit(reap_holders); /* before the directory goes (atexit: last first) */
    test_survives_kill();
    test_holder_killed();
    test_strangers();
    test_limits();
    test_grace();
    return check_report("test_keeper_holder");
}
