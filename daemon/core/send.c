#include "send.h"

#include <errno.h>
#include <stdlib.h>

#include "clients.h"
#include "log.h"
#include "vram_msg.h"

/* Decodes what was encoded, as a peer will: a frame the catalogue does not
 * describe is a bug, caught in every test that runs the daemon. */
static void self_check(const struct vram_tdesc *t, const char *text,
                       vp_handle *hs, int nh, bool partial)
{
    cJSON *o = cJSON_Parse(text);
    struct vram_codec_frame f = {.nhandles = nh};
    for (int i = 0; i < nh; i++)
        f.handles[i] = hs[i];
    union {
        union vram_rep_any r;
        union vram_evt_any e;
    } out;
    struct vram_arena a = {0};
    struct vram_dec d = {.arena = &a, .frame = &f, .partial = partial};
    int r = o ? vram_decode(t, o, &out, &d) : -EINVAL;
    vram_arena_free(&a);
    cJSON_Delete(o);
    if (r < 0) {
        vlog(VLOG_ERR, "a message that proto/messages.json does not describe: "
             "%s (%s)", d.why, text);
        abort();
    }
}

static int send_text(struct vd_core *core, struct vd_client *c,
                     struct vram_jw *w, vp_handle *hs, int nh)
{
    size_t len = 0;
    char *text = vram_jw_take(w, &len);
    if (!text) {
        for (int i = 0; i < nh; i++)
            vp_close(&hs[i]);
        return -ENOMEM;
    }
    int r;
    if (len > VRAM_MAX_PAYLOAD) {
        /* Not queued: the caller splits it (reply.c), nothing is closed. */
        for (int i = 0; i < nh; i++)
            vp_close(&hs[i]);
        r = -EMSGSIZE;
    } else if (!c->conn || c->closing) {
        for (int i = 0; i < nh; i++)
            vp_close(&hs[i]);
        r = -ECONNABORTED;
    } else {
        r = core->port.send(core->port.ctx, c->conn, text, len, hs, nh);
    }
    free(text);
    return r;
}

int vd_send_event(struct vd_core *core, struct vd_client *c, int evt,
                  const void *fields)
{
    struct vram_jw w = {0};
    struct vram_enc e = {.w = &w};
    int r = vram_encode_event(&e, &vram_events[evt], fields);
    if (r < 0) {
        vram_jw_free(&w);
        return r;
    }
    if (core->check_replies) {
        /* The event's fields, as the library reads them. */
        self_check(vram_events[evt].req, w.p, NULL, 0, false);
    }
    return send_text(core, c, &w, NULL, 0);
}

int vd_send_reply(struct vd_core *core, struct vd_client *c, int type,
                  uint64_t id, int err, const char *message, bool more,
                  const void *fields, const char *only, int *taken)
{
    struct vram_jw w = {0};
    vp_handle hs[VRAM_MAX_FDS_PER_FRAME];
    struct vram_enc e = {.w = &w, .hs = hs, .max = VRAM_MAX_FDS_PER_FRAME};
    const struct vram_mdesc *m = type >= 0 ? &vram_requests[type] : NULL;
    int r = vram_encode_reply(&e, m, id, err, message, more, fields, only);
    if (taken)
        *taken = e.nh;
    if (r < 0) {
        for (int i = 0; i < e.nh; i++)
            vp_close(&hs[i]);
        vram_jw_free(&w);
        return r;
    }
    if (core->check_replies && m && !err)
        self_check(m->rep, w.p, hs, e.nh, more || only);
    return send_text(core, c, &w, hs, e.nh);
}
