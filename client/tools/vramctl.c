/* vramctl: inspect vramd's budgets.
 * Exit codes: 0 success, 1 the daemon refused or failed the request,
 * 2 usage error, 3 no daemon reachable on the socket. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "message.h"
#include "platform.h"
#include "units.h"
#include "vram.h"

static void usage(FILE *f);

static uint64_t u64(const cJSON *o, const char *k)
{
    uint64_t v = 0;
    vram_json_u64(o, k, &v);
    return v;
}

static const char *sz(uint64_t b, char *buf)
{
    return vram_size_format(b, buf, 32);
}

static void print_devices(const cJSON *st, bool legend)
{
    char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
    const cJSON *it;

    if (legend)
        printf("%-6s %-7s %-9s %-10s %-10s %-10s %-10s %-10s %-11s\n", "DEVICE",
               "BACKEND", "CHUNK", "CAPACITY", "FREE", "GRANTED", "LOANED",
               "RECALLING", "QUARANTINED");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(st, "devices")) {
        printf("%-6llu %-7s %-9s %-10s %-10s %-10s %-10s %-10s %-11s\n",
               (unsigned long long)u64(it, "id"),
               vram_json_str(it, "backend") ? vram_json_str(it, "backend") : "?",
               sz(u64(it, "chunk_bytes"), a), sz(u64(it, "capacity_bytes"), b),
               sz(u64(it, "free_bytes"), c), sz(u64(it, "granted_bytes"), d),
               sz(u64(it, "loaned_bytes"), e), sz(u64(it, "recalling_bytes"), f),
               sz(u64(it, "quarantined_bytes"), g));
    }
    printf("\n");
    if (legend)
        printf("%-6s %-22s %-10s %-11s %-5s %-8s %-6s %s\n", "DEVICE", "NAME",
               "TOTAL", "GRANULARITY", "VMM", "POSIX-FD", "PEERS", "UUID");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(st, "devices")) {
        char peers[64] = "";
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItem(it, "peer_access")) {
            size_t n = strlen(peers);
            snprintf(peers + n, sizeof(peers) - n, "%s%d", n ? "," : "",
                     (int)p->valuedouble);
        }
        const cJSON *vmm = cJSON_GetObjectItem(it, "vmm");
        const cJSON *pfd = cJSON_GetObjectItem(it, "posix_fd");
        const char *uuid = vram_json_str(it, "uuid");
        printf("%-6llu %-22.22s %-10s %-11s %-5s %-8s %-6s %s\n",
               (unsigned long long)u64(it, "id"),
               vram_json_str(it, "name") ? vram_json_str(it, "name") : "",
               sz(u64(it, "total_bytes"), a),
               cJSON_IsNumber(cJSON_GetObjectItem(it, "granularity_bytes"))
                   ? sz(u64(it, "granularity_bytes"), b) : "-",
               vmm ? (cJSON_IsTrue(vmm) ? "yes" : "no") : "-",
               pfd ? (cJSON_IsTrue(pfd) ? "yes" : "no") : "-",
               peers[0] ? peers : "-", uuid ? uuid : "-");
    }
}

static void print_stages(const cJSON *st, bool legend)
{
    char a[32], b[32], c[32], d[32];
    const cJSON *it;
    if (legend)
        printf("%-5s %-6s %-7s %-6s %-10s %-10s %-10s %-12s %-6s %-7s\n",
               "STAGE", "DEVICE", "LAYERS", "OWNER", "KV-MAPPED", "KV-NEEDED",
               "KV-MAX", "EXPERT-LOANS", "SLOTS", "RECALLS");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(st, "stages")) {
        char layers[24], owner[16];
        snprintf(layers, sizeof(layers), "%llu-%llu",
                 (unsigned long long)u64(it, "first_layer"),
                 (unsigned long long)u64(it, "last_layer"));
        const cJSON *o = cJSON_GetObjectItem(it, "owner");
        snprintf(owner, sizeof(owner), "%s", cJSON_IsNumber(o) ? "" : "-");
        if (cJSON_IsNumber(o))
            snprintf(owner, sizeof(owner), "%llu", (unsigned long long)o->valuedouble);
        printf("%-5llu %-6llu %-7s %-6s %-10s %-10s %-10s %-12s %-6llu %-7llu\n",
               (unsigned long long)u64(it, "id"),
               (unsigned long long)u64(it, "device"), layers, owner,
               sz(u64(it, "kv_mapped_bytes"), a), sz(u64(it, "kv_needed_bytes"), b),
               sz(u64(it, "kv_max_bytes"), c), sz(u64(it, "expert_loaned_bytes"), d),
               (unsigned long long)u64(it, "expert_slots_backed"),
               (unsigned long long)u64(it, "recalls_pending"));
    }
}

static void print_clients(const cJSON *st, bool legend)
{
    char a[32];
    const cJSON *it;
    if (legend)
        printf("%-6s %-20s %-8s %-6s %-12s %-10s %s\n", "CLIENT", "NAME", "PID",
               "ROLE", "STATE", "HELD", "STAGES");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(st, "clients")) {
        char stages[64] = "";
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(it, "stages")) {
            size_t n = strlen(stages);
            snprintf(stages + n, sizeof(stages) - n, "%s%d", n ? "," : "",
                     (int)s->valuedouble);
        }
        printf("%-6llu %-20.20s %-8llu %-6s %-12s %-10s %s\n",
               (unsigned long long)u64(it, "id"),
               vram_json_str(it, "name") ? vram_json_str(it, "name") : "",
               (unsigned long long)u64(it, "pid"),
               vram_json_str(it, "role") ? vram_json_str(it, "role") : "",
               vram_json_str(it, "state") ? vram_json_str(it, "state") : "",
               sz(u64(it, "held_bytes"), a), stages[0] ? stages : "-");
    }
}

static void print_table(const cJSON *st, bool legend)
{
    print_devices(st, legend);
    printf("\n");
    print_stages(st, legend);
    printf("\n");
    print_clients(st, legend);
}

static void print_loans(const cJSON *st, bool legend)
{
    char a[32], b[32], c[32];
    const cJSON *it;
    if (legend)
        printf("%-5s %-6s %-5s %-12s %-12s %-9s %-6s %-8s %-10s %s\n", "STAGE",
               "DEVICE", "LEND", "EXPERT-LOANS", "KV-HEADROOM", "SLOT", "SLOTS",
               "RECALLS", "RESIDENCY", "HOLD/DEADLINE");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(st, "stages")) {
        if (!cJSON_IsTrue(cJSON_GetObjectItem(it, "configured")))
            continue;
        uint64_t max = u64(it, "kv_max_bytes"), kv = u64(it, "kv_mapped_bytes");
        char hold[48];
        snprintf(hold, sizeof(hold), "%llu/%llu ms",
                 (unsigned long long)u64(it, "hold_ms"),
                 (unsigned long long)u64(it, "recall_deadline_ms"));
        printf("%-5llu %-6llu %-5s %-12s %-12s %-9s %-6llu %-8llu %-10llu %s\n",
               (unsigned long long)u64(it, "id"),
               (unsigned long long)u64(it, "device"),
               cJSON_IsTrue(cJSON_GetObjectItem(it, "lend")) ? "yes" : "no",
               sz(u64(it, "expert_loaned_bytes"), a),
               sz(max > kv ? max - kv : 0, b), sz(u64(it, "expert_slot_bytes"), c),
               (unsigned long long)u64(it, "expert_slots_backed"),
               (unsigned long long)u64(it, "recalls_pending"),
               (unsigned long long)u64(it, "residency_version"), hold);
    }
}

/* Prometheus text exposition (version 0.0.4). */
static void metric_head(const char *name, const char *type, const char *help)
{
    printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void print_metrics(const cJSON *st)
{
    static const struct {
        const char *key, *name, *help;
    } dev[] = {
        {"capacity_bytes", "vramd_device_capacity_bytes", "Bytes the device's pool holds."},
        {"free_bytes", "vramd_device_free_bytes", "Bytes free in the pool."},
        {"granted_bytes", "vramd_device_granted_bytes", "Bytes granted to KV and fixed regions."},
        {"loaned_bytes", "vramd_device_loaned_bytes", "Bytes lent to expert regions."},
        {"recalling_bytes", "vramd_device_recalling_bytes", "Bytes being recalled."},
        {"quarantined_bytes", "vramd_device_quarantined_bytes", "Bytes of gone clients, not yet reclaimed."},
    }, stage[] = {
        {"kv_mapped_bytes", "vramd_stage_kv_mapped_bytes", "KV bytes mapped for the stage."},
        {"kv_needed_bytes", "vramd_stage_kv_needed_bytes", "KV bytes the current request needs."},
        {"kv_max_bytes", "vramd_stage_kv_max_bytes", "KV bytes of the native-context window."},
        {"expert_loaned_bytes", "vramd_stage_expert_loaned_bytes", "Bytes lent to the stage's experts."},
        {"expert_slots_backed", "vramd_stage_expert_slots_backed", "Expert slots backed by loans."},
        {"recalls_pending", "vramd_stage_recalls_pending", "Chunks of the stage being recalled."},
    }, counter[] = {
        {"grants", "vramd_grants_total", "Chunks granted."},
        {"moves", "vramd_moves_total", "Chunks moved between a client's regions."},
        {"recalls", "vramd_recalls_total", "Chunks recalled."},
        {"recalls_missed", "vramd_recalls_missed_total", "Recall deadlines missed."},
        {"releases", "vramd_releases_total", "Chunks returned to the pool."},
        {"errors", "vramd_errors_total", "Requests refused."},
        {"protocol_errors", "vramd_protocol_errors_total", "Connections dropped for bad frames."},
    };
    const cJSON *it;
    for (size_t k = 0; k < sizeof(dev) / sizeof(dev[0]); k++) {
        metric_head(dev[k].name, "gauge", dev[k].help);
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(st, "devices"))
            printf("%s{device=\"%llu\",backend=\"%s\"} %llu\n", dev[k].name,
                   (unsigned long long)u64(it, "id"),
                   vram_json_str(it, "backend") ? vram_json_str(it, "backend") : "",
                   (unsigned long long)u64(it, dev[k].key));
    }
    for (size_t k = 0; k < sizeof(stage) / sizeof(stage[0]); k++) {
        metric_head(stage[k].name, "gauge", stage[k].help);
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(st, "stages"))
            printf("%s{stage=\"%llu\",device=\"%llu\"} %llu\n", stage[k].name,
                   (unsigned long long)u64(it, "id"),
                   (unsigned long long)u64(it, "device"),
                   (unsigned long long)u64(it, stage[k].key));
    }
    const cJSON *ct = cJSON_GetObjectItem(st, "counters");
    for (size_t k = 0; k < sizeof(counter) / sizeof(counter[0]); k++) {
        metric_head(counter[k].name, "counter", counter[k].help);
        printf("%s %llu\n", counter[k].name,
               (unsigned long long)u64(ct, counter[k].key));
    }
    int clients = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(st, "clients")) {
        const char *role = vram_json_str(it, "role"), *state = vram_json_str(it, "state");
        clients += role && strcmp(role, "engine") == 0 && state &&
                   strcmp(state, "connected") == 0;
    }
    metric_head("vramd_clients_connected", "gauge", "Engine clients connected.");
    printf("vramd_clients_connected %d\n", clients);
}

struct opts {
    bool json, legend;
    long interval_ms;
    int count;
};

static volatile sig_atomic_t stop;

static void on_sigint(int sig)
{
    (void)sig;
    stop = 1;
}

static int fetch(vram_client *c, cJSON **out, char **text)
{
    char *t;
    int e = vram_status_json(c, &t);
    if (e < 0) {
        fprintf(stderr, "vramctl: status failed: %s\n", vram_client_last_error(c));
        return 1;
    }
    cJSON *st = cJSON_Parse(t);
    if (!st) {
        free(t);
        fprintf(stderr, "vramctl: the daemon's status is not JSON\n");
        return 1;
    }
    *out = st;
    if (text)
        *text = t;
    else
        free(t);
    return 0;
}

/* Prints one section, as a table or as the JSON of that part. */
static int show(vram_client *c, const char *what, const struct opts *o)
{
    cJSON *st;
    char *text = NULL;
    if (fetch(c, &st, o->json ? &text : NULL))
        return 1;
    if (o->json) {
        if (strcmp(what, "status") == 0) {
            printf("%s\n", text);
        } else {
            const char *key = strcmp(what, "loans") == 0 ? "stages" : what;
            char *part = cJSON_Print(cJSON_GetObjectItem(st, key));
            printf("%s\n", part ? part : "[]");
            cJSON_free(part);
        }
    } else if (strcmp(what, "status") == 0) {
        print_table(st, o->legend);
    } else if (strcmp(what, "clients") == 0) {
        print_clients(st, o->legend);
    } else if (strcmp(what, "stages") == 0) {
        print_stages(st, o->legend);
    } else if (strcmp(what, "loans") == 0) {
        print_loans(st, o->legend);
    } else if (strcmp(what, "metrics") == 0) {
        print_metrics(st);
    }
    free(text);
    cJSON_Delete(st);
    return 0;
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
        if (show(c, "status", &table))
            return 1;
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
     "devices (capacity, free, granted, loaned, recalling, quarantined; names,\n"
     "UUIDs, granularity, peers), stages (KV mapped, needed and maximum,\n"
     "expert loans, backed slots, pending recalls) and clients"},
    {"clients", "[--json] [--no-legend]", "connected and quarantined clients"},
    {"stages", "[--json] [--no-legend]", "stages and their KV and expert budgets"},
    {"loans", "[--json] [--no-legend]",
     "per configured stage: loan policy, expert loans, KV headroom, backed\n"
     "slots, pending recalls, residency version, hold bound and recall deadline"},
    {"watch", "[--interval MS] [--count N] [--no-legend]",
     "status, refreshed every MS milliseconds (default 1000) until ^C"},
    {"metrics", "", "Prometheus text exposition of the devices, stages and counters"},
    {"set-capacity", "DEVICE SIZE",
     "admin only (access.admin): set a device's capacity (e.g. 12GiB), down\n"
     "to what is in use and reserved, up to its size when vramd started"},
    {"evict", "CLIENT",
     "admin only (access.admin): disconnect client CLIENT (an id from\n"
     "vramctl clients); its chunks return once its process is gone"},
};

static void usage(FILE *f)
{
    fprintf(f, "Usage: vramctl [--socket PATH] COMMAND [OPTIONS]\n\nCommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].args);
    fprintf(f, "\nOptions:\n"
            "  -s, --socket PATH   daemon socket (default $VRAM_SOCKET, else "
            "/run/vramd/vramd.sock)\n"
            "  -h, --help          this text; COMMAND --help for a command's\n\n"
            "Sizes are shown in binary units (MiB, GiB).\n"
            "Exit status: 0 success, 1 request failed, 2 usage, 3 no daemon.\n");
}

int main(int argc, char **argv)
{
    static const struct option gopts[] = {
        {"socket", required_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *path = NULL;
    int ch;
    while ((ch = getopt_long(argc, argv, "+s:h", gopts, NULL)) != -1) {
        switch (ch) {
        case 's': path = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind];
    size_t ci = 0, nc = sizeof(commands) / sizeof(commands[0]);
    while (ci < nc && strcmp(commands[ci].name, cmd) != 0)
        ci++;
    if (ci == nc) {
        fprintf(stderr, "vramctl: unknown command '%s' (try --help)\n", cmd);
        return 2;
    }
    struct opts o = {.legend = true, .interval_ms = 1000};
    long evict = -1, device = -1;
    uint64_t capacity = 0;
    bool have_capacity = false;
    for (int i = optind + 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(cmd, "set-capacity") == 0 && a[0] != '-' && !have_capacity) {
            char *end;
            if (device < 0) {
                device = strtol(a, &end, 10);
                if (*end || device < 0 || device > 1023) {
                    fprintf(stderr, "vramctl set-capacity: '%s' is not a device "
                            "id\n", a);
                    return 2;
                }
            } else if (vram_size_parse(a, &capacity) < 0) {
                fprintf(stderr, "vramctl set-capacity: '%s' is not a size (such "
                        "as 12GiB or 512MiB)\n", a);
                return 2;
            } else {
                have_capacity = true;
            }
            continue;
        }
        if (strcmp(cmd, "evict") == 0 && evict < 0 && a[0] != '-') {
            char *end;
            evict = strtol(a, &end, 10);
            if (*end || evict <= 0 || evict > UINT32_MAX) {
                fprintf(stderr, "vramctl evict: '%s' is not a client id\n", a);
                return 2;
            }
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("Usage: vramctl %s %s\n%s.\n", commands[ci].name,
                   commands[ci].args, commands[ci].help);
            return 0;
        } else if (strcmp(a, "--json") == 0 && strstr(commands[ci].args, "--json")) {
            o.json = true;
        } else if (strcmp(a, "--no-legend") == 0 &&
                   strstr(commands[ci].args, "--no-legend")) {
            o.legend = false;
        } else if ((strcmp(a, "--interval") == 0 || strcmp(a, "--count") == 0) &&
                   strcmp(cmd, "watch") == 0 && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v <= 0 || v > 3600000) {
                fprintf(stderr, "vramctl watch: %s must be a positive number\n", a);
                return 2;
            }
            if (a[2] == 'i')
                o.interval_ms = v;
            else
                o.count = (int)v;
        } else {
            fprintf(stderr, "vramctl %s: unknown option '%s'\n", cmd, a);
            return 2;
        }
    }
    if (strcmp(cmd, "set-capacity") == 0 && !have_capacity) {
        fprintf(stderr, "vramctl set-capacity: DEVICE and SIZE, e.g. "
                "vramctl set-capacity 0 12GiB\n");
        return 2;
    }
    if (strcmp(cmd, "evict") == 0 && evict < 0) {
        fprintf(stderr, "vramctl evict: which client? (vramctl clients)\n");
        return 2;
    }
    const char *shown = path ? path : getenv("VRAM_SOCKET");
    if (!shown || !*shown)
        shown = "/run/vramd/vramd.sock";
    char err[512] = "";
    struct vram_client_options co = {.name = "vramctl", .ctl = 1,
                                     .timeout_ms = 10000, .error = err,
                                     .error_len = sizeof(err)};
    vram_client *cl;
    int e = vram_client_connect(shown, &co, &cl);
    if (e < 0) {
        if (e == -ENOENT || e == -ECONNREFUSED)
            fprintf(stderr, "vramctl: no vramd is listening on %s (%s)\n", shown,
                    vram_strerror(e));
        else
            fprintf(stderr, "vramctl: cannot talk to vramd on %s: %s\n", shown,
                    err[0] ? err : vram_strerror(e));
        return e == -ENOENT || e == -ECONNREFUSED || e == -EACCES ? 3 : 1;
    }
    int rc;
    if (strcmp(cmd, "set-capacity") == 0) {
        char b[32];
        rc = vram_admin_set_capacity(cl, (uint32_t)device, capacity) == 0 ? 0 : 1;
        if (rc)
            fprintf(stderr, "vramctl: set-capacity: %s\n", vram_client_last_error(cl));
        else
            printf("device %ld: capacity %s\n", device, sz(capacity, b));
    } else if (strcmp(cmd, "evict") == 0) {
        rc = vram_admin_evict(cl, (uint32_t)evict) == 0 ? 0 : 1;
        if (rc)
            fprintf(stderr, "vramctl: evict: %s\n", vram_client_last_error(cl));
        else
            printf("client %ld evicted\n", evict);
    } else if (strcmp(cmd, "watch") == 0) {
        rc = cmd_watch(cl, &o);
    } else {
        rc = show(cl, cmd, &o);
    }
    vram_client_close(cl);
    return rc;
}
