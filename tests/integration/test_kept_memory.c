/* SPDX-License-Identifier: Apache-2.0 */
/* A client that releases chunks but keeps a mapping of them, or an open
 * handle, is caught (host chunks: their memory ids among the process's
 * mappings and fds): the release is refused with EBUSY and the chunks stay
 * its own, counted against it, until it lets go or its process is gone.
 * A client that unmaps properly is not bothered. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static uint64_t kept(const struct daemon *d)
{
    cJSON *st = daemon_status(d);
    uint64_t v = json_u64(cJSON_GetObjectItem(st, "counters"), "kept_after_release");
    cJSON_Delete(st);
    return v;
}

static uint64_t fixed(const struct daemon *d)
{
    cJSON *st = daemon_status(d);
    uint64_t v = status_dev(st, 0, "fixed_bytes");
    cJSON_Delete(st);
    return v;
}

/* A handle of slot 0's memory behind the library's back (through
 * /proc/self/map_files). */
static int steal(vram_client *c, uint32_t r)
{
    char *slot0 = vram_region_slot(c, r, 0, 0);
    char path[128];
    snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx",
             (unsigned long)(uintptr_t)slot0,
             (unsigned long)(uintptr_t)(slot0 + 2 * MIB));
    int fd = open(path, O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0, "open %s", path);
    return fd;
}

/* The engine, in a process of its own so that it can end. */
static int keeper(const struct daemon *d, void *p)
{
    struct rendezvous *rv = p;
    vram_client *c = connect_client(d, "keeper");
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 1, &st) == 0, "stage");
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 16 * MIB, 1, &r) == 0, "region");

    /* Well behaved: grow, shrink; nothing reported. */
    REQUIRE(vram_region_grow(c, r, 2) == 0, "grow");
    REQUIRE(vram_region_shrink(c, r, 2) == 0, "shrink");
    CHECK_EQ_U(kept(d), 0);
    CHECK_EQ_U(fixed(d), 0);

    /* A second mapping survives the library's unmap: the release is
     * refused and the chunks stay the client's. */
    REQUIRE(vram_region_grow(c, r, 2) == 0, "grow again");
    strcpy(vram_region_slot(c, r, 0, 0), "still mine");
    int fd = steal(c, r);
    char *copy = mmap(NULL, 2 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(copy != MAP_FAILED, "second mapping");
    CHECK(strcmp(copy, "still mine") == 0, "the second mapping is other memory");
    int e = vram_region_shrink(c, r, 2);
    CHECK(e == -EBUSY, "shrink with a mapping kept: %d", e);
    CHECK(strstr(vram_client_last_error(c), "still mapped or open") != NULL,
          "unclear: %s", vram_client_last_error(c));
    CHECK(daemon_log_wait(d, "still maps or holds open", 2000),
          "the kept mapping was not logged");
    CHECK_EQ_U(kept(d), 1);
    CHECK_EQ_U(fixed(d), 2 * 2 * MIB); /* still counted as the client's */
    munmap(copy, 2 * MIB);

    /* An open handle, not mapped, keeps the memory too. */
    uint32_t r2;
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 16 * MIB, 1, &r2) == 0,
            "region 2");
    REQUIRE(vram_region_grow(c, r2, 1) == 0, "grow region 2");
    fd = steal(c, r2);
    e = vram_region_shrink(c, r2, 1);
    CHECK(e == -EBUSY, "shrink with a handle kept: %d", e);
    CHECK_EQ_U(kept(d), 2);

    /* Closed while it still holds that handle: its chunks wait, quarantined,
     * for its process to go; nothing of them is granted meanwhile. */
    vram_client_close(c);
    rv_send(rv->to_parent[1], 1);
    rv_recv(rv->to_child[0]);
    close(fd);
    return check_failures ? 1 : 0;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    struct rendezvous rv;
    rv_init(&rv);
    pid_t k = spawn(keeper, &d, &rv);
    rv_recv(rv.to_parent[0]);
    CHECK(wait_dev_value(&d, 0, "quarantined_bytes", 3 * 2 * MIB, 3000),
          "the kept chunks are not quarantined");
    rv_send(rv.to_child[1], 1);
    CHECK(wait_child(k) == 0, "the keeper failed");
    /* Its process gone, every chunk is back. */
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_kept_memory");
}
