/* SPDX-License-Identifier: Apache-2.0 */
/* Prometheus text exposition of a status. Label names follow Prometheus'
 * conventions (device, backend, stage, client, name, pid); label values
 * that come from peers (client names) are escaped as every view escapes
 * them (control characters and bytes that are not UTF-8 as \xNN, so the
 * exposition stays valid UTF-8), then as the format says. */
#include "client/tools/metrics_text.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto/text.h"

static void head(struct tool_text *t, const char *name, const char *type,
                 const char *help)
{
    tool_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value, quoted: first escaped as every view escapes text from
 * vramd (control characters and bytes that are not UTF-8 as the text
 * \xNN, textbuf.h), then \\, \" and \n escaped as the format says (a
 * newline can no longer be there, but the rule is the format's). */
static void label_value(struct tool_text *t, const char *v)
{
    char small[VW_TEXT_ESCAPED(128)];
    struct tool_text e = {0};
    const char *s = small;
    size_t n;
    if (strlen(v ? v : "") <= 128) {
        n = vw_text_escape(small, sizeof(small), v);
    } else {
        tool_text_peer(&e, v);
        t->oom |= e.oom;
        s = e.p ? e.p : "";
        n = e.len;
    }
    tool_text_raw(t, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\')
            tool_text_raw(t, "\\\\", 2);
        else if (c == '"')
            tool_text_raw(t, "\\\"", 2);
        else if (c == '\n')
            tool_text_raw(t, "\\n", 2);
        else
            tool_text_raw(t, &c, 1);
    }
    tool_text_raw(t, "\"", 1);
    tool_text_free(&e);
}

/* A gauge or counter and the struct member it reads: offsetof keeps the
 * member's name checked by the compiler. A field the catalogue makes
 * optional (one an older vramd does not send) has its has_ flag: without
 * it the series has no sample, rather than a 0 that would be a lie. */
struct metric {
    size_t off;
    bool u32; /* else u64 */
    const char *name, *help;
    size_t has; /* offsetof the has_ flag, plus 1; 0: always there */
};
#define M64(type, member, name, help) {offsetof(type, member), false, name, help, 0}
#define M32(type, member, name, help) {offsetof(type, member), true, name, help, 0}
#define M64_OPT(type, member, name, help)                                      \
    {offsetof(type, member), false, name, help, offsetof(type, has_##member) + 1}
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static bool present(const void *obj, const struct metric *m)
{
    bool has = true;
    if (m->has)
        memcpy(&has, (const char *)obj + m->has - 1, sizeof(has));
    return has;
}

static unsigned long long value(const void *obj, const struct metric *m)
{
    const char *p = (const char *)obj + m->off;
    if (m->u32) {
        uint32_t v;
        memcpy(&v, p, sizeof(v));
        return v;
    }
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static const struct metric dev[] = {
    M64(struct vw_t_device, capacity_bytes, "vramd_device_capacity_bytes",
        "Bytes the device's pool holds."),
    M64(struct vw_t_device, free_bytes, "vramd_device_free_bytes",
        "Bytes free in the pool."),
    M64(struct vw_t_device, granted_bytes, "vramd_device_granted_bytes",
        "Bytes granted to KV and fixed regions."),
    M64(struct vw_t_device, fixed_bytes, "vramd_device_fixed_bytes",
        "Bytes granted to fixed regions (weights, workspace, drafter KV)."),
    M64(struct vw_t_device, kv_bytes, "vramd_device_kv_bytes",
        "Bytes granted to KV regions."),
    M64(struct vw_t_device, loaned_bytes, "vramd_device_loaned_bytes",
        "Bytes lent to expert regions."),
    M64(struct vw_t_device, recalling_bytes, "vramd_device_recalling_bytes",
        "Bytes being recalled."),
    M64(struct vw_t_device, quarantined_bytes, "vramd_device_quarantined_bytes",
        "Bytes of gone clients, not yet reclaimed."),
    M64(struct vw_t_device, reserved_bytes, "vramd_device_reserved_bytes",
        "Bytes reserved by configured stages (fixed and the KV window)."),
    M64(struct vw_t_device, max_capacity_bytes,
        "vramd_device_max_capacity_bytes",
        "The largest capacity the device may be given."),
    M64(struct vw_t_device, total_bytes, "vramd_device_total_bytes",
        "The device's own size."),
    M32(struct vw_t_device, pool_ready_chunks, "vramd_device_pool_ready_chunks",
        "Chunks made ahead of grants."),
    M64_OPT(struct vw_t_device, weights_bytes, "vramd_device_weights_bytes",
            "Bytes of capacity charged to weight sets (their allocations, in "
            "whole chunks)."),
    M64_OPT(struct vw_t_device, weights_cached_bytes,
            "vramd_device_weights_cached_bytes",
            "Of those, bytes of sealed weight sets no client maps (cached: "
            "evicted when memory is needed, unless kept)."),
};

static const struct metric stage[] = {
    M64(struct vw_t_stage, kv_mapped_bytes, "vramd_stage_kv_mapped_bytes",
        "KV bytes mapped for the stage."),
    M64(struct vw_t_stage, kv_needed_bytes, "vramd_stage_kv_needed_bytes",
        "KV bytes the current request needs."),
    M64(struct vw_t_stage, kv_max_bytes, "vramd_stage_kv_max_bytes",
        "KV bytes of the native-context window."),
    M64(struct vw_t_stage, expert_loaned_bytes, "vramd_stage_expert_loaned_bytes",
        "Bytes lent to the stage's experts."),
    M32(struct vw_t_stage, expert_slots_backed, "vramd_stage_expert_slots_backed",
        "Expert slots backed by loans."),
    M32(struct vw_t_stage, recalls_pending, "vramd_stage_recalls_pending",
        "Chunks of the stage being recalled."),
    M64(struct vw_t_stage, fixed_bytes, "vramd_stage_fixed_bytes",
        "Bytes mapped in the stage's fixed regions."),
    M64(struct vw_t_stage, fixed_reserved_bytes, "vramd_stage_fixed_reserved_bytes",
        "Bytes the stage's fixed regions reserve."),
};

static const struct metric counter[] = {
    M64(struct vw_t_counters, grants, "vramd_grants_total", "Chunks granted."),
    M64(struct vw_t_counters, moves, "vramd_moves_total",
        "Chunks moved between a client's regions."),
    M64(struct vw_t_counters, recalls, "vramd_recalls_total", "Chunks recalled."),
    M64(struct vw_t_counters, recalls_missed, "vramd_recalls_missed_total",
        "Recall deadlines missed."),
    M64(struct vw_t_counters, releases, "vramd_releases_total",
        "Chunks returned to the pool."),
    M64(struct vw_t_counters, errors, "vramd_errors_total", "Requests refused."),
    M64(struct vw_t_counters, protocol_errors, "vramd_protocol_errors_total",
        "Connections dropped for bad frames."),
    M64(struct vw_t_counters, disconnects, "vramd_disconnects_total",
        "Client connections that ended."),
    M64(struct vw_t_counters, kept_after_release, "vramd_kept_after_release_total",
        "Releases refused because the client still mapped or held the chunk."),
    M64_OPT(struct vw_t_counters, weights_hits, "vramd_weights_hits_total",
            "Weight set opens that mapped a sealed set."),
    M64_OPT(struct vw_t_counters, weights_misses, "vramd_weights_misses_total",
            "Weight set opens that made a new set (the opener writes it)."),
    M64_OPT(struct vw_t_counters, weights_evictions,
            "vramd_weights_evictions_total",
            "Cached weight sets evicted to make room."),
};

/* Sleep and wake (R18), per stage. A vramd that knows them sends the
 * counters for every stage, and asleep and host_bytes only while the stage
 * sleeps: for it an awake stage's asleep and host bytes are 0, a sample
 * that says so; an older vramd sends none of these and its stages get no
 * sample. The engine reports its times in microseconds; Prometheus counts
 * seconds. */
static void render_sleep(struct tool_text *t, const struct vw_rep_status *st)
{
    enum { ASLEEP, HOST, SLEEPS, WAKES, SLEEP_S, WAKE_S };
    static const struct {
        const char *name, *type, *help;
    } per[] = {
        [ASLEEP] = {"vramd_stage_asleep", "gauge",
                    "1 while the stage sleeps (it holds no device memory; its "
                    "owner keeps its bytes in host memory)."},
        [HOST] = {"vramd_stage_host_bytes", "gauge",
                  "Bytes the sleeping stage's owner keeps in host memory, as it "
                  "said; 0 while awake."},
        [SLEEPS] = {"vramd_stage_sleeps_total", "counter",
                    "Sleeps of the stage since it was registered."},
        [WAKES] = {"vramd_stage_wakes_total", "counter",
                   "Wakes of the stage since it was registered."},
        [SLEEP_S] = {"vramd_stage_sleep_seconds_total", "counter",
                     "Seconds the stage's owner spent in sleeps (copying out, "
                     "unmapping), as it reported."},
        [WAKE_S] = {"vramd_stage_wake_seconds_total", "counter",
                    "Seconds the stage's owner spent in wakes (getting memory, "
                    "mapping, copying back), as it reported."},
    };
    for (size_t k = 0; k < COUNT(per); k++) {
        head(t, per[k].name, per[k].type, per[k].help);
        for (size_t i = 0; i < st->stages.n; i++) {
            const struct vw_t_stage *s = &st->stages.v[i];
            bool asleep = s->has_asleep && s->asleep;
            bool has = s->has_sleeps || asleep;
            unsigned long long v = 0;
            uint64_t us = 0;
            switch (k) {
            case ASLEEP: v = asleep; break;
            case HOST: v = asleep && s->has_host_bytes ? s->host_bytes : 0; break;
            case SLEEPS: has = s->has_sleeps; v = s->sleeps; break;
            case WAKES: has = s->has_wakes; v = s->wakes; break;
            case SLEEP_S: has = s->has_sleep_us; us = s->sleep_us; break;
            default: has = s->has_wake_us; us = s->wake_us; break;
            }
            if (!has)
                continue;
            tool_text_printf(t, "%s{stage=\"%u\",device=\"%u\"} ", per[k].name,
                             s->id, s->device);
            if (k == SLEEP_S || k == WAKE_S)
                tool_text_printf(t, "%.6f\n", (double)us / 1e6);
            else
                tool_text_printf(t, "%llu\n", v);
        }
    }
}

/* Engines, and any client that holds memory: control clients (vramctl,
 * this exporter among them) come and go with new ids and hold nothing, so
 * series of theirs would only add churn. */
static bool client_shown(const struct vw_t_client *c)
{
    return !(c->role && strcmp(c->role, "ctl") == 0) || c->held_bytes ||
           c->quarantined_bytes;
}

/* A client's series are keyed by its id and name; the pid, which changes
 * with every restart of an engine, is on vramd_client_info alone (join on
 * client to read it). */
static void client_labels(struct tool_text *t, const struct vw_t_client *c,
                          bool with_pid)
{
    tool_text_printf(t, "{client=\"%u\",name=", c->id);
    label_value(t, c->name);
    if (with_pid)
        tool_text_printf(t, ",pid=\"%lld\"", (long long)c->pid);
}

static void render_clients(struct tool_text *t, const struct vw_rep_status *st)
{
    head(t, "vramd_client_info", "gauge",
         "1 for each engine client, with its pid; state: connected, "
         "quarantined (gone, its process may still map its memory) or "
         "handed-off.");
    for (size_t i = 0; i < st->clients.n; i++) {
        const struct vw_t_client *c = &st->clients.v[i];
        if (!client_shown(c))
            continue;
        tool_text_str(t, "vramd_client_info");
        client_labels(t, c, true);
        tool_text_str(t, ",state=");
        label_value(t, c->state);
        tool_text_str(t, ",role=");
        label_value(t, c->role);
        tool_text_str(t, "} 1\n");
    }
    /* The same series text for each: name{labels} value. */
    static const struct {
        const char *name, *type, *help;
    } per[] = {
        {"vramd_client_held_bytes", "gauge", "Bytes the client holds."},
        {"vramd_client_quarantined_bytes", "gauge",
         "Bytes of the gone client waiting for its process."},
        {"vramd_client_stages", "gauge", "Stages the client owns."},
        {"vramd_client_recalls_missed_total", "counter",
         "Recall deadlines the client missed."},
        {"vramd_client_delinquent", "gauge",
         "1 when the client missed a recall deadline (it gets no new loans)."},
    };
    for (size_t k = 0; k < COUNT(per); k++) {
        head(t, per[k].name, per[k].type, per[k].help);
        for (size_t i = 0; i < st->clients.n; i++) {
            const struct vw_t_client *c = &st->clients.v[i];
            if (!client_shown(c))
                continue;
            unsigned long long v = k == 0   ? c->held_bytes
                                   : k == 1 ? c->quarantined_bytes
                                   : k == 2 ? c->stages.n
                                   : k == 3 ? c->missed_recalls
                                            : (unsigned long long)c->delinquent;
            tool_text_str(t, per[k].name);
            client_labels(t, c, false);
            tool_text_printf(t, "} %llu\n", v);
        }
    }
}

void tool_metrics_render(struct tool_text *t, const struct vw_rep_status *st,
                         double scrape_seconds)
{
    head(t, "vramd_up", "gauge", "1 when vramd's status was read.");
    tool_text_str(t, "vramd_up 1\n");
    head(t, "vramd_scrape_duration_seconds", "gauge",
         "Seconds reading vramd's status took.");
    tool_text_printf(t, "vramd_scrape_duration_seconds %.6f\n", scrape_seconds);
    head(t, "vramd_info", "gauge", "1, labelled with vramd's version and backend.");
    tool_text_str(t, "vramd_info{version=");
    label_value(t, st->daemon.version);
    tool_text_str(t, ",backend=");
    label_value(t, st->backend);
    tool_text_str(t, "} 1\n");
    head(t, "vramd_uptime_seconds", "gauge", "Seconds since vramd started.");
    tool_text_printf(t, "vramd_uptime_seconds %.3f\n",
                     (double)st->daemon.uptime_ms / 1000.0);
    head(t, "vramd_chunk_fds", "gauge", "File descriptors vramd holds for chunks.");
    tool_text_printf(t, "vramd_chunk_fds %llu\n",
                     (unsigned long long)st->daemon.chunk_fds);

    for (size_t k = 0; k < COUNT(dev); k++) {
        head(t, dev[k].name, "gauge", dev[k].help);
        for (size_t i = 0; i < st->devices.n; i++) {
            if (!present(&st->devices.v[i], &dev[k]))
                continue;
            tool_text_printf(t, "%s{device=\"%u\",backend=", dev[k].name,
                             st->devices.v[i].id);
            label_value(t, st->devices.v[i].backend);
            /* The GPU's own id, as DCGM's series carry it (joins across
             * exporters; the device number is vramd's). */
            if (st->devices.v[i].uuid && st->devices.v[i].uuid[0]) {
                tool_text_str(t, ",gpu_uuid=");
                label_value(t, st->devices.v[i].uuid);
            }
            tool_text_printf(t, "} %llu\n", value(&st->devices.v[i], &dev[k]));
        }
    }
    for (size_t k = 0; k < COUNT(stage); k++) {
        head(t, stage[k].name, "gauge", stage[k].help);
        for (size_t i = 0; i < st->stages.n; i++)
            tool_text_printf(t, "%s{stage=\"%u\",device=\"%u\"} %llu\n",
                             stage[k].name, st->stages.v[i].id,
                             st->stages.v[i].device,
                             value(&st->stages.v[i], &stage[k]));
    }
    head(t, "vramd_stage_expert_slots", "gauge",
         "Slots of the stage's expert region (configured stages).");
    for (size_t i = 0; i < st->stages.n; i++)
        if (st->stages.v[i].has_expert_slots)
            tool_text_printf(t, "vramd_stage_expert_slots{stage=\"%u\",device=\"%u\"} %u\n",
                             st->stages.v[i].id, st->stages.v[i].device,
                             st->stages.v[i].expert_slots);
    render_sleep(t, st);
    for (size_t k = 0; k < COUNT(counter); k++) {
        head(t, counter[k].name, "counter", counter[k].help);
        if (present(&st->counters, &counter[k]))
            tool_text_printf(t, "%s %llu\n", counter[k].name,
                             value(&st->counters, &counter[k]));
    }
    int connected = 0;
    for (size_t i = 0; i < st->clients.n; i++) {
        const struct vw_t_client *c = &st->clients.v[i];
        connected += c->role && strcmp(c->role, "engine") == 0 && c->state &&
                     strcmp(c->state, "connected") == 0;
    }
    head(t, "vramd_clients_connected", "gauge", "Engine clients connected.");
    tool_text_printf(t, "vramd_clients_connected %d\n", connected);
    render_clients(t, st);
}

void tool_metrics_render_down(struct tool_text *t, const char *why)
{
    /* One comment line: why, escaped, holds no newline. */
    tool_text_str(t, "# ");
    tool_text_peer(t, why ? why : "vramd could not be read");
    tool_text_str(t, "\n");
    head(t, "vramd_up", "gauge", "1 when vramd's status was read.");
    tool_text_str(t, "vramd_up 0\n");
}
