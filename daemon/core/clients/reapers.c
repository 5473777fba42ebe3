/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/clients/reapers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "platform/watch.h"

struct vd_reaper {
    struct vd_reaper *next;
    struct vd_core *core;
    uint32_t client;
    int64_t pid;
    vp_handle pin;
    uint64_t start_time;
    bool resumable;
    char name[64];
    vd_reaper_fn on_exit;
    struct vp_watch watch;
};

uint32_t vd_reaper_client(const struct vd_reaper *rp) { return rp->client; }
int64_t vd_reaper_pid(const struct vd_reaper *rp) { return rp->pid; }
uint64_t vd_reaper_start_time(const struct vd_reaper *rp) { return rp->start_time; }
bool vd_reaper_resumable(const struct vd_reaper *rp) { return rp->resumable; }
const char *vd_reaper_name(const struct vd_reaper *rp) { return rp->name; }

static void reaper_closed(uv_handle_t *h)
{
    struct vd_reaper *rp = ((struct vp_watch *)h->data)->data;
    vp_close(&rp->pin);
    free(rp);
}

static void reaper_ready(struct vp_watch *w, int status, int events)
{
    (void)status;
    (void)events;
    struct vd_reaper *rp = w->data;
    rp->on_exit(rp->core, rp);
}

int vd_reapers_add(struct vd_core *core, uint32_t client, int64_t pid,
                   vp_handle pin, uint64_t start_time, bool resumable,
                   const char *name, vd_reaper_fn on_exit)
{
    struct vd_reaper *rp = calloc(1, sizeof(*rp));
    if (!rp)
        return -ENOMEM;
    rp->core = core;
    rp->client = client;
    rp->pid = pid;
    rp->pin = pin;
    rp->start_time = start_time;
    rp->resumable = resumable;
    snprintf(rp->name, sizeof(rp->name), "%s", name ? name : "");
    rp->on_exit = on_exit;
    if (vp_watch_init(core->loop, &rp->watch, pin) < 0) {
        free(rp);
        return -EIO;
    }
    rp->watch.data = rp;
    vp_watch_set(&rp->watch, VP_READABLE, reaper_ready);
    rp->next = core->reapers;
    core->reapers = rp;
    return 0;
}

struct vd_reaper *vd_reapers_find(struct vd_core *core, uint32_t client)
{
    for (struct vd_reaper *rp = core->reapers; rp; rp = rp->next)
        if (rp->client == client)
            return rp;
    return NULL;
}

void vd_reapers_each(struct vd_core *core,
                     void (*fn)(void *ud, struct vd_reaper *rp), void *ud)
{
    for (struct vd_reaper *rp = core->reapers; rp; rp = rp->next)
        fn(ud, rp);
}

void vd_reapers_remove(struct vd_core *core, struct vd_reaper *rp)
{
    struct vd_reaper **pp = &core->reapers;
    while (*pp && *pp != rp)
        pp = &(*pp)->next;
    if (*pp)
        *pp = rp->next;
    vp_watch_close(&rp->watch, reaper_closed);
}

void vd_reapers_fini(struct vd_core *core)
{
    /* The loop closed the watches already (main.c). */
    for (struct vd_reaper *r = core->reapers, *n; r; r = n) {
        n = r->next;
        vp_close(&r->pin);
        free(r);
    }
    core->reapers = NULL;
}
