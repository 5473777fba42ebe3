/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char hex[] = "0123456789abcdef";

size_t vw_utf8_len(const unsigned char *p, size_t n)
{
    if (n == 0)
        return 0;
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t min;
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
    uint32_t cp = c & (0x3Fu >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* U+0080 to U+009F, two bytes in UTF-8. */
static bool c1(const unsigned char *p, size_t k)
{
    return k == 2 && p[0] == 0xC2 && p[1] < 0xA0;
}

size_t vw_text_escape(char *out, size_t len, const char *in)
{
    const unsigned char *p = (const unsigned char *)(in ? in : "");
    size_t n = strlen((const char *)p), o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = vw_utf8_len(p + i, n - i);
        /* A control character (C0, DEL, C1), or a byte that is not part
         * of a character: each of its bytes as \xNN. */
        size_t bytes = k == 0 ? 1 : c1(p + i, k) ? 2
                       : p[i] < 0x20 || p[i] == 0x7F ? 1 : 0;
        if (bytes) {
            if (o + 4 * bytes >= len)
                break;
            for (size_t b = 0; b < bytes; b++, o += 4) {
                unsigned char c = p[i + b];
                char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
                memcpy(out + o, esc, 4);
            }
            i += bytes;
            continue;
        }
        if (o + k >= len)
            break;
        memcpy(out + o, p + i, k);
        o += k;
        i += k;
    }
    out[o] = '\0';
    return o;
}

bool vw_json_has_nul(const char *text, size_t len)
{
    /* Outside strings JSON has no backslash; inside, a run of them is
     * pairs (a backslash each), and an odd one escapes what follows. */
    for (size_t i = 0; i < len;) {
        const char *b = memchr(text + i, '\\', len - i);
        if (!b)
            return false;
        size_t j = (size_t)(b - text), run = 0;
        while (j < len && text[j] == '\\') {
            j++;
            run++;
        }
        if (run % 2 && len - j >= 5 && memcmp(text + j, "u0000", 5) == 0)
            return true;
        i = j;
    }
    return false;
}

/* Writes the mended text to out (when not NULL); returns its length. */
static size_t json_mend(const unsigned char *p, size_t len, char *out)
{
    size_t o = 0;
    bool in_string = false;
    for (size_t i = 0; i < len;) {
        unsigned char c = p[i];
        size_t k = 1;
        bool esc = false;
        if (!in_string) {
            in_string = c == '"';
        } else if (c == '\\' && i + 1 < len) {
            k = 2; /* an escape, as it is */
        } else if (c == '"') {
            in_string = false;
        } else {
            k = vw_utf8_len(p + i, len - i);
            esc = k == 0 || c1(p + i, k) || c < 0x20 || c == 0x7F;
        }
        if (!esc) {
            if (out)
                memcpy(out + o, p + i, k);
            o += k;
            i += k;
            continue;
        }
        unsigned cp = k == 0 ? 0xFFFD : k == 2 ? p[i + 1] : c;
        if (out) {
            char e[6] = {'\\', 'u', hex[cp >> 12], hex[(cp >> 8) & 15],
                         hex[(cp >> 4) & 15], hex[cp & 15]};
            memcpy(out + o, e, 6);
        }
        o += 6;
        i += k ? k : 1;
    }
    return o;
}

char *vw_json_printable(const char *text, size_t len, size_t *out_len)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t n = json_mend(p, len, NULL);
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    json_mend(p, len, out);
    out[n] = '\0';
    if (out_len)
        *out_len = n;
    return out;
}
