/* SPDX-License-Identifier: Apache-2.0 */
/* The message catalogue (proto/messages.json, made into descriptors by
 * vram_msggen) and the decoder and encoder that work from it; envelopes;
 * errno names; human sizes. Every request, reply and event of the catalogue
 * is exercised from its descriptor, so a message added to the file is
 * tested too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#else
#include <sys/socket.h>
#include <unistd.h>
#endif

#include "tests/check.h"

/* check.h's REQUIRE evaluates its condition twice; MUST evaluates it once,
 * for conditions that call something (socketpair, queue, flush...). */
#define MUST(cond, ...)                                                        \
    do {                                                                       \
        int must_failures_ = check_failures;                                   \
        CHECK(cond, __VA_ARGS__);                                              \
        if (check_failures != must_failures_)                                  \
            exit(1);                                                           \
    } while (0)
#include "proto/frame.h"
#include "proto/message.h"
#include "proto/msg.h"
#include "gen/vram_msg.h"
#include "proto/wire.h"
#include "proto/units.h"
#include "platform/conn.h"

/* ---- fixtures: a handle to close, a connected pair ---------------------- */

#ifdef _WIN32
#include "tests/win/unique.h" /* pipe names that never repeat */

static vp_handle fresh(void)
{
    return (vp_handle){(intptr_t)CreateEventW(NULL, TRUE, FALSE, NULL)};
}

/* A named pipe's two ends, as the listener and vp_dial make them. */
static int conn_pair(vp_handle sv[2])
{
    char path[96];
    wchar_t w[96];
    wt_unique(path, sizeof(path), "\\\\.\\pipe\\vramd-test-catalogue");
    MultiByteToWideChar(CP_UTF8, 0, path, -1, w, 96);
    HANDLE s = CreateNamedPipeW(w, PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED,
                                PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT |
                                    PIPE_REJECT_REMOTE_CLIENTS,
                                1, 65536, 65536, 0, NULL);
    if (s == INVALID_HANDLE_VALUE)
        return -1;
    sv[1] = (vp_handle){(intptr_t)s};
    if (vp_dial(path, &sv[0]) < 0) {
        vp_close(&sv[1]);
        return -1;
    }
    return 0;
}
#else
static vp_handle fresh(void)
{
    return (vp_handle){dup(0)};
}

static int conn_pair(vp_handle sv[2])
{
    int fd[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd) < 0)
        return -1;
    sv[0] = (vp_handle){fd[0]};
    sv[1] = (vp_handle){fd[1]};
    return 0;
}
#endif

/* ---- values by the descriptors ------------------------------------------ */

static cJSON *good_object(const struct vw_tdesc *t, bool all);

/* A valid value of a field's kind (an array holds one valid item). */
static cJSON *good_kind(int kind, const struct vw_tdesc *type, bool all)
{
    switch (kind) {
    case VW_K_U32:
    case VW_K_U64:
    case VW_K_I64: return cJSON_CreateNumber(3);
    case VW_K_BOOL: return cJSON_CreateTrue();
    case VW_K_STRING: return cJSON_CreateString("kv");
    case VW_K_HANDLE: return cJSON_CreateNumber(0);
    case VW_K_OBJECT: return good_object(type, all);
    default: return NULL;
    }
}

static cJSON *good_field(const struct vw_fdesc *f, bool all)
{
    if (f->kind != VW_K_ARRAY)
        return good_kind(f->kind, f->type, all);
    cJSON *a = cJSON_CreateArray();
    /* An array of handles would need a handle per item: one is enough. */
    cJSON_AddItemToArray(a, good_kind(f->item, f->type, all));
    return a;
}

/* Every field (all) or the required ones, valid. Handle fields are left out
 * (messages hold at most one, checked on their own below). */
static cJSON *good_object(const struct vw_tdesc *t, bool all)
{
    cJSON *o = t->tuple ? cJSON_CreateArray() : cJSON_CreateObject();
    for (uint32_t i = 0; i < t->nfields; i++) {
        const struct vw_fdesc *f = &t->fields[i];
        if (!t->tuple && !f->required && (!all || f->kind == VW_K_HANDLE))
            continue;
        cJSON *v = good_field(f, all);
        if (t->tuple)
            cJSON_AddItemToArray(o, v);
        else
            cJSON_AddItemToObject(o, f->name, v);
    }
    return o;
}

/* Values that are not of the kind (freshly made). */
static int bad_values(int kind, bool required, cJSON **out)
{
    int n = 0;
    if (required)
        out[n++] = cJSON_CreateNull(); /* null is absent: wrong when required */
    switch (kind) {
    case VW_K_U32:
        out[n++] = cJSON_CreateNumber(4294967296.0);
        /* fall through */
    case VW_K_U64:
        out[n++] = cJSON_CreateNumber(-1);
        /* fall through */
    case VW_K_I64:
    case VW_K_HANDLE:
        out[n++] = cJSON_CreateString("3");
        out[n++] = cJSON_CreateNumber(1.5);
        out[n++] = cJSON_CreateNumber(1e300); /* beyond exact doubles */
        out[n++] = cJSON_CreateTrue();
        out[n++] = cJSON_CreateArray();
        break;
    case VW_K_BOOL:
        out[n++] = cJSON_CreateNumber(1);
        out[n++] = cJSON_CreateString("true");
        break;
    case VW_K_STRING:
        out[n++] = cJSON_CreateNumber(1);
        out[n++] = cJSON_CreateFalse();
        out[n++] = cJSON_CreateArray();
        break;
    case VW_K_ARRAY:
        out[n++] = cJSON_CreateObject();
        out[n++] = cJSON_CreateString("[]");
        out[n++] = cJSON_CreateNumber(0);
        break;
    default:
        out[n++] = cJSON_CreateArray();
        out[n++] = cJSON_CreateString("{}");
        out[n++] = cJSON_CreateNumber(0);
    }
    return n;
}

static int decode(const struct vw_tdesc *t, const cJSON *o, char *why,
                  size_t whylen)
{
    union {
        union vw_req_any r;
        union vw_rep_any p;
        union vw_evt_any e;
    } out;
    struct vw_arena arena = {0};
    struct vw_dec d = {.arena = &arena};
    int r = vw_decode(t, o, &out, &d);
    snprintf(why, whylen, "%s", d.why);
    vw_arena_free(&arena);
    return r;
}

/* One message or reply: valid ones pass, unknown fields are tolerated, each
 * required field left out and each wrong value is refused naming it, and
 * what passes comes back the same from the encoder. */
static void check_type(const char *what, const struct vw_tdesc *t)
{
    char why[256];
    for (int all = 0; all <= 1; all++) {
        cJSON *m = good_object(t, all);
        int r = decode(t, m, why, sizeof(why));
        CHECK(r == 0, "%s (%s fields): %d %s", what, all ? "all" : "required",
              r, why);
        /* Encoded again, the same JSON. */
        union {
            union vw_req_any r;
            union vw_rep_any p;
            union vw_evt_any e;
        } val;
        struct vw_arena arena = {0};
        struct vw_dec d = {.arena = &arena};
        if (vw_decode(t, m, &val, &d) == 0) {
            struct vw_jw w = {0};
            struct vw_enc e = {.w = &w};
            CHECK(vw_encode_object(&e, t, &val) == 0, "%s: encode", what);
            cJSON *back = cJSON_Parse(w.p);
            CHECK(back && cJSON_Compare(back, m, true),
                  "%s: encoded as %s", what, w.p ? w.p : "(nothing)");
            cJSON_Delete(back);
            vw_jw_free(&w);
        }
        vw_arena_free(&arena);
        if (!t->tuple) {
            cJSON_AddStringToObject(m, "zz_future_field", "x");
            cJSON_AddItemToObject(m, "zz_future_obj", cJSON_CreateObject());
            r = decode(t, m, why, sizeof(why));
            CHECK(r == 0, "%s with unknown fields: %d %s", what, r, why);
        }
        cJSON_Delete(m);
    }
    if (t->tuple)
        return;
    for (uint32_t i = 0; i < t->nfields; i++) {
        const struct vw_fdesc *f = &t->fields[i];
        if (f->kind == VW_K_HANDLE)
            continue;
        char named[128];
        snprintf(named, sizeof(named), "%s.%s", t->name, f->name);
        cJSON *m = good_object(t, true);
        cJSON_DeleteItemFromObjectCaseSensitive(m, f->name);
        int r = decode(t, m, why, sizeof(why));
        if (f->required) {
            CHECK(r == -EINVAL, "%s without %s: %d", what, f->name, r);
            CHECK(strstr(why, named) != NULL,
                  "%s without %s: reason '%s' does not name it", what, f->name,
                  why);
        } else {
            CHECK(r == 0, "%s without optional %s: %d %s", what, f->name, r, why);
        }
        cJSON_Delete(m);
        cJSON *bad[12];
        int nbad = bad_values(f->kind, f->required, bad);
        for (int k = 0; k < nbad; k++) {
            m = good_object(t, true);
            char *shown = cJSON_PrintUnformatted(bad[k]);
            cJSON_DeleteItemFromObjectCaseSensitive(m, f->name);
            cJSON_AddItemToObject(m, f->name, bad[k]);
            r = decode(t, m, why, sizeof(why));
            CHECK(r == -EINVAL, "%s.%s = %s: %d", what, f->name, shown, r);
            CHECK(strstr(why, named) != NULL,
                  "%s.%s = %s: reason '%s' does not name the field", what,
                  f->name, shown, why);
            cJSON_free(shown);
            cJSON_Delete(m);
        }
        if (f->max && (f->kind == VW_K_ARRAY || f->kind == VW_K_STRING) &&
            f->max < 4096) {
            /* One over its limit. */
            m = good_object(t, true);
            cJSON_DeleteItemFromObjectCaseSensitive(m, f->name);
            if (f->kind == VW_K_STRING) {
                char longer[4200];
                memset(longer, 'x', f->max + 1);
                longer[f->max + 1] = '\0';
                cJSON_AddStringToObject(m, f->name, longer);
            } else {
                cJSON *a = cJSON_AddArrayToObject(m, f->name);
                for (uint32_t k = 0; k <= f->max; k++)
                    cJSON_AddItemToArray(a, good_kind(f->item, f->type, false));
            }
            r = decode(t, m, why, sizeof(why));
            CHECK(r == -EINVAL && strstr(why, "at most"),
                  "%s.%s over its limit of %u: %d %s", what, f->name, f->max, r,
                  why);
            cJSON_Delete(m);
        }
    }
}

static cJSON *read_catalogue(void)
{
    const char *src = getenv("VRAM_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/proto/messages.json", src ? src : "..");
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL, "cannot read %s", path);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *c = cJSON_Parse(buf);
    REQUIRE(c != NULL, "%s does not parse", path);
    return c;
}

static void test_catalogue(void)
{
    cJSON *cat = read_catalogue();
    /* The file documents the same limits the code enforces. */
    uint64_t v = 0;
    CHECK(vw_json_u64(cat, "protocol_version", &v) == 0 &&
              v == VW_PROTOCOL_VERSION && v == VW_CATALOGUE_VERSION,
          "protocol_version %llu, code says %d", (unsigned long long)v,
          VW_PROTOCOL_VERSION);
    CHECK(vw_json_u64(cat, "oldest_version", &v) == 0 &&
              v == VW_PROTOCOL_OLDEST && v == VW_CATALOGUE_OLDEST,
          "oldest_version %llu, code says %d", (unsigned long long)v,
          VW_PROTOCOL_OLDEST);
    const cJSON *lim = cJSON_GetObjectItemCaseSensitive(cat, "limits");
    CHECK(vw_json_u64(lim, "max_payload_bytes", &v) == 0 &&
              v == VW_MAX_PAYLOAD,
          "max_payload_bytes %llu", (unsigned long long)v);
    CHECK(vw_json_u64(lim, "max_fds_per_frame", &v) == 0 &&
              v == VW_MAX_FDS_PER_FRAME,
          "max_fds_per_frame %llu", (unsigned long long)v);
    CHECK(vw_json_u64(lim, "max_requests_in_flight", &v) == 0 &&
              v == VW_MAX_REQUESTS_IN_FLIGHT,
          "max_requests_in_flight %llu", (unsigned long long)v);
    /* Every message of the file has its descriptor, with its doc. */
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(cat, "requests")) ==
              VW_REQ_COUNT,
          "requests in the file and the generated table differ");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(cat, "events")) ==
              VW_EVT_COUNT,
          "events in the file and the generated table differ");
    cJSON_Delete(cat);

    for (int i = 0; i < VW_REQ_COUNT; i++) {
        const struct vw_mdesc *m = &vw_requests[i];
        CHECK(m->doc && m->doc[0], "%s: no doc", m->name);
        CHECK(vw_req_lookup(m->name) == i, "%s: lookup", m->name);
        char what[96];
        snprintf(what, sizeof(what), "request %s", m->name);
        check_type(what, m->req);
        snprintf(what, sizeof(what), "reply of %s", m->name);
        check_type(what, m->rep);
    }
    for (int i = 0; i < VW_EVT_COUNT; i++) {
        const struct vw_mdesc *m = &vw_events[i];
        CHECK(m->doc && m->doc[0], "%s: no doc", m->name);
        CHECK(vw_evt_lookup(m->name) == i, "%s: lookup", m->name);
        char what[96];
        snprintf(what, sizeof(what), "event %s", m->name);
        check_type(what, m->req);
    }
    /* The messages issue 2 names must be there. */
    const char *must[] = {"hello", "stage_register", "region_create",
                          "region_grow", "region_release", "status"};
    for (size_t i = 0; i < sizeof(must) / sizeof(must[0]); i++)
        CHECK(vw_req_lookup(must[i]) >= 0, "request '%s' missing", must[i]);
    CHECK(vw_req_lookup("recall") < 0, "an event found as a request");
    CHECK(vw_evt_lookup("status") < 0, "a request found as an event");
}

/* A reply's map entries carry handles: named by index among the frame's,
 * moved out of the frame when decoded, refused when the frame has none at
 * that index, and left in the frame when the reply is refused. */
static void test_handles(void)
{
    const struct vw_mdesc *m = &vw_requests[VW_REQ_REGION_GROW];
    struct vw_codec_frame f = {.nhandles = 2};
    f.handles[0] = fresh();
    f.handles[1] = fresh();
    intptr_t h1 = f.handles[1].v;
    cJSON *o = cJSON_Parse("{\"map\":[{\"chunk\":5,\"region\":2,\"slot\":0},"
                           "{\"chunk\":6,\"region\":2,\"slot\":1,\"fd\":1}]}");
    struct vw_rep_region_grow rep;
    struct vw_arena arena = {0};
    struct vw_dec d = {.arena = &arena, .frame = &f};
    CHECK(vw_decode(m->rep, o, &rep, &d) == 0, "map with an fd: %s", d.why);
    CHECK(rep.map.n == 2 && !rep.map.v[0].has_fd && rep.map.v[1].has_fd &&
              rep.map.v[1].fd.v == h1 && !vp_ok(f.handles[1]),
          "the handle did not move out of the frame");
    /* Encoded, the handle goes to the frame's list, by index. */
    struct vw_jw w = {0};
    vp_handle out[4];
    struct vw_enc e = {.w = &w, .hs = out, .max = 4};
    CHECK(vw_encode_object(&e, m->rep, &rep) == 0 && e.nh == 1 &&
              out[0].v == h1 && strstr(w.p, "\"fd\":0"),
          "encoded: %s", w.p);
    vw_jw_free(&w);
    struct vw_enc none = {.w = &w};
    CHECK(vw_encode_object(&none, m->rep, &rep) == -E2BIG,
          "a handle encoded with no room for it");
    vw_jw_free(&w);
    vw_close_handles(m->rep, &rep);
    vw_arena_free(&arena);
    cJSON_Delete(o);
    /* Index beyond the frame, or taken already: refused, nothing moved. */
    o = cJSON_Parse("{\"map\":[{\"chunk\":5,\"region\":2,\"slot\":0,\"fd\":0},"
                    "{\"chunk\":6,\"region\":2,\"slot\":1,\"fd\":1}]}");
    CHECK(vw_decode(m->rep, o, &rep, &d) == -EINVAL && strstr(d.why, "fd"),
          "a taken handle named again: %s", d.why);
    CHECK(vp_ok(f.handles[0]), "a refused reply took a handle");
    vp_close(&f.handles[0]);
    vw_arena_free(&arena);
    cJSON_Delete(o);
}

static void test_validate_envelope(void)
{
    char why[256];
    cJSON *m;
    int r;

    m = cJSON_Parse("{\"type\":\"no_such_message\",\"id\":1}");
    why[0] = '\0';
    r = vw_msg_validate_request(m, why, sizeof(why));
    CHECK(r == -ENOSYS, "unknown type: %d", r);
    CHECK(strstr(why, "no_such_message") != NULL, "reason '%s'", why);
    cJSON_Delete(m);

    /* An event name is not a request type and vice versa. */
    m = cJSON_Parse("{\"type\":\"recall\",\"id\":1}");
    CHECK(vw_msg_validate_request(m, why, sizeof(why)) == -ENOSYS,
          "event accepted as a request");
    cJSON_Delete(m);
    m = cJSON_Parse("{\"event\":\"status\"}");
    CHECK(vw_msg_validate_event(m, why, sizeof(why)) == -ENOSYS,
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
        r = vw_msg_validate_request(m, why, sizeof(why));
        CHECK(r == -EINVAL, "%s: %d", bad[i], r);
        CHECK(why[0] != '\0', "%s: no reason", bad[i]);
        cJSON_Delete(m);
    }
    why[0] = '\0';
    CHECK(vw_msg_validate_request(NULL, why, sizeof(why)) == -EINVAL,
          "NULL message");

    /* Names are case-sensitive: "Hello" is not "hello". */
    m = cJSON_Parse("{\"type\":\"Hello\",\"version\":1}");
    CHECK(vw_msg_validate_request(m, why, sizeof(why)) == -ENOSYS,
          "type matched case-insensitively");
    cJSON_Delete(m);
    m = cJSON_Parse("{\"type\":\"hello\",\"Version\":1}");
    CHECK(vw_msg_validate_request(m, why, sizeof(why)) == -EINVAL,
          "field matched case-insensitively");
    cJSON_Delete(m);

    /* Envelopes. */
    struct vw_envelope env;
    m = cJSON_Parse("{\"type\":\"reply\",\"id\":4,\"ok\":false,\"error\":"
                    "\"ENOSPC\",\"message\":\"full\",\"more\":true}");
    CHECK(vw_envelope_read(m, &env, why, sizeof(why)) == 0 &&
              env.kind == VW_MSG_REPLY && env.id == 4 && !env.ok && env.more &&
              strcmp(env.error, "ENOSPC") == 0 && strcmp(env.message, "full") == 0,
          "reply envelope");
    cJSON_Delete(m);
    m = cJSON_Parse("{\"type\":\"reply\",\"id\":4}");
    CHECK(vw_envelope_read(m, &env, why, sizeof(why)) == -EINVAL,
          "a reply without ok");
    cJSON_Delete(m);
    m = cJSON_Parse("{\"type\":\"event\",\"event\":\"recall\"}");
    CHECK(vw_envelope_read(m, &env, why, sizeof(why)) == 0 &&
              env.kind == VW_MSG_EVENT && strcmp(env.type, "recall") == 0,
          "event envelope");
    cJSON_Delete(m);
    m = cJSON_Parse("{\"type\":\"ping\",\"id\":-1}");
    CHECK(vw_envelope_read(m, &env, why, sizeof(why)) == -EINVAL &&
              strstr(why, "id"), "a negative id: %s", why);
    cJSON_Delete(m);
}

static void test_errno_names(void)
{
    /* Every code the catalogue documents round-trips. */
    int n = 0;
    for (const char *const *e = vw_catalogue_errors; *e; e += 2) {
        n++;
        int err = vw_errno_from_name(e[0]);
        CHECK(err < 0, "%s: %d", e[0], err);
        CHECK(err != -EPROTO || strcmp(e[0], "EPROTO") == 0,
              "documented code %s is unknown to vw_errno_from_name", e[0]);
        const char *back = vw_errno_name(err);
        CHECK(back && strcmp(back, e[0]) == 0, "%s -> %d -> %s", e[0], err,
              back ? back : "(null)");
        CHECK(strcmp(vw_errno_name(-err), e[0]) == 0,
              "%s: positive errno gives %s", e[0], vw_errno_name(-err));
        CHECK(e[1] && e[1][0], "%s: no meaning", e[0]);
    }
    CHECK(n >= 10, "only %d error codes documented", n);

    const int codes[] = {EPROTONOSUPPORT, EPROTO, EINVAL, ENOSYS, EPERM,
                         EACCES, ENOENT, EEXIST, ENOSPC, EAGAIN, EXDEV, E2BIG,
                         EDQUOT, EBUSY, ENODEV, ENOMEM, ETIMEDOUT, EMSGSIZE,
                         EBADMSG, EIO, ENOTCONN, ECANCELED};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const char *name = vw_errno_name(-codes[i]);
        CHECK(vw_errno_from_name(name) == -codes[i], "%d -> %s -> %d",
              codes[i], name, vw_errno_from_name(name));
    }
    CHECK(strcmp(vw_errno_name(-ENOSPC), "ENOSPC") == 0, "ENOSPC");
    /* Unknown codes map to a generic error in both directions. */
    for (int err = 0; err < 200; err++)
        CHECK(vw_errno_name(err) != NULL, "errno %d has no name", err);
    CHECK(vw_errno_from_name("ENOSUCHTHING") == -EPROTO, "unknown name");
    CHECK(vw_errno_from_name("enospc") == -EPROTO, "lower-case name");
    CHECK(vw_errno_from_name("") == -EPROTO, "empty name");
    CHECK(vw_errno_from_name(NULL) == -EPROTO, "NULL name");
}

static void test_json_helpers(void)
{
    cJSON *o = cJSON_Parse("{\"a\":5,\"neg\":-1,\"frac\":2.5,\"s\":\"x\","
                           "\"t\":true,\"f\":false,\"max\":9007199254740992,"
                           "\"over\":18014398509481984}");
    REQUIRE(o != NULL, "parse");
    uint64_t v = 77;
    CHECK(vw_json_u64(o, "a", &v) == 0 && v == 5, "a");
    v = 77;
    CHECK(vw_json_u64(o, "missing", &v) == -ENOENT && v == 77, "missing");
    CHECK(vw_json_u64(o, "neg", &v) == -EINVAL && v == 77, "neg");
    CHECK(vw_json_u64(o, "frac", &v) == -EINVAL && v == 77, "frac");
    CHECK(vw_json_u64(o, "s", &v) == -EINVAL && v == 77, "string");
    CHECK(vw_json_u64(o, "over", &v) == -EINVAL && v == 77, "over 2^53");
    CHECK(vw_json_u64(o, "max", &v) == 0 && v == 9007199254740992ull, "2^53");
    bool b = false;
    CHECK(vw_json_bool(o, "t", &b) == 0 && b, "true");
    CHECK(vw_json_bool(o, "f", &b) == 0 && !b, "false");
    b = true;
    CHECK(vw_json_bool(o, "a", &b) == -EINVAL && b, "number as bool");
    CHECK(vw_json_bool(o, "missing", &b) == -ENOENT && b, "missing bool");
    CHECK(vw_json_str(o, "s") && strcmp(vw_json_str(o, "s"), "x") == 0,
          "str");
    CHECK(vw_json_str(o, "a") == NULL, "number as string");
    CHECK(vw_json_str(o, "missing") == NULL, "missing string");

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
        CHECK(vw_json_add_u64(w, k, vals[i]) != NULL, "add");
    }
    char *s = cJSON_PrintUnformatted(w);
    cJSON *r = cJSON_Parse(s);
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        char k[8];
        snprintf(k, sizeof(k), "k%zu", i);
        v = 0;
        CHECK(vw_json_u64(r, k, &v) == 0 && v == vals[i],
              "%llu came back as %llu (%s)", (unsigned long long)vals[i],
              (unsigned long long)v, s);
    }
    cJSON_free(s);
    cJSON_Delete(r);
    cJSON_Delete(w);
    cJSON_Delete(o);
}

static int on_msg(void *ud, struct vw_codec_frame *f)
{
    cJSON **out = ud;
    *out = cJSON_Parse(f->payload);
    return 0;
}

/* vw_msg_queue puts the message on the wire as one frame. */
static void test_msg_queue(void)
{
    vp_handle sv[2];
    MUST(conn_pair(sv) == 0, "a connected pair");
    struct vw_wire tx, rx;
    vw_wire_init(&tx, sv[0]);
    vw_wire_init(&rx, sv[1]);
    cJSON *m = cJSON_Parse("{\"type\":\"region_grow\",\"id\":9,"
                           "\"region\":4,\"chunks\":2}");
    REQUIRE(m != NULL, "parse");
    CHECK(vw_msg_queue(&tx, m, NULL, 0) == 0, "queue");
    CHECK(vw_wire_flush(&tx) == 0, "flush");
    cJSON *got = NULL;
    char why[256];
    CHECK(vw_wire_read(&rx, on_msg, &got, why, sizeof(why)) == 0, "read %s",
          why);
    CHECK(got && cJSON_Compare(got, m, true), "message changed on the wire");
    CHECK(got && vw_msg_validate_request(got, why, sizeof(why)) == 0,
          "received message invalid: %s", why);
    cJSON_Delete(got);
    cJSON_Delete(m);
    vw_wire_fini(&tx);
    vw_wire_fini(&rx);
    vp_close(&sv[0]);
    vp_close(&sv[1]);
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
        {"512KiB", 524288},
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
        int r = vw_size_parse(ok[i].s, &v);
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
        int r = vw_size_parse(bad[i], &v);
        CHECK(r < 0, "'%s' accepted as %llu", bad[i], (unsigned long long)v);
        CHECK(v == 12345, "'%s': out written on failure", bad[i]);
    }
    uint64_t v = 12345;
    CHECK(vw_size_parse("abc", &v) == -EINVAL, "abc: not EINVAL");
    CHECK(vw_size_parse("0.3B", &v) == -EINVAL, "0.3B: not EINVAL");
    CHECK(vw_size_parse(NULL, &v) == -EINVAL, "NULL");
    CHECK(vw_size_parse("8193TiB", &v) == -ERANGE, "8193 TiB not ERANGE");
    CHECK(vw_size_parse("1e300", &v) == -ERANGE, "1e300 not ERANGE");
    /* Decimal and bare units are refused, never read as binary. */
    static const char *const decimal[] = {"16GB", "16 gb", "2M", "2mb", "2MB",
                                          "512 k", "1T", "1 TB", "3g", "4KB"};
    for (size_t i = 0; i < sizeof(decimal) / sizeof(decimal[0]); i++)
        CHECK(vw_size_parse(decimal[i], &v) == -EDOM, "'%s' not EDOM", decimal[i]);
    CHECK(strstr(vw_size_why(-EDOM), "did you mean GiB") != NULL, "EDOM text");
    CHECK(v == 12345, "out written on failure");
    /* The binary spelling suggested for each refused one. */
    static const char *const spelled[][2] = {
        {"16GB", "16GiB"}, {"16 gb", "16GiB"}, {"2M", "2MiB"}, {"1.5t", "1.5TiB"},
        {"512 k", "512KiB"}};
    for (size_t i = 0; i < sizeof(spelled) / sizeof(spelled[0]); i++) {
        char b[32] = "";
        CHECK(vw_size_binary(spelled[i][0], b, sizeof(b)) == 0 &&
                  strcmp(b, spelled[i][1]) == 0,
              "'%s' spelled '%s'", spelled[i][0], b);
    }
    char b[8] = "kept";
    CHECK(vw_size_binary("16GiB", b, sizeof(b)) == -EINVAL &&
              vw_size_binary("lots", b, sizeof(b)) == -EINVAL &&
              vw_size_binary("1234567GB", b, 8) == -EINVAL && strcmp(b, "kept") == 0,
          "vw_size_binary of a size it should not spell: '%s'", b);
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
        char *r = vw_size_format(t[i].v, buf, sizeof(buf));
        CHECK(r == buf, "returns buf");
        CHECK(strcmp(buf, t[i].want) == 0, "%llu -> '%s', expected '%s'",
              (unsigned long long)t[i].v, buf, t[i].want);
    }
    /* What format prints, parse reads back (when it is exact). */
    const uint64_t back[] = {17179869184ull, 1572864, 2097152, 4096, 1536, 0};
    for (size_t i = 0; i < sizeof(back) / sizeof(back[0]); i++) {
        char buf[32];
        uint64_t v = 1;
        vw_size_format(back[i], buf, sizeof(buf));
        CHECK(vw_size_parse(buf, &v) == 0 && v == back[i],
              "'%s' parsed as %llu, expected %llu", buf, (unsigned long long)v,
              (unsigned long long)back[i]);
    }
    /* A short buffer is cut, never overrun. */
    char small[6];
    memset(small, 'x', sizeof(small));
    vw_size_format(17179869184ull, small, 4);
    CHECK(memchr(small, '\0', 4) != NULL && small[4] == 'x' && small[5] == 'x',
          "short buffer overrun");
}

int main(void)
{
    test_catalogue();
    test_handles();
    test_validate_envelope();
    test_errno_names();
    test_json_helpers();
    test_msg_queue();
    test_size_parse();
    test_size_format();
    return check_report("test_catalogue");
}
