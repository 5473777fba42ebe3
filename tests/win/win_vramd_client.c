/* SPDX-License-Identifier: Apache-2.0 */
/* An engine-style client of the real vramd.exe, started by test_win_vramd
 * as a process of its own: built from vram.h and linked against
 * libvram.dll.a only. Connects to the pipe named on its command line,
 * registers an ad-hoc stage, grows a fixed region by a few host chunks
 * (sections vramd pushed into this process, their values inline in the
 * reply), writes and reads them through the region's slots, shrinks and
 * releases (or, with argv[3] "hold", exits holding them; with argv[3]
 * "refused" and argv[4] an errno, expects the connection to be refused with
 * it, and a message that says so; with argv[3] "resume" [argv[4] "thread"],
 * holds the chunks until vramd is restarted under it, then checks that the
 * library connected again and took them back: see resume() below). Exits 0
 * when
 * every check passed. argv[2], when given, is a byte
 * the chunks are filled with (the second client checks it does not see the
 * first one's bytes: chunks come back zeroed or not at all). */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vram.h>

#include "tests/check.h"

#define NCHUNKS 3

/* "weights-write": makes, fills with fill and seals a weight set of 4 MiB
 * (two 2 MiB allocations), then closes it (cached). "weights-read": opens
 * it as a reader: sealed, the writer's bytes, mapped read-only; and no
 * handle in this process can map any of its sections writable, whatever
 * it asks (vramd pushed them with reading access alone). "weights-drop":
 * an admin's drop of it. */
static int weights(vram_client *c, const char *mode, unsigned fill)
{
    uint8_t key[VRAM_WEIGHTS_KEY_BYTES] = {(uint8_t)fill, 0x17};
    const uint64_t bytes = 4u << 20;
    struct vram_weights_info w;
    if (strcmp(mode, "drop") == 0) {
        /* the end of the test: nothing left for vramd's holder to keep */
        int e = vram_admin_weights_drop(c, "win/model");
        CHECK(e == 0, "drop: %d (%s)", e, vram_client_last_error(c));
        vram_client_close(c);
        return check_report("win_vramd_client");
    }
    bool writer = strcmp(mode, "write") == 0;
    int e = vram_weights_open(c, "win/model", 0, bytes, key,
                              writer ? 0 : VRAM_WEIGHTS_NOWAIT, &w);
    REQUIRE(e == 0, "weights_open: %d (%s)", e, vram_client_last_error(c));
    unsigned char *p = (unsigned char *)(uintptr_t)w.base;
    if (writer) {
        CHECK(w.writer && !w.sealed, "the first open is not the writer");
        memset(p, (int)fill, bytes);
        e = vram_weights_seal(c, w.id);
        CHECK(e == 0, "seal: %d (%s)", e, vram_client_last_error(c));
    } else {
        CHECK(!w.writer && w.sealed, "the reader's open: writer %d sealed %d",
              w.writer, w.sealed);
        size_t bad = 0;
        for (uint64_t i = 0; i < bytes; i++)
            bad += p[i] != (unsigned char)fill;
        CHECK(bad == 0, "%zu bytes of the set differ from the writer's", bad);
        MEMORY_BASIC_INFORMATION m;
        CHECK(VirtualQuery(p, &m, sizeof(m)) && m.Protect == PAGE_READONLY,
              "the set is mapped with protection 0x%lx", (unsigned long)m.Protect);
        /* Every handle value: the set's sections map for reading (their
         * first bytes are the writer's), never for writing. */
        int found = 0, writable = 0;
        for (uintptr_t h = 4; h < 65536; h += 4) {
            void *r = MapViewOfFile((HANDLE)h, FILE_MAP_READ, 0, 0, 65536);
            if (!r)
                continue;
            bool ours = ((unsigned char *)r)[0] == (unsigned char)fill &&
                        ((unsigned char *)r)[65535] == (unsigned char)fill;
            UnmapViewOfFile(r);
            if (!ours)
                continue;
            found++;
            void *wv = MapViewOfFile((HANDLE)h, FILE_MAP_WRITE, 0, 0, 65536);
            if (wv) {
                writable++;
                UnmapViewOfFile(wv);
            }
        }
        CHECK(found == 2 && writable == 0, "of the set's sections in this "
              "process, %d found (want 2), %d mappable writable (want 0)",
              found, writable);
        printf("win_vramd_client: read the sealed set: %d sections, none "
               "writable\n", found);
    }
    CHECK(vram_weights_close(c, w.id) == 0, "close: %s", vram_client_last_error(c));
    vram_client_close(c);
    return check_report("win_vramd_client");
}

/* What the event callback heard (on the event thread, in "thread" mode). */
static volatile LONG reconnected, kept_chunks = -1, lost_chunks = -1;

static void on_event(void *user, const struct vram_event *ev)
{
    (void)user;
    if (ev->type == VRAM_EVENT_RECONNECTED) {
        InterlockedExchange(&kept_chunks, (LONG)ev->nchunks);
        InterlockedExchange(&lost_chunks, (LONG)ev->lost_chunks);
        InterlockedIncrement(&reconnected);
    }
}

/* "resume": the chunks are held while the test ends vramd and starts it
 * again over its state file; the file $VRAM_TEST_GO, once it exists,
 * says the new one listens. Then the library must connect again by itself
 * (on the next call, or on its event thread, which meets the broken pipe
 * first), say what it holds, and get it all back: the same ids at the same
 * slots with the bytes written before; then a shrink and a grow through
 * the new connection. */
static int resume(vram_client *c, uint32_t region, uint32_t stage, uint64_t chunk,
                  const uint64_t *ids, unsigned fill, bool thread)
{
    const char *go = getenv("VRAM_TEST_GO");
    REQUIRE(go && *go, "VRAM_TEST_GO names no file");
    vram_handle before = vram_client_fd(c);
    printf("win_vramd_client: holding %u chunks for a restart (fill 0x%x)\n", NCHUNKS, fill);
    fflush(stdout);
    /* $VRAM_TEST_HELD, when set, is a file made to say so (for a test whose
     * clients' output is not in a file it can read). */
    const char *held = getenv("VRAM_TEST_HELD");
    if (held && *held) {
        HANDLE hf = CreateFileA(held, GENERIC_WRITE, 0, NULL, CREATE_ALWAYS, 0, NULL);
        if (hf != INVALID_HANDLE_VALUE)
            CloseHandle(hf);
    }
    int t = 0;
    while (GetFileAttributesA(go) == INVALID_FILE_ATTRIBUTES && t < 60000) {
        Sleep(50);
        t += 50;
    }
    REQUIRE(t < 60000, "no word that vramd was started again (%s)", go);
    if (thread) {
        /* The event thread meets the broken pipe and connects again. */
        for (t = 0; !reconnected && t < 40000; t += 20)
            Sleep(20);
        CHECK(reconnected == 1, "the event thread did not connect again (%ld)",
              (long)reconnected);
    }
    CHECK(vram_client_ping(c) == 0, "ping after the restart: %s", vram_client_last_error(c));
    CHECK(reconnected == 1, "RECONNECTED told %ld times", (long)reconnected);
    CHECK(kept_chunks == NCHUNKS && lost_chunks == 0, "resume kept %ld, lost %ld",
          (long)kept_chunks, (long)lost_chunks);
    CHECK_EQ_U(vram_client_chunks_held(c), NCHUNKS);
    printf("win_vramd_client: reconnected (%s), connection %lld then %lld\n",
           thread ? "event thread" : "on the next call", (long long)before,
           (long long)vram_client_fd(c));
    for (uint32_t i = 0; i < NCHUNKS; i++) {
        uint64_t id = 0;
        CHECK(vram_region_chunk(c, region, 0, i, &id) == 0 && id == ids[i],
              "slot %u holds chunk %llu after the resume, not %llu", i,
              (unsigned long long)id, (unsigned long long)ids[i]);
        uint8_t *s = vram_region_slot(c, region, 0, i);
        CHECK(s && s[0] == (uint8_t)(fill + i) && s[chunk - 1] == (uint8_t)(fill + i),
              "slot %u lost its bytes over the restart: 0x%x", i, s ? s[0] : 0);
    }
    /* The new connection takes back and grants: the last slot's chunk
     * given back, and another pushed in through it. */
    int e = vram_region_shrink(c, region, 1);
    CHECK(e == 0, "shrink after the resume: %d (%s)", e, vram_client_last_error(c));
    e = vram_region_grow(c, region, 1);
    CHECK(e == 0, "grow after the resume: %d (%s)", e, vram_client_last_error(c));
    /* A chunk id may be 0 (device 0's first chunk): the slot holds one when
     * vram_region_chunk says 0, and it is not one the other slots hold. */
    uint64_t nid = UINT64_MAX;
    int in_slot = vram_region_chunk(c, region, 0, NCHUNKS - 1, &nid);
    CHECK(in_slot == 0, "the last slot holds no chunk after the grow: %d (%s)", in_slot,
          vram_client_last_error(c));
    for (uint32_t i = 0; in_slot == 0 && i + 1 < NCHUNKS; i++)
        CHECK(nid != ids[i], "the grow put chunk %llu, slot %u's, in the last slot too",
              (unsigned long long)nid, i);
    uint8_t *sl = vram_region_slot(c, region, 0, NCHUNKS - 1);
    CHECK(e == 0 && in_slot == 0 && sl && sl[0] == 0 && sl[chunk - 1] == 0,
          "the chunk granted after the resume is not zero");
    if (e == 0 && in_slot == 0 && sl)
        memset(sl, 0x7e, chunk);
    CHECK_EQ_U(vram_client_chunks_held(c), NCHUNKS);
    e = vram_region_release(c, region);
    CHECK(e == 0, "release after the resume: %d (%s)", e, vram_client_last_error(c));
    e = vram_stage_release(c, stage);
    CHECK(e == 0, "stage release after the resume: %d (%s)", e, vram_client_last_error(c));
    CHECK_EQ_U(vram_client_chunks_held(c), 0);
    vram_client_close(c);
    return check_report("win_vramd_client");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: win_vramd_client PIPE [FILL [hold | refused ERRNO | "
                "resume [thread]]]\n");
        return 2;
    }
    unsigned fill = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : 0x5a;
    char err[512] = "";
    struct vram_client_options o = {.name = "wine-engine", .error = err,
                                    .error_len = sizeof(err)};
    vram_client *c = NULL;
    int e = vram_client_connect(argv[1], &o, &c);
    /* "refused ERRNO": the connection must fail with -ERRNO, saying why. */
    if (argc > 4 && strcmp(argv[3], "refused") == 0) {
        int want = atoi(argv[4]);
        CHECK(e == -want && c == NULL, "connect to %s gave %d, not %d: %s", argv[1], e,
              -want, err);
        CHECK(strstr(err, argv[1]) && strstr(err, "refusing"),
              "the refusal names the pipe and says it refuses: %s", err);
        printf("win_vramd_client: refused as expected: %s\n", err);
        if (c)
            vram_client_close(c);
        return check_report("win_vramd_client");
    }
    REQUIRE(e == 0 && c, "connect to vramd at %s: %d (%s)", argv[1], e, err);
    bool resuming = argc > 3 && strcmp(argv[3], "resume") == 0;
    bool thread = resuming && argc > 4 && strcmp(argv[4], "thread") == 0;
    vram_client_set_event_callback(c, on_event, NULL);
    if (thread)
        REQUIRE(vram_client_start_event_thread(c) == 0, "event thread: %s",
                vram_client_last_error(c));
    CHECK(vram_client_id(c) > 0, "client id %u", vram_client_id(c));
    CHECK(strcmp(vram_client_backend(c), "host") == 0, "backend %s",
          vram_client_backend(c));
    CHECK(vram_client_ping(c) == 0, "ping: %s", vram_client_last_error(c));
    if (argc > 3 && strncmp(argv[3], "weights-", 8) == 0)
        return weights(c, argv[3] + 8, fill);

    struct vram_device_info devs[4];
    int nd = vram_devices(c, devs, 4);
    CHECK(nd == 1, "devices: %d (%s)", nd, vram_client_last_error(c));
    uint64_t chunk = nd >= 1 ? devs[0].chunk_bytes : 0;
    REQUIRE(chunk && chunk % 65536 == 0, "chunk of %llu bytes",
            (unsigned long long)chunk);

    uint32_t stage = 0, region = 0;
    e = vram_stage_register_adhoc(c, 0, 0, 0, &stage);
    REQUIRE(e == 0, "register: %d (%s)", e, vram_client_last_error(c));
    e = vram_region_create(c, stage, VRAM_REGION_FIXED, NCHUNKS * chunk, 1, &region);
    REQUIRE(e == 0, "region: %d (%s)", e, vram_client_last_error(c));
    uint8_t *s0 = vram_region_slot(c, region, 0, 0);
    REQUIRE(s0 != NULL, "no slot 0");
    MEMORY_BASIC_INFORMATION mbi;
    CHECK(VirtualQuery(s0, &mbi, sizeof(mbi)) && mbi.State == MEM_RESERVE,
          "the region is not reserved before it is grown (state 0x%lx)", mbi.State);

    /* Two grows: one chunk, then the rest, each a reply whose sections
     * vramd pushed into this process. */
    e = vram_region_grow(c, region, 1);
    REQUIRE(e == 0, "grow 1: %d (%s)", e, vram_client_last_error(c));
    e = vram_region_grow(c, region, NCHUNKS - 1);
    REQUIRE(e == 0, "grow 2: %d (%s)", e, vram_client_last_error(c));
    CHECK_EQ_U(vram_client_chunks_held(c), NCHUNKS);
    uint64_t ids[NCHUNKS];
    for (uint32_t i = 0; i < NCHUNKS; i++) {
        ids[i] = 0;
        CHECK(vram_region_chunk(c, region, 0, i, &ids[i]) == 0, "slot %u holds no chunk", i);
        for (uint32_t k = 0; k < i; k++)
            CHECK(ids[k] != ids[i], "slots %u and %u hold chunk %llu", k, i,
                  (unsigned long long)ids[i]);
        uint8_t *s = vram_region_slot(c, region, 0, i);
        CHECK(s == s0 + i * chunk, "slot %u at %p", i, (void *)s);
        /* A chunk handed out again must not carry anyone's bytes. */
        CHECK(s[0] == 0 && s[chunk - 1] == 0 && s[chunk / 2] == 0,
              "slot %u is not zero: 0x%x 0x%x", i, s[0], s[chunk - 1]);
        memset(s, (int)(fill + i), chunk);
    }
    for (uint32_t i = 0; i < NCHUNKS; i++) {
        uint8_t *s = vram_region_slot(c, region, 0, i);
        CHECK(s[0] == (uint8_t)(fill + i) && s[chunk - 1] == (uint8_t)(fill + i),
              "slot %u reads 0x%x", i, s[0]);
    }
    /* "hold": end here, holding the chunks (no release, no close): vramd
     * must keep them quarantined until this process is gone, which it
     * learns from the process handle (platform/win32/watch_win32.c). */
    if (resuming)
        return resume(c, region, stage, chunk, ids, fill, thread);
    if (argc > 3 && strcmp(argv[3], "hold") == 0) {
        printf("win_vramd_client: holding %u chunks, exiting\n", NCHUNKS);
        fflush(stdout);
        ExitProcess(check_failures ? 1 : 0);
    }
    char *json = NULL;
    e = vram_status_json(c, &json);
    CHECK(e == 0 && json && strstr(json, "\"devices\""), "status: %d (%s)", e,
          vram_client_last_error(c));
    vram_free(json);

    e = vram_region_shrink(c, region, 1);
    CHECK(e == 0, "shrink: %d (%s)", e, vram_client_last_error(c));
    CHECK_EQ_U(vram_client_chunks_held(c), NCHUNKS - 1);
    uint8_t *last = vram_region_slot(c, region, 0, NCHUNKS - 1);
    CHECK(last && VirtualQuery(last, &mbi, sizeof(mbi)) && mbi.State != MEM_COMMIT,
          "the shrunk slot is still mapped (state 0x%lx)", mbi.State);
    e = vram_region_release(c, region);
    CHECK(e == 0, "release: %d (%s)", e, vram_client_last_error(c));
    CHECK_EQ_U(vram_client_chunks_held(c), 0);
    e = vram_stage_release(c, stage);
    CHECK(e == 0, "stage release: %d (%s)", e, vram_client_last_error(c));
    CHECK(vram_client_ping(c) == 0, "ping after release: %s", vram_client_last_error(c));
    vram_client_close(c);
    return check_report("win_vramd_client");
}
