#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static int level = VLOG_INFO;
static bool journal;

static const char *names[] = {"emerg", "alert", "crit", "error", "warning",
                              "notice", "info", "debug"};

/* JOURNAL_STREAM names the device and inode of the journal's stream; only
 * when our stderr is that stream do we switch to priority prefixes. */
static bool stderr_is_journal(void)
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

void vlog_init(int lvl)
{
    level = lvl;
    journal = stderr_is_journal();
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
        struct timespec ts;
        struct tm tm;
        char when[32];
        clock_gettime(CLOCK_REALTIME, &ts);
        localtime_r(&ts.tv_sec, &tm);
        strftime(when, sizeof(when), "%H:%M:%S", &tm);
        fprintf(stderr, "vramd %s.%03ld %s: %s\n", when, ts.tv_nsec / 1000000,
                names[prio], msg);
    }
    fflush(stderr);
}
