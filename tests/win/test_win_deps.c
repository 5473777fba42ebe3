/* SPDX-License-Identifier: Apache-2.0 */
/* The Windows build's dependencies, built from their Debian source packages
 * (cmake/windows.cmake): libuv's static library links and runs a loop, and
 * cJSON parses and prints. Run under wine by ctest. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "tests/check.h"

static int fired;

static void on_timer(uv_timer_t *t)
{
    fired++;
    uv_close((uv_handle_t *)t, NULL);
}

static void test_libuv(void)
{
    const char *v = uv_version_string();
    CHECK(v && v[0] >= '1' && v[0] <= '9', "uv_version_string() = %s", v ? v : "(null)");
    printf("libuv %s\n", v ? v : "(null)");

    uv_loop_t loop;
    uv_timer_t timer;
    REQUIRE(uv_loop_init(&loop) == 0, "uv_loop_init");
    CHECK(uv_timer_init(&loop, &timer) == 0, "uv_timer_init");
    CHECK(uv_timer_start(&timer, on_timer, 1, 0) == 0, "uv_timer_start");
    CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0, "uv_run");
    CHECK(fired == 1, "the timer fired %d times", fired);
    CHECK(uv_loop_close(&loop) == 0, "uv_loop_close");
}

static void test_cjson(void)
{
    printf("cJSON %s\n", cJSON_Version());
    cJSON *j = cJSON_Parse("{\"a\": [1, 2.5, \"x\"], \"b\": true}");
    REQUIRE(j != NULL, "cJSON_Parse");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "a");
    CHECK(cJSON_IsArray(a) && cJSON_GetArraySize(a) == 3, "a is an array of 3");
    char *s = cJSON_PrintUnformatted(j);
    REQUIRE(s != NULL, "cJSON_PrintUnformatted");
    CHECK(strcmp(s, "{\"a\":[1,2.5,\"x\"],\"b\":true}") == 0, "printed %s", s);
    free(s);
    cJSON_Delete(j);
}

int main(void)
{
    test_libuv();
    test_cjson();
    return check_report("test_win_deps");
}
