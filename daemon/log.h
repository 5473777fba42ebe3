/* SPDX-License-Identifier: Apache-2.0 */
/* Logging: one line per event, syslog priorities. Under systemd (stderr
 * connected to the journal) lines carry "<N>" priority prefixes instead of
 * timestamps, which journald turns into priorities. */
#ifndef VRAMD_LOG_H
#define VRAMD_LOG_H

#include <stdbool.h>
#include <stdint.h>

enum { VLOG_ERR = 3, VLOG_WARNING = 4, VLOG_NOTICE = 5, VLOG_INFO = 6, VLOG_DEBUG = 7 };

void vlog_init(int level);
int vlog_level_parse(const char *s); /* -EINVAL when unknown */
int vlog_level(void);
/* Every line is escaped: control characters and bytes that are not UTF-8
 * are written as \xNN, so text from a peer cannot forge a line. */
void vlog(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An event that a peer can repeat at will: the first in each interval is
 * logged, the others counted and said with the next line. */
struct vlog_limit {
    uint32_t interval_ms;
    uint32_t suppressed;
    int64_t since;
    bool logged;
};
void vlog_limited(struct vlog_limit *l, int prio, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
