/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's entry on POSIX: the foreground is the only mode. systemd
 * runs vramd as an ordinary process, stops it with SIGTERM, reloads it with
 * SIGHUP and hears from it through sd_notify (vp_service_notify); the
 * state file and the lock go beside the socket. */
#include "platform/entry.h"

#include <signal.h>
#include <stdio.h>

#include "platform/service.h"

#define DEFAULT_CONFIG "/etc/vramd/vramd.json"

/* Nothing to keep: systemd needs no state of ours. */
struct vp_entry {
    int unused;
};

enum vp_entry_mode vp_entry_mode(int *argc, char **argv,
                                 struct vp_entry_cfg *cfg, char *why,
                                 size_t whylen)
{
    (void)argc;
    (void)argv;
    (void)cfg;
    if (whylen)
        why[0] = 0;
    return VP_ENTRY_FOREGROUND;
}

const char *vp_entry_usage(void)
{
    return "";
}

const char *vp_entry_default_config(void)
{
    return DEFAULT_CONFIG;
}

int vp_entry_exec(enum vp_entry_mode mode, int argc, char **argv,
                  const struct vp_entry_cfg *cfg, const struct vp_entry_ops *ops,
                  char *why, size_t whylen)
{
    static struct vp_entry the;
    (void)argc;
    (void)argv;
    (void)cfg;
    if (whylen)
        why[0] = 0;
    if (mode != VP_ENTRY_FOREGROUND) {
        snprintf(why, whylen, "no service mode on this system");
        return -1;
    }
    return ops->main(&the, ops->data);
}

void vp_entry_starting(struct vp_entry *e, uint32_t wait_hint_ms)
{
    (void)e;
    (void)wait_hint_ms;
}

static void notify(const char *what, const char *status)
{
    char state[512];
    snprintf(state, sizeof(state), "%s\nSTATUS=%s", what, status);
    vp_service_notify(state);
}

void vp_entry_running(struct vp_entry *e, const char *status)
{
    (void)e;
    notify("READY=1", status);
}

void vp_entry_stopping(struct vp_entry *e, const char *status)
{
    (void)e;
    notify("STOPPING=1", status);
}

bool vp_entry_under_manager(const struct vp_entry *e)
{
    (void)e;
    return false;
}

const char *vp_entry_log_path(const struct vp_entry *e)
{
    (void)e;
    return "";
}

void vp_entry_signals(struct vp_entry_signals *out)
{
    *out = (struct vp_entry_signals){.stop = SIGTERM, .interrupt = SIGINT,
                                     .reload = SIGHUP, .stop_name = "SIGTERM"};
}

int vp_entry_files(const struct vp_entry_cfg *cfg, const char *endpoint,
                   struct vp_entry_files *out, char *why, size_t whylen)
{
    (void)cfg;
    (void)endpoint;
    if (whylen)
        why[0] = 0;
    out->config[0] = 0;
    if (vp_path_exists(DEFAULT_CONFIG))
        snprintf(out->config, sizeof(out->config), "%s", DEFAULT_CONFIG);
    out->state_base[0] = 0;
    return 0;
}
