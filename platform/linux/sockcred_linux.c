/* SPDX-License-Identifier: Apache-2.0 */
/* A local socket's peer on Linux: SO_PEERCRED, fixed when the connection
 * was made (connect or listen), so a process that passed the socket on
 * is still the one named. */
#include "platform/posix/sockcred.h"

#include <errno.h>
#include <sys/socket.h>

int vpx_sockcred(int s, int64_t *pid, uint32_t *uid)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    *pid = cred.pid;
    *uid = cred.uid;
    return 0;
}
