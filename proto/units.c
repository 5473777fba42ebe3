/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Case-insensitive equality (strcasecmp is POSIX, not C). */
static int same_word(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    return *a == *b;
}

int vw_size_parse(const char *s, uint64_t *out)
{
    if (!s)
        return -EINVAL;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !isfinite(v) || v < 0)
        return -ERANGE;
    while (isspace((unsigned char)*end))
        end++;
    static const struct {
        const char *suffix;
        int shift;
    } units[] = {{"", 0},     {"b", 0},    {"kib", 10}, {"mib", 20},
                 {"gib", 30}, {"tib", 40}};
    static const char *const ambiguous[] = {"k", "kb", "m", "mb", "g", "gb",
                                            "t", "tb"};
    for (size_t i = 0; i < sizeof(ambiguous) / sizeof(ambiguous[0]); i++)
        if (same_word(end, ambiguous[i]))
            return -EDOM;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (!same_word(end, units[i].suffix))
            continue;
        double b = ldexp(v, units[i].shift);
        if (b > 9007199254740992.0)
            return -ERANGE;
        if (b != floor(b))
            return -EINVAL; /* a fraction of a byte */
        *out = (uint64_t)b;
        return 0;
    }
    return -EINVAL;
}

int vw_size_binary(const char *s, char *buf, size_t len)
{
    uint64_t v;
    if (!s || vw_size_parse(s, &v) != -EDOM)
        return -EINVAL;
    while (isspace((unsigned char)*s))
        s++;
    size_t num = strspn(s, "0123456789.eE+-");
    const char *unit = s + num;
    while (isspace((unsigned char)*unit))
        unit++;
    /* EDOM means the unit is one of K, M, G, T with or without a B. */
    char out[80];
    int n = snprintf(out, sizeof(out), "%.*s%ciB", (int)num, s,
                     toupper((unsigned char)*unit));
    if (n <= 0 || (size_t)n >= sizeof(out) || (size_t)n >= len)
        return -EINVAL;
    memcpy(buf, out, (size_t)n + 1);
    return 0;
}

const char *vw_size_why(int err)
{
    switch (err) {
    case -EDOM:
        return "decimal and bare units are refused (is 16GB 16 * 10^9 bytes "
               "or 16 GiB?): did you mean GiB, MiB or KiB?";
    case -ERANGE:
        return "too large (at most 8192 TiB)";
    default:
        return "not a size: a number of bytes, or one with KiB, MiB, GiB or "
               "TiB (such as 512MiB or 1.5GiB), in whole bytes";
    }
}

char *vw_size_format(uint64_t bytes, char *buf, size_t len)
{
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    double v = (double)bytes;
    char num[64];
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    snprintf(num, sizeof(num), "%.2f", v);
    /* Rounding can reach the next unit: 1048575 bytes is "1 MiB", not
     * "1024 KiB". */
    if (i < 4 && strtod(num, NULL) >= 1024) {
        v /= 1024;
        i++;
        snprintf(num, sizeof(num), "%.2f", v);
    }
    char *dot = strchr(num, '.');
    if (dot) { /* 1.50 -> 1.5, 16.00 -> 16 */
        char *e = num + strlen(num) - 1;
        while (e > dot && *e == '0')
            *e-- = '\0';
        if (e == dot)
            *e = '\0';
    }
    snprintf(buf, len, "%s %s", num, u[i]);
    return buf;
}
