/* SPDX-License-Identifier: Apache-2.0 */
/* vram-replay: drives a scenario (such as tests/scenarios/seed-pp32-16.json)
 * against a running vramd and prints one JSON object per line per request step.
 *
 * Each configured stage named by the scenario gets its own client (by
 * default in its own process, as a pipeline-split engine would run; with
 * --one-client all stages share one connection in one process). A step
 * reserves KV for prompt + output tokens (blocking until mapped, holding for
 * recalls), writes into the memory it got, records the figures, then trims
 * back to the initial window. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proto/message.h"
#include "platform/platform.h"
#include "client/include/vram.h"
#include "client/tools/table.h"

#define MAX_STAGES 64
#define MAX_STEPS 4096

struct step {
    uint64_t prompt, output;
};

struct scenario {
    uint32_t stages[MAX_STAGES];
    size_t nstages;
    struct step steps[MAX_STEPS];
    size_t nsteps;
    bool expert_at_start, trim;
};

static const char *socket_path;
static bool table;

static uint64_t get(const cJSON *o, const char *k)
{
    uint64_t v = 0;
    vw_json_u64(o, k, &v);
    return v;
}


/* One step: a JSON line, or rows of a table for people (counts name what
 * they count: tokens, slots, chunks). */
static void emit(cJSON *step)
{
    if (!table) {
        char *txt = cJSON_PrintUnformatted(step);
        printf("%s\n", txt);
        cJSON_free(txt);
        fflush(stdout);
        return;
    }
    if (get(step, "step") == 1)
        tool_row("%-5s %-13s %-13s %-6s %-6s %-10s %-10s %-12s %-12s %-15s %s",
            "STEP", "PROMPT-TOKENS", "OUTPUT-TOKENS", "STAGE", "DEVICE",
            "KV-NEEDED", "KV-MAPPED", "EXPERT-LOANS", "BACKED-SLOTS",
            "RECALLED-CHUNKS", "TIME");
    const cJSON *st;
    cJSON_ArrayForEach(st, cJSON_GetObjectItem(step, "stages")) {
        char need[24], mapped[24], loans[24], us[24];
        snprintf(need, sizeof(need), "%.1f MiB", get(st, "kv_needed_bytes") / 1048576.0);
        snprintf(mapped, sizeof(mapped), "%llu MiB",
                 (unsigned long long)(get(st, "kv_mapped_bytes") >> 20));
        snprintf(loans, sizeof(loans), "%llu MiB",
                 (unsigned long long)(get(st, "expert_loaned_bytes") >> 20));
        snprintf(us, sizeof(us), "%.1f ms", get(st, "step_us") / 1000.0);
        tool_row("%-5llu %-13llu %-13llu %-6llu %-6llu %-10s %-10s %-12s %-12llu %-15llu %s",
            (unsigned long long)get(step, "step"),
            (unsigned long long)get(st, "prompt_tokens"),
            (unsigned long long)get(st, "output_tokens"),
            (unsigned long long)get(st, "stage"),
            (unsigned long long)get(st, "device"), need, mapped, loans,
            (unsigned long long)get(st, "expert_slots_backed"),
            (unsigned long long)get(st, "recalled_chunks"), us);
    }
    fflush(stdout);
}

static uint64_t now_us(void)
{
    return vp_now_ns() / 1000;
}

static int load(const char *path, struct scenario *sc)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "vram-replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *root = cJSON_Parse(buf);
    if (!root) {
        fprintf(stderr, "vram-replay: %s: not valid JSON\n", path);
        return -1;
    }
    int rc = -1;
    const cJSON *scn = cJSON_GetObjectItem(root, "scenario");
    const cJSON *steps = cJSON_GetObjectItem(scn, "steps");
    if (!cJSON_IsArray(steps) || cJSON_GetArraySize(steps) == 0) {
        fprintf(stderr, "vram-replay: %s: scenario.steps: expected a non-empty "
                "array\n", path);
        goto out;
    }
    const cJSON *st;
    cJSON_ArrayForEach(st, cJSON_GetObjectItem(root, "stages")) {
        uint64_t id = sc->nstages;
        vw_json_u64(st, "id", &id);
        if (sc->nstages == MAX_STAGES) {
            fprintf(stderr, "vram-replay: at most %d stages\n", MAX_STAGES);
            goto out;
        }
        sc->stages[sc->nstages++] = (uint32_t)id;
    }
    const cJSON *only = cJSON_GetObjectItem(scn, "stages");
    if (cJSON_IsArray(only)) {
        sc->nstages = 0;
        cJSON_ArrayForEach(st, only) {
            uint64_t id;
            if (sc->nstages == MAX_STAGES || !vw_json_uint(st, UINT32_MAX, &id)) {
                fprintf(stderr, "vram-replay: %s: scenario.stages: at most %d "
                        "stage ids (whole numbers)\n", path, MAX_STAGES);
                goto out;
            }
            sc->stages[sc->nstages++] = (uint32_t)id;
        }
    }
    /* No stages named: the daemon's configured ones (main asks it). */
    int i = 0;
    cJSON_ArrayForEach(st, steps) {
        if (sc->nsteps == MAX_STEPS ||
            vw_json_u64(st, "prompt_tokens", &sc->steps[sc->nsteps].prompt) < 0) {
            fprintf(stderr, "vram-replay: %s: scenario.steps[%d].prompt_tokens: "
                    "expected a non-negative integer\n", path, i);
            goto out;
        }
        sc->steps[sc->nsteps].output = 0;
        vw_json_u64(st, "output_tokens", &sc->steps[sc->nsteps].output);
        sc->nsteps++;
        i++;
    }
    sc->expert_at_start = true;
    sc->trim = true;
    vw_json_bool(scn, "expert_request_at_start", &sc->expert_at_start);
    vw_json_bool(scn, "trim_after_each_step", &sc->trim);
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

static void fail(vram_client *c, const char *what, int e)
{
    fprintf(stderr, "vram-replay: %s: %s (%s)\n", what,
            c ? vram_client_last_error(c) : "", vram_strerror(e));
    exit(1);
}

/* Connects as name, or says where it could not and why, and exits. */
static vram_client *connect_or_die(const char *name, int ctl)
{
    char err[512] = "";
    struct vram_client_options o = {.name = name, .ctl = ctl, .error = err,
                                    .error_len = sizeof(err)};
    vram_client *c;
    int e = vram_client_connect(socket_path, &o, &c);
    if (e < 0) {
        fprintf(stderr, "vram-replay: %s\n", err[0] ? err : vram_strerror(e));
        exit(1);
    }
    return c;
}

/* The stages of the daemon's configuration, when the scenario names none. */
static int daemon_stages(struct scenario *sc)
{
    vram_client *c = connect_or_die("replay-stages", 1);
    char *text = NULL;
    int e = vram_status_json(c, &text);
    vram_client_close(c);
    if (e < 0)
        fail(NULL, "status", e);
    cJSON *st = cJSON_Parse(text);
    vram_free(text);
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(st, "stages")) {
        bool configured = false;
        uint64_t id;
        vw_json_bool(s, "configured", &configured);
        if (configured && sc->nstages < MAX_STAGES &&
            vw_json_u64(s, "id", &id) == 0)
            sc->stages[sc->nstages++] = (uint32_t)id;
    }
    cJSON_Delete(st);
    if (!sc->nstages) {
        fprintf(stderr, "vram-replay: the scenario names no stages and vramd "
                "has none configured\n");
        return -1;
    }
    return 0;
}

static int budget_events;

static void on_event(void *user, const struct vram_event *ev)
{
    (void)user;
    if (ev->type == VRAM_EVENT_BUDGET_CHANGED)
        budget_events++;
}

static void prepare(vram_client *c, uint32_t stage, const struct scenario *sc)
{
    int e = vram_stage_register(c, stage, 0, NULL);
    if (e < 0)
        fail(c, "stage_register", e);
    if (sc->expert_at_start && (e = vram_expert_request(c, stage, 0)) < 0)
        fail(c, "expert_request", e);
}

/* On the host backend, writes into the first and the last KV chunk of every
 * lane and the first expert slot, proving the mappings are real memory. */
static void touch(vram_client *c, const struct vram_stage_info *in)
{
    if (strcmp(vram_client_backend(c), "host") != 0)
        return; /* device memory: the CPU cannot store to it */
    struct vram_region_info kv;
    if (vram_region_info(c, in->kv_region, &kv) < 0 || !kv.mapped)
        return;
    uint32_t per_lane = kv.mapped / kv.lanes;
    for (uint32_t l = 0; l < kv.lanes; l++) {
        volatile char *a = vram_region_slot(c, in->kv_region, l, 0);
        volatile char *b = vram_region_slot(c, in->kv_region, l, per_lane - 1);
        a[0] = 1;
        b[kv.chunk_bytes - 1] = 2;
    }
    if (in->expert_slots_backed) {
        volatile char *e = vram_region_slot(c, in->expert_region, 0, 0);
        e[0] = 3;
    }
}

static cJSON *run_step(vram_client *c, uint32_t stage, const struct step *s,
                       bool trim)
{
    struct vram_kv_result r;
    uint64_t t0 = now_us();
    int e = vram_kv_reserve(c, stage, s->prompt, s->output, VRAM_KV_HOLD, &r);
    uint64_t dt = now_us() - t0;
    if (e < 0)
        fail(c, "kv_reserve", e);
    struct vram_stage_info in;
    vram_stage_info(c, stage, &in);
    touch(c, &in);
    struct vram_residency res;
    vram_expert_residency(c, stage, &res);
    cJSON *o = cJSON_CreateObject();
    vw_json_add_u64(o, "stage", stage);
    vw_json_add_u64(o, "device", in.device);
    vw_json_add_u64(o, "prompt_tokens", s->prompt);
    vw_json_add_u64(o, "output_tokens", s->output);
    vw_json_add_u64(o, "kv_needed_bytes", r.kv_needed_bytes);
    vw_json_add_u64(o, "kv_mapped_bytes", r.kv_mapped_bytes);
    vw_json_add_u64(o, "expert_loaned_bytes", res.expert_loaned_bytes);
    vw_json_add_u64(o, "expert_slots_backed", res.expert_slots_backed);
    vw_json_add_u64(o, "recalled_chunks", r.recalled_chunks);
    vw_json_add_u64(o, "residency_version", res.version);
    vw_json_add_u64(o, "step_us", dt);
    if (trim && (e = vram_kv_trim(c, stage, 0)) < 0)
        fail(c, "kv_trim", e);
    return o;
}

/* ---- one process per stage ---------------------------------------------- */

struct worker {
    int64_t pid;
    FILE *cmd, *res;
};

/* A stage's client in a process of its own (vram-replay --worker STAGE):
 * steps come on standard input, results go to standard output. */
static int worker_main(uint32_t stage, const struct scenario *sc)
{
    FILE *in = stdin, *out = stdout;
    char name[32];
    snprintf(name, sizeof(name), "replay-stage-%u", stage);
    vram_client *c = connect_or_die(name, 0);
    vram_client_set_event_callback(c, on_event, NULL);
    prepare(c, stage, sc);
    fprintf(out, "ready\n");
    fflush(out);
    char line[64];
    while (fgets(line, sizeof(line), in)) {
        if (strncmp(line, "quit", 4) == 0)
            break;
        if (strncmp(line, "events", 6) == 0) {
            vram_client_dispatch(c);
            fprintf(out, "ok\n");
            fflush(out);
            continue;
        }
        size_t i = strtoul(line, NULL, 10);
        cJSON *r = run_step(c, stage, &sc->steps[i], sc->trim);
        char *s = cJSON_PrintUnformatted(r);
        fprintf(out, "%s\n", s);
        fflush(out);
        cJSON_free(s);
        cJSON_Delete(r);
    }
    vram_client_close(c);
    return 0;
}

static volatile sig_atomic_t stop_linger;

static void on_stop(int sig)
{
    (void)sig;
    stop_linger = 1;
}

static void linger(void)
{
    if (table)
        printf("(holding: the clients keep their memory until SIGTERM or "
               "SIGINT)\n");
    else
        printf("{\"event\":\"holding\",\"note\":\"clients keep their memory "
               "until SIGTERM or SIGINT\"}\n");
    fflush(stdout);
    vp_on_interrupt(on_stop);
    while (!stop_linger)
        vp_sleep_ms(50);
}

static int run_processes(const struct scenario *sc, const char *scenario_path,
                         bool hold)
{
    struct worker w[MAX_STAGES];
    char self[4096];
    if (vp_self_exe(self, sizeof(self)) < 0) {
        fprintf(stderr, "vram-replay: cannot find its own executable\n");
        return 1;
    }
    for (size_t i = 0; i < sc->nstages; i++) {
        char stage[16];
        snprintf(stage, sizeof(stage), "%u", sc->stages[i]);
        char *args[8];
        int n = 0;
        args[n++] = self;
        args[n++] = "--worker";
        args[n++] = stage;
        if (socket_path) {
            args[n++] = "--socket";
            args[n++] = (char *)socket_path;
        }
        args[n++] = (char *)scenario_path;
        args[n] = NULL;
        int e = vp_spawn_piped(self, args, &w[i].pid, &w[i].cmd, &w[i].res);
        if (e < 0) {
            fprintf(stderr, "vram-replay: cannot start a worker: %s\n",
                    strerror(-e));
            return 1;
        }
    }
    char line[8192];
    for (size_t i = 0; i < sc->nstages; i++)
        if (!fgets(line, sizeof(line), w[i].res) || strcmp(line, "ready\n")) {
            fprintf(stderr, "vram-replay: stage %u's client failed to start\n",
                    sc->stages[i]);
            return 1;
        }
    int rc = 0;
    for (size_t s = 0; s < sc->nsteps && !rc; s++) {
        uint64_t t0 = now_us();
        /* All stages of a step run at once, as a pipeline's windows do. */
        for (size_t i = 0; i < sc->nstages; i++) {
            fprintf(w[i].cmd, "%zu\n", s);
            fflush(w[i].cmd);
        }
        cJSON *o = cJSON_CreateObject();
        vw_json_add_u64(o, "step", s + 1);
        vw_json_add_u64(o, "prompt_tokens", sc->steps[s].prompt);
        vw_json_add_u64(o, "output_tokens", sc->steps[s].output);
        cJSON *arr = cJSON_AddArrayToObject(o, "stages");
        for (size_t i = 0; i < sc->nstages; i++) {
            cJSON *r = fgets(line, sizeof(line), w[i].res) ? cJSON_Parse(line) : NULL;
            if (!r) {
                fprintf(stderr, "vram-replay: stage %u failed at step %zu\n",
                        sc->stages[i], s + 1);
                rc = 1;
                break;
            }
            cJSON_AddItemToArray(arr, r);
        }
        vw_json_add_u64(o, "step_us", now_us() - t0);
        if (!rc)
            emit(o);
        cJSON_Delete(o);
    }
    if (!rc && hold)
        linger();
    for (size_t i = 0; i < sc->nstages; i++) {
        fprintf(w[i].cmd, "quit\n");
        fclose(w[i].cmd);
        fclose(w[i].res);
        int st = 1;
        if (vp_wait_child(w[i].pid, &st) < 0 || st)
            rc = 1;
    }
    return rc;
}

/* ---- one client for every stage ---------------------------------------- */

static int run_one_client(const struct scenario *sc, bool hold)
{
    vram_client *c = connect_or_die("replay", 0);
    vram_client_set_event_callback(c, on_event, NULL);
    for (size_t i = 0; i < sc->nstages; i++)
        prepare(c, sc->stages[i], sc);
    for (size_t s = 0; s < sc->nsteps; s++) {
        uint64_t t0 = now_us();
        cJSON *o2 = cJSON_CreateObject();
        vw_json_add_u64(o2, "step", s + 1);
        vw_json_add_u64(o2, "prompt_tokens", sc->steps[s].prompt);
        vw_json_add_u64(o2, "output_tokens", sc->steps[s].output);
        cJSON *arr = cJSON_AddArrayToObject(o2, "stages");
        for (size_t i = 0; i < sc->nstages; i++)
            cJSON_AddItemToArray(arr, run_step(c, sc->stages[i], &sc->steps[s],
                                               sc->trim));
        vw_json_add_u64(o2, "step_us", now_us() - t0);
        emit(o2);
        cJSON_Delete(o2);
    }
    if (hold)
        linger();
    vram_client_close(c);
    return 0;
}

static void usage(FILE *f, bool full)
{
    fprintf(f, "Usage: vram-replay [--socket PATH] [--one-client] [--hold] "
            "[--table] SCENARIO.json\n"
            "       vram-replay --version | --help\n");
    if (!full)
        return;
    fprintf(f,
            "Drives the scenario's steps against a running vramd (one client "
            "process per\nstage, or one client for all with --one-client) and "
            "prints one JSON line per\nstep. Without stages in the scenario, "
            "the daemon's configured stages are used.\n\n"
            "Options:\n"
            "  -s, --socket PATH  vramd's socket (default $VRAM_SOCKET, else "
            VP_DEFAULT_ENDPOINT ")\n"
            "      --one-client   one client, in this process, for every stage\n"
            "      --hold         keep the clients and their memory after the "
            "last step,\n"
            "                     until SIGTERM or SIGINT\n"
            "      --table        a table for people instead of JSON lines\n"
            "  -V, --version      the version\n"
            "  -h, --help         this text\n\n"
            "Exit status: 0 every step done, 1 a step or the connection failed, "
            "2 usage.\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, 0, 's'},
        {"one-client", no_argument, 0, '1'},
        {"hold", no_argument, 0, 'H'},
        {"table", no_argument, 0, 't'},
        {"worker", required_argument, 0, 'W'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0},
    };
    bool one = false, hold = false;
    long worker = -1;
    int c;
    while ((c = getopt_long(argc, argv, "s:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'V': printf("vram-replay %s\n", VRAM_VERSION); return 0;
        case 's': socket_path = optarg; break;
        case '1': one = true; break;
        case 'H': hold = true; break;
        case 't': table = true; break;
        case 'W': worker = strtol(optarg, NULL, 10); break;
        case 'h': usage(stdout, true); return 0;
        default: usage(stderr, false); return 2;
        }
    }
    if (optind + 1 != argc) {
        usage(stderr, false);
        return 2;
    }
    static struct scenario sc;
    if (load(argv[optind], &sc) < 0 || (!sc.nstages && daemon_stages(&sc) < 0))
        return 1;
    if (worker >= 0)
        return worker_main((uint32_t)worker, &sc);
    return one ? run_one_client(&sc, hold)
               : run_processes(&sc, argv[optind], hold);
}
