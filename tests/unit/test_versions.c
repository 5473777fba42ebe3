/* SPDX-License-Identifier: Apache-2.0 */
/* Protocol versions in the runtime and the generator: a field added by a
 * later version is neither written to nor read from a connection of an
 * earlier one; an error code of a later version goes to such a peer as its
 * fallback; and vram_msggen refuses a catalogue that would break an older
 * peer (a later field made required, a tuple grown, a later error without
 * a fallback). The generator's cases run the real vram_msggen (argv[1]) on
 * small catalogues. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/check.h"
#include "proto/errnames.h"
#include "proto/msg.h"
#include "gen/vram_msg.h"

/* ---- the runtime, over descriptors of our own ---------------------------- */

struct two {
    uint32_t a;
    bool has_b;
    uint32_t b;
};

static const struct vw_fdesc two_fields[] = {
    {.name = "a", .kind = VW_K_U32, .required = true,
     .off = offsetof(struct two, a), .has_off = UINT32_MAX},
    {.name = "b", .kind = VW_K_U32, .off = offsetof(struct two, b),
     .has_off = offsetof(struct two, has_b), .since = 2},
};
static const struct vw_tdesc two_t = {.name = "two", .size = sizeof(struct two),
                                        .fields = two_fields, .nfields = 2};

static char *encode_at(unsigned version, const struct two *in)
{
    struct vw_jw w = {0};
    struct vw_enc e = {.w = &w, .version = version};
    CHECK(vw_encode_object(&e, &two_t, in) == 0, "encode at %u", version);
    size_t n;
    return vw_jw_take(&w, &n);
}

static void fields(void)
{
    struct two in = {.a = 7, .has_b = true, .b = 9};
    char *v1 = encode_at(1, &in), *v2 = encode_at(2, &in), *v0 = encode_at(0, &in);
    CHECK(v1 && strcmp(v1, "{\"a\":7}") == 0, "version 1 wrote %s", v1);
    CHECK(v2 && strcmp(v2, "{\"a\":7,\"b\":9}") == 0, "version 2 wrote %s", v2);
    CHECK(v0 && strcmp(v0, v2) == 0, "the newest wrote %s", v0);
    free(v1);
    free(v2);
    free(v0);

    cJSON *o = cJSON_Parse("{\"a\":7,\"b\":9}");
    for (unsigned v = 0; v <= 3; v++) {
        struct vw_arena a = {0};
        struct vw_dec d = {.arena = &a, .version = v};
        struct two out;
        CHECK(vw_decode(&two_t, o, &out, &d) == 0, "decode at %u: %s", v, d.why);
        bool want_b = v == 0 || v >= 2;
        CHECK(out.a == 7 && out.has_b == want_b && out.b == (want_b ? 9u : 0u),
              "decoded at %u: a %u, has_b %d, b %u", v, out.a, out.has_b, out.b);
        vw_arena_free(&a);
    }
    /* A field a version does not have is unknown to it: even a malformed
     * one is ignored, as any unknown field. */
    cJSON_Delete(o);
    o = cJSON_Parse("{\"a\":7,\"b\":\"not a number\"}");
    struct vw_arena a = {0};
    struct vw_dec d = {.arena = &a, .version = 1};
    struct two out;
    CHECK(vw_decode(&two_t, o, &out, &d) == 0 && !out.has_b,
          "version 1 read a field of version 2: %s", d.why);
    d = (struct vw_dec){.arena = &a, .version = 2};
    CHECK(vw_decode(&two_t, o, &out, &d) == -EINVAL && strstr(d.why, "two.b"),
          "version 2 took a malformed b: %s", d.why);
    vw_arena_free(&a);
    cJSON_Delete(o);
}

static void catalogue(void)
{
    /* Every error of the catalogue is of a version this build speaks, and
     * a peer of the oldest is told it as it is, or as its fallback. */
    int n = 0;
    for (const struct vw_errdesc *e = vw_errdescs; e->name; e++, n++) {
        CHECK(e->since >= 1 && e->since <= VW_PROTOCOL_VERSION, "%s since %u",
              e->name, e->since);
        CHECK(e->since == 1 || e->fallback, "%s has no fallback", e->name);
    }
    CHECK(n > 10, "only %d errors", n);
    CHECK(strcmp(vw_error_name_at(-ENOENT, 1), "ENOENT") == 0, "ENOENT at 1");
    /* Every request and event is of a version from 1 to the newest. */
    for (int i = 0; i < VW_REQ_COUNT; i++)
        CHECK(vw_requests[i].since >= 1 &&
                  vw_requests[i].since <= VW_PROTOCOL_VERSION,
              "%s since %u", vw_requests[i].name, vw_requests[i].since);
    /* hello's range, and status's schema, came with version 2. */
    const struct vw_fdesc *f =
        vw_field(vw_requests[VW_REQ_HELLO].req, "min_version");
    CHECK(f && f->since == 2 && !f->required, "hello.min_version");
    f = vw_field(vw_requests[VW_REQ_STATUS].rep, "schema");
    CHECK(f && f->since == 2, "status.schema");
}

/* ---- the generator ------------------------------------------------------- */

static const char *msggen;
static char dir[] = "/tmp/vram-versions-XXXXXX";

/* Runs vram_msggen on the catalogue text; its exit status, its stderr in
 * err. */
static int gen(const char *text, char *err, size_t errlen)
{
    char cat[200], out[200], log[200];
    snprintf(cat, sizeof(cat), "%s/cat.json", dir);
    snprintf(out, sizeof(out), "%s/out", dir);
    snprintf(log, sizeof(log), "%s/err", dir);
    FILE *f = fopen(cat, "w");
    if (!f)
        return -1;
    fputs(text, f);
    fclose(f);
    {
        char cmd[2048];
        snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && '%s' '%s' '%s' 2>'%s'", out,
                 msggen, cat, out, log);
        int st = system(cmd);
        f = fopen(log, "r");
        size_t n = f ? fread(err, 1, errlen - 1, f) : 0;
        err[n] = '\0';
        if (f)
            fclose(f);
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
}

#define HEAD "{\"protocol_version\": 2, \"oldest_version\": 1, \"types\": {"
#define MID "}, \"requests\": {\"ping\": {\"fields\": {"
#define TAIL "}, \"reply\": {}}}, \"events\": {}, \"errors\": {"

static void expect_refused(const char *what, const char *text, const char *needle)
{
    char err[1024];
    int st = gen(text, err, sizeof(err));
    CHECK(st == 1 && strstr(err, needle), "%s: status %d, said: %s", what, st, err);
}

static void generator(void)
{
    char err[1024];
    /* A catalogue whose version 2 adds a field, a message and an error. */
    int st = gen(HEAD MID "\"a\": {\"type\": \"u32\", \"required\": true},"
                 " \"b\": {\"type\": \"u32\", \"since\": 2}" TAIL
                 "\"EIO\": \"the backend failed\","
                 " \"ENOTSUP\": {\"doc\": \"new\", \"since\": 2, \"fallback\": \"EIO\"}}}",
                 err, sizeof(err));
    CHECK(st == 0, "a good catalogue: status %d: %s", st, err);
    char path[256];
    snprintf(path, sizeof(path), "%s/out/vram_msg.c", dir);
    FILE *f = fopen(path, "r");
    static char src[1 << 16];
    size_t n = f ? fread(src, 1, sizeof(src) - 1, f) : 0;
    src[n] = '\0';
    if (f)
        fclose(f);
    CHECK(strstr(src, "{\"ENOTSUP\", \"new\", 2, \"EIO\"}"), "the error's version "
          "and fallback are not in the tables");
    CHECK(strstr(src, ".since = 2"), "the field's version is not in the tables");

    expect_refused("a later field made required",
                   HEAD MID "\"b\": {\"type\": \"u32\", \"since\": 2, \"required\": true}"
                   TAIL "\"EIO\": \"x\"}}",
                   "cannot be required");
    expect_refused("a tuple grown",
                   HEAD "\"t\": {\"tuple\": true, \"fields\": {\"x\": {\"type\": \"u32\"},"
                   " \"y\": {\"type\": \"u32\", \"since\": 2}}}" MID TAIL "\"EIO\": \"x\"}}",
                   "positional");
    expect_refused("a version beyond the catalogue's",
                   HEAD MID "\"b\": {\"type\": \"u32\", \"since\": 3}" TAIL "\"EIO\": \"x\"}}",
                   "since must be a protocol version from 1 to 2");
    expect_refused("a later error without a fallback",
                   HEAD MID TAIL "\"EIO\": \"x\", \"ENOTSUP\": {\"doc\": \"y\", \"since\": 2}}}",
                   "needs a fallback");
    expect_refused("a fallback no older",
                   HEAD MID TAIL "\"EIO\": {\"doc\": \"x\", \"since\": 2, \"fallback\": \"ENOTSUP\"},"
                   " \"ENOTSUP\": {\"doc\": \"y\", \"since\": 2, \"fallback\": \"EIO\"}}}",
                   "not older");
    expect_refused("an oldest version past the newest",
                   "{\"protocol_version\": 2, \"oldest_version\": 3, \"types\": {"
                   MID TAIL "\"EIO\": \"x\"}}",
                   "oldest_version");
}

int main(int argc, char **argv)
{
    fields();
    catalogue();
    if (argc > 1) {
        msggen = argv[1];
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            return 1;
        }
        generator();
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "test_versions: could not remove %s\n", dir);
    } else {
        printf("test_versions: no vram_msggen given: its cases are left out\n");
    }
    return check_report("test_versions");
}
