/* SPDX-License-Identifier: Apache-2.0 */
/* systemd's readiness protocol (sd_notify), spoken directly: a datagram to
 * $NOTIFY_SOCKET, a path or, with a leading '@', Linux's abstract socket
 * namespace. */
#include "platform/service.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
