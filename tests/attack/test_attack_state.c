/* SPDX-License-Identifier: Apache-2.0 */
/* Attacks on the state file: a crafted, truncated, foreign or inconsistent
 * file never crashes vramd and is never silently dropped (a newcomer could
 * be granted what a live engine maps): vramd refuses to start, names the
 * file and what is wrong, and exits with status 65, which the systemd unit
 * does not restart on. --discard-state is the operator's way past it. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attack.h"
#include "format.h"

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

/* The good file with one change, and vramd's answer to it. */
static void refused(struct daemon *d, const char *what, const char *needle,
                    void (*spoil)(char *buf, size_t *len))
{
    static char buf[sizeof(good)];
    memcpy(buf, good, good_len);
    size_t len = good_len;
    spoil(buf, &len);
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

#define HDR(buf) ((struct vd_state_hdr *)(buf))

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
