/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "platform/clock.h"
#include "platform/service.h"
#include "proto/text.h"

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
    char raw[1024], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    /* Text from peers reaches the log inside messages: a control
     * character (a newline would forge a line of its own) or a byte that
     * is not UTF-8 is written as \xNN (proto/text.h), so a line is one
     * event. */
    vw_text_escape(msg, sizeof(msg), raw);
    if (journal) {
        fprintf(stderr, "<%d>%s\n", prio, msg);
    } else {
        char when[32];
        vp_wall_time(when, sizeof(when));
        fprintf(stderr, "vramd %s %s: %s\n", when, names[prio], msg);
    }
    fflush(stderr);
}

void vlog_limited(struct vlog_limit *l, int prio, const char *fmt, ...)
{
    if (prio > level)
        return;
    int64_t now = vp_now_ms();
    if (l->logged && now - l->since < (int64_t)l->interval_ms) {
        l->suppressed++;
        return;
    }
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (l->suppressed)
        vlog(prio, "%s (and %u more like it in the last %lld s)", msg,
             l->suppressed, (long long)(now - l->since) / 1000);
    else
        vlog(prio, "%s", msg);
    l->logged = true;
    l->since = now;
    l->suppressed = 0;
}
