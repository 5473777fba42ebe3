/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/errnames.h"

#include <string.h>

static const struct {
    int err;
    const char *name;
} names[] = {
    {EPROTONOSUPPORT, "EPROTONOSUPPORT"}, {EPROTO, "EPROTO"},
    {EINVAL, "EINVAL"}, {ENOSYS, "ENOSYS"}, {EPERM, "EPERM"},
    {EACCES, "EACCES"}, {ENOENT, "ENOENT"}, {EEXIST, "EEXIST"},
    {ENOSPC, "ENOSPC"}, {EAGAIN, "EAGAIN"}, {EXDEV, "EXDEV"},
    {E2BIG, "E2BIG"}, {EDQUOT, "EDQUOT"}, {EBUSY, "EBUSY"},
    {ENODEV, "ENODEV"}, {ENOMEM, "ENOMEM"}, {ETIMEDOUT, "ETIMEDOUT"},
    {EMSGSIZE, "EMSGSIZE"}, {EBADMSG, "EBADMSG"}, {EIO, "EIO"},
    {ENOTCONN, "ENOTCONN"}, {ECANCELED, "ECANCELED"}, {EADDRINUSE, "EADDRINUSE"},
    {EALREADY, "EALREADY"}, {ESTALE, "ESTALE"}, {EMFILE, "EMFILE"},
    {ENFILE, "ENFILE"}, {ENOBUFS, "ENOBUFS"},
};

const char *vw_errno_name(int err)
{
    if (err < 0)
        err = -err;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].err == err)
            return names[i].name;
    return "EIO";
}

int vw_errno_from_name(const char *name)
{
    if (name)
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strcmp(names[i].name, name) == 0)
                return -names[i].err;
    return -EPROTO;
}
