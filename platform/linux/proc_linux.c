/* SPDX-License-Identifier: Apache-2.0 */
/* Processes on Linux: pidfds (a pin that a reused pid cannot fool), and
 * from /proc start times, this program's path and the holders of memory
 * objects. The rest of proc.h is portable (platform/posix/proc_posix.c). */
#include "platform/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

uint64_t vp_proc_start_time(int64_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%lld/stat", (long long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    /* The command name may hold spaces and parentheses: fields start after
     * the last ')'. Field 3 is the first after it; start time is field 22. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p)
            return 0;
    }
    return strtoull(p + 1, NULL, 10);
}

int vp_proc_pin(int64_t pid, vp_handle *out)
{
    if (pid <= 0)
        return -ESRCH;
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (fd < 0)
        return -errno;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    out->v = fd;
    return 0;
}

bool vp_proc_exited(vp_handle pin)
{
    struct pollfd p = {.fd = (int)pin.v, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

int vp_proc_kill(vp_handle pin)
{
    return syscall(SYS_pidfd_send_signal, (int)pin.v, SIGKILL, NULL, 0) < 0
               ? -errno
               : 0;
}

static bool is_one_of(uint64_t ino, const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == ino)
            return true;
    return false;
}

int vp_proc_count_held(int64_t pid, const uint64_t *ids, size_t n)
{
    int mapped = vp_proc_count_mapped(pid, ids, n);
    if (mapped != 0)
        return mapped;
    /* Not mapped: an fd of it still open keeps the memory too. */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%lld/fd", (long long)pid);
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    int held = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char link[320], target[128];
        snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
        ssize_t k = readlink(link, target, sizeof(target) - 1);
        if (k <= 0)
            continue;
        target[k] = '\0';
        struct stat st;
        if (strncmp(target, "/memfd:", 7) != 0 || stat(link, &st) < 0)
            continue;
        if (is_one_of((uint64_t)st.st_ino, ids, n))
            held++;
    }
    closedir(d);
    return held;
}

int vp_proc_count_mapped(int64_t pid, const uint64_t *ids, size_t n)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%lld/maps", (long long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    int kept = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long ino = 0;
        /* Memory objects are memfds: their lines name "/memfd:". */
        if (!strstr(line, "/memfd:") ||
            sscanf(line, "%*s %*s %*s %*s %llu", &ino) != 1 || !ino)
            continue;
        kept += is_one_of(ino, ids, n);
    }
    fclose(f);
    return kept;
}

int vp_self_exe(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return 0;
}

int vp_procs_holding(const uint64_t *ids, size_t n)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -errno;
    int holders = 0;
    pid_t self = getpid();
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == self)
            continue;
        holders += vp_proc_count_held(pid, ids, n) > 0;
    }
    closedir(d);
    return holders;
}
