/* SPDX-License-Identifier: Apache-2.0 */
/* Under load: engines grow and shrink while they are killed with SIGKILL
 * and replaced, and other peers send garbage (random bytes, lying headers,
 * oversized lengths, frames cut short) and connect again when dropped.
 * Afterwards vramd serves, every gone engine's memory is back, and it
 * holds what it held before. */
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/attack/attack.h"
#include "proto/frame.h"

#define ENGINES 6
#define NOISY 2
#define KILLS 30 /* engines killed at random while they work */

static int engine(const struct daemon *d, void *p)
{
    (void)p;
    srand((unsigned)getpid());
    vram_client *c = connect_client(d, "busy");
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 1, &st) == 0, "stage");
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 32 * MIB, 1, &r) == 0,
            "region");
    for (;;) {
        uint32_t n = 1 + (uint32_t)(rand() % 8);
        if (vram_region_grow(c, r, n) == 0) {
            memset(vram_region_slot(c, r, 0, 0), 0x5a, 4096);
            vram_region_shrink(c, r, n);
        }
    }
    return 0;
}

/* Another user, bound by limits.connections_per_user however fast it
 * connects again: the engines (root) always find a slot. */
static int noisy(const struct daemon *d, void *p)
{
    (void)p;
    REQUIRE(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(20010) == 0,
            "become uid 20010");
    srand((unsigned)getpid());
    for (;;) {
        int fd = raw_connect(d);
        for (int k = 0; k < 50; k++) {
            uint8_t buf[512];
            size_t n = (size_t)(rand() % (int)sizeof(buf));
            for (size_t i = 0; i < n; i++)
                buf[i] = (uint8_t)rand();
            if (rand() % 2) {
                /* A header that lies about its length, or a good one cut
                 * short. */
                struct vw_frame_header h = {.magic = VW_FRAME_MAGIC,
                                              .version = VW_PROTOCOL_OLDEST,
                                              .payload_len = (uint32_t)rand(),
                                              .nfds = (uint16_t)(rand() % 40)};
                vw_frame_header_encode(&h, buf);
            }
            if (send(fd, buf, n, MSG_NOSIGNAL) < 0)
                break;
        }
        close(fd);
    }
    return 0;
}

int main(void)
{
    struct daemon d;
    REQUIRE(geteuid() == 0, "this test needs root (to become another user)");
    REQUIRE(daemon_start(&d, "{\"devices\": [{\"id\": 0, \"capacity\": \"2GiB\"}],"
                             " \"access\": {\"allow\": {\"gids\": [65534]},"
                             "  \"socket_group\": \"nogroup\", \"socket_mode\": \"0660\"}}",
                         NULL) == 0, "start vramd");
    chmod(d.dir, 0755);
    struct attack_base b;
    attack_baseline(&d, &b);
    pid_t eng[ENGINES], noise[NOISY];
    for (int i = 0; i < ENGINES; i++)
        eng[i] = spawn(engine, &d, NULL);
    for (int i = 0; i < NOISY; i++)
        noise[i] = spawn(noisy, &d, NULL);
    srand(1);
    /* A count of kills, not a time: on a loaded machine a 4 s loop made
     * only 16 of them once (fork and exec slow down, not vramd). */
    int kills = 0;
    while (kills < KILLS) {
        usleep(100000);
        int i = rand() % ENGINES;
        kill(eng[i], SIGKILL);
        waitpid(eng[i], NULL, 0);
        kills++;
        eng[i] = spawn(engine, &d, NULL);
    }
    for (int i = 0; i < ENGINES; i++) {
        kill(eng[i], SIGKILL);
        waitpid(eng[i], NULL, 0);
    }
    for (int i = 0; i < NOISY; i++) {
        kill(noise[i], SIGKILL);
        waitpid(noise[i], NULL, 0);
    }
    CHECK(kill(d.pid, 0) == 0, "vramd died under load");
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 0, 5000) &&
              wait_dev_value(&d, 0, "fixed_bytes", 0, 1000),
          "the killed engines' memory did not come back");
    cJSON *st = daemon_status(&d);
    CHECK(json_u64(cJSON_GetObjectItem(st, "counters"), "protocol_errors") > 10,
          "the garbage was not counted");
    cJSON_Delete(st);
    attack_after(&d, &b, "kill -9 and garbage under load", 16 * 1024);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_attack_load");
}
