/* SPDX-License-Identifier: Apache-2.0 */
/* vw_json_print: what it writes parses back to the same value, integers
 * are exact, strings are escaped. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "proto/message.h"

static void round_trip(const char *text)
{
    cJSON *a = cJSON_Parse(text);
    REQUIRE(a, "test input does not parse: %s", text);
    size_t len = 0;
    char *out = vw_json_print(a, &len);
    REQUIRE(out, "print failed");
    CHECK(strlen(out) == len, "length %zu, string %zu", len, strlen(out));
    cJSON *b = cJSON_Parse(out);
    CHECK(b && cJSON_Compare(a, b, 1), "%s came back as %s", text, out);
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(out);
}

int main(void)
{
    round_trip("{}");
    round_trip("[]");
    round_trip("{\"type\":\"reply\",\"id\":42,\"ok\":true,\"x\":null,\"f\":false}");
    round_trip("[0,1,-1,123456789012345,-98765,0.5,1e-7,3.141592653589793,1e300]");
    round_trip("{\"s\":\"quote \\\" backslash \\\\ tab \\t nl \\n cr \\r bell \\u0007\"}");
    round_trip("{\"utf8\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}");
    round_trip("{\"nested\":{\"a\":[1,[2,[3,{\"b\":[]}]]],\"c\":{}}}");

    /* Integers are written as integers, exactly, up to 2^53. */
    cJSON *o = cJSON_CreateObject();
    vw_json_add_u64(o, "a", 9007199254740992ull);
    vw_json_add_u64(o, "b", 140737488355328ull); /* 2^47 */
    vw_json_add_u64(o, "c", 4294967296ull + 17);
    char *t = vw_json_print(o, NULL);
    CHECK(strcmp(t, "{\"a\":9007199254740992,\"b\":140737488355328,\"c\":4294967313}") == 0,
          "integers: %s", t);
    cJSON *back = cJSON_Parse(t);
    uint64_t v = 0;
    CHECK(vw_json_u64(back, "a", &v) == 0 && v == 9007199254740992ull,
          "2^53 came back as %llu", (unsigned long long)v);
    cJSON_Delete(back);
    free(t);
    cJSON_Delete(o);

    /* Not-a-number has no JSON form: null, as cJSON writes it. */
    o = cJSON_CreateArray();
    cJSON_AddItemToArray(o, cJSON_CreateNumber(NAN));
    t = vw_json_print(o, NULL);
    CHECK(strcmp(t, "[null]") == 0, "nan: %s", t);
    free(t);
    cJSON_Delete(o);

    /* Raw items go out as they are (the daemon's map entries). */
    o = cJSON_CreateObject();
    cJSON_AddRawToObject(o, "map", "[{\"chunk\":1,\"slot\":2}]");
    t = vw_json_print(o, NULL);
    CHECK(strcmp(t, "{\"map\":[{\"chunk\":1,\"slot\":2}]}") == 0, "raw: %s", t);
    free(t);
    cJSON_Delete(o);

    /* Control characters are escaped: the output parses. */
    char ctl[40];
    for (int i = 1; i < 32; i++)
        ctl[i - 1] = (char)i;
    ctl[31] = 0;
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "ctl", ctl);
    t = vw_json_print(o, NULL);
    back = cJSON_Parse(t);
    CHECK(back && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(back, "ctl")), ctl) == 0,
          "control characters did not survive: %s", t);
    cJSON_Delete(back);
    free(t);
    cJSON_Delete(o);
    return check_report("test_json");
}
