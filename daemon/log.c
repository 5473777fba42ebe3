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

/* The length of the well-formed UTF-8 sequence at p (of n bytes), or 0:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    unsigned cp = c & (0x3F >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* Text from peers reaches the log inside messages: every control
 * character (a newline would forge a line of its own) and every byte that
 * is not well-formed UTF-8 is written as \xNN, so a line is one event. */
static void escape(const char *in, char *out, size_t outlen)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t n = strlen(in), o = 0;
    for (size_t i = 0; i < n && o + 5 < outlen;) {
        size_t k = p[i] >= 0x80 ? utf8_len(p + i, n - i) : 1;
        if (p[i] < 0x20 || p[i] == 0x7F || k == 0) {
            snprintf(out + o, outlen - o, "\\x%02x", p[i]);
            o += 4;
            i++;
            continue;
        }
        if (o + k >= outlen)
            break;
        memcpy(out + o, p + i, k);
        o += k;
        i += k;
    }
    out[o] = '\0';
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
    escape(raw, msg, sizeof(msg));
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
