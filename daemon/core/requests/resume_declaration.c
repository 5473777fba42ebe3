/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon/core/requests/resume_declaration.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for more items in a growing array. */
static int room(void **v, size_t *cap, size_t n, size_t more, size_t size)
{
    if (n + more <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < n + more)
        c *= 2;
    void *p = realloc(*v, c * size);
    if (!p)
        return -ENOMEM;
    *v = p;
    *cap = c;
    return 0;
}

int vd_declaration_add(struct vd_resume_acc **accp,
                       const struct vw_req_resume *m, char *why,
                       size_t whylen)
{
    if (!*accp && !(*accp = calloc(1, sizeof(**accp))))
        return -ENOMEM;
    struct vd_resume_acc *a = *accp;
    if (room((void **)&a->stages, &a->capstages, a->nstages, m->stages.n,
             sizeof(*a->stages)) < 0 ||
        room((void **)&a->regions, &a->capregions, a->nregions, m->regions.n,
             sizeof(*a->regions)) < 0 ||
        room((void **)&a->chunks, &a->capchunks, a->nchunks, m->chunks.n,
             sizeof(*a->chunks)) < 0 ||
        room((void **)&a->claims, &a->capclaims, a->nclaims, m->claims.n,
             sizeof(*a->claims)) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < m->stages.n; i++) {
        const struct vw_t_resume_stage *s = &m->stages.v[i];
        if (!s->configured && (!s->has_device || !s->has_first_layer ||
                               !s->has_last_layer)) {
            snprintf(why, whylen, "resume.stages[%zu]: an ad-hoc stage needs "
                     "device, first_layer and last_layer", i);
            return -EINVAL;
        }
        a->stages[a->nstages++] = (struct vl_resume_stage){
            .id = s->id, .configured = s->configured,
            .keep_window = s->keep_window, .device = s->device,
            .first_layer = s->first_layer, .last_layer = s->last_layer,
            .asleep = s->has_asleep && s->asleep,
            .wake_tokens = s->wake_tokens, .host_bytes = s->host_bytes};
    }
    for (size_t i = 0; i < m->regions.n; i++) {
        const struct vw_t_resume_region *r = &m->regions.v[i];
        int kind = vl_kind_parse(r->kind);
        if (kind < 0 || r->lane_slots.n < 1) {
            snprintf(why, whylen, "resume.regions[%zu]: %s", i,
                     kind < 0 ? "kind must be kv, expert, fixed or draft_kv"
                              : "lane_slots needs 1 to 256 lanes");
            return -EINVAL;
        }
        struct vl_resume_region *x = &a->regions[a->nregions++];
        memset(x, 0, sizeof(*x));
        x->id = r->id;
        x->stage = r->stage;
        x->kind = kind;
        x->base = r->base;
        x->lane_stride = r->lane_stride;
        x->va_bytes = r->va_bytes;
        x->lanes = (uint32_t)r->lane_slots.n;
        memcpy(x->lane_slots, r->lane_slots.v, x->lanes * sizeof(uint32_t));
    }
    for (size_t i = 0; i < m->chunks.n; i++)
        a->chunks[a->nchunks++] = (struct vl_resume_chunk){
            .chunk = m->chunks.v[i].chunk, .region = m->chunks.v[i].region,
            .slot = m->chunks.v[i].slot};
    for (size_t i = 0; i < m->claims.n; i++)
        a->claims[a->nclaims++] = (struct vl_resume_claim){
            m->claims.v[i].stage, m->claims.v[i].slot, m->claims.v[i].layer};
    return 0;
}

void vd_resume_acc_free(struct vd_resume_acc *a)
{
    if (!a)
        return;
    free(a->stages);
    free(a->regions);
    free(a->chunks);
    free(a->claims);
    free(a);
}
