/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl: inspect vramd's budgets. Exit statuses: exits.h (0 success, 1
 * refused or failed, 2 usage, 3 no daemon, 4 not allowed, 5 protocol).
 *
 * The status reply is decoded into the catalogue's typed structs (checked
 * field by field against proto/messages.json), so every column below names
 * a struct member the compiler checks, never a string key. */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/tools/cmdline.h"
#include "client/tools/connect_why.h"
#include "client/tools/exits.h"
#include "proto/json.h"
#include "client/tools/metrics_http.h"
#include "client/tools/metrics_text.h"
#include "proto/msg.h"
#include "platform/platform.h"
#include "client/tools/snapshot.h"
#include "client/tools/table.h"
#include "proto/text.h"
#include "client/tools/textbuf.h"
#include "client/tools/top.h"
#include "proto/units.h"
#include "client/include/vram.h"
#include "gen/vram_msg.h"
#include "client/tools/weights_view.h"


static const char *sz(uint64_t b, char *buf)
{
    return vw_size_format(b, buf, 32);
}

/* Text from vramd in a table: escaped (textbuf.h), at most width bytes
 * (0: as much as a string of the catalogue holds). */
struct cell {
    char s[VW_TEXT_ESCAPED(96)];
};
#define CELL(text, none, width, c) tool_peer_cell(text, none, width, (c).s, sizeof((c).s))

static void join_u32(char *buf, size_t len, const struct vw_u32s *a)
{
    buf[0] = '\0';
    for (size_t i = 0; i < a->n; i++) {
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, "%s%u", n ? "," : "", a->v[i]);
    }
}

/* WEIGHTS: capacity charged to weight sets (R17: not granted, not free);
 * WEIGHTS-CACHED: of those, sealed sets no client maps, which vramd evicts
 * when an engine needs the room. "-" from a vramd without weight sets. */
static void print_devices(const struct vw_rep_status *st, bool legend)
{
    char a[32], b[32], c[32], d[32], e[32], f[32], g[32], h[32];
    struct cell name, backend, uuid;

    if (legend)
        tool_row("%-6s %-7s %-9s %-10s %-10s %-10s %-10s %-10s %-10s %-11s %-10s %s",
            "DEVICE", "BACKEND", "CHUNK", "CAPACITY", "RESERVED", "FREE", "GRANTED",
            "LOANED", "RECALLING", "QUARANTINED", "WEIGHTS", "WEIGHTS-CACHED");
    for (size_t i = 0; i < st->devices.n; i++) {
        const struct vw_t_device *it = &st->devices.v[i];
        char w[32] = "-", wc[32] = "-";
        if (it->has_weights_bytes)
            sz(it->weights_bytes, w);
        if (it->has_weights_cached_bytes)
            sz(it->weights_cached_bytes, wc);
        tool_row("%-6u %-7s %-9s %-10s %-10s %-10s %-10s %-10s %-10s %-11s %-10s %s",
            it->id, CELL(it->backend, "?", 0, backend), sz(it->chunk_bytes, a),
            sz(it->capacity_bytes, b), sz(it->reserved_bytes, h),
            sz(it->free_bytes, c), sz(it->granted_bytes, d),
            sz(it->loaned_bytes, e), sz(it->recalling_bytes, f),
            sz(it->quarantined_bytes, g), w, wc);
    }
    printf("\n");
    /* POOL: chunks made (and for cuda exported) ahead, off the grant path;
     * it fills in the background after start. */
    if (legend)
        tool_row("%-6s %-22s %-10s %-10s %-11s %-5s %-8s %-6s %s", "DEVICE", "NAME",
            "TOTAL", "POOL", "GRANULARITY", "VMM", "POSIX-FD", "PEERS", "UUID");
    for (size_t i = 0; i < st->devices.n; i++) {
        const struct vw_t_device *it = &st->devices.v[i];
        char peers[64];
        join_u32(peers, sizeof(peers), &it->peer_access);
        tool_row("%-6u %-22s %-10s %-10s %-11s %-5s %-8s %-6s %s", it->id,
            CELL(it->name, "-", 22, name), sz(it->total_bytes, a),
            sz((uint64_t)it->pool_ready_chunks * it->chunk_bytes, c),
            it->has_granularity_bytes ? sz(it->granularity_bytes, b) : "-",
            it->has_vmm ? (it->vmm ? "yes" : "no") : "-",
            it->has_posix_fd ? (it->posix_fd ? "yes" : "no") : "-",
            peers[0] ? peers : "-", CELL(it->uuid, "-", 0, uuid));
    }
}

/* STATE: asleep while the stage sleeps (R18: it holds no device memory,
 * its regions keep their addresses), awake while owned otherwise, "-"
 * with no owner; HOST: what a sleeping stage's owner keeps in host memory,
 * as it told vramd ("-" while awake: it keeps nothing vramd knows of).
 * BLOCKED-BY: while a registration or KV reserve of the stage is held,
 * the client it waits for (a lender that has not given recalled chunks
 * back, or a gone client whose chunks are quarantined). */
static void print_stages(const struct vw_rep_status *st, bool legend)
{
    char a[32], b[32], c[32], d[32];
    if (legend)
        tool_row("%-5s %-6s %-7s %-6s %-6s %-10s %-10s %-10s %-10s %-12s %-12s "
                 "%-16s %s",
            "STAGE", "DEVICE", "LAYERS", "OWNER", "STATE", "HOST", "KV-MAPPED",
            "KV-NEEDED", "KV-MAX", "EXPERT-LOANS", "BACKED-SLOTS",
            "RECALLING-CHUNKS", "BLOCKED-BY");
    for (size_t i = 0; i < st->stages.n; i++) {
        const struct vw_t_stage *it = &st->stages.v[i];
        char layers[24], owner[16] = "-", blocked[24] = "-", host[32] = "-";
        bool asleep = it->has_asleep && it->asleep;
        snprintf(layers, sizeof(layers), "%u-%u", it->first_layer, it->last_layer);
        if (it->has_owner)
            snprintf(owner, sizeof(owner), "%u", it->owner);
        if (it->has_blocked_by)
            snprintf(blocked, sizeof(blocked), "client %u", it->blocked_by);
        if (asleep && it->has_host_bytes)
            sz(it->host_bytes, host);
        tool_row("%-5u %-6u %-7s %-6s %-6s %-10s %-10s %-10s %-10s %-12s %-12u "
                 "%-16u %s",
            it->id, it->device, layers, owner,
            asleep ? "asleep" : it->has_owner ? "awake" : "-", host,
            sz(it->kv_mapped_bytes, a), sz(it->kv_needed_bytes, b),
            sz(it->kv_max_bytes, c), sz(it->expert_loaned_bytes, d),
            it->expert_slots_backed, it->recalls_pending, blocked);
    }
}

/* Clients: a gone one (quarantined, maybe awaiting its process's resume)
 * has no name in the status: "-" then. QUARANTINED is what it holds that
 * waits for its process. */
static void print_clients(const struct vw_rep_status *st, bool legend)
{
    char a[32], b[32];
    if (legend)
        tool_row("%-6s %-20s %-8s %-6s %-12s %-10s %-11s %s", "CLIENT", "NAME", "PID",
            "ROLE", "STATE", "HELD", "QUARANTINED", "STAGES");
    for (size_t i = 0; i < st->clients.n; i++) {
        const struct vw_t_client *it = &st->clients.v[i];
        char stages[64];
        struct cell name, role, state;
        join_u32(stages, sizeof(stages), &it->stages);
        tool_row("%-6u %-20s %-8lld %-6s %-12s %-10s %-11s %s", it->id,
            CELL(it->name, "-", 20, name), (long long)it->pid,
            CELL(it->role, "-", 0, role), CELL(it->state, "-", 0, state),
            sz(it->held_bytes, a), sz(it->quarantined_bytes, b),
            stages[0] ? stages : "-");
    }
}

static void print_table(const struct vw_rep_status *st, bool legend)
{
    print_devices(st, legend);
    printf("\n");
    print_stages(st, legend);
    printf("\n");
    print_clients(st, legend);
}

static void print_loans(const struct vw_rep_status *st, bool legend)
{
    char a[32], b[32], c[32];
    if (legend)
        tool_row("%-5s %-6s %-5s %-12s %-12s %-9s %-12s %-16s %-10s %s", "STAGE",
            "DEVICE", "LEND", "EXPERT-LOANS", "KV-HEADROOM", "SLOT-SIZE",
            "BACKED-SLOTS", "RECALLING-CHUNKS", "RESIDENCY", "HOLD/DEADLINE");
    for (size_t i = 0; i < st->stages.n; i++) {
        const struct vw_t_stage *it = &st->stages.v[i];
        if (!it->configured)
            continue;
        uint64_t max = it->kv_max_bytes, kv = it->kv_mapped_bytes;
        char hold[48];
        snprintf(hold, sizeof(hold), "%u/%u ms", it->has_hold_ms ? it->hold_ms : 0,
                 it->has_recall_deadline_ms ? it->recall_deadline_ms : 0);
        tool_row("%-5u %-6u %-5s %-12s %-12s %-9s %-12u %-16u %-10llu %s", it->id,
            it->device, it->has_lend && it->lend ? "yes" : "no",
            sz(it->expert_loaned_bytes, a), sz(max > kv ? max - kv : 0, b),
            sz(it->expert_slot_bytes, c), it->expert_slots_backed,
            it->recalls_pending, (unsigned long long)it->residency_version,
            hold);
    }
}

/* The Prometheus exposition of one status (metrics_text.c). */
static int print_metrics(const struct vw_rep_status *st, double seconds)
{
    struct tool_text t = {0};
    tool_metrics_render(&t, st, seconds);
    size_t len = 0;
    char *text = tool_text_take(&t, &len);
    if (!text) {
        fprintf(stderr, "vramctl: out of memory\n");
        return 1;
    }
    fwrite(text, 1, len, stdout);
    free(text);
    return 0;
}

struct opts {
    bool json, legend;
    long interval_ms;
    int count;
    const char *listen; /* metrics --listen ADDR:PORT */
};

static volatile sig_atomic_t stop;

static void on_sigint(int sig)
{
    (void)sig;
    stop = 1;
}

/* What vramctl metrics prints when vramd could not be read: vramd_up 0,
 * so a textfile collector's file says so. */
static void print_metrics_down(const char *why)
{
    struct tool_text t = {0};
    tool_metrics_render_down(&t, why);
    if (!t.oom && t.p)
        fputs(t.p, stdout);
    tool_text_free(&t);
}

/* One status (0), or a line on stderr saying why not (and for metrics, the
 * exposition of a vramd that could not be read) and the exit status. */
static int fetch(vram_client *c, struct tool_snapshot *s, const char *what)
{
    char why[512];
    int e = tool_snapshot_fetch(c, s, why, sizeof(why));
    if (e < 0) {
        fprintf(stderr, "vramctl: %s\n", why);
        if (strcmp(what, "metrics") == 0)
            print_metrics_down(why);
        return tool_exit_request(e);
    }
    return 0;
}

/* JSON as it is printed: the real strings, with what a terminal would
 * obey (DEL, C1 controls) as \u escapes and bytes that are not UTF-8 as
 * U+FFFD (proto/text.h); JSON's writers have escaped the rest. */
static int print_json(const char *text, size_t len)
{
    char *out = text ? vw_json_printable(text, len, NULL) : NULL;
    if (!out) {
        fprintf(stderr, "vramctl: out of memory\n");
        return 1;
    }
    printf("%s\n", out);
    free(out);
    return 0;
}

/* {"schema": N, "<key>": [...]}: one array of the status (or of
 * weights_list), re-encoded from its typed items, beside the layout's
 * schema (a field once documented keeps its name and type within it). */
static int print_json_array(const char *key, const struct vw_tdesc *t,
                            const void *items, size_t n)
{
    struct vw_jw w = {0};
    struct vw_enc e = {.w = &w};
    vw_jw_lit(&w, "{\"schema\":");
    vw_jw_u64(&w, VW_STATUS_SCHEMA);
    vw_jw_lit(&w, ",");
    vw_jw_key(&w, key, true);
    vw_jw_lit(&w, "[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            vw_jw_lit(&w, ",");
        if (vw_encode_object(&e, t, (const char *)items + i * t->size) < 0)
            w.oom = true;
    }
    vw_jw_lit(&w, "]}");
    size_t len = 0;
    char *text = vw_jw_take(&w, &len);
    int rc = print_json(text, len);
    free(text);
    return rc;
}

/* Prints one section, as a table or as the JSON of that part. */
static int show(vram_client *c, const char *what, const struct opts *o)
{
    struct tool_snapshot s = {0};
    uint64_t t0 = vp_now_ns();
    int rc = fetch(c, &s, what);
    double seconds = (double)(vp_now_ns() - t0) / 1e9;
    const struct vw_rep_status *st = &s.st;
    if (rc)
        goto out;
    if (o->json) {
        if (strcmp(what, "status") == 0)
            rc = print_json(s.text, strlen(s.text));
        else if (strcmp(what, "clients") == 0)
            rc = print_json_array("clients", &vw_td_client, st->clients.v,
                                  st->clients.n);
        else /* stages, loans */
            rc = print_json_array("stages", &vw_td_stage, st->stages.v,
                                  st->stages.n);
    } else if (strcmp(what, "status") == 0) {
        print_table(st, o->legend);
    } else if (strcmp(what, "clients") == 0) {
        print_clients(st, o->legend);
    } else if (strcmp(what, "stages") == 0) {
        print_stages(st, o->legend);
    } else if (strcmp(what, "loans") == 0) {
        print_loans(st, o->legend);
    } else if (strcmp(what, "metrics") == 0) {
        rc = print_metrics(st, seconds);
    }
out:
    tool_snapshot_free(&s);
    return rc;
}

/* vramctl weights: every weight set, as a table or as the JSON of the
 * catalogue's weights_entry objects (the keys vramd sends). */
static int cmd_weights(vram_client *c, const struct opts *o)
{
    struct tool_weights w = {0};
    char why[600];
    int e = tool_weights_fetch(c, &w, why, sizeof(why));
    if (e < 0) {
        fprintf(stderr, "vramctl: %s\n", why);
        return tool_exit_request(e);
    }
    int rc = 0;
    if (o->json) {
        struct vw_t_weights_entry *t = calloc(w.n + 1, sizeof(*t));
        char (*keys)[2 * VRAM_WEIGHTS_KEY_BYTES + 1] = calloc(w.n + 1, sizeof(*keys));
        if (t && keys) {
            for (size_t i = 0; i < w.n; i++)
                tool_weights_wire(&w.v[i], keys[i], &t[i]);
            rc = print_json_array("sets", &vw_td_weights_entry, t, w.n);
        } else {
            fprintf(stderr, "vramctl: out of memory\n");
            rc = TOOL_EXIT_FAILED;
        }
        free(t);
        free(keys);
    } else {
        tool_weights_table(&w, o->legend, vp_unix_ms());
    }
    tool_weights_free(&w);
    return rc;
}

static int cmd_watch(vram_client *c, const struct opts *o)
{
    vp_on_interrupt(on_sigint);
    bool tty = vp_stdout_is_tty();
    for (int n = 0; !stop && (o->count <= 0 || n < o->count); n++) {
        if (tty)
            printf("\033[H\033[2J"); /* a live view on a terminal */
        else if (n)
            printf("\n");
        char when[32];
        vp_wall_time(when, sizeof(when));
        when[8] = '\0'; /* HH:MM:SS */
        printf("vramd at %s, every %ld ms (^C to stop)\n\n", when, o->interval_ms);
        struct opts table = *o;
        table.json = false;
        int rc = show(c, "status", &table);
        if (rc)
            return rc;
        fflush(stdout);
        if (o->count > 0 && n + 1 >= o->count)
            break;
        for (long waited = 0; waited < o->interval_ms && !stop; waited += 20)
            vp_sleep_ms(o->interval_ms - waited < 20 ? (int)(o->interval_ms - waited)
                                                     : 20);
    }
    return 0;
}

static const struct {
    const char *name, *args, *help;
} commands[] = {
    {"status", "[--json] [--no-legend]",
     "devices (capacity, reserved by stages, free, granted, loaned, recalling,\n"
     "quarantined, weight sets and the cached ones; names, UUIDs, granularity,\n"
     "peers), stages (asleep or awake, host bytes a sleeping one's owner\n"
     "keeps, KV mapped, needed and maximum, expert loans, backed slots,\n"
     "chunks being recalled, the client a held request waits for) and\n"
     "clients (held and quarantined bytes)"},
    {"clients", "[--json] [--no-legend]",
     "connected and quarantined clients: held and quarantined bytes (a gone\n"
     "client awaiting its process's resume has no name: -)"},
    {"stages", "[--json] [--no-legend]",
     "stages and their KV and expert budgets; STATE: asleep, awake or - (no\n"
     "owner); HOST: the bytes a sleeping stage's owner keeps in host memory;\n"
     "BLOCKED-BY: the client a held registration or KV reserve of the stage\n"
     "waits for"},
    {"loans", "[--json] [--no-legend]",
     "per configured stage: loan policy, expert loans, KV headroom, slot size,\n"
     "backed slots, chunks being recalled, residency version, hold bound and\n"
     "recall deadline"},
    {"watch", "[--interval MS] [--count N] [--no-legend]",
     "status, refreshed every MS milliseconds (default 1000) until ^C"},
    {"top", "[--interval MS]",
     "a live full-screen view: per device a bar of fixed, KV, loaned,\n"
     "recalling, quarantined and free memory; per stage KV against its window\n"
     "and expert residency (a sleeping one: asleep, with the bytes its owner\n"
     "keeps in host memory); per client the memory held. Keys: h or ? help,\n"
     "s sorts the clients by the next column (S reverses), d sets the delay,\n"
     "p pauses, the arrows, PgUp/PgDn and Home/End scroll, q or ^C quits, the\n"
     "terminal restored. While vramd does not answer, a banner says since when\n"
     "over the last figures. Where standard output is not a terminal it prints\n"
     "one frame, without escapes, and exits 0"},
    {"metrics", "[--listen ADDR:PORT]",
     "Prometheus text exposition (0.0.4) of the devices, stages, clients and\n"
     "counters, with vramd_up (0, and exit status 3, when no vramd answers).\n"
     "With --listen, an HTTP endpoint serving it at GET /metrics (one status\n"
     "read per scrape; 200 with vramd_up 0 while vramd cannot be read) until SIGTERM or ^C;\n"
     "port 0 takes a free port, and the address bound is printed on stdout"},
    {"weights", "[--json] [--no-legend]",
     "weight sets: name, device, size, allocation size and count, key prefix,\n"
     "state (writing; sealed: mapped read-only by its users; cached: mapped by\n"
     "none, evicted when memory is needed unless kept), users, writer, owner\n"
     "uid, keep, last use"},
    {"weights drop", "NAME",
     "admin only (access.admin): drop weight set NAME (refused while a\n"
     "client maps it); its memory is freed"},
    {"set-capacity", "DEVICE SIZE",
     "admin only (access.admin): set a device's capacity (e.g. 12GiB), down\n"
     "to what is in use and reserved, up to its size when vramd started"},
    {"evict", "CLIENT",
     "admin only (access.admin): disconnect client CLIENT (an id from\n"
     "vramctl clients); its chunks return once its process is gone"},
};

/* The options a command's arguments name, explained. */
static const struct {
    const char *opt, *help;
} command_opts[] = {
    {"--json", "the same data as JSON, with stable keys"},
    {"--no-legend", "tables without their header lines (for scripts)"},
    {"--interval", "milliseconds between refreshes (default 1000)"},
    {"--count", "stop after N refreshes"},
    {"--listen", "serve HTTP on ADDR:PORT (127.0.0.1:8726, [::1]:8726, :8726)"},
};

/* Each option of a command's arguments ("[--interval MS] [--count N]"), in
 * their order, as they spell it, with what it does. */
static void command_options(FILE *f, const char *args)
{
    bool any = false;
    for (const char *at = strstr(args, "--"); at; at = strstr(at + 2, "--")) {
        size_t name = strcspn(at, " ]"), n = strcspn(at, "]");
        for (size_t i = 0; i < sizeof(command_opts) / sizeof(command_opts[0]); i++) {
            if (strlen(command_opts[i].opt) != name ||
                strncmp(at, command_opts[i].opt, name) != 0)
                continue;
            if (!any)
                fprintf(f, "\nOptions:\n");
            any = true;
            fprintf(f, "  %-19.*s %s\n", (int)n, at, command_opts[i].help);
        }
    }
}

/* -t, --timeout: how long a request may wait for vramd's reply. */
static int timeout_ms = 10000;

static void usage(FILE *f)
{
    fprintf(f, "Usage: vramctl [--socket PATH] COMMAND [OPTIONS]\n\nCommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %s%*s%s\n", commands[i].name,
                commands[i].args[0] ? 13 - (int)strlen(commands[i].name) : 0, "",
                commands[i].args);
    fprintf(f, "\nOptions:\n"
            "  -s, --socket PATH   daemon socket (default $VRAM_SOCKET, else "
            VP_DEFAULT_ENDPOINT ")\n"
            "  -t, --timeout MS    how long a request waits for vramd's reply "
            "(10000)\n"
            "  --json              (status, clients, stages, loans, weights) JSON "
            "with\n"
            "                      stable keys\n"
            "  --no-legend         (status, clients, stages, loans, weights, watch) "
            "tables\n"
            "                      without their header lines\n"
            "  --interval MS       (watch, top) milliseconds between refreshes\n"
            "  --count N           (watch) stop after N refreshes\n"
            "  --listen ADDR:PORT  (metrics) serve the metrics over HTTP at /metrics\n"
            "  -h, --help          this text; with a command, that command's\n"
            "  -V, --version       the version\n\n"
            "Every option goes before or after the command (--opt=VALUE too).\n"
            "Sizes are binary: 12GiB, 12 GiB, 512MiB, 1.5TiB or bytes (12G and "
            "12GB are\nrefused: decimal to some, binary to others). Sizes are "
            "shown in binary units;\nother numbers name what they count "
            "(BACKED-SLOTS, RECALLING-CHUNKS).\n\n");
    tool_exit_table(f);
}

/* The options a command's arguments name, or that every command has. */
static bool command_has(size_t ci, enum tool_opt o)
{
    if (o == TOOL_OPT_SOCKET || o == TOOL_OPT_TIMEOUT || o == TOOL_OPT_HELP ||
        o == TOOL_OPT_VERSION)
        return true;
    return strstr(commands[ci].args, tool_opt_name(o)) != NULL;
}

static void command_usage(size_t ci)
{
    printf("Usage: vramctl [--socket PATH] %s%s%s\n%s.\n", commands[ci].name,
           commands[ci].args[0] ? " " : "", commands[ci].args, commands[ci].help);
    command_options(stdout, commands[ci].args);
    printf("\n");
    tool_exit_table(stdout);
}

/* A number option's value in [1, max], or -1 said on stderr. */
static long number_opt(const char *cmd, enum tool_opt o, const char *v, long max,
                       const char *what)
{
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (end == v || *end || n < 1 || n > max) {
        fprintf(stderr, "vramctl%s%s: %s '%s': %s, 1 to %ld\n", cmd ? " " : "",
                cmd ? cmd : "", tool_opt_name(o), v, what, max);
        return -1;
    }
    return n;
}

/* What a command's words say: set-capacity's DEVICE and SIZE, evict's
 * CLIENT, weights drop's NAME. */
struct command_args {
    long device;
    uint64_t capacity;
    long long evict; /* a client id is 32 bits unsigned, long is 32 bits signed
                      * on Windows */
    const char *set_name;
};

/* Reads words[first..n) for the command; 0, or 2 said on stderr. */
static int command_words(const char *cmd, const char *const *words, int first,
                         int n, struct command_args *a)
{
    int used = first;
    if (strcmp(cmd, "set-capacity") == 0) {
        if (n - first < 2) {
            fprintf(stderr, "vramctl set-capacity: DEVICE and SIZE, e.g. "
                    "vramctl set-capacity 0 12GiB\n");
            return TOOL_EXIT_USAGE;
        }
        char *end;
        a->device = strtol(words[first], &end, 10);
        if (end == words[first] || *end || a->device < 0 || a->device > 1023) {
            fprintf(stderr, "vramctl set-capacity: '%s' is not a device id\n",
                    words[first]);
            return TOOL_EXIT_USAGE;
        }
        /* "12 GiB": the number and its unit as two words. */
        const char *size = words[first + 1], *unit = NULL;
        if (n - first > 2 && isalpha((unsigned char)words[first + 2][0]))
            unit = words[first + 2];
        char joined[80];
        if (snprintf(joined, sizeof(joined), "%s%s", size, unit ? unit : "") >=
            (int)sizeof(joined)) {
            fprintf(stderr, "vramctl set-capacity: '%.40s...': not a size\n", size);
            return TOOL_EXIT_USAGE;
        }
        int e = vw_size_parse(joined, &a->capacity);
        if (e < 0) {
            char fix[96];
            if (e == -EDOM && vw_size_binary(joined, fix, sizeof(fix)) == 0)
                fprintf(stderr, "vramctl set-capacity: '%s%s%s': did you mean "
                        "%s? (a bare or decimal unit is powers of 1000 to some, "
                        "of 1024 to others: vramctl takes KiB, MiB, GiB, TiB)\n",
                        size, unit ? " " : "", unit ? unit : "", fix);
            else
                fprintf(stderr, "vramctl set-capacity: '%s%s%s': %s\n", size,
                        unit ? " " : "", unit ? unit : "", vw_size_why(e));
            return TOOL_EXIT_USAGE;
        }
        used = first + (unit ? 3 : 2);
    } else if (strcmp(cmd, "evict") == 0) {
        if (n - first < 1) {
            fprintf(stderr, "vramctl evict: which client? (vramctl clients)\n");
            return TOOL_EXIT_USAGE;
        }
        char *end;
        a->evict = strtoll(words[first], &end, 10);
        if (end == words[first] || *end || a->evict <= 0 || a->evict > UINT32_MAX) {
            fprintf(stderr, "vramctl evict: '%s' is not a client id\n", words[first]);
            return TOOL_EXIT_USAGE;
        }
        used = first + 1;
    } else if (strcmp(cmd, "weights drop") == 0) {
        if (n - first < 1) {
            fprintf(stderr, "vramctl weights drop: which set? (vramctl weights)\n");
            return TOOL_EXIT_USAGE;
        }
        a->set_name = words[first];
        used = first + 1;
    }
    if (used < n) {
        fprintf(stderr, "vramctl %s: unexpected argument '%s' (vramctl %s --help)\n",
                cmd, words[used], cmd);
        return TOOL_EXIT_USAGE;
    }
    return 0;
}

/* An admin command's outcome: what it did on stdout, or vramd's reason on
 * stderr and the exit status (4 for want of rights). */
static int admin_said(vram_client *cl, const char *cmd, int e)
{
    if (e < 0)
        fprintf(stderr, "vramctl: %s: %s\n", cmd, vram_client_last_error(cl));
    return tool_exit_request(e);
}

int main(int argc, char **argv)
{
    struct tool_cmdline cl;
    char why[600];
    if (tool_cmdline_parse(argc, argv, &cl, why, sizeof(why)) < 0) {
        fprintf(stderr, "%s\n", why);
        return TOOL_EXIT_USAGE;
    }
    const char *const *v = cl.value;
    if (cl.nwords == 0) {
        if (v[TOOL_OPT_VERSION] && !v[TOOL_OPT_HELP]) {
            printf("vramctl %s (protocol versions %d to %d)\n", VRAM_VERSION,
                   VW_PROTOCOL_OLDEST, VW_PROTOCOL_VERSION);
            return 0;
        }
        usage(v[TOOL_OPT_HELP] ? stdout : stderr);
        return v[TOOL_OPT_HELP] ? 0 : TOOL_EXIT_USAGE;
    }
    const char *cmd = cl.words[0];
    int first = 1; /* the command's first argument */
    if (strcmp(cmd, "weights") == 0 && cl.nwords > 1 &&
        strcmp(cl.words[1], "drop") == 0) {
        cmd = "weights drop";
        first++;
    }
    size_t ci = 0, nc = sizeof(commands) / sizeof(commands[0]);
    while (ci < nc && strcmp(commands[ci].name, cmd) != 0)
        ci++;
    if (ci == nc) {
        fprintf(stderr, "vramctl: unknown command '%s' (try --help)\n", cmd);
        return TOOL_EXIT_USAGE;
    }
    if (v[TOOL_OPT_HELP]) {
        command_usage(ci);
        return 0;
    }
    if (v[TOOL_OPT_VERSION]) {
        printf("vramctl %s (protocol versions %d to %d)\n", VRAM_VERSION,
               VW_PROTOCOL_OLDEST, VW_PROTOCOL_VERSION);
        return 0;
    }
    for (int o = 0; o < TOOL_OPT_N; o++)
        if (v[o] && !command_has(ci, (enum tool_opt)o)) {
            fprintf(stderr, "vramctl %s: no %s option (vramctl %s --help)\n", cmd,
                    tool_opt_name((enum tool_opt)o), cmd);
            return TOOL_EXIT_USAGE;
        }
    struct opts o = {.json = v[TOOL_OPT_JSON] != NULL,
                     .legend = !v[TOOL_OPT_NO_LEGEND], .interval_ms = 1000,
                     .listen = v[TOOL_OPT_LISTEN]};
    long n;
    if (v[TOOL_OPT_TIMEOUT]) {
        if ((n = number_opt(NULL, TOOL_OPT_TIMEOUT, v[TOOL_OPT_TIMEOUT], 3600000,
                            "milliseconds")) < 0)
            return TOOL_EXIT_USAGE;
        timeout_ms = (int)n;
    }
    if (v[TOOL_OPT_INTERVAL]) {
        if ((n = number_opt(cmd, TOOL_OPT_INTERVAL, v[TOOL_OPT_INTERVAL], 3600000,
                            "milliseconds")) < 0)
            return TOOL_EXIT_USAGE;
        o.interval_ms = n;
    }
    if (v[TOOL_OPT_COUNT]) {
        if ((n = number_opt(cmd, TOOL_OPT_COUNT, v[TOOL_OPT_COUNT], 3600000,
                            "a count")) < 0)
            return TOOL_EXIT_USAGE;
        o.count = (int)n;
    }
    const char *path = v[TOOL_OPT_SOCKET];
    if (path && !path[0]) {
        /* libvram would take $VRAM_SOCKET for it, and the messages would
         * name another socket than the one used. */
        fprintf(stderr, "vramctl: --socket '': an empty path\n");
        return TOOL_EXIT_USAGE;
    }
    struct command_args ca = {.device = -1, .evict = -1};
    int rc = command_words(cmd, cl.words, first, cl.nwords, &ca);
    if (rc)
        return rc;
    const char *shown = path ? path : getenv("VRAM_SOCKET");
    if (!shown || !*shown)
        shown = VP_DEFAULT_ENDPOINT; /* libvram's default, named in messages */
    if (o.listen) {
        /* The endpoint outlives vramd: it connects per scrape, not now. */
        struct tool_listen_addr la;
        if (tool_listen_parse(o.listen, &la) < 0) {
            fprintf(stderr, "vramctl metrics: --listen '%s': not ADDR:PORT (e.g. "
                    "127.0.0.1:8726, [::1]:8726, :8726)\n", o.listen);
            return TOOL_EXIT_USAGE;
        }
        return tool_metrics_serve(&la, shown, stdout) < 0 ? TOOL_EXIT_FAILED : 0;
    }
    char err[512] = "";
    struct vram_client_options co = {.name = "vramctl", .ctl = 1,
                                     .timeout_ms = timeout_ms, .error = err,
                                     .error_len = sizeof(err)};
    vram_client *c;
    int e = vram_client_connect(shown, &co, &c);
    if (e < 0) {
        tool_connect_why(why, sizeof(why), e, shown, err);
        fprintf(stderr, "vramctl: %s\n", why);
        /* A textfile collector's file says so too (written then renamed by
         * the timer's script whatever the exit status). */
        if (strcmp(cmd, "metrics") == 0)
            print_metrics_down(why);
        return tool_exit_connect(e);
    }
    if (strcmp(cmd, "set-capacity") == 0) {
        char b[32];
        rc = admin_said(c, cmd, vram_admin_set_capacity(c, (uint32_t)ca.device,
                                                         ca.capacity));
        if (!rc)
            printf("device %ld: capacity %s\n", ca.device, sz(ca.capacity, b));
    } else if (strcmp(cmd, "evict") == 0) {
        rc = admin_said(c, cmd, vram_admin_evict(c, (uint32_t)ca.evict));
        if (!rc)
            printf("client %lld evicted\n", ca.evict);
    } else if (strcmp(cmd, "weights drop") == 0) {
        struct cell name;
        rc = admin_said(c, cmd, vram_admin_weights_drop(c, ca.set_name));
        if (!rc)
            printf("weight set %s dropped\n", CELL(ca.set_name, "-", 0, name));
    } else if (strcmp(cmd, "weights") == 0) {
        rc = cmd_weights(c, &o);
    } else if (strcmp(cmd, "watch") == 0) {
        rc = cmd_watch(c, &o);
    } else if (strcmp(cmd, "top") == 0) {
        rc = tool_top_run(c, shown, o.interval_ms);
        c = NULL; /* the view closed it */
    } else {
        rc = show(c, cmd, &o);
    }
    vram_client_close(c);
    return rc;
}
