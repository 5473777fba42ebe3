/* SPDX-License-Identifier: Apache-2.0 */
/* The boot's identifier on Linux: the kernel's random boot id, new at each
 * boot. The rest of mapfile.h is portable (platform/posix/mapfile_posix.c). */
#include "platform/mapfile.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

void vp_boot_id(char out[40])
{
    memset(out, 0, 40);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, 39);
    close(fd);
    for (ssize_t i = 0; i < n; i++)
        if (out[i] == '\n')
            out[i] = 0;
}
