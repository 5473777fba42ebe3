/* SPDX-License-Identifier: Apache-2.0 */
/* Win32 error codes as errno values: the ones the platform's calls can
 * meet, named after what the POSIX implementation would report in the same
 * situation (a peer gone is EPIPE on a send, whatever the pipe calls it). */
#include "platform/win32/winerr.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>

int vpw_errno(unsigned long err)
{
    switch (err) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_NAME:
    case ERROR_BAD_PATHNAME:
        return -ENOENT;
    case ERROR_ACCESS_DENIED:
    case ERROR_PRIVILEGE_NOT_HELD:
        return -EACCES;
    case ERROR_INVALID_HANDLE:
        return -EBADF;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
    case ERROR_COMMITMENT_LIMIT:
        return -ENOMEM;
    case ERROR_NO_SYSTEM_RESOURCES:
    case ERROR_NONPAGED_SYSTEM_RESOURCES:
    case ERROR_PAGED_SYSTEM_RESOURCES:
        return -ENOBUFS;
    case ERROR_TOO_MANY_OPEN_FILES:
        return -EMFILE;
    case ERROR_BROKEN_PIPE: /* the other end closed */
    case ERROR_NO_DATA:     /* the pipe is being closed */
        return -EPIPE;
    case ERROR_PIPE_NOT_CONNECTED:
    case ERROR_PIPE_LISTENING:
        return -ENOTCONN;
    case ERROR_PIPE_BUSY:
        return -EAGAIN;
    case ERROR_NETNAME_DELETED:
        return -ECONNRESET;
    case ERROR_FILENAME_EXCED_RANGE:
    case ERROR_BUFFER_OVERFLOW:
        return -ENAMETOOLONG;
    case ERROR_FILE_EXISTS:
    case ERROR_ALREADY_EXISTS:
        return -EEXIST;
    case ERROR_SHARING_VIOLATION:
    case ERROR_LOCK_VIOLATION:
    case ERROR_BUSY:
        return -EBUSY;
    case ERROR_SEM_TIMEOUT:
    case WAIT_TIMEOUT:
        return -ETIMEDOUT;
    case ERROR_OPERATION_ABORTED:
        return -ECANCELED;
    case ERROR_INVALID_PARAMETER:
    case ERROR_INVALID_FLAGS:
        return -EINVAL;
    case ERROR_NOT_SUPPORTED:
    case ERROR_CALL_NOT_IMPLEMENTED:
        return -ENOSYS;
    case ERROR_DISK_FULL:
    case ERROR_HANDLE_DISK_FULL:
        return -ENOSPC;
    default:
        return -EIO;
    }
}

int vpw_last_errno(void)
{
    return vpw_errno(GetLastError());
}
