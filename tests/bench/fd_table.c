/* SPDX-License-Identifier: Apache-2.0 */
/* vram-bench-fdtable: what a first grant's handles cost to receive in a
 * fresh engine process, with the fd table as the kernel grows it and with
 * the table libvram grows when it connects (vp_reserve_handle_table).
 *
 * Each repetition is a fresh child with a second thread (an engine with
 * CUDA has several): Linux doubles a full fd table, and where the table is
 * shared by threads each doubling waits for an RCU grace period. The child
 * receives 2048 fds (4 GiB of 2 MiB chunks) in frames of 253, as vramd
 * sends them. One JSON line: medians of 5 each, kinds interleaved, and the
 * ratio of grown to not. Linux only (fds over SCM_RIGHTS). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/bench/bench_util.h"
#include "platform/handle.h"

#define NFDS 2048
#define PER 253
#define REPS 5

static void *idle_thread(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static void send_fds(int sock)
{
    int fds[PER];
    for (int i = 0; i < PER; i++)
        fds[i] = dup(0);
    for (int sent = 0; sent < NFDS; sent += PER) {
        int n = NFDS - sent < PER ? NFDS - sent : PER;
        char c = 'x';
        struct iovec io = {&c, 1};
        char cm[CMSG_SPACE(sizeof(int) * PER)];
        struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cm,
                           .msg_controllen = CMSG_SPACE(sizeof(int) * n)};
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int) * n);
        memcpy(CMSG_DATA(h), fds, sizeof(int) * n);
        if (sendmsg(sock, &m, 0) < 0)
            _exit(1);
    }
}

/* The receive's time in a fresh child, in microseconds (on its pipe),
 * and with the table grown, the growth's (*grow_us): with the table as the
 * kernel grows it, or grown at a connect 300 ms before, or right before
 * (at once: the grant follows the connect). */
static double one(bool grown, bool at_once, double *grow_us)
{
    int sv[2], out[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0 || pipe(out) < 0)
        exit(2);
    pid_t p = fork();
    if (p == 0) {
        pthread_t t;
        pthread_create(&t, NULL, idle_thread, NULL);
        vp_raise_handle_limit();
        if (!at_once)
            sleep_us(300000); /* a fresh process's threads settle */
        uint64_t g0 = now_ns();
        if (grown)
            vp_reserve_handle_table(16384);
        double gus = (double)(now_ns() - g0) / 1e3;
        if (!at_once)
            sleep_us(300000); /* the grant comes later than the connect */
        uint64_t t0 = now_ns();
        for (int got = 0; got < NFDS;) {
            char c;
            struct iovec io = {&c, 1};
            char cm[CMSG_SPACE(sizeof(int) * PER)];
            struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1,
                               .msg_control = cm, .msg_controllen = sizeof(cm)};
            if (recvmsg(sv[1], &m, 0) <= 0)
                _exit(1);
            struct cmsghdr *h = CMSG_FIRSTHDR(&m);
            got += h ? (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int)) : 0;
        }
        double us[2] = {(double)(now_ns() - t0) / 1e3, gus};
        full_io(out[1], us, sizeof(us), true);
        _exit(0);
    }
    send_fds(sv[0]);
    double us[2] = {-1, -1};
    full_io(out[0], us, sizeof(us), false);
    waitpid(p, NULL, 0);
    close(sv[0]);
    close(sv[1]);
    close(out[0]);
    close(out[1]);
    if (grow_us)
        *grow_us = us[1];
    return us[0];
}

static double median(double *v)
{
    qsort(v, REPS, sizeof(*v), cmp_double);
    return v[REPS / 2];
}

int main(void)
{
    double plain[REPS], grown[REPS], now[REPS], grow[REPS];
    for (int i = 0; i < REPS; i++) {
        plain[i] = one(false, false, NULL);
        grown[i] = one(true, false, NULL);
        now[i] = one(true, true, &grow[i]);
    }
    double a = median(plain), b = median(grown), c = median(now), g = median(grow);
    printf("{\"bench\":\"fd_table\",\"what\":\"a fresh two-thread process "
           "receiving %d fds in frames of %d: the table grown as they come, "
           "against grown to 16384 beforehand (libvram's connect, 300 ms "
           "before; at_once: right before; connect_grow_us: the growth's own "
           "time in the connect), medians of %d\",\"plain_us\":%.1f,"
           "\"grown_us\":%.1f,\"ratio\":%.4f,\"grown_at_once_us\":%.1f,"
           "\"connect_grow_us\":%.1f}\n",
           NFDS, PER, REPS, a, b, a > 0 ? b / a : 0, c, g);
    return 0;
}
