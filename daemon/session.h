/* The daemon's connection code, shared by session.c (frames in and out, a
 * connection's life), requests.c (one handler per message) and effects.c
 * (carrying out what the ledger decided). */
#ifndef VRAMD_SESSION_H
#define VRAMD_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "server.h"

/* session.c */
int vd_send(struct vd_session *s, cJSON *msg, vp_handle *hs, int n);
cJSON *vd_reply_new(uint64_t id, bool ok);
int vd_reply_err(struct vd_session *s, uint64_t id, int err, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));
struct vd_session *vd_session_by_id(struct vd_server *srv, uint32_t id);

/* requests.c */
int vd_request_handle(struct vd_session *s, uint64_t id, const char *type,
                      cJSON *msg);
/* Whether type names a request vramd handles. */
bool vd_request_known(const char *type);
uint32_t vd_client_chunks(struct vd_server *srv, uint32_t client);

/* resume.c */
int vd_handle_resume(struct vd_session *s, uint64_t id, cJSON *msg);

/* effects.c */
/* Carries out srv->fx for the requester and answers request id with fields
 * (consumed) and the map entries. */
int vd_finish(struct vd_session *s, uint64_t id, cJSON *fields);
cJSON *vd_kv_fields(struct vd_server *srv, uint32_t stage, uint32_t recalled);
int vd_held_add(struct vd_session *s, uint64_t id, uint32_t stage,
                uint64_t prompt, uint64_t output, const char *why);
void vd_held_drop_session(struct vd_server *srv, struct vd_session *s);

static inline struct vl_device *vd_device(struct vd_server *srv, uint32_t id)
{
    for (uint32_t i = 0; i < srv->ledger.ndev; i++)
        if (srv->ledger.dev[i].cfg.id == id)
            return &srv->ledger.dev[i];
    return NULL;
}

#endif
