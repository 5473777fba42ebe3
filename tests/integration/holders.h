/* SPDX-License-Identifier: Apache-2.0 */
/* The vramd-holder processes keeping weight sets for the daemon d (their
 * command line names its directory): how many, and the first one's pid in
 * *first when there is one. Shared by tests/integration/
 * test_weights_restart.c and tests/compat/upgrade.c (static: each includes
 * it once). */
#ifndef VRAM_TEST_HOLDERS_H
#define VRAM_TEST_HOLDERS_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "tests/integration/harness.h"

static int daemon_holders(const struct daemon *d, pid_t *first)
{
    int n = 0;
    DIR *dir = opendir("/proc");
    struct dirent *de;
    while (dir && (de = readdir(dir))) {
        if (!atoi(de->d_name))
            continue;
        char path[300], buf[4096];
        snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = 0;
        for (size_t i = 0; i < len; i++)
            if (!buf[i])
                buf[i] = ' ';
        if (!strstr(buf, "vramd-holder") || !strstr(buf, d->dir))
            continue;
        if (n++ == 0 && first)
            *first = atoi(de->d_name);
    }
    if (dir)
        closedir(dir);
    return n;
}

#endif
