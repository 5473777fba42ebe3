/* SPDX-License-Identifier: Apache-2.0 */
/* A client holding many chunks is not looked at before each release (its
 * process's mappings and fds take about 13 us a chunk to read): the release
 * goes through, and a sample of what it released is looked for later, off
 * vramd's loop. A chunk it kept is then counted (kept_after_release) and
 * logged; the release stands (its next grant is fresh memory). A small
 * client is still refused at once (test_kept_memory). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/integration/harness.h"

#define HELD 400u /* beyond what is looked at before a release (128) */

static uint64_t kept(const struct daemon *d)
{
    cJSON *st = daemon_status(d);
    uint64_t v = json_u64(cJSON_GetObjectItem(st, "counters"), "kept_after_release");
    cJSON_Delete(st);
    return v;
}

/* A mapping of slot i's memory behind the library's back. */
static char *keep(vram_client *c, uint32_t r, uint32_t i)
{
    char *slot = vram_region_slot(c, r, 0, i);
    char path[128];
    snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx",
             (unsigned long)(uintptr_t)slot,
             (unsigned long)(uintptr_t)(slot + 2 * MIB));
    int fd = open(path, O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0, "open %s", path);
    char *copy = mmap(NULL, 2 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(copy != MAP_FAILED, "second mapping");
    return copy;
}

static int big(const struct daemon *d, void *p)
{
    (void)p;
    vram_client *c = connect_client(d, "big");
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 1, &st) == 0, "stage");
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, HELD * 2 * MIB, 1,
                               &r) == 0, "region");
    REQUIRE(vram_region_grow(c, r, HELD) == 0, "grow");

    /* Well behaved: released, nothing found after. */
    REQUIRE(vram_region_shrink(c, r, 8) == 0, "shrink");
    usleep(600000);
    CHECK_EQ_U(kept(d), 0);

    /* The last chunk kept mapped, then released: not refused, found
     * after. */
    strcpy(vram_region_slot(c, r, 0, HELD - 9), "kept");
    char *copy = keep(c, r, HELD - 9);
    int e = vram_region_shrink(c, r, 1);
    CHECK(e == 0, "a large client's release was refused: %d %s", e,
          vram_client_last_error(c));
    CHECK(daemon_log_wait(d, "after the release", 5000),
          "the kept mapping was not found after the release");
    CHECK_EQ_U(kept(d), 1);
    CHECK(strcmp(copy, "kept") == 0, "the kept memory changed");
    munmap(copy, 2 * MIB);
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    CHECK(wait_child(spawn(big, &d, NULL)) == 0, "the big client failed");
    CHECK(wait_dev_value(&d, 0, "free_bytes", 16 * GIB, 5000),
          "its memory did not come back");
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_kept_audit");
}
