/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness for the state file reader: any bytes, as the file a
 * previous vramd left, go through the whole of vd_state_open (the check,
 * reading the tables, rebuilding live holders into a real ledger). Holders
 * of a file that passes the check are made to name this process, so that
 * the records behind them are read and restored too. It must never crash
 * nor read outside the file; every refusal is fine. And the invariant of
 * tests/unit/test_state_fuzz.c: a version 5 file that passes, with one bit
 * flipped anywhere (where, the input's own checksum says), is refused or
 * means exactly what it meant (what the reader reads of it, compared in
 * whole): else it aborts, as a crash would.
 *
 * VRAM_FUZZ_STATE_SEED=DIR: LLVMFuzzerInitialize writes a real state file
 * (a client holding chunks, an ad-hoc stage, regions) into DIR as the
 * corpus's seed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/state/format.h"
#include "daemon/ledger/ledger.h"
#include "daemon/log.h"
#include "daemon/state/state.h"
#include "daemon/state/crc32c.h"
#include "tests/unit/state_meaning.h"
#include "tests/unit/state_rebuild.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], path[128];

static struct vl_ledger *ledger(void)
{
    struct vl_device_cfg dev = {.id = 0, .chunk_bytes = 2u << 20,
                                .capacity_bytes = 128u << 20};
    struct vl_ledger *L = NULL;
    char why[128];
    if (vl_new(&dev, 1, 1ull << 40, 64ull << 30, 1u << 30, &L, why,
               sizeof(why)) < 0)
        abort();
    return L;
}

static void write_bytes(const char *p, const void *data, size_t n)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (n && write(fd, data, n) != (ssize_t)n))
        abort();
    close(fd);
}

static void open_once(struct vl_ledger *L)
{
    struct vd_state_params prm = {.ledger = L, .max_clients = 4,
                                  .max_regions_per_client = 4};
    (void)state_rebuild(&prm, path, NULL);
}

static void write_seed(const char *to)
{
    struct vl_ledger *L = ledger();
    unlink(path);
    struct vd_state_params prm = {.ledger = L, .max_clients = 4,
                                  .max_regions_per_client = 4};
    struct vd_orphan *orph = NULL;
    size_t n = 0;
    struct vd_state *st = NULL;
    if (vd_state_open(&prm, path, &orph, &n, &st) < 0)
        abort();
    free(orph);
    uint32_t stage, region;
    struct vl_fxlist fx = {0};
    if (vl_client_add(L, 1) < 0 ||
        vd_state_holder_add(st, 1, getpid(), 0, 1000, "fuzz-seed") < 0 ||
        vl_stage_register_adhoc(L, 1, 0, 0, 1, &stage) < 0 ||
        vl_region_create(L, 1, stage, VL_FIXED, 8u << 20, 1, &region) < 0 ||
        vl_region_grow(L, 1, region, 3, &fx) < 0)
        abort();
    vl_fx_free(&fx);
    FILE *f = fopen(path, "rb");
    static char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    char out[512];
    snprintf(out, sizeof(out), "%s/seed-state", to);
    write_bytes(out, buf, len);
    vd_state_close(st);
    vl_free(L);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    vlog_init(0); /* refusals are the point: nothing printed */
    /* A directory of its own (mkdtemp: random, made anew), not one named by
     * the pid, which an earlier run may have left. */
    snprintf(dir, sizeof(dir), "/tmp/vram-fuzz-state-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/vramd.sock.state", dir);
    const char *seed = getenv("VRAM_FUZZ_STATE_SEED");
    if (seed && *seed) {
        write_seed(seed);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    /* Aligned, and with live holders where the file passes the check. */
    static uint64_t buf[(1u << 20) / 8 + 1];
    memcpy(buf, data, size);
    struct vd_state_view v;
    char why[256];
    static struct meaning was, now;
    if (size && meaning_of((const uint8_t *)buf, size, &was) == 0 &&
        ((const struct vd_state_hdr *)buf)->version >= VD_STATE_VERSION_CRC) {
        static uint64_t flipped[(1u << 20) / 8 + 1];
        memcpy(flipped, buf, size);
        uint32_t bit = vd_crc32c(0, data, size) % (uint32_t)(size * 8);
        ((uint8_t *)flipped)[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        if (meaning_of((const uint8_t *)flipped, size, &now) == 0 &&
            (now.n != was.n || memcmp(now.b, was.b, was.n) != 0))
            abort(); /* a flip the checksums let through changed a meaning */
    }
    if (vd_state_check(buf, size, &v, why, sizeof(why)) == 0)
        for (uint32_t i = 0; i < v.h->nholders; i++) {
            /* Both versions' records begin alike (format.h). */
            struct vd_state_holder *h =
                (struct vd_state_holder *)(uintptr_t)(v.holders + (size_t)i * v.holder_bytes);
            if (h->client) {
                h->pid = (int32_t)getpid();
                h->starttime = 0;
            }
        }
    write_bytes(path, buf, size);
    struct vl_ledger *L = ledger();
    open_once(L);
    vl_free(L);
    return 0;
}
