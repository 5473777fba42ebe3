/* SPDX-License-Identifier: Apache-2.0 */
/* Replies in several frames (more: true) are bounded: a daemon that never
 * stops sending them, in four ways (new clients past the catalogue's
 * 65,536; one stage continued past its 4,096 regions; new stages with
 * regions, which no maximum of an array stops before 64 MiB; empty frames),
 * and one that sends a legal status of 65,536 clients, in large frames and
 * in small ones. The fake daemon is a real process speaking the wire
 * format (fake_vramd.c).
 *  - libvram in this process, with a timeout no load reaches, refuses each
 *    flood but the empty frames' with EPROTO naming the bound it passed.
 *  - vramctl status (and, but for the empty frames and the large ones,
 *    vramctl metrics and one scrape of vramctl metrics --listen) ends or
 *    answers within its timeout (50 s given; the scrape's is 10 s), a flood refused saying why
 *    (or, for the floods that need 64 MiB, on a loaded machine, timed
 *    out), the legal status shown whole, each tool under 256 MiB of peak
 *    resident memory (the child's getrusage; not under AddressSanitizer,
 *    whose shadow and quarantine are not the program's).
 * A runaway tool is capped at 2 GiB of address space, so that it fails the
 * check instead of taking the machine's memory; the deadlines are generous
 * for a loaded machine. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"
#include "tests/integration/fake_vramd.h"
#include "proto/json.h"
#include "client/include/vram.h"

#define NCLIENTS 65536
#define RSS_LIMIT_KIB (256L * 1024)
#define AS_CAP (2ull << 30)
#define DEADLINE_MS 60000 /* the tools' own timeout is 10 s */

enum mode {
    FLOOD_CLIENTS, /* new clients in every frame, never the last frame */
    FLOOD_REGIONS, /* stage 0 continued in every frame, its regions growing */
    FLOOD_STAGES,  /* new stages of 64 regions each */
    FLOOD_EMPTY,   /* frames with nothing but more: true */
    LEGAL_LARGE,   /* 65,536 clients in frames of about 256 KiB */
    LEGAL_SMALL,   /* the same in frames of 64 clients */
};

static const char *const mode_name[] = {
    "flood of clients", "flood of one stage's regions", "flood of stages",
    "flood of empty frames", "65,536 clients in large frames",
    "65,536 clients in small frames"};

static void head(struct vw_jw *w, uint64_t id, bool more)
{
    char s[96];
    snprintf(s, sizeof(s), "{\"type\":\"reply\",\"id\":%llu,\"ok\":true%s",
             (unsigned long long)id, more ? ",\"more\":true" : "");
    vw_jw_lit(w, s);
}

static void client(struct vw_jw *w, uint32_t id)
{
    char s[320];
    snprintf(s, sizeof(s), "{\"id\":%u,\"name\":\"engine-%u\",\"pid\":%u,"
             "\"role\":\"engine\",\"state\":\"connected\",\"held_bytes\":2097152,"
             "\"quarantined_bytes\":0,\"delinquent\":false,\"missed_recalls\":0,"
             "\"stages\":[]}", id, id, 100000 + id);
    vw_jw_lit(w, s);
}

static void stage_open(struct vw_jw *w, uint32_t id)
{
    char s[640];
    snprintf(s, sizeof(s), "{\"id\":%u,\"device\":0,\"first_layer\":0,"
             "\"last_layer\":1,\"configured\":false,\"kv_mapped_bytes\":0,"
             "\"kv_needed_bytes\":0,\"kv_max_bytes\":0,\"expert_loaned_bytes\":0,"
             "\"expert_slots_backed\":0,\"expert_slot_bytes\":0,"
             "\"recalls_pending\":0,\"residency_version\":0,\"fixed_bytes\":0,"
             "\"fixed_reserved_bytes\":0,\"regions\":[", id);
    vw_jw_lit(w, s);
}

static void region(struct vw_jw *w, uint32_t id, uint32_t stage, bool comma)
{
    char s[320];
    snprintf(s, sizeof(s), "%s{\"id\":%u,\"stage\":%u,\"kind\":\"fixed\","
             "\"device\":0,\"base\":%llu,\"lane_stride\":2097152,"
             "\"va_bytes\":2097152,\"lanes\":1,\"lane_slots\":1,"
             "\"stride_slots\":1,\"chunk_bytes\":2097152,\"chunks\":1}",
             comma ? "," : "", id, stage,
             (unsigned long long)(0x200000000000ull + (uint64_t)id * 2097152));
    vw_jw_lit(w, s);
}

/* The fields the last frame of a status carries besides its clients. */
static void rest(struct vw_jw *w)
{
    vw_jw_lit(w, ",\"protocol_version\":1,\"backend\":\"host\","
                "\"daemon\":{\"pid\":4242,\"version\":\"fake\",\"uptime_ms\":1,"
                "\"chunk_fds\":0},\"counters\":{\"grants\":0,\"moves\":0,"
                "\"recalls\":0,\"recalls_missed\":0,\"releases\":0,\"errors\":0,"
                "\"protocol_errors\":0,\"disconnects\":0,\"kept_after_release\":0},"
                "\"devices\":[{\"id\":0,\"backend\":\"host\",\"name\":\"fake\","
                "\"chunk_bytes\":2097152,\"capacity_bytes\":1073741824,"
                "\"free_bytes\":0,\"max_capacity_bytes\":1073741824,"
                "\"granted_bytes\":0,\"fixed_bytes\":0,\"kv_bytes\":0,"
                "\"loaned_bytes\":0,\"recalling_bytes\":0,\"quarantined_bytes\":0,"
                "\"reserved_bytes\":0,\"total_bytes\":1073741824,"
                "\"pool_ready_chunks\":0,\"lend_unreserved\":false}],"
                "\"stages\":[]");
}

static int send_text(struct fake_conn *c, struct vw_jw *w)
{
    int r = w->oom ? -1 : fake_send(c, w->p, w->len);
    w->len = 0;
    return r;
}

static void flood(struct fake_conn *c, uint64_t id, enum mode m)
{
    struct vw_jw w = {0};
    for (uint32_t frame = 0;; frame++) {
        head(&w, id, true);
        if (m == FLOOD_CLIENTS) {
            vw_jw_lit(&w, ",\"clients\":[");
            for (uint32_t i = 0; i < 4096; i++) {
                if (i)
                    vw_jw_lit(&w, ",");
                client(&w, frame * 4096 + i + 1);
            }
            vw_jw_lit(&w, "]");
        } else if (m == FLOOD_REGIONS) {
            vw_jw_lit(&w, ",\"stages\":[");
            stage_open(&w, 0);
            for (uint32_t i = 0; i < 4096; i++)
                region(&w, frame * 4096 + i + 1, 0, i > 0);
            vw_jw_lit(&w, "]}]");
        } else if (m == FLOOD_STAGES) {
            vw_jw_lit(&w, ",\"stages\":[");
            for (uint32_t s = 0; s < 64; s++) {
                uint32_t sid = frame * 64 + s;
                if (s)
                    vw_jw_lit(&w, ",");
                stage_open(&w, sid);
                for (uint32_t i = 0; i < 64; i++)
                    region(&w, sid * 64 + i + 1, sid, i > 0);
                vw_jw_lit(&w, "]}");
            }
            vw_jw_lit(&w, "]");
        }
        vw_jw_lit(&w, "}");
        if (send_text(c, &w) < 0)
            break;
    }
    vw_jw_free(&w);
}

static void legal(struct fake_conn *c, uint64_t id, uint32_t per_frame)
{
    struct vw_jw w = {0};
    for (uint32_t first = 1; first <= NCLIENTS; first += per_frame) {
        uint32_t end = first + per_frame;
        bool last = end > NCLIENTS;
        if (last)
            end = NCLIENTS + 1;
        head(&w, id, !last);
        if (last)
            rest(&w);
        vw_jw_lit(&w, ",\"clients\":[");
        for (uint32_t k = first; k < end; k++) {
            if (k > first)
                vw_jw_lit(&w, ",");
            client(&w, k);
        }
        vw_jw_lit(&w, "]}");
        if (send_text(c, &w) < 0)
            break;
    }
    vw_jw_free(&w);
}

static void answer(struct fake_conn *c, uint64_t id, void *ud)
{
    enum mode m = *(const enum mode *)ud;
    if (m == LEGAL_LARGE)
        legal(c, id, 1500); /* about 256 KiB a frame, as vramd splits */
    else if (m == LEGAL_SMALL)
        legal(c, id, 64);
    else
        flood(c, id, m);
}

static size_t as_cap(void)
{
    return under_asan() ? 0 : AS_CAP;
}

static void check_rss(const char *what, enum mode m, long kib)
{
    printf("  %-28s %-32s peak RSS %7.1f MiB\n", what, mode_name[m], kib / 1024.0);
    if (!under_asan())
        CHECK(kib < RSS_LIMIT_KIB, "%s against a %s: peak RSS %.1f MiB, over 256 MiB",
              what, mode_name[m], kib / 1024.0);
}

/* What a refused flood says: the bound it passed. */
static bool says_bound(const char *text, enum mode m)
{
    /* Empty frames reach the total in 6-7 s of a plain build, 64 MiB of
     * stages in 2 s (10 under AddressSanitizer): on a loaded machine the
     * tools' timeout may come first, which bounds them too (library()
     * checks the refusal itself). */
    if (m == FLOOD_EMPTY || m == FLOOD_STAGES)
        return strstr(text, "64 MiB") || strstr(text, "no reply from vramd");
    return strstr(text, "over the reply's frames") != NULL;
}

static bool flooding(enum mode m)
{
    return m != LEGAL_LARGE && m != LEGAL_SMALL;
}

static void one_shot(const struct fake_vramd *f, const char *bin, enum mode m,
                     const char *cmd)
{
    /* 50 s for the reply (under the 60 s deadline): a legal status of
     * 65,536 clients takes vramctl more than its default 10 s on a loaded
     * machine (seen once in a full run beside the soak). */
    const char *argv[] = {bin, "--socket", f->sock, "--timeout", "50000", cmd, NULL};
    struct tool_run r;
    tool_run(argv, DEADLINE_MS, as_cap(), &r);
    char what[64];
    snprintf(what, sizeof(what), "vramctl %s (%.2f s)", cmd, r.seconds);
    check_rss(what, m, r.maxrss_kib);
    CHECK(!r.killed, "vramctl %s against a %s ran past %d s", cmd, mode_name[m],
          DEADLINE_MS / 1000);
    if (flooding(m)) {
        CHECK(r.status == 1 && says_bound(r.err, m),
              "vramctl %s against a %s: exit %d, stderr: %.300s", cmd,
              mode_name[m], r.status, r.err);
        if (strcmp(cmd, "metrics") == 0)
            CHECK(strstr(r.out, "\nvramd_up 0\n") != NULL,
                  "vramctl metrics against a %s: no vramd_up 0", mode_name[m]);
    } else {
        CHECK(r.status == 0, "vramctl %s against a %s: exit %d, stderr: %.300s",
              cmd, mode_name[m], r.status, r.err);
        const char *want = strcmp(cmd, "metrics") == 0
                               ? "vramd_client_held_bytes{client=\"65536\","
                                 "name=\"engine-65536\"} 2097152\n"
                               : "\n65536  engine-65536";
        CHECK(strstr(r.out, want) != NULL, "vramctl %s against a %s: the last "
              "client is not shown", cmd, mode_name[m]);
        if (strcmp(cmd, "status") == 0) {
            size_t rows = 0;
            for (const char *p = r.out; (p = strstr(p, "  engine-")); p++)
                rows++;
            CHECK(rows == NCLIENTS, "vramctl status: %zu client rows", rows);
        }
    }
    tool_run_free(&r);
}

/* libvram itself, with a timeout far beyond any load: each flood is
 * refused with EPROTO for the bound it passed, saying so, whatever the
 * machine's speed (the tools above may meet their timeout first). */
static void library(const struct fake_vramd *f, enum mode m)
{
    char err[512] = "";
    struct vram_client_options o = {.name = "bounds", .ctl = 1,
                                    .timeout_ms = DEADLINE_MS * 2, .error = err,
                                    .error_len = sizeof(err), .reconnect_ms = -1};
    vram_client *c;
    REQUIRE(vram_client_connect(f->sock, &o, &c) == 0, "connect: %s", err);
    char *text = NULL;
    int e = vram_status_json(c, &text);
    const char *why = vram_client_last_error(c);
    bool bound = m == FLOOD_STAGES
                     ? strstr(why, "reply is over 64 MiB") != NULL
                     : strstr(why, "over the reply's frames") != NULL;
    CHECK(e == -EPROTO && bound, "libvram against a %s: %d, %s", mode_name[m], e,
          why);
    printf("  libvram against a %s: %s\n", mode_name[m], why);
    vram_free(text);
    vram_client_close(c);
}

/* The exporter: started, scraped once, stopped. */
static void scrape(const struct fake_vramd *f, const char *bin, enum mode m)
{
    const char *argv[] = {bin, "--socket", f->sock, "metrics", "--listen",
                          "127.0.0.1:0", NULL};
    int out;
    pid_t pid = tool_start(argv, as_cap(), &out);
    char line[512] = "";
    size_t n = 0;
    int port = 0;
    FILE *o = fdopen(out, "r");
    if (o && fgets(line, sizeof(line), o)) {
        const char *p = strstr(line, "http://127.0.0.1:");
        if (p)
            port = atoi(p + strlen("http://127.0.0.1:"));
    }
    CHECK(port > 0, "the exporter printed no address: '%s'", line);
    char *body = NULL;
    int code = port > 0 ? http_get(port, "/metrics", DEADLINE_MS, &body, &n) : 0;
    kill(pid, SIGTERM);
    long kib = 0;
    int st = tool_wait(pid, DEADLINE_MS, &kib);
    if (o)
        fclose(o);
    check_rss("vramctl metrics --listen", m, kib);
    CHECK(st == 0, "the exporter exited %d after SIGTERM", st);
    if (flooding(m)) {
        CHECK(code == 200 && body && strstr(body, "\nvramd_up 0\n") &&
              says_bound(body, m), "a scrape against a %s: %d %.300s",
              mode_name[m], code, body ? body : "");
    } else {
        CHECK(code == 200 && body && strstr(body, "vramd_client_held_bytes{client=\""
                                            "65536\",name=\"engine-65536\""),
              "a scrape against a %s: %d (%zu bytes)", mode_name[m], code, n);
    }
    free(body);
}

int main(void)
{
    const char *bin = getenv("VRAMCTL_BIN");
    REQUIRE(bin, "VRAMCTL_BIN is not set");
    signal(SIGPIPE, SIG_IGN);
    printf("test_reply_bounds:%s\n", under_asan() ? " (AddressSanitizer: peak "
           "RSS shown, not checked)" : "");
    for (int m = FLOOD_CLIENTS; m <= LEGAL_SMALL; m++) {
        struct fake_vramd f;
        enum mode mode = (enum mode)m;
        REQUIRE(fake_vramd_start(&f, answer, &mode) == 0, "start the fake vramd");
        if (flooding(mode) && mode != FLOOD_EMPTY) /* that one: time only */
            library(&f, mode);
        one_shot(&f, bin, mode, "status");
        /* Empty frames cost time, not memory, and vramd's own frame size
         * cost memory only with the quadratic merge's small frames: the
         * rest against vramctl status alone keeps the test short. */
        if (mode != FLOOD_EMPTY && mode != LEGAL_LARGE) {
            one_shot(&f, bin, mode, "metrics");
            scrape(&f, bin, mode);
        }
        fake_vramd_stop(&f);
    }
    return check_report("test_reply_bounds");
}
