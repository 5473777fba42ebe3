/* SPDX-License-Identifier: Apache-2.0 */
/* Service life on POSIX: the journal's stream, SIGPIPE. (sd_notify is
 * Linux's: platform/linux/notify_linux.c.) */
#include "platform/service.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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
