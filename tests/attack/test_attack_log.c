/* SPDX-License-Identifier: Apache-2.0 */
/* Attacks on the log: text from a peer (a request type, a name, bytes that
 * are not UTF-8) cannot forge a line; refusals a peer repeats at will are
 * rate-limited at info; a peer that resets its connection is logged as
 * that. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/attack/attack.h"

/* Lines of the log that begin with prefix (a forged line would). */
static int lines_starting(const struct daemon *d, const char *prefix)
{
    FILE *f = fopen(d->log, "r");
    char line[4096];
    int n = 0;
    while (f && fgets(line, sizeof(line), f))
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    if (f)
        fclose(f);
    return n;
}

static void forgery(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    struct attack_base b;
    attack_baseline(&d, &b);
    int fd = raw_connect(&d);
    /* A name with a newline and a forged line after it, and bytes that are
     * not UTF-8 (0xff, a lone continuation byte, an overlong '/'). */
    raw_send(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1,"
                 "\"name\":\"x\\nFORGED-1 error: root logged in\\u001b[2J\"}");
    cJSON *r = raw_recv(fd, 2000);
    CHECK(r && cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")), "hello");
    cJSON_Delete(r);
    raw_send(fd, "{\"type\":\"x\\nFORGED-2 error: forged\",\"id\":2}");
    cJSON_Delete(raw_recv(fd, 2000));
    raw_send(fd, "{\"type\":\"bad\xff\x80\xc0\xaf\",\"id\":3}");
    cJSON_Delete(raw_recv(fd, 2000));
    close(fd);
    daemon_log_wait(&d, "FORGED-2", 2000);
    CHECK(lines_starting(&d, "FORGED") == 0, "a peer forged a log line");
    /* Names are shown by vramctl too: their control characters become '?'. */
    CHECK(daemon_log_count(&d, "(x?FORGED-1 error: root logged in?[2J,") > 0,
          "the name's control characters are not replaced");
    CHECK(daemon_log_count(&d, "x\\x0aFORGED-2") > 0,
          "the type's newline is not shown escaped");
    CHECK(daemon_log_count(&d, "bad\\xff\\x80\\xc0\\xaf") > 0,
          "bytes that are not UTF-8 are not shown escaped");
    attack_after(&d, &b, "forged log lines", 4096);
    daemon_stop(&d);
}

static void refusals(void)
{
    struct daemon d;
    const char *args[] = {"--log-level", "info", NULL};
    REQUIRE(daemon_start(&d, NULL, args) == 0, "start vramd");
    struct attack_base b;
    attack_baseline(&d, &b);
    int fd = raw_connect(&d);
    raw_send(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1,\"name\":\"noisy\"}");
    cJSON_Delete(raw_recv(fd, 2000));
    for (int i = 0; i < 500; i++) {
        char m[128];
        snprintf(m, sizeof(m), "{\"type\":\"region_grow\",\"id\":%d,\"region\":77,"
                 "\"chunks\":1}", i + 2);
        raw_send(fd, m);
        cJSON_Delete(raw_recv(fd, 2000));
    }
    close(fd);
    int n = daemon_log_count(&d, "refused:");
    CHECK(n >= 1 && n <= 2, "%d refusal lines at info for 500 refusals", n);
    cJSON *st = daemon_status(&d);
    CHECK(json_u64(cJSON_GetObjectItem(st, "counters"), "errors") >= 500,
          "the refusals are not counted");
    cJSON_Delete(st);
    attack_after(&d, &b, "refusal flood", 4096);
    daemon_stop(&d);
}

static void reset(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    int fd = raw_connect(&d);
    raw_send(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1,\"name\":\"rst\"}");
    usleep(200000);
    /* Its reply unread, the close resets the connection (AF_UNIX); the
     * daemon's next write sees ECONNRESET. */
    raw_send(fd, "{\"type\":\"status\",\"id\":2}");
    usleep(100000);
    close(fd);
    CHECK(daemon_log_wait(&d, "rst", 2000), "no line for the client");
    usleep(300000);
    CHECK(daemon_log_count(&d, "Bad file descriptor") == 0 &&
          daemon_log_count(&d, "bad file descriptor") == 0,
          "a reset is logged as a bad file descriptor");
    daemon_stop(&d);
}

int main(void)
{
    forgery();
    refusals();
    reset();
    return check_report("test_attack_log");
}
