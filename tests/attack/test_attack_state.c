/* SPDX-License-Identifier: Apache-2.0 */
/* Attacks on the state file: a crafted, truncated, foreign or inconsistent
 * file never crashes vramd and is never silently dropped (a newcomer could
 * be granted what a live engine maps): vramd refuses to start, names the
 * file and what is wrong, and exits with status 65, which the systemd unit
 * does not restart on. --discard-state is the operator's way past it.
 * Version 5's checksums refuse a damaged file naming the table and the
 * offset; a crafted one (its header resealed, as an attacker can) still
 * meets every structural check. A newer format is refused and left as it
 * is; a version 4 file (no checksums) is read as before. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/attack/attack.h"
#include "daemon/state/crc32c.h"
#include "daemon/state/format.h"

static char good[1 << 22];
static size_t good_len;
static char state_path[256];
static const char *cfg_text = "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}]}";

static int engine(const struct daemon *d, void *p)
{
    struct rendezvous *rv = p;
    vram_client *c = connect_client(d, "holder");
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 1, &st) == 0, "stage");
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 8 * MIB, 1, &r) == 0,
            "region");
    REQUIRE(vram_region_grow(c, r, 4) == 0, "grow");
    rv_send(rv->to_parent[1], 1);
    rv_recv(rv->to_child[0]); /* holds its memory until told */
    return 0;
}

static void write_file(const char *data, size_t len)
{
    int fd = open(state_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0, "open %s", state_path);
    REQUIRE(write(fd, data, len) == (ssize_t)len, "write");
    close(fd);
}

#define HDR(buf) ((struct vd_state_hdr *)(buf))

/* A bit flipped in the record of a held chunk: damage, not resealed. */
static size_t flipped_at;
static void flip_chunk(char *b, size_t *n)
{
    (void)n;
    uint64_t *cs = (uint64_t *)(b + HDR(b)->off_chunks[0]);
    for (uint32_t k = 0; k < HDR(b)->dev[0].nchunks; k++)
        if ((uint32_t)cs[k]) {
            cs[k] ^= 1ull << 33;
            flipped_at = (size_t)HDR(b)->off_chunks[0] + 8u * k;
            return;
        }
}

/* The good file with one change, and vramd's answer to it. */
static void refused(struct daemon *d, const char *what, const char *needle,
                    void (*spoil)(char *buf, size_t *len))
{
    static char buf[sizeof(good)];
    memcpy(buf, good, good_len);
    size_t len = good_len;
    spoil(buf, &len);
    /* What an attacker would do: the header summed again, so that the
     * checks behind the checksum are what meets the spoiled field. */
    if (len >= VD_STATE_HDR_V5_BYTES && spoil != flip_chunk)
        VD_STATE_CHECK_AT(buf)->crc = vd_state_hdr_crc(buf);
    write_file(buf, len);
    d->exit_status = 0;
    int e = daemon_restart(d, cfg_text, NULL);
    CHECK(e == -ECHILD, "%s: vramd started over it", what);
    if (e == 0) {
        daemon_kill(d);
        return;
    }
    CHECK(d->exit_status == 65, "%s: exit status %d, not 65", what,
          d->exit_status);
    CHECK(daemon_log_contains(d, needle), "%s: no '%s' in the log", what, needle);
    CHECK(daemon_log_contains(d, state_path), "%s: the file is not named", what);
}

/* The name of the status's quarantined client, "?" when there is none. */
static const char *gone_name(const cJSON *st)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(st, "clients")) {
        const char *state = cJSON_GetStringValue(cJSON_GetObjectItem(c, "state"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
        if (state && strcmp(state, "quarantined") == 0)
            return name ? name : "?";
    }
    return "?";
}

static void tiny(char *b, size_t *n) { (void)b; *n = 100; }
static void cut(char *b, size_t *n) { (void)b; *n -= 4096; }
static void empty(char *b, size_t *n) { (void)b; *n = 0; }
static void magic(char *b, size_t *n) { (void)n; memcpy(b, "XXXXXXXX", 8); }
static void version(char *b, size_t *n) { (void)n; HDR(b)->version = 99; }
static void wrap_holders(char *b, size_t *n)
{
    (void)n;
    HDR(b)->off_holders = UINT64_MAX - 7;
    HDR(b)->nholders = 1000;
}
static void wrap_chunks(char *b, size_t *n)
{
    (void)n;
    HDR(b)->off_chunks[0] = 0xFFFFFFFFFFFFF000ull;
    HDR(b)->dev[0].nchunks = 0x200;
}
static void huge_chunks(char *b, size_t *n) { (void)n; HDR(b)->dev[0].nchunks = 0xFFFFFFFFu; }
static void in_header(char *b, size_t *n) { (void)n; HDR(b)->off_ranges = 8; }
static void many_devices(char *b, size_t *n) { (void)n; HDR(b)->ndev = 1000; }
static void misaligned(char *b, size_t *n) { (void)n; HDR(b)->off_holders += 3; }
/* A record of a live holder with a category no chunk has. */
static void bad_record(char *b, size_t *n)
{
    (void)n;
    uint64_t *cs = (uint64_t *)(b + HDR(b)->off_chunks[0]);
    for (uint32_t k = 0; k < HDR(b)->dev[0].nchunks; k++)
        if ((uint32_t)cs[k]) {
            cs[k] |= 0xEEull << 48;
            /* Its block summed again: only the ledger's check is left. */
            struct vd_state_blocks bl;
            vd_state_blocks(HDR(b), &bl);
            const struct vd_state_table *t = &bl.t[VD_T_CHUNKS];
            uint32_t blk = k / t->per_block, table, len;
            uint64_t off;
            vd_state_block_at(&bl, t->first + blk, &table, &off, &len);
            uint32_t *check = (uint32_t *)(b + VD_STATE_CHECK_AT(b)->off_check);
            check[t->first + blk] =
                vd_state_block_crc(t->first + blk, b + off, len);
            return;
        }
}

int main(void)
{
    REQUIRE(geteuid() == 0, "this test chowns files");
    const char *config = "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}]}";
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    snprintf(state_path, sizeof(state_path), "%s.state", d.sock);
    struct rendezvous rv;
    rv_init(&rv);
    pid_t eng = spawn(engine, &d, &rv);
    rv_recv(rv.to_parent[0]);
    daemon_kill(&d);
    FILE *f = fopen(state_path, "r");
    REQUIRE(f, "no state file");
    good_len = fread(good, 1, sizeof(good), f);
    fclose(f);
    REQUIRE(good_len > sizeof(struct vd_state_hdr) + 4096, "state file of %zu bytes",
            good_len);

    refused(&d, "a file of 100 bytes", "shorter than its header", tiny);
    refused(&d, "an empty file", "shorter than its header", empty);
    refused(&d, "a truncated file", "truncated", cut);
    refused(&d, "another magic", "not a vramd state file", magic);
    refused(&d, "another version", "format version 99", version);
    refused(&d, "a holder table past 2^64", "holder table", wrap_holders);
    refused(&d, "a chunk table past 2^64", "chunk table", wrap_chunks);
    refused(&d, "4 billion chunks", "chunk table", huge_chunks);
    refused(&d, "a table inside the header", "range table", in_header);
    refused(&d, "1000 devices", "1000 devices", many_devices);
    refused(&d, "a misaligned table", "holder table", misaligned);
    refused(&d, "a record of no kind", "inconsistent", bad_record);

    /* Damage: refused, naming the table and the offset of its block. */
    refused(&d, "a bit flipped in a chunk record",
            "device 0's chunk table fails its checksum at offset", flip_chunk);
    {
        struct vd_state_blocks bl;
        vd_state_blocks(HDR(good), &bl);
        const struct vd_state_table *t = &bl.t[VD_T_CHUNKS];
        size_t rec = (flipped_at - t->off) / 8;
        char needle[96];
        snprintf(needle, sizeof(needle), "at offset %llu (",
                 (unsigned long long)(t->off + rec / t->per_block * t->per_block * 8));
        CHECK(daemon_log_contains(&d, needle), "the offset of the block is not "
              "named ('%s')", needle);
        /* --discard-state starts over it, the file kept aside. */
        const char *discard1[] = {"--discard-state", NULL};
        REQUIRE(daemon_restart(&d, cfg_text, discard1) == 0,
                "restart discarding a damaged file");
        daemon_kill(&d);
    }
    /* A newer format: refused, and the file left exactly as it was, for
     * the vramd that wrote it. */
    {
        static char newer[sizeof(good)];
        memcpy(newer, good, good_len);
        HDR(newer)->version = VD_STATE_VERSION + 1;
        VD_STATE_CHECK_AT(newer)->crc = vd_state_hdr_crc(newer);
        write_file(newer, good_len);
        struct stat before, after;
        REQUIRE(stat(state_path, &before) == 0, "stat");
        usleep(20000); /* an mtime set now would differ */
        d.exit_status = 0;
        CHECK(daemon_restart(&d, cfg_text, NULL) == -ECHILD && d.exit_status == 65,
              "a newer format was accepted (%d)", d.exit_status);
        char needle[128];
        snprintf(needle, sizeof(needle), "format version %u, this vramd reads "
                 "2 to %u; run the newer vramd again, or --discard-state",
                 VD_STATE_VERSION + 1, VD_STATE_VERSION);
        CHECK(daemon_log_contains(&d, needle), "a newer format: not said");
        REQUIRE(stat(state_path, &after) == 0, "the newer file is gone");
        CHECK(before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
                  before.st_mtim.tv_nsec == after.st_mtim.tv_nsec &&
                  before.st_ino == after.st_ino && after.st_size == (off_t)good_len,
              "the newer file was changed (mtime, inode or size)");
        static char back[sizeof(good)];
        FILE *nf = fopen(state_path, "rb");
        REQUIRE(nf, "open the newer file");
        size_t got = fread(back, 1, sizeof(back), nf);
        fclose(nf);
        CHECK(got == good_len && memcmp(back, newer, good_len) == 0,
              "the newer file's bytes changed");
    }
    /* A version 4 file, laid out as version 4 wrote it (no checksums, the
     * header's extension of version 5 not there): read, with a word. */
    {
        static char v4[sizeof(good)];
        memcpy(v4, good, good_len);
        HDR(v4)->version = 4;
        const struct vd_state_hdr_check *c = VD_STATE_CHECK_AT(good);
        HDR(v4)->next_client = ((const struct vd_state_counters *)(const void *)(
                                    good + c->off_counters))->next_client;
        memset(v4 + c->off_check, 0, good_len - c->off_check); /* checks, journal */
        memset(VD_STATE_CHECK_AT(v4), 0, sizeof(struct vd_state_hdr_check));
        write_file(v4, good_len);
        REQUIRE(daemon_restart(&d, cfg_text, NULL) == 0, "restart over a version 4 file");
        CHECK(daemon_log_contains(&d, "format version 4, which has no checksum"),
              "a version 4 file: not said");
        cJSON *st4 = daemon_status(&d);
        CHECK_EQ_U(status_dev(st4, 0, "quarantined_bytes"), 4 * 2 * MIB);
        CHECK(strcmp(gone_name(st4), "holder") == 0, "a version 4 holder named '%s'",
              gone_name(st4));
        cJSON_Delete(st4);
        daemon_kill(&d);
    }

    /* Another user's file, and a link. */
    write_file(good, good_len);
    REQUIRE(chown(state_path, 12345, 12345) == 0, "chown");
    d.exit_status = 0;
    CHECK(daemon_restart(&d, cfg_text, NULL) == -ECHILD && d.exit_status == 65,
          "another user's state file was accepted (%d)", d.exit_status);
    CHECK(daemon_log_contains(&d, "not a regular file of this user"),
          "another user's file: not said");
    unlink(state_path);
    char elsewhere[300];
    snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", d.dir);
    f = fopen(elsewhere, "w");
    fwrite(good, 1, good_len, f);
    fclose(f);
    REQUIRE(symlink(elsewhere, state_path) == 0, "symlink");
    d.exit_status = 0;
    CHECK(daemon_restart(&d, cfg_text, NULL) == -ECHILD && d.exit_status == 65,
          "a linked state file was accepted (%d)", d.exit_status);
    CHECK(daemon_log_contains(&d, "is a symbolic link"), "a link: not said");
    unlink(state_path);

    /* The good file: the engine's memory is still its own, and the gone
     * client keeps the name it said hello with. */
    write_file(good, good_len);
    REQUIRE(daemon_restart(&d, cfg_text, NULL) == 0, "restart over the good file");
    cJSON *st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "quarantined_bytes"), 4 * 2 * MIB);
    CHECK(strcmp(gone_name(st), "holder") == 0, "the gone client is named '%s'",
          gone_name(st));
    cJSON_Delete(st);
    daemon_kill(&d);

    /* A version 2 file, from before names (an upgrade over live engines):
     * read as before, the memory still the engine's, no name. */
    static char old[sizeof(good)];
    memcpy(old, good, good_len);
    struct vd_state_hdr *oh = HDR(old);
    oh->version = VD_STATE_VERSION_NO_NAMES;
    /* Without format 5's header additions, as a real version 2 file: with
     * them, and their checksum intact, it reads as a damaged format 5
     * file (format.c), which vramd refuses. */
    memset(old + sizeof(struct vd_state_hdr), 0,
           VD_STATE_HDR_V5_BYTES - sizeof(struct vd_state_hdr));
    for (uint32_t i = 0; i < oh->nholders; i++)
        memmove(old + oh->off_holders + (size_t)i * VD_STATE_HOLDER_V2_BYTES,
                old + oh->off_holders + (size_t)i * sizeof(struct vd_state_holder),
                VD_STATE_HOLDER_V2_BYTES);
    write_file(old, good_len);
    REQUIRE(daemon_restart(&d, cfg_text, NULL) == 0, "restart over a version 2 file");
    st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "quarantined_bytes"), 4 * 2 * MIB);
    CHECK(strcmp(gone_name(st), "") == 0, "a version 2 holder named '%s'",
          gone_name(st));
    cJSON_Delete(st);
    daemon_kill(&d);

    /* The operator's choice: discard it (kept aside), with a warning. */
    write_file(good, good_len);
    const char *discard[] = {"--discard-state", NULL};
    REQUIRE(daemon_restart(&d, cfg_text, discard) == 0, "restart discarding");
    CHECK(daemon_log_contains(&d, "discarded as asked"), "no warning");
    char aside[300];
    snprintf(aside, sizeof(aside), "%s.discarded", state_path);
    CHECK(access(aside, F_OK) == 0, "the discarded file was not kept");
    st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "quarantined_bytes"), 0);
    cJSON_Delete(st);
    rv_send(rv.to_child[1], 1);
    wait_child(eng);
    struct attack_base b;
    attack_baseline(&d, &b);
    attack_after(&d, &b, "state file attacks", 4096);
    daemon_stop(&d);
    return check_report("test_attack_state");
}
