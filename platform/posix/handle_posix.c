/* SPDX-License-Identifier: Apache-2.0 */
/* Handles on POSIX are file descriptors. */
#include "platform/handle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <unistd.h>

void vp_close(vp_handle *h)
{
    if (h && h->v >= 0) {
        close((int)h->v);
        h->v = -1;
    }
}

bool vp_valid(vp_handle h)
{
    return h.v >= 0 && fcntl((int)h.v, F_GETFD) >= 0;
}

int vp_dup(vp_handle h, vp_handle *out)
{
    int fd = fcntl((int)h.v, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return -errno;
    out->v = fd;
    return 0;
}

int vp_replace(vp_handle dst, vp_handle *src)
{
    if (dup3((int)src->v, (int)dst.v, O_CLOEXEC) < 0)
        return -errno;
    vp_close(src);
    return 0;
}

int vp_set_noinherit(vp_handle h)
{
    int fl = fcntl((int)h.v, F_GETFD);
    if (fl < 0 || fcntl((int)h.v, F_SETFD, fl | FD_CLOEXEC) < 0)
        return -errno;
    return 0;
}

void vp_raise_handle_limit(void)
{
    /* Marked once raised: two threads at once both raise it (the same
     * value), neither returns before it is. */
    static atomic_int done;
    struct rlimit rl;
    if (atomic_load(&done) || getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    atomic_store(&done, 1);
}

/* An fd at the table's last slot grows it (the table never shrinks);
 * closed again at once. */
static int grow_table(int last)
{
    int p[2], e = -1;
    if (pipe2(p, O_CLOEXEC) == 0) {
        int fd = fcntl(p[0], F_DUPFD_CLOEXEC, last);
        if (fd >= 0) {
            close(fd);
            e = 0;
        }
        close(p[0]);
        close(p[1]);
    }
    return e;
}

void vp_reserve_handle_table(uint64_t n)
{
    /* Once a process: a child of fork gets a table only as large as its
     * open fds need, so it grows its own. */
    static _Atomic long done_in;
    long me = (long)getpid();
    uint64_t lim = vp_handle_limit();
    if (n > lim)
        n = lim;
    if (n < 2 || n > INT32_MAX || atomic_load(&done_in) == me)
        return;
    /* Marked once grown: a second thread connecting meanwhile grows too,
     * and the kernel has it wait for the first growth, not return before
     * the table is there; a growth that failed is tried again. */
    if (grow_table((int)(n - 1)) == 0)
        atomic_store(&done_in, me);
}

uint64_t vp_handle_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 1024;
    return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}

bool vp_handles_inline(void)
{
    return false;
}
