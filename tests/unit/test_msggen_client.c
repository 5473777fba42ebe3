/* SPDX-License-Identifier: Apache-2.0 */
/* vram_msggen's libvram calls (gen/vc_stubs.c), from a request's "client":
 * the parameters in args' order, an optional field sent with its has_
 * flag, a required string checked for NULL, the reply's numbers copied
 * out on success; and the refusals of what a generated call cannot do
 * (arrays, objects, handles, strings out, a required field left out, a
 * name that is not public or not a field). Also a message added by a later
 * version, whose fields came with it. Runs the real vram_msggen (argv[1])
 * on small catalogues. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/check.h"

static const char *msggen;
static char dir[] = "/tmp/vram-msggen-client-XXXXXX";

/* Runs vram_msggen on the catalogue text: its exit status, its stderr in
 * err, and OUTDIR/name (when it ran) in out. */
static int gen(const char *text, const char *name, char *out, size_t outlen,
               char *err, size_t errlen)
{
    char cat[200], log[200], path[300];
    snprintf(cat, sizeof(cat), "%s/cat.json", dir);
    snprintf(log, sizeof(log), "%s/err", dir);
    FILE *f = fopen(cat, "w");
    if (!f)
        return -1;
    fputs(text, f);
    fclose(f);
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s/out' && mkdir '%s/out' && '%s' '%s' '%s/out' 2>'%s'",
             dir, dir, msggen, cat, dir, log);
    int st = system(cmd);
    f = fopen(log, "r");
    size_t n = f ? fread(err, 1, errlen - 1, f) : 0;
    err[n] = '\0';
    if (f)
        fclose(f);
    snprintf(path, sizeof(path), "%s/out/%s", dir, name);
    f = fopen(path, "r");
    n = f ? fread(out, 1, outlen - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define HEAD "{\"protocol_version\": 2, \"types\": {\"pair\": {\"fields\": {" \
             "\"x\": {\"type\": \"u32\"}}}}, \"requests\": {\"sum\": {"
#define FIELDS "\"fields\": {\"a\": {\"type\": \"u32\", \"required\": true}," \
               " \"b\": {\"type\": \"u64\", \"required\": true}," \
               " \"s\": {\"type\": \"string\", \"required\": true}," \
               " \"o\": {\"type\": \"u32\"}}, "
#define TAIL "}}, \"events\": {}, \"errors\": {\"EIO\": \"x\"}}"

static void expect_refused(const char *what, const char *text, const char *needle)
{
    static char out[1 << 16];
    char err[1024];
    int st = gen(text, "vc_stubs.c", out, sizeof(out), err, sizeof(err));
    CHECK(st == 1 && strstr(err, needle), "%s: status %d, said: %s", what, st, err);
}

static void generated(void)
{
    static char out[1 << 16];
    char err[1024];
    int st = gen(HEAD "\"client\": {\"function\": \"vram_x_sum\", \"args\": [\"b\", \"a\", \"s\", \"o\"]}, "
                 FIELDS "\"reply\": {\"r\": {\"type\": \"u64\", \"required\": true},"
                 " \"k\": {\"type\": \"i64\"}}" TAIL,
                 "vc_stubs.c", out, sizeof(out), err, sizeof(err));
    CHECK(st == 0, "a good client: status %d: %s", st, err);
    const char *want[] = {
        "int vram_x_sum(vram_client *c, uint64_t b, uint32_t a, const char *s, "
        "uint32_t o, uint64_t *r_out, int64_t *k_out)\n",
        "struct vw_req_sum m = {.b = b, .a = a, .s = s, .has_o = true, .o = o};",
        "    if (!s)\n        return vc_leave(c, vc_set_error(c, -EINVAL, \"no s\"));\n",
        "int e = vc_call(c, VW_REQ_SUM, &m, &rep, NULL);",
        "    if (e == 0 && r_out)\n        *r_out = rep.r;\n",
        "    if (e == 0 && k_out)\n        *k_out = rep.k;\n",
        "    return vc_leave(c, e);\n",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        CHECK(strstr(out, want[i]), "vc_stubs.c lacks: %s\n-- it is:\n%s", want[i], out);
    CHECK(strstr(out, "vc_enter(c);") < strstr(out, "if (!s)"), "entered after the check");

    /* The default: every field, in the catalogue's order; without a reply,
     * no out and no reply struct. A request without "client" has none. */
    st = gen(HEAD "\"client\": {\"function\": \"vram_x_sum\"}, " FIELDS "\"reply\": {}},"
             " \"other\": {\"fields\": {}, \"reply\": {}" TAIL,
             "vc_stubs.c", out, sizeof(out), err, sizeof(err));
    CHECK(st == 0, "defaults: status %d: %s", st, err);
    CHECK(strstr(out, "int vram_x_sum(vram_client *c, uint32_t a, uint64_t b, const char *s, "
                      "uint32_t o)\n"), "the default order: %s", out);
    CHECK(strstr(out, "vc_call(c, VW_REQ_SUM, &m, NULL, NULL)") && !strstr(out, "struct vw_rep_"),
          "a call without a reply: %s", out);
    CHECK(!strstr(out, "OTHER"), "a request without client got a call: %s", out);

    /* A message of version 2: its fields are of version 2 with it. */
    st = gen("{\"protocol_version\": 2, \"types\": {}, \"requests\": {\"late\": {"
             "\"since\": 2, \"fields\": {\"v\": {\"type\": \"u32\", \"required\": true}},"
             " \"reply\": {}" TAIL,
             "vram_msg.c", out, sizeof(out), err, sizeof(err));
    CHECK(st == 0, "a message of version 2: status %d: %s", st, err);
    CHECK(strstr(out, "offsetof(struct vw_req_late, v), .has_off = UINT32_MAX, .since = 2}"),
          "its field's version is not its message's: %s", out);
}

static void refused(void)
{
    expect_refused("an array argument",
                   HEAD "\"client\": {\"function\": \"vram_x_sum\"}, \"fields\": {\"l\":"
                   " {\"type\": \"array\", \"items\": \"u32\"}}, \"reply\": {}" TAIL,
                   "write this call by hand");
    expect_refused("an object argument",
                   HEAD "\"client\": {\"function\": \"vram_x_sum\"}, \"fields\": {\"p\":"
                   " {\"type\": \"pair\"}}, \"reply\": {}" TAIL,
                   "write this call by hand");
    expect_refused("a handle argument",
                   HEAD "\"client\": {\"function\": \"vram_x_sum\"}, \"fields\": {\"h\":"
                   " {\"type\": \"handle\"}}, \"reply\": {}" TAIL,
                   "write this call by hand");
    expect_refused("a string out",
                   HEAD "\"client\": {\"function\": \"vram_x_sum\"}, \"fields\": {},"
                   " \"reply\": {\"t\": {\"type\": \"string\"}}" TAIL,
                   "takes numbers only");
    expect_refused("a required field left out",
                   HEAD "\"client\": {\"function\": \"vram_x_sum\", \"args\": [\"a\", \"s\"]}, "
                   FIELDS "\"reply\": {}" TAIL,
                   "sum.b: required, so client.args must name it");
    expect_refused("an argument that is no field",
                   HEAD "\"client\": {\"function\": \"vram_x_sum\", \"args\": [\"zz\"]}, "
                   FIELDS "\"reply\": {}" TAIL,
                   "names zz, not a field of its request");
    expect_refused("a field twice",
                   HEAD "\"client\": {\"function\": \"vram_x_sum\", \"args\":"
                   " [\"a\", \"b\", \"s\", \"a\"]}, " FIELDS "\"reply\": {}" TAIL,
                   "names a twice");
    expect_refused("a reply field not copied out",
                   HEAD "\"client\": {\"function\": \"vram_x_sum\", \"out\": []}, \"fields\": {},"
                   " \"reply\": {\"r\": {\"type\": \"u64\"}}" TAIL,
                   "leaves reply fields out");
    expect_refused("a name that is not public",
                   HEAD "\"client\": {\"function\": \"sum\"}, \"fields\": {}, \"reply\": {}" TAIL,
                   "a public name");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_msggen_client VRAM_MSGGEN\n");
        return 2;
    }
    msggen = argv[1];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    generated();
    refused();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_msggen_client: could not remove %s\n", dir);
    return check_report("test_msggen_client");
}
