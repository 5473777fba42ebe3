/* Logging: one line per event, syslog priorities. Under systemd (stderr
 * connected to the journal) lines carry "<N>" priority prefixes instead of
 * timestamps, which journald turns into priorities. */
#ifndef VRAMD_LOG_H
#define VRAMD_LOG_H

enum { VLOG_ERR = 3, VLOG_WARNING = 4, VLOG_NOTICE = 5, VLOG_INFO = 6, VLOG_DEBUG = 7 };

void vlog_init(int level);
int vlog_level_parse(const char *s); /* -EINVAL when unknown */
int vlog_level(void);
void vlog(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
