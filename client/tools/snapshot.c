/* SPDX-License-Identifier: Apache-2.0 */
/* A status reply, fetched and decoded into the catalogue's typed structs,
 * so the tools name struct members the compiler checks, never string keys. */
#include "client/tools/snapshot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

int tool_snapshot_fetch(vram_client *c, struct tool_snapshot *out, char *why,
                        size_t why_len)
{
    struct tool_snapshot s = {0};
    cJSON *doc = NULL;
    int e = vram_status_json(c, &s.text);
    if (e < 0) {
        s.text = NULL;
        if (why)
            snprintf(why, why_len, "status failed: %s", vram_client_last_error(c));
        goto fail;
    }
    doc = cJSON_Parse(s.text);
    if (!doc) {
        e = -EBADMSG;
        if (why)
            snprintf(why, why_len, "the daemon's status is not JSON");
        goto fail;
    }
    struct vw_dec d = {.arena = &s.arena};
    e = vw_decode(vw_requests[VW_REQ_STATUS].rep, doc, &s.st, &d);
    if (e < 0) {
        if (why)
            snprintf(why, why_len, "the daemon's status does not match this "
                     "vramctl's catalogue: %s", d.why);
        e = -EBADMSG;
        goto fail;
    }
    /* The decoder copied the strings and arrays into the arena. */
    cJSON_Delete(doc);
    *out = s;
    return 0;
fail:
    cJSON_Delete(doc);
    tool_snapshot_free(&s);
    return e;
}

void tool_snapshot_free(struct tool_snapshot *s)
{
    if (!s)
        return;
    vram_free(s->text);
    vw_arena_free(&s->arena);
    memset(s, 0, sizeof(*s));
}
