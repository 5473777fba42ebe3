/* The message catalogue (proto/messages.json, compiled in) and the checks
 * built on it; errno names; human sizes. Every request and event of the
 * catalogue is exercised, so a message added to the file is tested too. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

/* check.h's REQUIRE evaluates its condition twice; MUST evaluates it once,
 * for conditions that call something (socketpair, queue, flush...). */
#define MUST(cond, ...)                                                        \
    do {                                                                       \
        int must_failures_ = check_failures;                                   \
        CHECK(cond, __VA_ARGS__);                                              \
        if (check_failures != must_failures_)                                  \
            exit(1);                                                           \
    } while (0)
#include "frame.h"
#include "message.h"
#include "wire.h"
#include "units.h"

static const char *const known_types[] = {"integer", "boolean", "string",
                                          "array", "object"};

static bool known_type(const char *t)
{
    for (size_t i = 0; i < sizeof(known_types) / sizeof(known_types[0]); i++)
        if (strcmp(t, known_types[i]) == 0)
            return true;
    return false;
}

/* A valid value of a catalogue type. */
static cJSON *good_value(const char *type)
{
    if (strcmp(type, "integer") == 0)
        return cJSON_CreateNumber(3);
    if (strcmp(type, "boolean") == 0)
        return cJSON_CreateTrue();
    if (strcmp(type, "string") == 0)
        return cJSON_CreateString("kv");
    if (strcmp(type, "array") == 0)
        return cJSON_CreateArray();
    return cJSON_CreateObject();
}

/* Values that are not of the type (NULL-terminated, freshly made). */
static int bad_values(const char *type, cJSON **out)
{
    int n = 0;
    out[n++] = cJSON_CreateNull();
    if (strcmp(type, "integer") == 0) {
        out[n++] = cJSON_CreateString("3");
        out[n++] = cJSON_CreateNumber(-1);
        out[n++] = cJSON_CreateNumber(1.5);
        out[n++] = cJSON_CreateNumber(1e300); /* beyond exact doubles */
        out[n++] = cJSON_CreateTrue();
        out[n++] = cJSON_CreateArray();
    } else if (strcmp(type, "boolean") == 0) {
        out[n++] = cJSON_CreateNumber(1);
        out[n++] = cJSON_CreateString("true");
    } else if (strcmp(type, "string") == 0) {
        out[n++] = cJSON_CreateNumber(1);
        out[n++] = cJSON_CreateFalse();
        out[n++] = cJSON_CreateArray();
    } else if (strcmp(type, "array") == 0) {
        out[n++] = cJSON_CreateObject();
        out[n++] = cJSON_CreateString("[]");
        out[n++] = cJSON_CreateNumber(0);
    } else {
        out[n++] = cJSON_CreateArray();
        out[n++] = cJSON_CreateString("{}");
        out[n++] = cJSON_CreateNumber(0);
    }
    return n;
}

typedef int (*validate_fn)(const cJSON *, char *, size_t);

/* Builds a message of `name` with every field the spec lists (optional ones
 * too when all is set). */
static cJSON *build(const char *key, const char *name, const cJSON *spec,
                    bool all)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, key, name);
    if (strcmp(key, "type") == 0)
        cJSON_AddNumberToObject(m, "id", 1);
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(spec, "fields")) {
        if (!all && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "required")))
            continue;
        const char *t =
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "type"));
        cJSON_AddItemToObject(m, f->string, good_value(t ? t : "integer"));
    }
    return m;
}

static void check_section(const char *section, const char *key,
                          validate_fn validate, int *count)
{
    const cJSON *sec =
        cJSON_GetObjectItemCaseSensitive(vram_catalogue(), section);
    REQUIRE(cJSON_IsObject(sec), "catalogue has no '%s' object", section);
    const cJSON *spec;
    cJSON_ArrayForEach(spec, sec) {
        const char *name = spec->string;
        char why[256];
        (*count)++;
        const cJSON *fields = cJSON_GetObjectItemCaseSensitive(spec, "fields");
        CHECK(cJSON_IsObject(fields), "%s: no fields object", name);
        CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(spec, "doc")),
              "%s: no doc", name);
        const cJSON *f;
        cJSON_ArrayForEach(f, fields) {
            const char *t = cJSON_GetStringValue(
                cJSON_GetObjectItemCaseSensitive(f, "type"));
            /* An unknown type name would be checked as "any number". */
            CHECK(t && known_type(t), "%s.%s: type '%s' is not one of the "
                  "catalogue's types", name, f->string, t ? t : "(none)");
        }

        /* Required fields only, then every field: both pass. */
        for (int all = 0; all <= 1; all++) {
            cJSON *m = build(key, name, spec, all);
            why[0] = '\0';
            int r = validate(m, why, sizeof(why));
            CHECK(r == 0, "%s (%s fields): %d %s", name,
                  all ? "all" : "required", r, why);
            /* Unknown extra fields are tolerated (forward compatibility). */
            cJSON_AddStringToObject(m, "zz_future_field", "x");
            cJSON_AddItemToObject(m, "zz_future_obj", cJSON_CreateObject());
            r = validate(m, why, sizeof(why));
            CHECK(r == 0, "%s with unknown fields: %d %s", name, r, why);
            cJSON_Delete(m);
        }

        cJSON_ArrayForEach(f, fields) {
            const char *t = cJSON_GetStringValue(
                cJSON_GetObjectItemCaseSensitive(f, "type"));
            bool required =
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "required"));
            char quoted[128];
            snprintf(quoted, sizeof(quoted), "'%s'", f->string);

            if (required) {
                cJSON *m = build(key, name, spec, true);
                cJSON_DeleteItemFromObjectCaseSensitive(m, f->string);
                why[0] = '\0';
                int r = validate(m, why, sizeof(why));
                CHECK(r == -EINVAL, "%s without %s: %d", name, f->string, r);
                CHECK(strstr(why, quoted) != NULL,
                      "%s without %s: reason '%s' does not name it", name,
                      f->string, why);
                cJSON_Delete(m);
            } else {
                /* An optional field may be left out. */
                cJSON *m = build(key, name, spec, true);
                cJSON_DeleteItemFromObjectCaseSensitive(m, f->string);
                int r = validate(m, why, sizeof(why));
                CHECK(r == 0, "%s without optional %s: %d %s", name,
                      f->string, r, why);
                cJSON_Delete(m);
            }
            if (!t)
                continue;
            cJSON *bad[8];
            int nbad = bad_values(t, bad);
            for (int i = 0; i < nbad; i++) {
                cJSON *m = build(key, name, spec, true);
                char *shown = cJSON_PrintUnformatted(bad[i]);
                cJSON_ReplaceItemInObjectCaseSensitive(m, f->string, bad[i]);
                why[0] = '\0';
                int r = validate(m, why, sizeof(why));
                CHECK(r == -EINVAL, "%s.%s = %s (%s expected): %d", name,
                      f->string, shown, t, r);
                CHECK(strstr(why, quoted) != NULL,
                      "%s.%s = %s: reason '%s' does not name the field", name,
                      f->string, shown, why);
                cJSON_free(shown);
                cJSON_Delete(m);
            }
        }
    }
}

static void test_catalogue(void)
{
    const cJSON *cat = vram_catalogue();
    REQUIRE(cat != NULL, "proto/messages.json does not parse");
    CHECK(vram_catalogue() == cat, "catalogue parsed twice");
    cJSON *again = cJSON_Parse(vram_catalogue_text());
    CHECK(again != NULL && cJSON_Compare(again, cat, true),
          "catalogue text and parsed catalogue differ");
    cJSON_Delete(again);

    /* The file documents the same limits the code enforces. */
    uint64_t v = 0;
    CHECK(vram_json_u64(cat, "protocol_version", &v) == 0 &&
              v == VRAM_PROTOCOL_VERSION,
          "protocol_version %llu, code says %d", (unsigned long long)v,
          VRAM_PROTOCOL_VERSION);
    const cJSON *lim = cJSON_GetObjectItemCaseSensitive(cat, "limits");
    CHECK(vram_json_u64(lim, "max_payload_bytes", &v) == 0 &&
              v == VRAM_MAX_PAYLOAD,
          "max_payload_bytes %llu", (unsigned long long)v);
    CHECK(vram_json_u64(lim, "max_fds_per_frame", &v) == 0 &&
              v == VRAM_MAX_FDS_PER_FRAME,
          "max_fds_per_frame %llu", (unsigned long long)v);
    CHECK(vram_json_u64(lim, "max_requests_in_flight", &v) == 0 &&
              v == VRAM_MAX_REQUESTS_IN_FLIGHT,
          "max_requests_in_flight %llu", (unsigned long long)v);

    int nreq = 0, nev = 0;
    check_section("requests", "type", vram_msg_validate_request, &nreq);
    check_section("events", "event", vram_msg_validate_event, &nev);
    /* The messages issue 2 names must be there. */
    const char *must[] = {"hello", "stage_register", "region_create",
                          "region_grow", "region_release", "status"};
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(cat, "requests");
    for (size_t i = 0; i < sizeof(must) / sizeof(must[0]); i++)
        CHECK(cJSON_GetObjectItemCaseSensitive(req, must[i]) != NULL,
              "request '%s' missing from the catalogue", must[i]);
    CHECK(nreq >= 6 && nev >= 1, "%d requests, %d events", nreq, nev);
}

static void test_validate_envelope(void)
{
    char why[256];
    cJSON *m;
    int r;

    m = cJSON_Parse("{\"type\":\"no_such_message\",\"id\":1}");
    why[0] = '\0';
    r = vram_msg_validate_request(m, why, sizeof(why));
    CHECK(r == -ENOSYS, "unknown type: %d", r);
    CHECK(strstr(why, "no_such_message") != NULL, "reason '%s'", why);
    cJSON_Delete(m);

    /* An event name is not a request type and vice versa. */
    m = cJSON_Parse("{\"type\":\"recall\",\"id\":1}");
    CHECK(vram_msg_validate_request(m, why, sizeof(why)) == -ENOSYS,
          "event accepted as a request");
    cJSON_Delete(m);
    m = cJSON_Parse("{\"event\":\"status\"}");
    CHECK(vram_msg_validate_event(m, why, sizeof(why)) == -ENOSYS,
          "request accepted as an event");
    cJSON_Delete(m);

    const char *bad[] = {
        "{\"id\":1}",                /* no type */
        "{\"type\":7}",              /* type not a string */
        "{\"type\":null}",
        "[\"status\"]",              /* not an object */
        "\"status\"",
        "42",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        m = cJSON_Parse(bad[i]);
        REQUIRE(m != NULL, "test JSON %s", bad[i]);
        why[0] = '\0';
        r = vram_msg_validate_request(m, why, sizeof(why));
        CHECK(r == -EINVAL, "%s: %d", bad[i], r);
        CHECK(why[0] != '\0', "%s: no reason", bad[i]);
        cJSON_Delete(m);
    }
    why[0] = '\0';
    CHECK(vram_msg_validate_request(NULL, why, sizeof(why)) == -EINVAL,
          "NULL message");

    /* Names are case-sensitive: "Hello" is not "hello". */
    m = cJSON_Parse("{\"type\":\"Hello\",\"version\":1}");
    CHECK(vram_msg_validate_request(m, why, sizeof(why)) == -ENOSYS,
          "type matched case-insensitively");
    cJSON_Delete(m);
    m = cJSON_Parse("{\"type\":\"hello\",\"Version\":1}");
    CHECK(vram_msg_validate_request(m, why, sizeof(why)) == -EINVAL,
          "field matched case-insensitively");
    cJSON_Delete(m);
}

static void test_errno_names(void)
{
    /* Every code the catalogue documents round-trips. */
    const cJSON *errs =
        cJSON_GetObjectItemCaseSensitive(vram_catalogue(), "errors");
    REQUIRE(cJSON_IsObject(errs), "catalogue has no errors object");
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, errs) {
        n++;
        int err = vram_errno_from_name(e->string);
        CHECK(err < 0, "%s: %d", e->string, err);
        CHECK(err != -EPROTO || strcmp(e->string, "EPROTO") == 0,
              "documented code %s is unknown to vram_errno_from_name",
              e->string);
        const char *back = vram_errno_name(err);
        CHECK(back && strcmp(back, e->string) == 0, "%s -> %d -> %s",
              e->string, err, back ? back : "(null)");
        CHECK(strcmp(vram_errno_name(-err), e->string) == 0,
              "%s: positive errno gives %s", e->string, vram_errno_name(-err));
    }
    CHECK(n >= 10, "only %d error codes documented", n);

    const int codes[] = {EPROTONOSUPPORT, EPROTO, EINVAL, ENOSYS, EPERM,
                         EACCES, ENOENT, EEXIST, ENOSPC, EAGAIN, EXDEV, E2BIG,
                         EDQUOT, EBUSY, ENODEV, ENOMEM, ETIMEDOUT, EMSGSIZE,
                         EBADMSG, EIO, ENOTCONN, ECANCELED};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const char *name = vram_errno_name(-codes[i]);
        CHECK(vram_errno_from_name(name) == -codes[i], "%d -> %s -> %d",
              codes[i], name, vram_errno_from_name(name));
    }
    CHECK(strcmp(vram_errno_name(-ENOSPC), "ENOSPC") == 0, "ENOSPC");
    /* Unknown codes map to a generic error in both directions. */
    for (int err = 0; err < 200; err++)
        CHECK(vram_errno_name(err) != NULL, "errno %d has no name", err);
    CHECK(vram_errno_from_name("ENOSUCHTHING") == -EPROTO, "unknown name");
    CHECK(vram_errno_from_name("enospc") == -EPROTO, "lower-case name");
    CHECK(vram_errno_from_name("") == -EPROTO, "empty name");
    CHECK(vram_errno_from_name(NULL) == -EPROTO, "NULL name");
}

static void test_json_helpers(void)
{
    cJSON *o = cJSON_Parse("{\"a\":5,\"neg\":-1,\"frac\":2.5,\"s\":\"x\","
                           "\"t\":true,\"f\":false,\"max\":9007199254740992,"
                           "\"over\":18014398509481984}");
    REQUIRE(o != NULL, "parse");
    uint64_t v = 77;
    CHECK(vram_json_u64(o, "a", &v) == 0 && v == 5, "a");
    v = 77;
    CHECK(vram_json_u64(o, "missing", &v) == -ENOENT && v == 77, "missing");
    CHECK(vram_json_u64(o, "neg", &v) == -EINVAL && v == 77, "neg");
    CHECK(vram_json_u64(o, "frac", &v) == -EINVAL && v == 77, "frac");
    CHECK(vram_json_u64(o, "s", &v) == -EINVAL && v == 77, "string");
    CHECK(vram_json_u64(o, "over", &v) == -EINVAL && v == 77, "over 2^53");
    CHECK(vram_json_u64(o, "max", &v) == 0 && v == 9007199254740992ull, "2^53");
    bool b = false;
    CHECK(vram_json_bool(o, "t", &b) == 0 && b, "true");
    CHECK(vram_json_bool(o, "f", &b) == 0 && !b, "false");
    b = true;
    CHECK(vram_json_bool(o, "a", &b) == -EINVAL && b, "number as bool");
    CHECK(vram_json_bool(o, "missing", &b) == -ENOENT && b, "missing bool");
    CHECK(vram_json_str(o, "s") && strcmp(vram_json_str(o, "s"), "x") == 0,
          "str");
    CHECK(vram_json_str(o, "a") == NULL, "number as string");
    CHECK(vram_json_str(o, "missing") == NULL, "missing string");

    /* Bytes, ids and addresses (the address window ends below 2^47) survive
     * a print/parse round trip exactly. cJSON prints with 15 significant
     * digits when its relative comparison says that is enough, so from 10^15
     * on (16 digits) a value may come back off by a few units. */
    const uint64_t vals[] = {0, 1, 2097152, 17179869184ull,
                             0x7fffffffffffull, 999999999999999ull};
    cJSON *w = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        char k[8];
        snprintf(k, sizeof(k), "k%zu", i);
        CHECK(vram_json_add_u64(w, k, vals[i]) != NULL, "add");
    }
    char *s = cJSON_PrintUnformatted(w);
    cJSON *r = cJSON_Parse(s);
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        char k[8];
        snprintf(k, sizeof(k), "k%zu", i);
        v = 0;
        CHECK(vram_json_u64(r, k, &v) == 0 && v == vals[i],
              "%llu came back as %llu (%s)", (unsigned long long)vals[i],
              (unsigned long long)v, s);
    }
    cJSON_free(s);
    cJSON_Delete(r);
    cJSON_Delete(w);
    cJSON_Delete(o);
}

static int on_msg(void *ud, struct vram_codec_frame *f)
{
    cJSON **out = ud;
    *out = cJSON_Parse(f->payload);
    return 0;
}

/* vram_msg_queue puts the message on the wire as one frame. */
static void test_msg_queue(void)
{
    int sv[2];
    MUST(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0,
            "socketpair");
    struct vram_wire tx, rx;
    vram_wire_init(&tx, (vp_handle){sv[0]});
    vram_wire_init(&rx, (vp_handle){sv[1]});
    cJSON *m = cJSON_Parse("{\"type\":\"region_grow\",\"id\":9,"
                           "\"region\":4,\"chunks\":2}");
    REQUIRE(m != NULL, "parse");
    CHECK(vram_msg_queue(&tx, m, NULL, 0) == 0, "queue");
    CHECK(vram_wire_flush(&tx) == 0, "flush");
    cJSON *got = NULL;
    char why[256];
    CHECK(vram_wire_read(&rx, on_msg, &got, why, sizeof(why)) == 0, "read %s",
          why);
    CHECK(got && cJSON_Compare(got, m, true), "message changed on the wire");
    CHECK(got && vram_msg_validate_request(got, why, sizeof(why)) == 0,
          "received message invalid: %s", why);
    cJSON_Delete(got);
    cJSON_Delete(m);
    vram_wire_fini(&tx);
    vram_wire_fini(&rx);
    close(sv[0]);
    close(sv[1]);
}

static void test_size_parse(void)
{
    static const struct {
        const char *s;
        uint64_t want;
    } ok[] = {
        {"1.5MiB", 1572864},
        {"16GiB", 17179869184ull},
        {"2 MiB", 2097152},
        {"2MiB", 2097152},
        {"2M", 2097152},
        {"2mb", 2097152},
        {"2MB", 2097152},
        {"512KiB", 524288},
        {"512 k", 524288},
        {"0.5KiB", 512},
        {"4096", 4096},
        {"4096B", 4096},
        {"4096 b", 4096},
        {"0", 0},
        {"  3 KiB", 3072},
        {"1TiB", 1099511627776ull},
        {"1.25 GiB", 1342177280ull},
        {"8192TiB", 9007199254740992ull},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 12345;
        int r = vram_size_parse(ok[i].s, &v);
        CHECK(r == 0 && v == ok[i].want, "'%s' -> %d, %llu (expected %llu)",
              ok[i].s, r, (unsigned long long)v,
              (unsigned long long)ok[i].want);
    }

    static const char *const bad[] = {
        "abc", "0.3B", "1.5", "", "   ", "MiB", "-1", "-1MiB", "+1",
        "2 XiB", "2 MiBs", "2 MiB x", "2MiB2", "2..5MiB", "inf", "nan",
        "0.1KiB", "1.1MiB", ".5MiB",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 12345;
        int r = vram_size_parse(bad[i], &v);
        CHECK(r < 0, "'%s' accepted as %llu", bad[i], (unsigned long long)v);
        CHECK(v == 12345, "'%s': out written on failure", bad[i]);
    }
    uint64_t v = 12345;
    CHECK(vram_size_parse("abc", &v) == -EINVAL, "abc: not EINVAL");
    CHECK(vram_size_parse("0.3B", &v) == -EINVAL, "0.3B: not EINVAL");
    CHECK(vram_size_parse(NULL, &v) == -EINVAL, "NULL");
    CHECK(vram_size_parse("8193TiB", &v) == -ERANGE, "8193 TiB not ERANGE");
    CHECK(vram_size_parse("1e300", &v) == -ERANGE, "1e300 not ERANGE");
    CHECK(v == 12345, "out written on failure");
}

static void test_size_format(void)
{
    static const struct {
        uint64_t v;
        const char *want;
    } t[] = {
        {17179869184ull, "16 GiB"},
        {1572864, "1.5 MiB"},
        {2097152, "2 MiB"},
        {0, "0 B"},
        {1, "1 B"},
        {512, "512 B"},
        {1023, "1023 B"},
        {1024, "1 KiB"},
        {1536, "1.5 KiB"},
        {1099511627776ull, "1 TiB"},
        {1125899906842624ull, "1024 TiB"}, /* no unit above TiB */
        {1342177280ull, "1.25 GiB"},
        {1048575, "1 MiB"}, /* 1023.999 KiB rounds into the next unit */
        {1073741823ull, "1 GiB"},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char buf[32];
        memset(buf, 'x', sizeof(buf));
        char *r = vram_size_format(t[i].v, buf, sizeof(buf));
        CHECK(r == buf, "returns buf");
        CHECK(strcmp(buf, t[i].want) == 0, "%llu -> '%s', expected '%s'",
              (unsigned long long)t[i].v, buf, t[i].want);
    }
    /* What format prints, parse reads back (when it is exact). */
    const uint64_t back[] = {17179869184ull, 1572864, 2097152, 4096, 1536, 0};
    for (size_t i = 0; i < sizeof(back) / sizeof(back[0]); i++) {
        char buf[32];
        uint64_t v = 1;
        vram_size_format(back[i], buf, sizeof(buf));
        CHECK(vram_size_parse(buf, &v) == 0 && v == back[i],
              "'%s' parsed as %llu, expected %llu", buf, (unsigned long long)v,
              (unsigned long long)back[i]);
    }
    /* A short buffer is cut, never overrun. */
    char small[6];
    memset(small, 'x', sizeof(small));
    vram_size_format(17179869184ull, small, 4);
    CHECK(memchr(small, '\0', 4) != NULL && small[4] == 'x' && small[5] == 'x',
          "short buffer overrun");
}

int main(void)
{
    test_catalogue();
    test_validate_envelope();
    test_errno_names();
    test_json_helpers();
    test_msg_queue();
    test_size_parse();
    test_size_format();
    return check_report("test_catalogue");
}
