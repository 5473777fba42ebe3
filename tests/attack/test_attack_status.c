/* SPDX-License-Identifier: Apache-2.0 */
/* Status at any size: 256 clients with 256 regions each is far more than a
 * frame holds; the reply comes in frames (more: true), each inside the
 * payload limit, and the library and vramctl put them back together. The
 * clients are raw connections: no process could map 64 TiB of regions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/attack/attack.h"
#include "proto/frame.h"

#define NCLIENTS 256
#define NREGIONS 256

static bool ok_reply(int fd, uint64_t *field, const char *obj, const char *key)
{
    cJSON *r = raw_recv(fd, 60000);
    bool ok = r && cJSON_IsTrue(cJSON_GetObjectItem(r, "ok"));
    if (ok && field)
        *field = json_u64(obj ? cJSON_GetObjectItem(r, obj) : r, key);
    cJSON_Delete(r);
    return ok;
}

int main(void)
{
    const char *config =
        "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}],"
        " \"address_window\": {\"base\": \"0x200000000000\","
        "                      \"size\": \"0x500000000000\"},"
        " \"limits\": {\"clients\": 260, \"hello_timeout_ms\": 60000}}";
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    static int fds[NCLIENTS];
    char m[256];
    for (int i = 0; i < NCLIENTS; i++) {
        /* One at a time: a connection must say hello in time (60 s here:
         * this process may be starved on a loaded machine). */
        REQUIRE(raw_connect_many(&d, &fds[i], 1) == 1, "connect %d", i);
        snprintf(m, sizeof(m), "{\"type\":\"hello\",\"id\":1,\"version\":1,"
                 "\"name\":\"regions-%d\"}", i);
        raw_send(fds[i], m);
        REQUIRE(ok_reply(fds[i], NULL, NULL, NULL), "hello %d", i);
        raw_send(fds[i], "{\"type\":\"stage_register\",\"id\":2,\"device\":0,"
                         "\"first_layer\":0,\"last_layer\":1}");
        uint64_t stage = 0;
        REQUIRE(ok_reply(fds[i], &stage, "stage", "id"), "stage %d", i);
        /* Many requests in flight, then their replies. */
        for (int k = 0; k < NREGIONS; k++) {
            snprintf(m, sizeof(m), "{\"type\":\"region_create\",\"id\":%d,"
                     "\"stage\":%llu,\"kind\":\"fixed\",\"bytes\":2097152}",
                     k + 3, (unsigned long long)stage);
            raw_send(fds[i], m);
            if (k % 32 == 31 || k == NREGIONS - 1)
                for (int j = k - (k % 32); j <= k; j++)
                    REQUIRE(ok_reply(fds[i], NULL, NULL, NULL), "region %d of "
                            "client %d", j, i);
        }
    }
    /* Raw: several frames, each within the limit, all but the last with
     * more. */
    int fd = raw_connect(&d);
    raw_send(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1,\"role\":\"ctl\"}");
    REQUIRE(ok_reply(fd, NULL, NULL, NULL), "ctl hello");
    raw_send(fd, "{\"type\":\"status\",\"id\":2}");
    int frames = 0, more = 1;
    size_t regions = 0;
    while (more) {
        /* Generous: the whole status is 65,536 regions, built and checked
         * (VRAMD_CHECK_REPLIES) on a machine that may be loaded. */
        cJSON *r = raw_recv(fd, 120000);
        REQUIRE(r, "status frame %d", frames);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")), "frame %d not ok", frames);
        more = cJSON_IsTrue(cJSON_GetObjectItem(r, "more"));
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(r, "stages"))
            regions += (size_t)cJSON_GetArraySize(cJSON_GetObjectItem(s, "regions"));
        cJSON_Delete(r);
        frames++;
    }
    close(fd);
    CHECK(frames > 8, "status in %d frames", frames);
    CHECK_EQ_U(regions, NCLIENTS * NREGIONS);
    /* The library puts them back together. */
    /* Its reply wait as generous as the raw one's above. */
    vram_client *c = NULL;
    char err[256] = "";
    struct vram_client_options o = {.name = "reader", .error = err, .error_len = sizeof(err),
                                    .timeout_ms = 120000};
    REQUIRE(vram_client_connect(d.sock, &o, &c) == 0, "connect as reader: %s", err);
    char *text = NULL;
    REQUIRE(vram_status_json(c, &text) == 0, "status: %s", vram_client_last_error(c));
    cJSON *st = cJSON_Parse(text);
    CHECK(strlen(text) > (4u << 20), "status of %zu bytes", strlen(text));
    free(text);
    int named = 0;
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItem(st, "clients")) {
        const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(cl, "name"));
        named += nm && strncmp(nm, "regions-", 8) == 0;
    }
    CHECK_EQ_U(named, NCLIENTS);
    size_t merged = 0;
    int stages = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(st, "stages")) {
        int n = cJSON_GetArraySize(cJSON_GetObjectItem(s, "regions"));
        merged += (size_t)n;
        stages += n > 0;
        CHECK(n == 0 || n == NREGIONS, "a stage with %d regions", n);
    }
    CHECK_EQ_U(merged, NCLIENTS * NREGIONS);
    CHECK_EQ_U(stages, NCLIENTS);
    cJSON_Delete(st);
    vram_client_close(c);
    /* vramctl reads it too. */
    char cmd[512];
    /* A minute for the reply: under a sanitizer on a loaded machine, the
     * 256 frames take more than vramctl's default 10 s. */
    snprintf(cmd, sizeof(cmd), "%s --socket %s --timeout 60000 clients --no-legend | wc -l",
             getenv("VRAMCTL_BIN") ? getenv("VRAMCTL_BIN") : "vramctl", d.sock);
    FILE *p = popen(cmd, "r");
    int lines = 0;
    CHECK(p && fscanf(p, "%d", &lines) == 1, "vramctl");
    if (p)
        pclose(p);
    CHECK(lines >= NCLIENTS, "vramctl clients listed %d lines", lines);
    for (int i = 0; i < NCLIENTS; i++)
        close(fds[i]);
    struct attack_base b;
    attack_baseline(&d, &b);
    attack_after(&d, &b, "a status of 65,536 regions", 1 << 20);
    daemon_stop(&d);
    return check_report("test_attack_status");
}
