/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl's command line and its errors (issue 29 item 6), run as an
 * operator runs it: the real vramctl against the real vramd on a temporary
 * socket, against no daemon, against a stopped one, and against daemons
 * that speak another protocol (the fake vramd, and a server that answers
 * in protocol version 9). Every case asserts the exit status, that
 * standard output holds nothing but what was asked for, and the one line
 * on standard error:
 *   - options before or after the command (--json, --socket=, -t, --timeout=,
 *     --interval, --count), an option the command lacks, an unknown one
 *     (one line, not the usage);
 *   - sizes: "12 GiB", "12GiB", bytes; "12G" and "16 GB" refused with the
 *     binary spelling suggested, "12 XB" not a size;
 *   - no daemon: "no vramd at PATH (is it running? VRAM_SOCKET=...)", or
 *     "VRAM_SOCKET unset", never vram_strerror's generic ENOENT text, the
 *     same in metrics' vramd_up 0;
 *   - the exit statuses: 0, 1 refused (or a status not of the catalogue),
 *     2 usage, 3 no daemon (none, a stopped one past --timeout, one gone),
 *     5 protocol (no version in common, a request the daemon lacks); 4 is
 *     test_vramctl's (it runs vramctl as other users);
 *   - the table of them in --help, every command's --help and vramctl.1. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/fake_vramd.h"
#include "proto/frame.h"
#include "tests/integration/harness.h"

static const char *bin(void)
{
    return getenv("VRAMCTL_BIN") ? getenv("VRAMCTL_BIN") : "vramctl";
}

/* vramctl with the words of fmt (split at spaces; no word here has one). */
static struct tool_run ctl(const char *fmt, ...)
{
    static char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    const char *argv[32] = {bin()};
    int n = 1;
    for (char *save = NULL, *w = strtok_r(line, " ", &save); w && n < 31;
         w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n] = NULL;
    struct tool_run r;
    tool_run(argv, 60000, 0, &r); /* its status is r.status */
    return r;
}

/* One line on stderr, nothing on stdout: how every error is said. */
static bool one_error_line(const struct tool_run *r)
{
    return r->out_len == 0 && r->err_len > 0 && r->err[r->err_len - 1] == '\n' &&
           strchr(r->err, '\n') == r->err + r->err_len - 1;
}

#define EXPECT(r, want, text)                                                  \
    CHECK((r).status == (want) && one_error_line(&(r)) &&                      \
              strstr((r).err, (text)) != NULL,                                 \
          "exit %d (want %d), stdout '%.200s', stderr '%.300s' (want '%s')",   \
          (r).status, (want), (r).out, (r).err, (text))

/* A server that answers every frame with one of protocol version 9, as a
 * vramd newer than any this vramctl speaks would refuse it. */
static pid_t version9_server(const char *path)
{
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    REQUIRE(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 &&
                listen(l, 8) == 0, "the version 9 server's socket: %s",
            strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid > 0) {
        close(l);
        return pid;
    }
    for (;;) {
        int fd = accept(l, NULL, NULL);
        if (fd < 0)
            continue;
        uint8_t hdr[VW_FRAME_HEADER_SIZE];
        struct vw_frame_header h;
        char why[128], payload[4096];
        if (recv(fd, hdr, sizeof(hdr), MSG_WAITALL) == (ssize_t)sizeof(hdr) &&
            vw_frame_header_decode(hdr, &h, why, sizeof(why)) == 0 &&
            h.payload_len < sizeof(payload) &&
            recv(fd, payload, h.payload_len, MSG_WAITALL) == (ssize_t)h.payload_len) {
            static const char refusal[] =
                "{\"type\":\"reply\",\"id\":1,\"ok\":false,\"error\":"
                "\"EPROTONOSUPPORT\",\"message\":\"protocol versions: client "
                "1 to 2, server 9 to 9\"}";
            struct vw_frame_header o = {.magic = VW_FRAME_MAGIC, .version = 9,
                                          .payload_len = sizeof(refusal) - 1};
            vw_frame_header_encode(&o, hdr);
            if (write(fd, hdr, sizeof(hdr)) < 0 ||
                write(fd, refusal, sizeof(refusal) - 1) < 0) {
            }
        }
        close(fd);
    }
}

/* The fake's status: a reply whose devices are no array, as a vramd whose
 * status this vramctl's catalogue cannot read. */
static void unreadable_status(struct fake_conn *c, uint64_t id, void *ud)
{
    (void)ud;
    char s[160];
    int n = snprintf(s, sizeof(s), "{\"type\":\"reply\",\"id\":%llu,\"ok\":true,"
                     "\"devices\":\"none\"}", (unsigned long long)id);
    fake_send(c, s, (size_t)n);
}

static void no_daemon(void)
{
    const char *none = "/tmp/vramd-test-none/cli.sock";
    unsetenv("VRAM_SOCKET");
    struct tool_run r = ctl("--socket %s status", none);
    EXPECT(r, 3, "vramctl: no vramd at /tmp/vramd-test-none/cli.sock (is it running? "
                 "VRAM_SOCKET unset)\n");
    CHECK(!strstr(r.err, "no such stage"), "the generic ENOENT text: %s", r.err);
    tool_run_free(&r);
    /* Where the socket came from shows: the environment's value. */
    setenv("VRAM_SOCKET", none, 1);
    r = ctl("status");
    EXPECT(r, 3, "vramctl: no vramd at /tmp/vramd-test-none/cli.sock (is it running? "
                 "VRAM_SOCKET=/tmp/vramd-test-none/cli.sock)\n");
    tool_run_free(&r);
    r = ctl("--socket /tmp/vramd-test-none/other.sock clients");
    EXPECT(r, 3, "no vramd at /tmp/vramd-test-none/other.sock (is it running? "
                 "VRAM_SOCKET=/tmp/vramd-test-none/cli.sock)");
    tool_run_free(&r);
    unsetenv("VRAM_SOCKET");
    /* Options before the command or after it: the same. */
    const char *forms[] = {"--json --socket %s status", "status --json --socket %s",
                           "--socket=%s --no-legend stages", "-s%s -t 500 loans",
                           "loans -t500 --timeout=700 --socket %s",
                           "--interval 50 --count 1 watch --socket %s",
                           "--socket %s set-capacity 0 12 GiB",
                           "set-capacity 0 12GiB -s %s", "evict 4 --socket %s",
                           "--socket %s weights drop -- -dashed"};
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        r = ctl(forms[i], none);
        EXPECT(r, 3, "no vramd at /tmp/vramd-test-none/cli.sock (is it running? ");
        if (r.status != 3)
            fprintf(stderr, "  (in '%s')\n", forms[i]);
        tool_run_free(&r);
    }
    /* metrics: vramd_up 0 on stdout for a textfile collector, saying why
     * in the same words. */
    r = ctl("--socket %s metrics", none);
    CHECK(r.status == 3 && strstr(r.out, "\nvramd_up 0\n") &&
              strstr(r.out, "# no vramd at /tmp/vramd-test-none/cli.sock (is it "
                            "running? VRAM_SOCKET unset)\n") &&
              !strstr(r.out, "no such stage") &&
              strcmp(r.err, "vramctl: no vramd at /tmp/vramd-test-none/cli.sock (is "
                            "it running? VRAM_SOCKET unset)\n") == 0,
          "metrics without vramd: %d '%s' '%s'", r.status, r.out, r.err);
    tool_run_free(&r);
}

static void usage_errors(void)
{
    struct tool_run r = ctl("--bogus status");
    EXPECT(r, 2, "vramctl status: unknown option '--bogus' (vramctl status --help)");
    CHECK(!strstr(r.err, "Usage:"), "the whole usage for one bad option");
    tool_run_free(&r);
    r = ctl("status --bogus");
    EXPECT(r, 2, "vramctl status: unknown option '--bogus'");
    tool_run_free(&r);
    r = ctl("--bogus");
    EXPECT(r, 2, "vramctl: unknown option '--bogus' (vramctl --help)");
    tool_run_free(&r);
    r = ctl("frobnicate --json");
    EXPECT(r, 2, "vramctl: unknown command 'frobnicate'");
    tool_run_free(&r);
    r = ctl("status -t");
    EXPECT(r, 2, "vramctl status: --timeout needs a value (MS)");
    tool_run_free(&r);
    r = ctl("--timeout=0 status");
    EXPECT(r, 2, "vramctl: --timeout '0': milliseconds, 1 to 3600000");
    tool_run_free(&r);
    r = ctl("watch --interval soon");
    EXPECT(r, 2, "vramctl watch: --interval 'soon': milliseconds");
    tool_run_free(&r);
    r = ctl("status extra");
    EXPECT(r, 2, "vramctl status: unexpected argument 'extra' (vramctl status --help)");
    tool_run_free(&r);
    /* An option the command does not have, before it or after it. */
    r = ctl("--json evict 3");
    EXPECT(r, 2, "vramctl evict: no --json option (vramctl evict --help)");
    tool_run_free(&r);
    r = ctl("top --json");
    EXPECT(r, 2, "vramctl top: no --json option");
    tool_run_free(&r);
    r = ctl("--count 3 status");
    EXPECT(r, 2, "vramctl status: no --count option");
    tool_run_free(&r);
    r = ctl("--socket= status");
    EXPECT(r, 2, "vramctl: --socket '': an empty path");
    tool_run_free(&r);
    /* Sizes: a bare or decimal unit is refused with the binary spelling. */
    r = ctl("set-capacity 0 12G");
    EXPECT(r, 2, "vramctl set-capacity: '12G': did you mean 12GiB?");
    tool_run_free(&r);
    r = ctl("set-capacity 0 16 GB");
    EXPECT(r, 2, "vramctl set-capacity: '16 GB': did you mean 16GiB?");
    tool_run_free(&r);
    r = ctl("set-capacity 0 1.5t");
    EXPECT(r, 2, "'1.5t': did you mean 1.5TiB?");
    tool_run_free(&r);
    r = ctl("set-capacity 0 12 XB");
    EXPECT(r, 2, "vramctl set-capacity: '12 XB': not a size");
    tool_run_free(&r);
    r = ctl("set-capacity 0");
    EXPECT(r, 2, "vramctl set-capacity: DEVICE and SIZE");
    tool_run_free(&r);
    r = ctl("set-capacity 0 12 GiB 7");
    EXPECT(r, 2, "vramctl set-capacity: unexpected argument '7'");
    tool_run_free(&r);
    r = ctl("set-capacity zero 12GiB");
    EXPECT(r, 2, "vramctl set-capacity: 'zero' is not a device id");
    tool_run_free(&r);
    r = ctl("weights drop");
    EXPECT(r, 2, "vramctl weights drop: which set?");
    tool_run_free(&r);
}

/* The exit statuses, in --help, each command's --help and the man page. */
static void exit_table(void)
{
    static const char *const rows[] = {
        "\n  0 success\n", "\n  1 vramd refused or failed the request",
        "\n  2 usage: ", "\n  3 no daemon answers at the socket",
        "\n  4 not allowed: ", "\n  5 protocol mismatch: "};
    const char *helps[] = {"--help", "status --help", "--help status", "-h evict",
                           "weights drop --help", "top -h"};
    for (size_t h = 0; h < sizeof(helps) / sizeof(helps[0]); h++) {
        struct tool_run r = ctl("%s", helps[h]);
        CHECK(r.status == 0 && r.err_len == 0, "%s: exit %d, '%s'", helps[h],
              r.status, r.err);
        for (size_t i = 0; i < 6; i++)
            CHECK(strstr(r.out, rows[i]), "%s lacks '%s':\n%s", helps[h], rows[i],
                  r.out);
        tool_run_free(&r);
    }
    /* With a command, before it or after it: that command's usage. */
    struct tool_run r = ctl("--help status");
    CHECK(strstr(r.out, "Usage: vramctl [--socket PATH] status [--json]") != NULL,
          "--help status is not status's usage:\n%s", r.out);
    tool_run_free(&r);
    char path[512];
    snprintf(path, sizeof(path), "%s/man/vramctl.1",
             getenv("VRAM_SOURCE_DIR") ? getenv("VRAM_SOURCE_DIR") : ".");
    FILE *f = fopen(path, "r");
    static char page[1 << 16];
    size_t n = f ? fread(page, 1, sizeof(page) - 1, f) : 0;
    page[n] = 0;
    if (f)
        fclose(f);
    const char *sec = strstr(page, ".SH EXIT STATUS\n");
    CHECK(sec && strstr(sec, ".B 0\nSuccess") && strstr(sec, ".B 1\nThe daemon refused") &&
              strstr(sec, ".B 2\nUsage error") && strstr(sec, ".B 3\nNo daemon") &&
              strstr(sec, ".B 4\nNot allowed") && strstr(sec, ".B 5\nProtocol mismatch") &&
              strstr(sec, "VRAM_SOCKET unset"),
          "vramctl.1's EXIT STATUS lacks a status:\n%.2000s", sec ? sec : page);
}

static void real_daemon(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    struct tool_run r = ctl("--json --socket %s status", d.sock);
    cJSON *j = cJSON_Parse(r.out ? r.out : "");
    CHECK(r.status == 0 && r.err_len == 0 && j && json_u64(j, "schema") == 1,
          "--json before the command: %d '%.200s' '%s'", r.status, r.out, r.err);
    cJSON_Delete(j);
    tool_run_free(&r);
    r = ctl("status --socket=%s --json -t 5000", d.sock);
    j = cJSON_Parse(r.out ? r.out : "");
    CHECK(r.status == 0 && j, "options after the command: %d '%s'", r.status, r.err);
    cJSON_Delete(j);
    tool_run_free(&r);
    r = ctl("--no-legend --socket %s clients", d.sock);
    CHECK(r.status == 0 && !strstr(r.out, "CLIENT") && strstr(r.out, "vramctl"),
          "--no-legend before the command: %d '%s' '%s'", r.status, r.out, r.err);
    tool_run_free(&r);
    r = ctl("--interval 50 --count 2 watch --socket %s", d.sock);
    CHECK(r.status == 0 && strstr(r.out, "every 50 ms") &&
              strstr(strstr(r.out, "every 50 ms") + 1, "every 50 ms"),
          "watch with its options before it: %d '%.300s' '%s'", r.status, r.out, r.err);
    tool_run_free(&r);

    /* Sizes, as one word, two, or bytes; each read as binary. */
    static const struct {
        const char *size;
        uint64_t bytes;
        const char *said;
    } sizes[] = {{"12 GiB", 12 * GIB, "device 1: capacity 12 GiB\n"},
                 {"8GiB", 8 * GIB, "device 1: capacity 8 GiB\n"},
                 {"10737418240", 10 * GIB, "device 1: capacity 10 GiB\n"},
                 {"1.5 gib", 3 * GIB / 2, "device 1: capacity 1.5 GiB\n"},
                 {"16384 MiB", 16 * GIB, "device 1: capacity 16 GiB\n"}};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        r = ctl("set-capacity 1 %s --socket %s", sizes[i].size, d.sock);
        CHECK(r.status == 0 && r.err_len == 0 && strcmp(r.out, sizes[i].said) == 0,
              "set-capacity 1 %s: %d '%s' '%s'", sizes[i].size, r.status, r.out, r.err);
        tool_run_free(&r);
        cJSON *st = daemon_status(&d);
        CHECK_EQ_U(status_dev(st, 1, "capacity_bytes"), sizes[i].bytes);
        cJSON_Delete(st);
    }
    r = ctl("--socket %s set-capacity 1 12G", d.sock);
    EXPECT(r, 2, "did you mean 12GiB?");
    tool_run_free(&r);
    cJSON *st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 1, "capacity_bytes"), 16 * GIB);
    cJSON_Delete(st);

    /* Refused by vramd: 1, with its reason. */
    r = ctl("--socket %s set-capacity 1 64GiB", d.sock);
    EXPECT(r, 1, "vramctl: set-capacity: ");
    tool_run_free(&r);
    r = ctl("--socket %s evict 99999", d.sock);
    EXPECT(r, 1, "vramctl: evict: ");
    tool_run_free(&r);

    /* A vramd that does not answer (stopped): 3 past --timeout. */
    REQUIRE(kill(d.pid, SIGSTOP) == 0, "SIGSTOP");
    r = ctl("--socket %s -t 300 status", d.sock);
    EXPECT(r, 3, d.sock);
    CHECK(strstr(r.err, "no reply") != NULL, "a stopped vramd: '%s'", r.err);
    tool_run_free(&r);
    REQUIRE(kill(d.pid, SIGCONT) == 0, "SIGCONT");
    r = ctl("--socket %s status", d.sock);
    CHECK(r.status == 0, "after SIGCONT: %d '%s'", r.status, r.err);
    tool_run_free(&r);

    /* Gone: the socket is left behind or removed; 3 either way. */
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    r = ctl("--socket %s status", d.sock);
    EXPECT(r, 3, "no vramd at ");
    CHECK(strstr(r.err, d.sock) != NULL, "the socket is not named: %s", r.err);
    tool_run_free(&r);
}

static void other_protocols(void)
{
    /* A daemon whose frames are of a protocol version this vramctl does
     * not speak: 5, naming both. */
    char dir[] = "/tmp/vramctl-cli-XXXXXX", sock[64];
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(sock, sizeof(sock), "%s/v9.sock", dir);
    pid_t v9 = version9_server(sock);
    struct tool_run r = ctl("--socket %s status", sock);
    EXPECT(r, 5, "protocol version");
    CHECK(strstr(r.err, "9") != NULL, "the other version is not named: %s", r.err);
    tool_run_free(&r);
    r = ctl("--socket %s metrics", sock);
    CHECK(r.status == 5 && strstr(r.out, "\nvramd_up 0\n"),
          "metrics against version 9: %d '%s'", r.status, r.err);
    tool_run_free(&r);
    kill(v9, SIGKILL);
    waitpid(v9, NULL, 0);
    unlink(sock);
    rmdir(dir);

    /* Requests the daemon does not know (ENOSYS, as from an older vramd):
     * 5. A status that is not of the catalogue is the daemon failing
     * (1, as test_reply_bounds has it for replies over their bounds). */
    struct fake_vramd f;
    REQUIRE(fake_vramd_start(&f, unreadable_status, NULL) == 0, "the fake vramd");
    r = ctl("--socket %s status", f.sock);
    EXPECT(r, 1, "does not match the catalogue: status.protocol_version: missing");
    tool_run_free(&r);
    r = ctl("--socket %s set-capacity 0 1GiB", f.sock);
    EXPECT(r, 5, "vramctl: set-capacity: ");
    tool_run_free(&r);
    r = ctl("--socket %s evict 3", f.sock);
    EXPECT(r, 5, "vramctl: evict: ");
    tool_run_free(&r);
    fake_vramd_stop(&f);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    no_daemon();
    usage_errors();
    exit_table();
    real_daemon();
    other_protocols();
    return check_report("test_vramctl_cli");
}
