#include "reply.h"

#include <string.h>

#include "effects.h"
#include "send.h"
#include "vram_msg.h"

/* Map entries one frame carries at most, besides its 32 handles: a frame
 * stays well inside the payload limit. */
#define MAP_PER_FRAME 1024

static void set_array(void *fields, const struct vram_fdesc *f, void *v,
                      size_t n)
{
    char *p = (char *)fields + f->off;
    memcpy(p, &v, sizeof(v));
    memcpy(p + sizeof(void *), &n, sizeof(n));
}

void vd_reply(struct vd_request *rq, int err, void *rep)
{
    struct vd_core *core = rq->core;
    struct vd_effects_out out = {0};
    vd_effects_apply(core, &rq->fx, rq->client, &out);
    const struct vram_mdesc *m = &vram_requests[rq->type];
    const char *message = err ? rq->why : NULL;
    if (!err && out.map_error) {
        err = out.map_error;
        message = "the backend could not create chunk memory; what was "
                  "mapped is listed, the rest returned to the pool";
    }
    const struct vram_fdesc *mapf = vram_field(m->rep, "map");
    const struct vram_fdesc *unmapf = vram_field(m->rep, "unmap");
    union vram_rep_any scratch;
    void *fields = rep;
    if (!fields && out.nmap && mapf) {
        memset(&scratch, 0, sizeof(scratch));
        fields = &scratch;
    }
    if (fields && unmapf)
        set_array(fields, unmapf, out.unmap, out.nunmap);
    size_t i = 0;
    do {
        size_t k = i;
        int nfd = 0;
        while (k < out.nmap && k - i < MAP_PER_FRAME) {
            if (out.map[k].has_fd && nfd++ == VRAM_MAX_FDS_PER_FRAME)
                break;
            k++;
        }
        bool last = k >= out.nmap;
        if (fields && mapf)
            set_array(fields, mapf, out.map + i, k - i);
        int taken = 0;
        int r = vd_send_reply(core, rq->client, rq->type, rq->id, err, message,
                              !last, fields,
                              !last || (err && mapf) ? "map" : err ? "" : NULL,
                              &taken);
        /* The frame took the first handles of its entries. */
        for (size_t j = i; j < k && taken; j++)
            if (out.map[j].has_fd) {
                out.map[j].has_fd = false;
                taken--;
            }
        if (r < 0)
            break;
        i = k;
    } while (i < out.nmap);
    if (fields && mapf)
        set_array(fields, mapf, NULL, 0);
    if (fields && unmapf)
        set_array(fields, unmapf, NULL, 0);
    vd_effects_out_free(&out);
    vd_effects_flush_budget(core);
    if (rq->close_after && rq->client->conn && !rq->client->closing) {
        rq->client->closing = true;
        core->port.close(core->port.ctx, rq->client->conn,
                         "closed after a fatal error reply", true);
    }
}
