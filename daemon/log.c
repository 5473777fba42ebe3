#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "service.h"

static int level = VLOG_INFO;
static bool journal;

static const char *names[] = {"emerg", "alert", "crit", "error", "warning",
                              "notice", "info", "debug"};

void vlog_init(int lvl)
{
    level = lvl;
    journal = vp_stderr_is_journal();
}

int vlog_level(void)
{
    return level;
}

int vlog_level_parse(const char *s)
{
    for (int i = 3; i < 8; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    if (strcmp(s, "err") == 0)
        return VLOG_ERR;
    if (strcmp(s, "warn") == 0)
        return VLOG_WARNING;
    return -EINVAL;
}

void vlog(int prio, const char *fmt, ...)
{
    if (prio > level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (journal) {
        fprintf(stderr, "<%d>%s\n", prio, msg);
    } else {
        char when[32];
        vp_wall_time(when, sizeof(when));
        fprintf(stderr, "vramd %s %s: %s\n", when, names[prio], msg);
    }
    fflush(stderr);
}
