/* SPDX-License-Identifier: Apache-2.0 */
/* vram_msggen: makes the protocol's C from proto/messages.json, at build
 * time.
 *
 *   vram_msggen CATALOGUE OUTDIR      writes OUTDIR/vram_msg.h and .c (the
 *                                     structs, their descriptors, the
 *                                     request and event tables) and
 *                                     OUTDIR/vd_dispatch.h and .c (the
 *                                     daemon's table of typed handlers)
 *                                     and OUTDIR/vc_stubs.c (libvram's
 *                                     public calls for the requests that
 *                                     name one: "client")
 *   vram_msggen --markdown CATALOGUE  prints the message reference that
 *                                     proto/PROTOCOL.md holds
 *
 * It checks the catalogue as it goes (known types, no name twice, types
 * that exist) and fails, naming what is wrong, rather than write half a
 * protocol. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

static const char *catalogue_path;
static const cJSON *types_obj;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "vram_msggen: %s: ", catalogue_path);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static const char *const scalars[] = {"u32", "u64", "i64", "bool", "string",
                                      "handle"};
static const char *const kinds[] = {"VW_K_U32", "VW_K_U64", "VW_K_I64",
                                    "VW_K_BOOL", "VW_K_STRING",
                                    "VW_K_HANDLE"};
static const char *const ctypes[] = {"uint32_t", "uint64_t", "int64_t",
                                     "bool", "const char *", "vp_handle"};
static const char *const arrays[] = {"struct vw_u32s", "struct vw_u64s",
                                     "struct vw_i64s", "struct vw_bools",
                                     "struct vw_strs", "struct vw_handles"};

static int scalar(const char *t)
{
    for (int i = 0; i < 6; i++)
        if (strcmp(t, scalars[i]) == 0)
            return i;
    return -1;
}

static const cJSON *type_def(const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(types_obj, name);
}

static const char *str(const cJSON *o, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static bool flag(const cJSON *o, const char *key)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static unsigned maxof(const cJSON *f)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(f, "max");
    return cJSON_IsNumber(m) && m->valuedouble >= 0 && m->valuedouble < 4294967296.0
               ? (unsigned)m->valuedouble
               : 0;
}

static int newest_version, oldest_version;

/* What "since" says of o (a message, field or error): the protocol version
 * that added it, 1 when absent; checked against the catalogue's versions. */
static int since_of(const char *where, const cJSON *o)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "since");
    if (!v)
        return 1;
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)v->valueint ||
        v->valueint < 1 || v->valueint > newest_version)
        die("%s: since must be a protocol version from 1 to %d", where,
            newest_version);
    return v->valueint;
}

/* A field's type, checked: scalar index (>= 0), or -1 with *obj set. */
static int field_type(const char *where, const cJSON *f, const char **obj,
                      bool *array)
{
    const char *t = str(f, "type");
    if (!t)
        die("%s.%s: no type", where, f->string);
    *array = strcmp(t, "array") == 0;
    if (*array) {
        t = str(f, "items");
        if (!t)
            die("%s.%s: an array needs items", where, f->string);
        if (strcmp(t, "array") == 0)
            die("%s.%s: arrays of arrays are not supported", where, f->string);
    }
    int s = scalar(t);
    if (s >= 0)
        return s;
    if (!type_def(t))
        die("%s.%s: no type named '%s'", where, f->string, t);
    *obj = t;
    return -1;
}

/* A C comment's text: no closing sequence inside. */
static void put_doc(FILE *o, const char *indent, const char *doc)
{
    if (!doc)
        return;
    fprintf(o, "%s/* ", indent);
    for (const char *p = doc; *p; p++) {
        if (p[0] == '*' && p[1] == '/')
            fputc(' ', o);
        fputc(*p, o);
    }
    fprintf(o, " */\n");
}

static void c_string(FILE *o, const char *s)
{
    if (!s) {
        fprintf(o, "NULL");
        return;
    }
    fputc('"', o);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', o);
        if (*s == '\n')
            fprintf(o, "\\n");
        else
            fputc(*s, o);
    }
    fputc('"', o);
}

/* ---- the header --------------------------------------------------------- */

static void struct_fields(FILE *o, const char *where, const cJSON *fields)
{
    const cJSON *f;
    int n = 0;
    cJSON_ArrayForEach(f, fields) {
        const char *obj = NULL;
        bool array;
        int s = field_type(where, f, &obj, &array);
        bool req = flag(f, "required");
        put_doc(o, "    ", str(f, "doc"));
        if (array) {
            if (s >= 0)
                fprintf(o, "    %s %s;\n", arrays[s], f->string);
            else
                fprintf(o, "    struct vw_%s_array %s;\n", obj, f->string);
        } else {
            if (!req && s != 4) /* strings: NULL when absent */
                fprintf(o, "    bool has_%s;\n", f->string);
            if (s >= 0)
                fprintf(o, "    %s%s%s;\n", ctypes[s], s == 4 ? "" : " ", f->string);
            else
                fprintf(o, "    struct vw_t_%s %s;\n", obj, f->string);
        }
        n++;
    }
    if (!n)
        fprintf(o, "    uint8_t none_; /* no fields */\n");
}

/* Types in an order where each comes after those it holds. */
static const char *order[256];
static int norder;

static void visit(const char *name, int depth)
{
    for (int i = 0; i < norder; i++)
        if (strcmp(order[i], name) == 0)
            return;
    if (depth > 64)
        die("type %s holds itself", name);
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(type_def(name), "fields")) {
        const char *obj = NULL;
        bool array;
        if (field_type(name, f, &obj, &array) < 0)
            visit(obj, depth + 1);
    }
    if (norder == 256)
        die("more than 256 types");
    order[norder++] = name;
}

static void upper(char *dst, const char *s, size_t n)
{
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++)
        dst[i] = (char)(s[i] >= 'a' && s[i] <= 'z' ? s[i] - 32 : s[i]);
    dst[i] = '\0';
}

static void write_header(FILE *o, const cJSON *cat)
{
    const cJSON *reqs = cJSON_GetObjectItemCaseSensitive(cat, "requests");
    const cJSON *evts = cJSON_GetObjectItemCaseSensitive(cat, "events");
    fprintf(o, "/* Generated by vram_msggen from proto/messages.json: do not edit. */\n"
               "#ifndef VW_MSG_GEN_H\n#define VW_MSG_GEN_H\n\n"
               "#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n\n"
               "#include \"proto/msg.h\"\n\n");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cat, "protocol_version");
    fprintf(o, "#define VW_CATALOGUE_VERSION %d\n#define VW_CATALOGUE_OLDEST %d\n\n",
            cJSON_IsNumber(v) ? v->valueint : 0, oldest_version);
    const cJSON *sch = cJSON_GetObjectItemCaseSensitive(cat, "status_schema");
    fprintf(o, "/* The layout of status and of vramctl's JSON: raised when a documented\n"
               " * field is renamed or retyped, never within one. */\n"
               "#define VW_STATUS_SCHEMA %d\n\n", cJSON_IsNumber(sch) ? sch->valueint : 1);
    char up[128];
    fprintf(o, "enum vw_req_id {\n");
    const cJSON *m;
    cJSON_ArrayForEach(m, reqs) {
        upper(up, m->string, sizeof(up));
        fprintf(o, "    VW_REQ_%s,\n", up);
    }
    fprintf(o, "    VW_REQ_COUNT\n};\n\nenum vw_evt_id {\n");
    cJSON_ArrayForEach(m, evts) {
        upper(up, m->string, sizeof(up));
        fprintf(o, "    VW_EVT_%s,\n", up);
    }
    fprintf(o, "    VW_EVT_COUNT\n};\n\n");
    const cJSON *t;
    cJSON_ArrayForEach(t, types_obj) visit(t->string, 0);
    for (int i = 0; i < norder; i++) {
        const cJSON *td = type_def(order[i]);
        put_doc(o, "", str(td, "doc"));
        fprintf(o, "struct vw_t_%s {\n", order[i]);
        struct_fields(o, order[i], cJSON_GetObjectItemCaseSensitive(td, "fields"));
        fprintf(o, "};\nstruct vw_%s_array {\n    struct vw_t_%s *v;\n    size_t n;\n};\n"
                   "extern const struct vw_tdesc vw_td_%s;\n\n",
                order[i], order[i], order[i]);
    }
    cJSON_ArrayForEach(m, reqs) {
        put_doc(o, "", str(m, "doc"));
        fprintf(o, "struct vw_req_%s {\n", m->string);
        struct_fields(o, m->string, cJSON_GetObjectItemCaseSensitive(m, "fields"));
        fprintf(o, "};\nstruct vw_rep_%s {\n", m->string);
        struct_fields(o, m->string, cJSON_GetObjectItemCaseSensitive(m, "reply"));
        fprintf(o, "};\n\n");
    }
    cJSON_ArrayForEach(m, evts) {
        put_doc(o, "", str(m, "doc"));
        fprintf(o, "struct vw_evt_%s {\n", m->string);
        struct_fields(o, m->string, cJSON_GetObjectItemCaseSensitive(m, "fields"));
        fprintf(o, "};\n\n");
    }
    fprintf(o, "/* Room for any request, any reply. */\nunion vw_req_any {\n");
    cJSON_ArrayForEach(m, reqs) fprintf(o, "    struct vw_req_%s %s;\n", m->string, m->string);
    fprintf(o, "};\nunion vw_rep_any {\n");
    cJSON_ArrayForEach(m, reqs) fprintf(o, "    struct vw_rep_%s %s;\n", m->string, m->string);
    fprintf(o, "};\nunion vw_evt_any {\n");
    cJSON_ArrayForEach(m, evts) fprintf(o, "    struct vw_evt_%s %s;\n", m->string, m->string);
    fprintf(o, "};\n\n"
               "/* Every request with its reply, by enum vw_req_id; every event by\n"
               " * enum vw_evt_id (their fields in req). */\n"
               "extern const struct vw_mdesc vw_requests[VW_REQ_COUNT];\n"
               "extern const struct vw_mdesc vw_events[VW_EVT_COUNT];\n"
               "/* The id of a request or event by name, or -1. */\n"
               "int vw_req_lookup(const char *name);\n"
               "int vw_evt_lookup(const char *name);\n"
               "/* The errors the catalogue names, NULL-terminated pairs of name and\n"
               " * meaning. */\n"
               "extern const char *const vw_catalogue_errors[];\n\n"
               "#endif\n");
}

/* ---- the descriptors ---------------------------------------------------- */

/* The indexes of the messages of obj in strcmp order (for lookups). */
static const char *sort_names[256];
static int by_name(const void *a, const void *b)
{
    return strcmp(sort_names[*(const unsigned char *)a],
                  sort_names[*(const unsigned char *)b]);
}

static void sorted_index(FILE *o, const char *what, const cJSON *obj)
{
    unsigned char idx[256];
    int n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, obj) {
        if (n == 256) {
            fprintf(stderr, "vram_msggen: more than 256 %s messages\n", what);
            exit(1);
        }
        sort_names[n] = m->string;
        idx[n] = (unsigned char)n;
        n++;
    }
    qsort(idx, (size_t)n, 1, by_name);
    fprintf(o, "static const unsigned char vw_%s_sorted[] = {", what);
    for (int i = 0; i < n; i++)
        fprintf(o, "%s%u", i ? ", " : "", idx[i]);
    fprintf(o, "%s};\n", n ? "" : "0");
}

static void field_descs(FILE *o, const char *sname, const char *dname,
                        const char *where, const cJSON *fields, int msince,
                        bool tuple)
{
    int n = cJSON_GetArraySize(fields);
    if (!n)
        return;
    fprintf(o, "static const struct vw_fdesc vw_f_%s[] = {\n", dname);
    const cJSON *f;
    cJSON_ArrayForEach(f, fields) {
        const char *obj = NULL;
        bool array;
        int s = field_type(where, f, &obj, &array);
        bool req = flag(f, "required");
        fprintf(o, "    {.name = \"%s\", .doc = ", f->string);
        c_string(o, str(f, "doc"));
        const char *k = s >= 0 ? kinds[s] : "VW_K_OBJECT";
        fprintf(o, ",\n     .kind = %s, .item = %s, .required = %s, .max = %u,\n"
                   "     .off = offsetof(struct %s, %s), .has_off = ",
                array ? "VW_K_ARRAY" : k, array ? k : "0", req ? "true" : "false",
                maxof(f), sname, f->string);
        if (!array && !req && s != 4)
            fprintf(o, "offsetof(struct %s, has_%s)", sname, f->string);
        else
            fprintf(o, "UINT32_MAX");
        if (obj)
            fprintf(o, ", .type = &vw_td_%s", obj);
        char at[256];
        snprintf(at, sizeof(at), "%s.%s", where, f->string);
        /* A field without since came with its message. */
        int since = cJSON_GetObjectItemCaseSensitive(f, "since") ? since_of(at, f)
                                                                : msince;
        if (since > 1 && tuple)
            die("%s: a tuple's fields are positional; one added later "
                "(since) belongs in a type of its own", at);
        if (since > msince && req)
            die("%s: a field added after its message (since %d, the message "
                "%d) cannot be required: a peer of an older version never "
                "sends it", at, since, msince);
        if (since < msince)
            die("%s: since %d, before its message's (%d)", at, since, msince);
        if (since > 1)
            fprintf(o, ", .since = %d", since);
        fprintf(o, "},\n");
    }
    fprintf(o, "};\n");
}

static void tdesc(FILE *o, const char *sname, const char *dname, const char *name,
                  const char *doc, bool tuple, const cJSON *fields, bool is_static)
{
    int n = cJSON_GetArraySize(fields);
    fprintf(o, "%sconst struct vw_tdesc vw_td_%s = {\n    .name = \"%s\", .doc = ",
            is_static ? "static " : "", dname, name);
    c_string(o, doc);
    fprintf(o, ",\n    .size = sizeof(struct %s), .tuple = %s,\n    .fields = %s%s, .nfields = %d};\n\n",
            sname, tuple ? "true" : "false", n ? "vw_f_" : "NULL", n ? dname : "", n);
}

/* An error is "NAME": "meaning" (the first version's), or "NAME": {"doc":
 * meaning, "since": N, "fallback": OLDER}: a peer of an earlier version is
 * told the fallback, a code its version has. */
static const char *error_doc(const cJSON *e)
{
    const char *d = cJSON_IsObject(e) ? str(e, "doc") : cJSON_GetStringValue(e);
    if (!d)
        die("errors.%s: a meaning (a string, or an object with doc)", e->string);
    return d;
}

static int error_since(const cJSON *errs, const cJSON *e)
{
    if (!cJSON_IsObject(e))
        return 1;
    char at[128];
    snprintf(at, sizeof(at), "errors.%s", e->string);
    int since = since_of(at, e);
    const char *fb = str(e, "fallback");
    if (since > 1 && !fb)
        die("%s: an error added after version 1 needs a fallback (the code "
            "older peers are told)", at);
    if (fb) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(errs, fb);
        if (!f || strcmp(fb, e->string) == 0)
            die("%s: fallback %s is not another error of the catalogue", at, fb);
        /* Its own version only (not its fallback's check: two errors that
         * name each other would never end). */
        char fat[128];
        snprintf(fat, sizeof(fat), "errors.%s", fb);
        if ((cJSON_IsObject(f) ? since_of(fat, f) : 1) >= since)
            die("%s: fallback %s is not older than it", at, fb);
    }
    return since;
}

static void write_source(FILE *o, const cJSON *cat)
{
    const cJSON *reqs = cJSON_GetObjectItemCaseSensitive(cat, "requests");
    const cJSON *evts = cJSON_GetObjectItemCaseSensitive(cat, "events");
    fprintf(o, "/* Generated by vram_msggen from proto/messages.json: do not edit. */\n"
               "#include \"gen/vram_msg.h\"\n\n#include <string.h>\n\n");
    char sname[160], dname[160];
    for (int i = 0; i < norder; i++) {
        const cJSON *td = type_def(order[i]);
        snprintf(sname, sizeof(sname), "vw_t_%s", order[i]);
        field_descs(o, sname, order[i], order[i],
                    cJSON_GetObjectItemCaseSensitive(td, "fields"), 1,
                    flag(td, "tuple"));
        tdesc(o, sname, order[i], order[i], str(td, "doc"), flag(td, "tuple"),
              cJSON_GetObjectItemCaseSensitive(td, "fields"), false);
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, reqs) {
        snprintf(sname, sizeof(sname), "vw_req_%s", m->string);
        snprintf(dname, sizeof(dname), "req_%s", m->string);
        field_descs(o, sname, dname, m->string, cJSON_GetObjectItemCaseSensitive(m, "fields"),
                    since_of(m->string, m), false);
        tdesc(o, sname, dname, m->string, NULL, false,
              cJSON_GetObjectItemCaseSensitive(m, "fields"), true);
        snprintf(sname, sizeof(sname), "vw_rep_%s", m->string);
        snprintf(dname, sizeof(dname), "rep_%s", m->string);
        field_descs(o, sname, dname, m->string, cJSON_GetObjectItemCaseSensitive(m, "reply"),
                    since_of(m->string, m), false);
        tdesc(o, sname, dname, m->string, NULL, false,
              cJSON_GetObjectItemCaseSensitive(m, "reply"), true);
    }
    cJSON_ArrayForEach(m, evts) {
        snprintf(sname, sizeof(sname), "vw_evt_%s", m->string);
        snprintf(dname, sizeof(dname), "evt_%s", m->string);
        field_descs(o, sname, dname, m->string, cJSON_GetObjectItemCaseSensitive(m, "fields"),
                    since_of(m->string, m), false);
        tdesc(o, sname, dname, m->string, NULL, false,
              cJSON_GetObjectItemCaseSensitive(m, "fields"), true);
    }
    fprintf(o, "const struct vw_mdesc vw_requests[VW_REQ_COUNT] = {\n");
    cJSON_ArrayForEach(m, reqs) {
        fprintf(o, "    {\"%s\", ", m->string);
        c_string(o, str(m, "doc"));
        fprintf(o, ", &vw_td_req_%s, &vw_td_rep_%s, %d},\n", m->string, m->string,
                since_of(m->string, m));
    }
    fprintf(o, "};\n\nconst struct vw_mdesc vw_events[VW_EVT_COUNT] = {\n");
    cJSON_ArrayForEach(m, evts) {
        fprintf(o, "    {\"%s\", ", m->string);
        c_string(o, str(m, "doc"));
        fprintf(o, ", &vw_td_evt_%s, NULL, %d},\n", m->string, since_of(m->string, m));
    }
    fprintf(o, "};\n\n");
    /* Every frame's type is looked up: by binary search over the names in
     * sorted order, not one strcmp per message. */
    sorted_index(o, "req", reqs);
    sorted_index(o, "evt", evts);
    fprintf(o, "static int lookup(const char *name, const struct vw_mdesc *m,\n"
               "                  const unsigned char *sorted, int n)\n{\n"
               "    int lo = 0, hi = n - 1;\n"
               "    while (name && lo <= hi) {\n"
               "        int mid = (lo + hi) / 2;\n"
               "        int c = strcmp(name, m[sorted[mid]].name);\n"
               "        if (c == 0)\n            return sorted[mid];\n"
               "        if (c < 0)\n            hi = mid - 1;\n"
               "        else\n            lo = mid + 1;\n    }\n    return -1;\n}\n\n"
               "int vw_req_lookup(const char *name)\n{\n"
               "    return lookup(name, vw_requests, vw_req_sorted, VW_REQ_COUNT);\n}\n\n"
               "int vw_evt_lookup(const char *name)\n{\n"
               "    return lookup(name, vw_events, vw_evt_sorted, VW_EVT_COUNT);\n}\n\n"
               "const char *const vw_catalogue_errors[] = {\n");
    const cJSON *e;
    const cJSON *errs = cJSON_GetObjectItemCaseSensitive(cat, "errors");
    cJSON_ArrayForEach(e, errs) {
        fprintf(o, "    \"%s\", ", e->string);
        c_string(o, error_doc(e));
        fprintf(o, ",\n");
    }
    fprintf(o, "    NULL, NULL};\n\nconst struct vw_errdesc vw_errdescs[] = {\n");
    cJSON_ArrayForEach(e, errs) {
        fprintf(o, "    {\"%s\", ", e->string);
        c_string(o, error_doc(e));
        fprintf(o, ", %d, ", error_since(errs, e));
        c_string(o, cJSON_IsObject(e) ? str(e, "fallback") : NULL);
        fprintf(o, "},\n");
    }
    fprintf(o, "    {NULL, NULL, 0, NULL}};\n");
}

/* ---- the daemon's dispatch table ---------------------------------------- */

static void write_dispatch(FILE *h, FILE *c, const cJSON *cat)
{
    const cJSON *reqs = cJSON_GetObjectItemCaseSensitive(cat, "requests");
    fprintf(h, "/* Generated by vram_msggen from proto/messages.json: do not edit.\n"
               " * One typed handler per request (daemon/core/requests/handlers/); a request\n"
               " * added to the catalogue without its handler does not link. */\n"
               "#ifndef VD_DISPATCH_GEN_H\n#define VD_DISPATCH_GEN_H\n\n"
               "#include \"gen/vram_msg.h\"\n\nstruct vd_request;\n\n");
    const cJSON *m;
    cJSON_ArrayForEach(m, reqs)
        fprintf(h, "int vd_handle_%s(struct vd_request *rq, const struct vw_req_%s *m,\n"
                   "    struct vw_rep_%s *rep);\n", m->string, m->string, m->string);
    fprintf(h, "\ntypedef int (*vd_handler_fn)(struct vd_request *rq, const void *m,\n"
               "                             void *rep);\n"
               "extern const vd_handler_fn vd_handlers[VW_REQ_COUNT];\n\n#endif\n");
    fprintf(c, "/* Generated by vram_msggen from proto/messages.json: do not edit. */\n"
               "#include \"gen/vd_dispatch.h\"\n\n");
    cJSON_ArrayForEach(m, reqs)
        fprintf(c, "static int call_%s(struct vd_request *rq, const void *m, void *rep)\n"
                   "{\n    return vd_handle_%s(rq, m, rep);\n}\n\n", m->string, m->string);
    fprintf(c, "const vd_handler_fn vd_handlers[VW_REQ_COUNT] = {\n");
    cJSON_ArrayForEach(m, reqs) fprintf(c, "    call_%s,\n", m->string);
    fprintf(c, "};\n");
}

/* ---- libvram's generated calls ------------------------------------------ */

/* A request with "client": {"function": NAME, "args": [...], "out": [...]}
 * is one public call of vram.h that fills the request from its arguments,
 * sends it (vc_call, framed by vc_enter and vc_leave) and copies reply
 * fields out: NAME(vram_client *c, ARGS..., OUTS...). args are request
 * fields in the order of the parameters (default: every field, in the
 * catalogue's order; one left out is sent absent), out the reply fields
 * written through pointers on success (default: every field). Only what is
 * that plain fits: numbers and strings in, numbers out; a call with more to
 * do (mapping, tables, sleep) is written by hand in client/lib/. vram.h
 * declares NAME; the compiler checks that the two agree. */
struct stub_param {
    const cJSON *f;
    int s;
};

static int stub_fields(const char *where, const char *what, const cJSON *fields,
                       const cJSON *names, bool in, struct stub_param *out)
{
    int n = 0;
    if (names && !cJSON_IsArray(names))
        die("%s: client.%s must be an array of field names", where, what);
    const cJSON *f;
    if (names) {
        const cJSON *nm;
        cJSON_ArrayForEach(nm, names) {
            const char *name = cJSON_GetStringValue(nm);
            f = name ? cJSON_GetObjectItemCaseSensitive(fields, name) : NULL;
            if (!f)
                die("%s: client.%s names %s, not a field of its %s", where,
                    what, name ? name : "a non-string", in ? "request" : "reply");
            for (int i = 0; i < n; i++)
                if (out[i].f == f)
                    die("%s: client.%s names %s twice", where, what, name);
            if (n == 16)
                die("%s: client.%s: more than 16", where, what);
            out[n++].f = f;
        }
    } else {
        cJSON_ArrayForEach(f, fields) {
            if (n == 16)
                die("%s: client: more than 16 %s fields", where, what);
            out[n++].f = f;
        }
    }
    for (int i = 0; i < n; i++) {
        const char *obj = NULL;
        bool array;
        int s = field_type(where, out[i].f, &obj, &array);
        /* u32, u64, i64 both ways, strings in only (a reply's point into
         * memory freed before the call returns). */
        if (array || s < 0 || s == 3 || s == 5 || (s == 4 && !in))
            die("%s.%s: a generated client call takes numbers%s only; write "
                "this call by hand (client/lib/) and drop its \"client\"",
                where, out[i].f->string, in ? " and strings" : "");
        out[i].s = s;
    }
    /* What is not an argument is sent absent: it must be optional. */
    const cJSON *sent = in ? fields : NULL;
    cJSON_ArrayForEach(f, sent) {
        bool listed = false;
        for (int i = 0; i < n; i++)
            listed |= out[i].f == f;
        if (!listed && flag(f, "required"))
            die("%s.%s: required, so client.args must name it", where, f->string);
    }
    return n;
}

static void write_stubs(FILE *o, const cJSON *cat)
{
    fprintf(o, "/* Generated by vram_msggen from proto/messages.json: do not edit.\n"
               " * libvram's public calls that are one request, its fields from the\n"
               " * arguments and its reply's copied out (the requests with \"client\";\n"
               " * vram.h declares them). */\n"
               "#include <errno.h>\n#include <stddef.h>\n\n"
               "#include \"client/lib/call.h\"\n#include \"client/lib/call_frame.h\"\n#include \"client/lib/error.h\"\n"
               "#include \"client/include/vram.h\"\n#include \"gen/vram_msg.h\"\n");
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(cat, "requests")) {
        const cJSON *cl = cJSON_GetObjectItemCaseSensitive(m, "client");
        if (!cl)
            continue;
        const char *fn = str(cl, "function");
        if (!cJSON_IsObject(cl) || !fn || strncmp(fn, "vram_", 5) != 0)
            die("%s: client needs function, a public name (vram_...)", m->string);
        struct stub_param args[16], outs[16];
        const cJSON *rf = cJSON_GetObjectItemCaseSensitive(m, "reply");
        int na = stub_fields(m->string, "args", cJSON_GetObjectItemCaseSensitive(m, "fields"),
                             cJSON_GetObjectItemCaseSensitive(cl, "args"), true, args);
        int no = stub_fields(m->string, "out", rf,
                             cJSON_GetObjectItemCaseSensitive(cl, "out"), false, outs);
        if (no != cJSON_GetArraySize(rf))
            die("%s: client.out leaves reply fields out (every one is copied)",
                m->string);
        char up[128];
        upper(up, m->string, sizeof(up));
        fprintf(o, "\nint %s(vram_client *c", fn);
        for (int i = 0; i < na; i++)
            fprintf(o, ", %s%s%s", ctypes[args[i].s], args[i].s == 4 ? "" : " ",
                    args[i].f->string);
        for (int i = 0; i < no; i++)
            fprintf(o, ", %s *%s_out", ctypes[outs[i].s], outs[i].f->string);
        fprintf(o, ")\n{\n    struct vw_req_%s m = {", m->string);
        for (int i = 0; i < na; i++) {
            const char *f = args[i].f->string;
            if (!flag(args[i].f, "required") && args[i].s != 4)
                fprintf(o, "%s.has_%s = true, .%s = %s", i ? ", " : "", f, f, f);
            else
                fprintf(o, "%s.%s = %s", i ? ", " : "", f, f);
        }
        fprintf(o, "%s};\n", na ? "" : "0");
        if (no)
            fprintf(o, "    struct vw_rep_%s rep;\n", m->string);
        fprintf(o, "    vc_enter(c);\n");
        for (int i = 0; i < na; i++)
            if (args[i].s == 4 && flag(args[i].f, "required"))
                fprintf(o, "    if (!%s)\n        return vc_leave(c, vc_set_error(c, "
                           "-EINVAL, \"no %s\"));\n",
                        args[i].f->string, args[i].f->string);
        fprintf(o, "    int e = vc_call(c, VW_REQ_%s, &m, %s, NULL);\n", up,
                no ? "&rep" : "NULL");
        for (int i = 0; i < no; i++)
            fprintf(o, "    if (e == 0 && %s_out)\n        *%s_out = rep.%s;\n",
                    outs[i].f->string, outs[i].f->string, outs[i].f->string);
        fprintf(o, "    return vc_leave(c, e);\n}\n");
    }
}

/* ---- the message reference ---------------------------------------------- */

static void md_text(const char *s)
{
    for (; s && *s; s++)
        if (*s == '|')
            fputs("\\|", stdout);
        else
            fputc(*s, stdout);
}

static void md_fields(const char *where, const cJSON *fields)
{
    if (!cJSON_GetArraySize(fields)) {
        printf("(no fields)\n\n");
        return;
    }
    printf("| field | type | |\n| --- | --- | --- |\n");
    const cJSON *f;
    cJSON_ArrayForEach(f, fields) {
        const char *obj = NULL;
        bool array;
        int s = field_type(where, f, &obj, &array);
        const char *t = s >= 0 ? scalars[s] : obj;
        printf("| `%s` | %s%s%s", f->string, array ? "array of " : "", t,
               flag(f, "required") ? ", required" : "");
        if (maxof(f))
            printf(", at most %u%s", maxof(f), s == 4 && !array ? " bytes" : "");
        char at[256];
        snprintf(at, sizeof(at), "%s.%s", where, f->string);
        if (since_of(at, f) > 1)
            printf(", since version %d", since_of(at, f));
        printf(" | ");
        md_text(str(f, "doc"));
        printf(" |\n");
    }
    printf("\n");
}

static void write_markdown(const cJSON *cat)
{
    printf("### Requests\n\n");
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(cat, "requests")) {
        printf("#### `%s`\n\n", m->string);
        if (since_of(m->string, m) > 1)
            printf("Since version %d. ", since_of(m->string, m));
        md_text(str(m, "doc"));
        printf("\n\nRequest:\n\n");
        md_fields(m->string, cJSON_GetObjectItemCaseSensitive(m, "fields"));
        printf("Reply:\n\n");
        md_fields(m->string, cJSON_GetObjectItemCaseSensitive(m, "reply"));
    }
    printf("### Events\n\n");
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(cat, "events")) {
        printf("#### `%s`\n\n", m->string);
        if (since_of(m->string, m) > 1)
            printf("Since version %d. ", since_of(m->string, m));
        md_text(str(m, "doc"));
        printf("\n\n");
        md_fields(m->string, cJSON_GetObjectItemCaseSensitive(m, "fields"));
    }
    printf("### Types\n\n");
    for (int i = 0; i < norder; i++) {
        const cJSON *td = type_def(order[i]);
        printf("#### `%s`\n\n", order[i]);
        if (str(td, "doc")) {
            md_text(str(td, "doc"));
            printf("\n\n");
        }
        if (flag(td, "tuple"))
            printf("Written as an array of its fields, in order.\n\n");
        md_fields(order[i], cJSON_GetObjectItemCaseSensitive(td, "fields"));
    }
    printf("### Errors\n\n| error | meaning |\n| --- | --- |\n");
    const cJSON *e;
    const cJSON *errs = cJSON_GetObjectItemCaseSensitive(cat, "errors");
    cJSON_ArrayForEach(e, errs) {
        printf("| `%s` | ", e->string);
        md_text(error_doc(e));
        if (error_since(errs, e) > 1)
            printf(" (since version %d; %s before it)", error_since(errs, e),
                   str(e, "fallback"));
        printf(" |\n");
    }
}

/* ---- main --------------------------------------------------------------- */

static cJSON *load(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "vram_msggen: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *cat = cJSON_Parse(buf);
    if (!cat)
        die("not valid JSON (near: %.40s)", cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "?");
    const cJSON *nv = cJSON_GetObjectItemCaseSensitive(cat, "protocol_version");
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(cat, "oldest_version");
    if (!cJSON_IsNumber(nv) || nv->valueint < 1)
        die("protocol_version: the newest version, a whole number from 1");
    newest_version = nv->valueint;
    oldest_version = ov ? (cJSON_IsNumber(ov) ? ov->valueint : 0) : 1;
    if (oldest_version < 1 || oldest_version > newest_version)
        die("oldest_version: from 1 to protocol_version (%d)", newest_version);
    types_obj = cJSON_GetObjectItemCaseSensitive(cat, "types");
    if (!cJSON_IsObject(types_obj) ||
        !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(cat, "requests")) ||
        !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(cat, "events")))
        die("needs objects types, requests and events");
    const cJSON *t;
    cJSON_ArrayForEach(t, types_obj) visit(t->string, 0);
    return cat;
}

static FILE *open_out(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "vram_msggen: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return f;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--markdown") == 0) {
        catalogue_path = argv[2];
        cJSON *cat = load(argv[2]);
        write_markdown(cat);
        cJSON_Delete(cat);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: vram_msggen CATALOGUE OUTDIR | --markdown CATALOGUE\n");
        return 2;
    }
    catalogue_path = argv[1];
    cJSON *cat = load(argv[1]);
    FILE *h = open_out(argv[2], "vram_msg.h"), *c = open_out(argv[2], "vram_msg.c");
    write_header(h, cat);
    write_source(c, cat);
    FILE *dh = open_out(argv[2], "vd_dispatch.h"), *dc = open_out(argv[2], "vd_dispatch.c");
    write_dispatch(dh, dc, cat);
    FILE *sc = open_out(argv[2], "vc_stubs.c");
    write_stubs(sc, cat);
    int bad = 0;
    FILE *all[] = {h, c, dh, dc, sc};
    for (int i = 0; i < 5; i++)
        bad |= fclose(all[i]) != 0;
    cJSON_Delete(cat);
    return bad;
}
