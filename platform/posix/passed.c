/* SPDX-License-Identifier: Apache-2.0 */
/* The service manager's passed fds, read once and shared out. */
#include "platform/posix/passed.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define FIRST_FD 3 /* SD_LISTEN_FDS_START */

struct entry {
    int fd;     /* -1 once taken */
    char *name; /* within names */
};

static struct {
    bool loaded;
    int result; /* what vpx_passed_load returns */
    char why[256];
    bool named;
    size_t n;
    struct entry *e;
    char *names; /* LISTEN_FDNAMES, split in place */
} passed;

/* A whole decimal number, nothing else. */
static bool parse_long(const char *s, long *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0)
        return false;
    *out = v;
    return true;
}

static void unset_all(void)
{
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_PIDFDID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
}

static int load(char *why, size_t whylen)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    if (!pid)
        return 0;
    long p, n;
    if (!parse_long(pid, &p)) {
        snprintf(why, whylen, "the service manager passed LISTEN_PID=%.32s, "
                 "which is not a process id", pid);
        unset_all();
        return -EINVAL;
    }
    if (p != (long)getpid())
        return 0; /* meant for another process */
    if (!fds) {
        unset_all();
        return 0;
    }
    if (!parse_long(fds, &n) || n > VPX_PASSED_MAX) {
        snprintf(why, whylen, "the service manager passed LISTEN_FDS=%.32s, "
                 "which is not a count of fds (0 to %d)", fds, VPX_PASSED_MAX);
        unset_all();
        return -EINVAL;
    }
    /* Close-on-exec first, before anything can fail: none may reach a
     * child, whatever is made of them. */
    for (long i = 0; i < n; i++) {
        int fd = FIRST_FD + (int)i;
        int fl = fcntl(fd, F_GETFD);
        if (fl < 0) {
            snprintf(why, whylen, "the service manager passed LISTEN_FDS=%ld, "
                     "but fd %d is not open", n, fd);
            unset_all();
            return -EBADF;
        }
        fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
    }
    const char *names = getenv("LISTEN_FDNAMES");
    size_t count = 0;
    if (names) {
        count = 1;
        for (const char *c = names; *c; c++)
            count += *c == ':';
        if (count != (size_t)n) {
            snprintf(why, whylen, "the service manager passed %ld fds but "
                     "%zu names (LISTEN_FDNAMES); refusing them all", n,
                     count);
            unset_all();
            return -EINVAL;
        }
    }
    passed.e = calloc(n ? (size_t)n : 1, sizeof(*passed.e));
    passed.names = strdup(names ? names : "");
    if (!passed.e || !passed.names) {
        free(passed.e);
        free(passed.names);
        passed.e = NULL;
        passed.names = NULL;
        snprintf(why, whylen, "out of memory for the passed fds");
        unset_all();
        return -ENOMEM;
    }
    char *c = passed.names;
    for (long i = 0; i < n; i++) {
        passed.e[i].fd = FIRST_FD + (int)i;
        passed.e[i].name = c;
        if (names) {
            char *sep = strchr(c, ':');
            if (sep) {
                *sep = '\0';
                c = sep + 1;
            } else {
                c += strlen(c);
            }
        }
    }
    passed.n = (size_t)n;
    passed.named = names != NULL;
    unset_all();
    return (int)n;
}

int vpx_passed_load(char *why, size_t whylen)
{
    if (!passed.loaded) {
        passed.loaded = true;
        passed.result = load(passed.why, sizeof(passed.why));
    }
    if (passed.result < 0)
        snprintf(why, whylen, "%s", passed.why);
    return passed.result;
}

bool vpx_passed_named(void)
{
    return passed.named;
}

int vpx_passed_fd(size_t i)
{
    return i < passed.n ? passed.e[i].fd : -1;
}

const char *vpx_passed_name(size_t i)
{
    return i < passed.n ? passed.e[i].name : "";
}

bool vpx_listening_unix_stream(int fd)
{
    int type = 0, listening = 0;
    socklen_t len = sizeof(type);
    struct sockaddr_un sa;
    socklen_t salen = sizeof(sa);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
        type != SOCK_STREAM)
        return false;
    len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 ||
        !listening)
        return false;
    return getsockname(fd, (struct sockaddr *)&sa, &salen) == 0 &&
           sa.sun_family == AF_UNIX;
}

bool vpx_passed_is_socket(size_t i)
{
    if (i >= passed.n || passed.e[i].fd < 0)
        return false;
    const char *name = passed.e[i].name;
    size_t len = strlen(name);
    if (len >= 7 && strcmp(name + len - 7, ".socket") == 0)
        return true;
    return vpx_listening_unix_stream(passed.e[i].fd);
}

int vpx_passed_take(size_t i)
{
    if (i >= passed.n)
        return -1;
    int fd = passed.e[i].fd;
    passed.e[i].fd = -1;
    return fd;
}
