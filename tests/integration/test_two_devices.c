/* SPDX-License-Identifier: Apache-2.0 */
/* Two client processes, one stage each on two devices, are granted chunks,
 * map them at the daemon's addresses, and status (library and vramctl)
 * agrees with what they hold. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto/frame.h"
#include "tests/integration/harness.h"

struct arg {
    int device;
    uint32_t chunks;
    struct rendezvous rv;
};

static int stage_client(const struct daemon *d, void *p)
{
    struct arg *a = p;
    char name[32];
    snprintf(name, sizeof(name), "stage-on-%d", a->device);
    vram_client *c = connect_client(d, name);
    uint32_t stage, region;
    REQUIRE(vram_stage_register_adhoc(c, a->device, a->device * 32,
                                      a->device * 32 + 31, &stage) == 0,
            "register: %s", vram_client_last_error(c));
    REQUIRE(vram_region_create(c, stage, VRAM_REGION_KV, 256 * MIB, 1, &region) == 0,
            "create: %s", vram_client_last_error(c));
    REQUIRE(vram_region_grow(c, region, a->chunks) == 0, "grow: %s",
            vram_client_last_error(c));
    struct vram_region_info ri;
    REQUIRE(vram_region_info(c, region, &ri) == 0, "info");
    CHECK_EQ_U(ri.mapped, a->chunks);
    CHECK_EQ_U(ri.device, a->device);
    for (uint32_t i = 0; i < a->chunks; i++)
        fill_pattern((char *)ri.base + i * ri.chunk_bytes, ri.chunk_bytes,
                     a->device * 1000 + i);
    for (uint32_t i = 0; i < a->chunks; i++)
        CHECK(check_pattern((char *)ri.base + i * ri.chunk_bytes, ri.chunk_bytes,
                            a->device * 1000 + i), "chunk %u lost its data", i);
    rv_send(a->rv.to_parent[1], (uint64_t)(uintptr_t)ri.base);
    rv_recv(a->rv.to_child[0]); /* parent inspected the daemon */
    vram_client_close(c);
    return 0;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");

    /* The default configuration: two 16 GiB devices, 2 MiB chunks. */
    cJSON *st = daemon_status(&d);
    REQUIRE(st, "status");
    CHECK_EQ_U(cJSON_GetArraySize(cJSON_GetObjectItem(st, "devices")), 2);
    CHECK_EQ_U(status_dev(st, 0, "capacity_bytes"), 16 * GIB);
    CHECK_EQ_U(status_dev(st, 1, "capacity_bytes"), 16 * GIB);
    CHECK_EQ_U(status_dev(st, 1, "chunk_bytes"), 2 * MIB);
    cJSON_Delete(st);

    struct arg a[2] = {{.device = 0, .chunks = 12}, {.device = 1, .chunks = 20}};
    pid_t pid[2];
    uint64_t base[2];
    for (int i = 0; i < 2; i++) {
        rv_init(&a[i].rv);
        pid[i] = spawn(stage_client, &d, &a[i]);
    }
    for (int i = 0; i < 2; i++)
        base[i] = rv_recv(a[i].rv.to_parent[0]);
    CHECK(base[0] != base[1] && base[0] && base[1], "regions share an address");

    st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "granted_bytes"), 12 * 2 * MIB);
    CHECK_EQ_U(status_dev(st, 1, "granted_bytes"), 20 * 2 * MIB);
    CHECK_EQ_U(status_dev(st, 0, "free_bytes"), 16 * GIB - 24 * MIB);
    const cJSON *cl;
    int engines = 0;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItem(st, "clients")) {
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(cl, "role"));
        if (role && strcmp(role, "engine") == 0) {
            engines++;
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(cl, "name"));
            uint64_t want = strcmp(name, "stage-on-0") == 0 ? 24 * MIB : 40 * MIB;
            CHECK_EQ_U(json_u64(cl, "held_bytes"), want);
        }
    }
    CHECK_EQ_U(engines, 2);
    cJSON_Delete(st);

    /* vramctl status --json says the same. */
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --socket %s status --json",
             getenv("VRAMCTL_BIN") ? getenv("VRAMCTL_BIN") : "vramctl", d.sock);
    FILE *p = popen(cmd, "r");
    REQUIRE(p, "popen vramctl");
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, p);
    int rc = pclose(p);
    buf[n] = 0;
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "vramctl exit %d", rc);
    cJSON *ctl = cJSON_Parse(buf);
    REQUIRE(ctl, "vramctl --json is not JSON: %.200s", buf);
    CHECK_EQ_U(json_u64(ctl, "protocol_version"), VW_PROTOCOL_VERSION);
    CHECK_EQ_U(json_u64(ctl, "protocol_oldest"), VW_PROTOCOL_OLDEST);
    CHECK_EQ_U(json_u64(ctl, "schema"), 1);
    const cJSON *dev;
    cJSON_ArrayForEach(dev, cJSON_GetObjectItem(ctl, "devices")) {
        CHECK(cJSON_GetObjectItem(dev, "id") && cJSON_GetObjectItem(dev, "backend") &&
              cJSON_GetObjectItem(dev, "chunk_bytes") &&
              cJSON_GetObjectItem(dev, "capacity_bytes") &&
              cJSON_GetObjectItem(dev, "free_bytes"), "device keys missing");
    }
    CHECK(cJSON_IsArray(cJSON_GetObjectItem(ctl, "stages")), "stages");
    CHECK(cJSON_IsArray(cJSON_GetObjectItem(ctl, "clients")), "clients");
    CHECK_EQ_U(status_dev(ctl, 0, "granted_bytes"), 24 * MIB);
    CHECK_EQ_U(status_dev(ctl, 1, "granted_bytes"), 40 * MIB);
    CHECK_EQ_U(cJSON_GetArraySize(cJSON_GetObjectItem(ctl, "stages")), 2);
    cJSON_Delete(ctl);
    free(buf);

    for (int i = 0; i < 2; i++) {
        rv_send(a[i].rv.to_child[1], 1);
        CHECK(wait_child(pid[i]) == 0, "client %d failed", i);
    }
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_two_devices");
}
