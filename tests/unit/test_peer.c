/* SPDX-License-Identifier: Apache-2.0 */
/* Pinning a connection's peer (platform/linux/peer_linux.c): vp_peer_pin pins the
 * process that connected, by the connection, and reads its start time only
 * then (vp_peer_of no longer does where the kernel has SO_PEERPIDFD, so an
 * empty client costs no read of /proc). The pin and start time are that
 * process's; a peer that has exited (a zombie, or reaped, when its pid may
 * already be another's), one whose start time differs from the one read at
 * connect (its pid reused, on kernels without SO_PEERPIDFD) or one whose
 * pid this namespace cannot see is refused with -ESRCH. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/check.h"
#include "platform/handle.h"
#include "platform/peer.h"
#include "platform/proc.h"

static char dir[64], path[96];

static int listener(void)
{
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    REQUIRE(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 &&
                listen(l, 8) == 0, "listen on %s: %s", path, strerror(errno));
    return l;
}

/* A child that connects, says one byte, then waits for one back (live) or
 * exits at once (!live). */
static pid_t peer(bool live)
{
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid)
        return pid;
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
        _exit(2);
    char b = 'x';
    if (write(s, &b, 1) != 1)
        _exit(3);
    if (live && read(s, &b, 1) < 0)
        _exit(4);
    _exit(0);
}

static vp_handle accepted(int l)
{
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    REQUIRE(c >= 0, "accept: %s", strerror(errno));
    char b;
    REQUIRE(read(c, &b, 1) == 1, "the peer's byte");
    return (vp_handle){c};
}

static void test_live(int l)
{
    pid_t child = peer(true);
    vp_handle c = accepted(l);
    struct vp_peer p;
    REQUIRE(vp_peer_of(c, &p) == 0, "vp_peer_of");
    CHECK(p.pid == child, "peer pid %lld, child %d", (long long)p.pid, child);
    uint64_t real = vp_proc_start_time(child);
    REQUIRE(real != 0, "the child's start time");
    /* Read at connect only where it must be (no SO_PEERPIDFD). */
    CHECK(p.start_time == 0 || p.start_time == real, "start time at connect "
          "%llu, the child's %llu", (unsigned long long)p.start_time,
          (unsigned long long)real);

    vp_handle pin = VP_NONE;
    uint64_t start = 0;
    CHECK(vp_peer_pin(c, &p, &pin, &start) == 0, "pin a live peer");
    CHECK_EQ_U(start, real);
    CHECK(vp_ok(pin) && !vp_proc_exited(pin), "pinned and running");
    CHECK(vp_ok(pin) && (fcntl((int)pin.v, F_GETFD) & FD_CLOEXEC),
          "the pin is close-on-exec");

    /* Out-parameters are left alone when it fails. */
    vp_handle none = VP_NONE;
    uint64_t untouched = 7;
    struct vp_peer forged = p;
    forged.start_time = real + 1; /* as if its pid now named another */
    CHECK(vp_peer_pin(c, &forged, &none, &untouched) == -ESRCH,
          "a start time other than the one at connect");
    CHECK(!vp_ok(none) && untouched == 7, "out-parameters written on failure");
    forged = p;
    forged.pid = 0; /* a peer outside this pid namespace */
    CHECK(vp_peer_pin(c, &forged, &none, &untouched) == -ESRCH,
          "a pid this namespace cannot see");

    /* The pin is the child: it sees the child's exit. */
    char b = 'y';
    CHECK(write((int)c.v, &b, 1) == 1, "let it go");
    int st;
    CHECK(waitpid(child, &st, 0) == child && WIFEXITED(st) &&
              WEXITSTATUS(st) == 0, "child exit %d", st);
    CHECK(vp_ok(pin) && vp_proc_exited(pin), "the pin saw the child exit");
    /* Reaped: its pid may be another process's by now. */
    CHECK(vp_peer_pin(c, &p, &none, &untouched) == -ESRCH, "pin a reaped peer");
    CHECK(!vp_ok(none) && untouched == 7, "out-parameters written on failure");
    vp_close(&pin);
    vp_close(&c);
}

static void test_gone(int l)
{
    pid_t child = peer(false);
    vp_handle c = accepted(l);
    struct vp_peer p;
    REQUIRE(vp_peer_of(c, &p) == 0, "vp_peer_of");
    /* Exited, not yet reaped: its pid is still its own, but it will never
     * use memory, and its connection may live on in another process. */
    siginfo_t si;
    REQUIRE(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT) == 0, "waitid");
    vp_handle pin = VP_NONE;
    uint64_t start = 0;
    CHECK(vp_peer_pin(c, &p, &pin, &start) == -ESRCH, "pin a zombie peer");
    int st;
    CHECK(waitpid(child, &st, 0) == child, "reap");
    CHECK(vp_peer_pin(c, &p, &pin, &start) == -ESRCH, "pin a reaped peer");
    CHECK(!vp_ok(pin) && start == 0, "out-parameters written on failure");
    vp_close(&c);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_peer.XXXXXX");
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof(path), "%s/s", dir);
    int l = listener();
    test_live(l);
    test_gone(l);
    close(l);
    unlink(path);
    rmdir(dir);
    return check_report("test_peer");
}
