/* SPDX-License-Identifier: Apache-2.0 */
/* Text from the daemon is shown safely by every view of vramctl, one rule
 * for all: a fake vramd (fake_vramd.c, the real wire format) whose status
 * names (a client's name and state, a device's name and uuid, a region's
 * name and kind, the version and backend) and weight set names carry ESC
 * sequences, CR, BEL, DEL, a C1 CSI (raw and as \u009b) and a byte that is
 * not UTF-8. Then:
 *  - status, clients, stages, loans, weights, top (one frame, no
 *    terminal), metrics and one scrape of metrics --listen print no raw
 *    control byte (only newlines), only UTF-8, and the names escaped the
 *    same way (\x1b...), metrics inside valid label values;
 *  - status --json, clients --json, stages --json, loans --json and
 *    weights --json (its list in two frames, merged) are
 *    valid JSON with the real strings (the byte that is not UTF-8 as
 *    U+FFFD), and no raw control byte but JSON's own layout;
 *  - a name holding \u0000 (NUL, which would cut the C string unseen) is
 *    refused, saying so; a refusal's message from the daemon reaches
 *    stderr escaped. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tests/check.h"
#include "tests/integration/fake_vramd.h"
#include "proto/text.h"

#define DEADLINE_MS 60000

enum mode { HOSTILE, WITH_NUL, REFUSED };

/* The client's name as JSON text (its raw bytes C2 9B, FF, C3 A9 in the
 * text itself), and the C string a reader gets from it. */
#define NAME_JSON "evil\\u001b[2J\\u001b]0;pwned\\u0007\\r\\u007f\xc2\x9b" "31m\\u009b\xff\xc3\xa9"
#define NAME_REAL "evil\x1b[2J\x1b]0;pwned\x07\r\x7f\xc2\x9b" "31m\xc2\x9b\xff\xc3\xa9"
/* ... as JSON output gives it back: the byte that is not UTF-8 as U+FFFD. */
#define NAME_JSON_OUT "evil\x1b[2J\x1b]0;pwned\x07\r\x7f\xc2\x9b" "31m\xc2\x9b\xef\xbf\xbd\xc3\xa9"
/* ... as every text view shows it. */
#define NAME_SHOWN "evil\\x1b[2J\\x1b]0;pwned\\x07\\x0d\\x7f\\xc2\\x9b31m\\xc2\\x9b\\xff\xc3\xa9"

static const char status_head[] =
    "{\"type\":\"reply\",\"id\":%llu,\"ok\":true,\"protocol_version\":1,"
    "\"backend\":\"h\\u001b[2J\",\"daemon\":{\"pid\":4242,"
    "\"version\":\"v\\u001b]0;x\\u0007\",\"uptime_ms\":1,\"chunk_fds\":0},"
    "\"counters\":{\"grants\":0,\"moves\":0,\"recalls\":0,\"recalls_missed\":0,"
    "\"releases\":0,\"errors\":0,\"protocol_errors\":0,\"disconnects\":0,"
    "\"kept_after_release\":0},"
    "\"devices\":[{\"id\":0,\"backend\":\"h\\u001b[2J\",\"name\":\"gpu\\u001b[1A\\r\","
    "\"uuid\":\"u\\r\\u007f\",\"chunk_bytes\":2097152,\"capacity_bytes\":1073741824,"
    "\"free_bytes\":1069547520,\"max_capacity_bytes\":1073741824,"
    "\"granted_bytes\":4194304,\"fixed_bytes\":4194304,\"kv_bytes\":0,"
    "\"loaned_bytes\":0,\"recalling_bytes\":0,\"quarantined_bytes\":0,"
    "\"reserved_bytes\":0,\"total_bytes\":1073741824,\"pool_ready_chunks\":0,"
    "\"lend_unreserved\":false}],"
    "\"stages\":[{\"id\":0,\"device\":0,\"first_layer\":0,\"last_layer\":1,"
    "\"configured\":true,\"owner\":1,\"kv_mapped_bytes\":0,\"kv_needed_bytes\":0,"
    "\"kv_max_bytes\":2097152,\"expert_loaned_bytes\":0,\"expert_slots_backed\":0,"
    "\"expert_slot_bytes\":2097152,\"expert_slots\":4,\"recalls_pending\":0,"
    "\"residency_version\":0,\"fixed_bytes\":4194304,"
    "\"fixed_reserved_bytes\":4194304,\"lend\":true,\"hold_ms\":1,"
    "\"recall_deadline_ms\":1,"
    "\"regions\":[{\"id\":1,\"stage\":0,\"kind\":\"fixed\\u001b[8m\",\"device\":0,"
    "\"base\":35184372088832,\"lane_stride\":4194304,\"va_bytes\":4194304,"
    "\"lanes\":1,\"lane_slots\":2,\"stride_slots\":2,\"chunk_bytes\":2097152,"
    "\"chunks\":2,\"name\":\"w\\u001b[31m\\r\"}]}],"
    "\"clients\":[{\"id\":1,\"name\":\"%s\",\"pid\":4343,\"role\":\"engine\","
    "\"state\":\"conn\\u001b[5m\\r\",\"held_bytes\":4194304,"
    "\"quarantined_bytes\":0,\"delinquent\":false,\"missed_recalls\":0,"
    "\"stages\":[0]}]}";

/* A frame of the weight sets' list: one set. */
static const char weights_head[] =
    "{\"type\":\"reply\",\"id\":%llu,\"ok\":true%s,\"sets\":[{\"id\":%u,"
    "\"name\":\"%s\",\"device\":0,\"bytes\":8388608,\"alloc_bytes\":8388608,"
    "\"allocs\":1,\"key\":\"0102030400000000000000000000000000000000000000000000"
    "000000000000\",\"state\":\"cached\",\"users\":0,\"keep\":false,"
    "\"owner\":0,\"created_ms\":1,\"sealed_ms\":2,\"last_use_ms\":3}]}";

static void answer(struct fake_conn *c, uint64_t id, void *ud)
{
    enum mode m = *(const enum mode *)ud;
    char text[8192];
    int n;
    const char *name = m == WITH_NUL ? "ok\\u0000\\u001b[2J" : NAME_JSON;
    if (strcmp(fake_request_type(c), "weights_list") == 0 && m != REFUSED) {
        /* In two frames, as vramd splits a long list: the set named as the
         * client is, then one named plainly. */
        n = snprintf(text, sizeof(text), weights_head, (unsigned long long)id,
                     ",\"more\":true", 1u, name);
        fake_send(c, text, (size_t)n);
        n = snprintf(text, sizeof(text), weights_head, (unsigned long long)id, "",
                     2u, "plain/two");
        fake_send(c, text, (size_t)n);
        return;
    }
    if (m == REFUSED)
        n = snprintf(text, sizeof(text), "{\"type\":\"reply\",\"id\":%llu,"
                     "\"ok\":false,\"error\":\"EIO\",\"message\":\"the backend "
                     "failed\\u001b[2J\\r\\u009b\"}", (unsigned long long)id);
    else
        n = snprintf(text, sizeof(text), status_head, (unsigned long long)id, name);
    fake_send(c, text, (size_t)n);
}

/* No byte a terminal obeys: only UTF-8, no C0 control but the newline
 * (and the tab of JSON's layout, when json), no DEL, no C1. */
static bool clean(const char *what, const char *text, size_t len, bool json)
{
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t k = vw_utf8_len(p + i, len - i);
        unsigned char c = p[i];
        bool bad = k == 0 || c == 0x7f || (k == 2 && c == 0xc2 && p[i + 1] < 0xa0) ||
                   (c < 0x20 && c != '\n' && !(json && c == '\t'));
        if (bad) {
            CHECK(false, "%s: a raw byte 0x%02x at %zu: ...%.40s", what, c, i,
                  text + (i > 20 ? i - 20 : 0));
            return false;
        }
        i += k;
    }
    return true;
}

static void run(const struct fake_vramd *f, const char *bin, const char *cmd,
                const char *opt, struct tool_run *r)
{
    const char *argv[] = {bin, "--socket", f->sock, cmd, opt, NULL};
    tool_run(argv, DEADLINE_MS, 0, r);
    CHECK(!r->killed, "vramctl %s %s ran past the deadline", cmd, opt ? opt : "");
}

static void text_view(const struct fake_vramd *f, const char *bin, const char *cmd,
                      const char *const *want)
{
    struct tool_run r;
    run(f, bin, cmd, NULL, &r);
    char what[64];
    snprintf(what, sizeof(what), "vramctl %s", cmd);
    CHECK(r.status == 0, "%s: exit %d: %s", what, r.status, r.err);
    clean(what, r.out, r.out_len, false);
    clean(what, r.err, r.err_len, false);
    for (; want && *want; want++)
        CHECK(strstr(r.out, *want), "%s does not show '%s':\n%s", what, *want, r.out);
    tool_run_free(&r);
}

static const char *str_at(const cJSON *o, const char *path)
{
    /* "a.0.b": keys and indexes. */
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *k = strtok(buf, "."); k && o; k = strtok(NULL, "."))
        o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(k))
                             : cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_GetStringValue(o);
}

static void json_view(const struct fake_vramd *f, const char *bin, const char *cmd,
                      const char *const *paths, const char *const *want)
{
    struct tool_run r;
    run(f, bin, cmd, "--json", &r);
    char what[64];
    snprintf(what, sizeof(what), "vramctl %s --json", cmd);
    CHECK(r.status == 0, "%s: exit %d: %s", what, r.status, r.err);
    clean(what, r.out, r.out_len, true);
    cJSON *o = cJSON_Parse(r.out);
    CHECK(o, "%s is not JSON:\n%s", what, r.out);
    for (; o && *paths; paths++, want++) {
        const char *s = str_at(o, *paths);
        CHECK(s && strcmp(s, *want) == 0, "%s: %s is not the daemon's string: %s",
              what, *paths, r.out);
    }
    cJSON_Delete(o);
    tool_run_free(&r);
}

static void scrape(const struct fake_vramd *f, const char *bin,
                   const char *const *want)
{
    const char *argv[] = {bin, "--socket", f->sock, "metrics", "--listen",
                          "127.0.0.1:0", NULL};
    int out;
    pid_t pid = tool_start(argv, 0, &out);
    FILE *o = fdopen(out, "r");
    char line[512] = "";
    int port = 0;
    if (o && fgets(line, sizeof(line), o) && strstr(line, "http://127.0.0.1:"))
        port = atoi(strstr(line, "http://127.0.0.1:") + strlen("http://127.0.0.1:"));
    CHECK(port > 0, "the exporter printed no address: '%s'", line);
    char *body = NULL;
    size_t n = 0;
    int code = port > 0 ? http_get(port, "/metrics", DEADLINE_MS, &body, &n) : 0;
    kill(pid, SIGTERM);
    CHECK(tool_wait(pid, DEADLINE_MS, NULL) == 0, "the exporter's exit");
    if (o)
        fclose(o);
    CHECK(code == 200 && body, "a scrape: %d", code);
    if (body) {
        clean("a scrape of vramctl metrics --listen", body, n, false);
        for (; *want; want++)
            CHECK(strstr(body, *want), "a scrape does not show '%s':\n%s", *want, body);
    }
    free(body);
}

int main(void)
{
    const char *bin = getenv("VRAMCTL_BIN");
    REQUIRE(bin, "VRAMCTL_BIN is not set");
    signal(SIGPIPE, SIG_IGN);
    struct fake_vramd f;
    enum mode mode = HOSTILE;
    REQUIRE(fake_vramd_start(&f, answer, &mode) == 0, "start the fake vramd");

    /* Tables cut the name at 20 bytes, between whole escapes. */
    const char *status[] = {"evil\\x1b[2J\\x1b]0;pw", "conn\\x1b[5m\\x0d",
                            "gpu\\x1b[1A\\x0d", "h\\x1b[2J", "u\\x0d\\x7f", NULL};
    text_view(&f, bin, "status", status);
    const char *clients[] = {"evil\\x1b[2J\\x1b]0;pw", "conn\\x1b[5m\\x0d", NULL};
    text_view(&f, bin, "clients", clients);
    text_view(&f, bin, "stages", NULL);
    text_view(&f, bin, "loans", NULL);
    /* weights: a set's name whole (vramctl weights drop takes it); the
     * list's two frames merged. */
    const char *weights[] = {NAME_SHOWN, "\nplain/two ", NULL};
    text_view(&f, bin, "weights", weights);
    /* top: beyond ASCII, one '?' a character. */
    const char *top[] = {"evil\\x1b[2J\\x1b]0;pw", "conn\\x1b[5m\\x0d",
                         "gpu\\x1b[1A\\x0d", "vramd v\\x1b]0;x\\x07 (h\\x1b[2J)", NULL};
    text_view(&f, bin, "top", top);
    /* metrics: the same escapes, then the label's own (\\ for \). */
    const char *metrics[] = {
        "name=\"evil\\\\x1b[2J\\\\x1b]0;pwned\\\\x07\\\\x0d\\\\x7f\\\\xc2\\\\x9b31m"
        "\\\\xc2\\\\x9b\\\\xff\xc3\xa9\"",
        "state=\"conn\\\\x1b[5m\\\\x0d\"",
        "vramd_info{version=\"v\\\\x1b]0;x\\\\x07\",backend=\"h\\\\x1b[2J\"} 1",
        NULL};
    text_view(&f, bin, "metrics", metrics);
    scrape(&f, bin, metrics);
    {
        char text[256];
        vw_text_escape(text, sizeof(text), NAME_REAL);
        CHECK(strcmp(text, NAME_SHOWN) == 0, "the name escapes to %s", text);
    }

    const char *st_paths[] = {"clients.0.name", "clients.0.state", "devices.0.name",
                              "devices.0.uuid", "stages.0.regions.0.name",
                              "stages.0.regions.0.kind", "daemon.version", NULL};
    const char *st_want[] = {NAME_JSON_OUT, "conn\x1b[5m\r", "gpu\x1b[1A\r",
                             "u\r\x7f", "w\x1b[31m\r", "fixed\x1b[8m",
                             "v\x1b]0;x\x07"};
    json_view(&f, bin, "status", st_paths, st_want);
    const char *cl_paths[] = {"clients.0.name", "clients.0.state", NULL};
    const char *cl_want[] = {NAME_JSON_OUT, "conn\x1b[5m\r"};
    json_view(&f, bin, "clients", cl_paths, cl_want);
    const char *sg_paths[] = {"stages.0.regions.0.name", "stages.0.regions.0.kind", NULL};
    const char *sg_want[] = {"w\x1b[31m\r", "fixed\x1b[8m"};
    json_view(&f, bin, "stages", sg_paths, sg_want);
    json_view(&f, bin, "loans", sg_paths, sg_want);
    const char *ws_paths[] = {"sets.0.name", "sets.0.state", "sets.1.name", NULL};
    const char *ws_want[] = {NAME_JSON_OUT, "cached", "plain/two"};
    json_view(&f, bin, "weights", ws_paths, ws_want);
    fake_vramd_stop(&f);

    /* A NUL in a string: refused, saying so, nothing raw shown. */
    mode = WITH_NUL;
    REQUIRE(fake_vramd_start(&f, answer, &mode) == 0, "start the fake vramd");
    const char *views[] = {"status", "clients", "metrics", "weights", NULL};
    for (const char *const *v = views; *v; v++) {
        struct tool_run r;
        run(&f, bin, *v, NULL, &r);
        CHECK(r.status == 1 && strstr(r.err, "NUL (\\u0000)"),
              "vramctl %s with a NUL in a name: exit %d: %s", *v, r.status, r.err);
        clean("a NUL's refusal", r.out, r.out_len, false);
        clean("a NUL's refusal", r.err, r.err_len, false);
        tool_run_free(&r);
    }
    fake_vramd_stop(&f);

    /* The daemon's own message for a refusal, escaped on stderr. */
    mode = REFUSED;
    REQUIRE(fake_vramd_start(&f, answer, &mode) == 0, "start the fake vramd");
    const char *refused[] = {"status", "weights", NULL};
    for (const char *const *v = refused; *v; v++) {
        struct tool_run r;
        run(&f, bin, *v, NULL, &r);
        CHECK(r.status == 1 &&
                  strstr(r.err, "the backend failed\\x1b[2J\\x0d\\xc2\\x9b"),
              "a refusal of %s: exit %d: %s", *v, r.status, r.err);
        clean("a refusal's message", r.err, r.err_len, false);
        tool_run_free(&r);
    }
    fake_vramd_stop(&f);
    return check_report("test_peer_text");
}
