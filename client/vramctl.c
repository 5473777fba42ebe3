/* vramctl: inspect vramd's budgets.
 * Exit codes: 0 success, 1 the daemon refused or failed the request,
 * 2 usage error, 3 no daemon reachable on the socket. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "message.h"
#include "units.h"
#include "vram.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: vramctl [--socket PATH] COMMAND [OPTIONS]\n\n"
            "Commands:\n"
            "  status [--json] [--no-legend]   devices, stages and clients\n\n"
            "Options:\n"
            "  -s, --socket PATH   daemon socket (default $VRAM_SOCKET, else "
            "/run/vramd/vramd.sock)\n"
            "  -h, --help          this text\n\n"
            "Exit status: 0 success, 1 request failed, 2 usage, 3 no daemon.\n");
}

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

static void print_table(const cJSON *st, bool legend)
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
    printf("\n");
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
    printf("\n");
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

static int cmd_status(vram_client *c, int argc, char **argv)
{
    bool json = false, legend = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else if (strcmp(argv[i], "--no-legend") == 0)
            legend = false;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("Usage: vramctl status [--json] [--no-legend]\n"
                   "Devices (capacity, free, granted, loaned, recalling,\n"
                   "quarantined), stages (KV mapped, needed and maximum, expert\n"
                   "loans, backed slots, pending recalls) and clients.\n");
            return 0;
        } else {
            fprintf(stderr, "vramctl status: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    char *text;
    int e = vram_status_json(c, &text);
    if (e < 0) {
        fprintf(stderr, "vramctl: status failed: %s\n", vram_client_last_error(c));
        return 1;
    }
    if (json) {
        printf("%s\n", text);
    } else {
        cJSON *st = cJSON_Parse(text);
        print_table(st, legend);
        cJSON_Delete(st);
    }
    free(text);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *path = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "+s:h", opts, NULL)) != -1) {
        switch (c) {
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
    if (strcmp(cmd, "status") != 0) {
        fprintf(stderr, "vramctl: unknown command '%s' (try --help)\n", cmd);
        return 2;
    }
    const char *shown = path ? path : getenv("VRAM_SOCKET");
    if (!shown || !*shown)
        shown = "/run/vramd/vramd.sock";
    char err[512] = "";
    struct vram_client_options o = {.name = "vramctl", .ctl = 1,
                                    .timeout_ms = 10000, .error = err,
                                    .error_len = sizeof(err)};
    vram_client *cl;
    int e = vram_client_connect(shown, &o, &cl);
    if (e < 0) {
        if (e == -ENOENT || e == -ECONNREFUSED)
            fprintf(stderr, "vramctl: no vramd is listening on %s (%s)\n", shown,
                    vram_strerror(e));
        else
            fprintf(stderr, "vramctl: cannot talk to vramd on %s: %s\n", shown,
                    err[0] ? err : vram_strerror(e));
        return e == -ENOENT || e == -ECONNREFUSED || e == -EACCES ? 3 : 1;
    }
    int rc = cmd_status(cl, argc - optind, argv + optind);
    vram_client_close(cl);
    return rc;
}
