/* SPDX-License-Identifier: Apache-2.0 */
/* The Service Control Manager's errors as errno values. */
#include "platform/win32/scm_errno.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>

int vpw_scm_errno(unsigned long err)
{
    switch (err) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_SERVICE_DOES_NOT_EXIST:
        return -ENOENT;
    case ERROR_ACCESS_DENIED:
    case ERROR_PRIVILEGE_NOT_HELD:
        return -EACCES;
    case ERROR_SERVICE_EXISTS:
    case ERROR_DUPLICATE_SERVICE_NAME:
    case ERROR_ALREADY_EXISTS:
    case ERROR_FILE_EXISTS:
        return -EEXIST;
    case ERROR_SERVICE_MARKED_FOR_DELETE:
    case ERROR_SERVICE_ALREADY_RUNNING:
    case ERROR_SERVICE_CANNOT_ACCEPT_CTRL:
    case ERROR_SHARING_VIOLATION:
        return -EBUSY;
    case ERROR_SERVICE_NOT_ACTIVE:
        return -ESRCH;
    case ERROR_FAILED_SERVICE_CONTROLLER_CONNECT:
        return -ESRCH;
    case ERROR_INVALID_NAME:
    case ERROR_INVALID_PARAMETER:
    case ERROR_INVALID_SERVICE_ACCOUNT:
        return -EINVAL;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
        return -ENOMEM;
    case ERROR_CALL_NOT_IMPLEMENTED:
    case ERROR_INVALID_LEVEL:
    case ERROR_NOT_SUPPORTED:
        return -ENOSYS;
    case ERROR_SERVICE_REQUEST_TIMEOUT:
    case WAIT_TIMEOUT:
        return -ETIMEDOUT;
    case ERROR_BUFFER_OVERFLOW:
    case ERROR_FILENAME_EXCED_RANGE:
        return -ENAMETOOLONG;
    default:
        return -EIO;
    }
}
