/* A client that releases chunks but keeps a mapping of them is detected
 * (host chunks, through /proc/PID/maps) and reported; a client that unmaps
 * properly is not. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

static uint64_t kept(const struct daemon *d)
{
    cJSON *st = daemon_status(d);
    uint64_t v = json_u64(cJSON_GetObjectItem(st, "counters"), "kept_after_release");
    cJSON_Delete(st);
    return v;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    vram_client *c = connect_client(&d, "keeper");
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 1, &st) == 0, "stage");
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 16 * MIB, 1, &r) == 0, "region");

    /* Well behaved: grow, shrink; nothing reported. */
    REQUIRE(vram_region_grow(c, r, 2) == 0, "grow");
    REQUIRE(vram_region_shrink(c, r, 2) == 0, "shrink");
    CHECK_EQ_U(kept(&d), 0);

    /* A second mapping of slot 0's memory, made behind the library's back
     * (through /proc/self/map_files), survives the release. */
    REQUIRE(vram_region_grow(c, r, 2) == 0, "grow again");
    char *slot0 = vram_region_slot(c, r, 0, 0);
    strcpy(slot0, "still mine");
    char path[128];
    snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx",
             (unsigned long)(uintptr_t)slot0,
             (unsigned long)(uintptr_t)(slot0 + 2 * MIB));
    int fd = open(path, O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0, "open %s", path);
    char *copy = mmap(NULL, 2 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(copy != MAP_FAILED, "second mapping");
    CHECK(strcmp(copy, "still mine") == 0, "the second mapping is other memory");
    REQUIRE(vram_region_shrink(c, r, 2) == 0, "shrink with a mapping kept");
    CHECK(daemon_log_wait(&d, "released chunks it still maps", 2000),
          "the kept mapping was not reported");
    CHECK_EQ_U(kept(&d), 1);
    munmap(copy, 2 * MIB);
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_kept_memory");
}
