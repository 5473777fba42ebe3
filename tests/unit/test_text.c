/* SPDX-License-Identifier: Apache-2.0 */
/* Text from peers made safe to show (proto/text.c): the escape every view
 * and the daemon's log use (C0, DEL and C1 controls and bytes that are not
 * UTF-8 as \xNN, the rest kept, cut between whole characters); the NUL
 * escape found in JSON text only where it is one; JSON made printable with
 * its strings still the real ones. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tests/check.h"
#include "proto/text.h"

static void escapes(const char *in, const char *want)
{
    char out[256];
    size_t n = vw_text_escape(out, sizeof(out), in);
    CHECK(strcmp(out, want) == 0 && n == strlen(want), "escape: '%s', want '%s'",
          out, want);
}

static void cut(const char *in, size_t len, const char *want)
{
    char out[64];
    vw_text_escape(out, len, in);
    CHECK(strcmp(out, want) == 0, "escape into %zu bytes: '%s', want '%s'", len,
          out, want);
}

static void nul(const char *json, bool want)
{
    CHECK(vw_json_has_nul(json, strlen(json)) == want, "has_nul(%s) is not %d",
          json, want);
}

/* JSON text made printable: still JSON, with no raw control byte or byte
 * that is not UTF-8, and the string as JSON reads it. */
static void printable(const char *json, const char *want_string)
{
    size_t n;
    char *out = vw_json_printable(json, strlen(json), &n);
    REQUIRE(out, "out of memory");
    CHECK(n == strlen(out), "length %zu", n);
    bool clean = true;
    for (const unsigned char *p = (const unsigned char *)out; *p; p++) {
        size_t k = vw_utf8_len(p, strlen((const char *)p));
        clean &= k > 0 && (*p >= 0x20 || *p == '\n' || *p == '\t') && *p != 0x7f &&
                 !(k == 2 && p[0] == 0xc2 && p[1] < 0xa0);
        p += k ? k - 1 : 0;
    }
    CHECK(clean, "raw control or non-UTF-8 bytes left in %s", out);
    cJSON *o = cJSON_Parse(out);
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, "s"));
    CHECK(s && strcmp(s, want_string) == 0, "%s reads as '%s'", out, s ? s : "?");
    cJSON_Delete(o);
    free(out);
}

int main(void)
{
    escapes("engine-0", "engine-0");
    escapes("", "");
    escapes(NULL, "");
    escapes("a\x1b[2Jb", "a\\x1b[2Jb");
    escapes("line\r\nnext\tx", "line\\x0d\\x0anext\\x09x");
    escapes("del\x7f", "del\\x7f");
    escapes("csi\xc2\x9b" "31m", "csi\\xc2\\x9b31m"); /* C1, in UTF-8 */
    escapes("nbsp\xc2\xa0", "nbsp\xc2\xa0");           /* U+00A0 is text */
    escapes("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    escapes("bad\xff\x80\xc0\xaf", "bad\\xff\\x80\\xc0\\xaf"); /* stray, overlong */
    escapes("sur\xed\xa0\x80", "sur\\xed\\xa0\\x80");          /* a surrogate */
    escapes("cut\xe2\x82", "cut\\xe2\\x82");                   /* cut short */
    escapes("back\\x1b", "back\\x1b"); /* text as it is: escaping it again is
                                          the same */
    /* Cut between whole characters and escapes, never inside one. */
    cut("abc\x1b", 5, "abc");
    cut("abc\x1b", 8, "abc\\x1b");
    cut("ab\xc3\xa9", 4, "ab");
    cut("ab\xc3\xa9", 5, "ab\xc3\xa9");
    cut("x", 1, "");

    nul("{\"name\":\"a\\u0000b\"}", true);
    nul("{\"name\":\"\\u0000\"}", true);
    nul("{\"name\":\"a\\\\u0000b\"}", false);  /* a backslash, then text */
    nul("{\"name\":\"a\\\\\\u0000b\"}", true); /* a backslash, then NUL */
    nul("{\"name\":\"a\\u0001b\"}", false);
    nul("{\"name\":\"a\\u00001\"}", true);
    nul("{\"name\":\"\\u000\"}", false);
    nul("", false);

    printable("{\"s\":\"plain\"}", "plain");
    printable("{\"s\":\"e\\u001b[31m\\r\"}", "e\x1b[31m\r");
    printable("{\"s\":\"del\x7f\"}", "del\x7f");
    printable("{\"s\":\"csi\xc2\x9b\"}", "csi\xc2\x9b");
    printable("{\"s\":\"bad\xff\"}", "bad\xef\xbf\xbd"); /* U+FFFD */
    printable("{\"s\":\"raw\x01\"}", "raw\x01");
    printable("{\n\t\"s\":\t\"q\\\"\x7f\\\\\"\n}", "q\"\x7f\\");
    printable("{\"s\":\"\xc3\xa9\"}", "\xc3\xa9");
    return check_report("test_text");
}
