/* SPDX-License-Identifier: Apache-2.0 */
/* Service life on POSIX: sd_notify spoken directly (a datagram to
 * $NOTIFY_SOCKET), the journal's stream, SIGPIPE. */
#include "service.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int vp_service_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
        return -EINVAL;
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@') /* abstract namespace */
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL,
                       (struct sockaddr *)&sa, salen);
    int e = n < 0 ? -errno : 0;
    close(fd);
    return e;
}

/* JOURNAL_STREAM names the device and inode of the journal's stream; only
 * when our stderr is that stream do we switch to priority prefixes. */
bool vp_stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
        return false;
    if (fstat(2, &st) < 0)
        return false;
    return (unsigned long long)st.st_dev == dev &&
           (unsigned long long)st.st_ino == ino;
}

void vp_process_init(void)
{
    signal(SIGPIPE, SIG_IGN);
}

bool vp_path_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

bool vp_stdout_is_tty(void)
{
    return isatty(STDOUT_FILENO) != 0;
}

void vp_on_interrupt(void (*fn)(int))
{
    signal(SIGINT, fn);
    signal(SIGTERM, fn);
}
