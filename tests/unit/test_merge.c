/* SPDX-License-Identifier: Apache-2.0 */
/* Merging a reply's frames (proto/msg.c, vw_merge_add): status replies
 * decoded frame by frame as libvram does, into one arena. The merged
 * arrays are the frames' items in order, a stage continued over frames
 * gets its regions joined (and the frames' own arrays are never written);
 * merging costs memory in proportion to the items, however many frames
 * carry them (the arena's bytes against the items' bytes: with a new
 * block per frame, 4,096 frames of one client each would take about 2,000
 * times the clients' bytes); and the catalogue's maxima hold for the
 * whole reply: 65,537 clients over frames, or a stage's 4,097 regions over
 * frames, are refused with the array named. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "proto/json.h"
#include "proto/msg.h"
#include "gen/vram_msg.h"

static const struct vw_tdesc *status_t(void)
{
    return vw_requests[VW_REQ_STATUS].rep;
}

struct merger {
    struct vw_arena a;
    struct vw_merge m;
    struct vw_rep_status acc;
    int frames;
};

/* One frame's JSON (its fields), decoded as a part and merged. */
static int add(struct merger *g, const char *fields, bool last)
{
    char *text = malloc(strlen(fields) + 64);
    REQUIRE(text, "out of memory");
    sprintf(text, "{%s}", fields);
    cJSON *o = cJSON_Parse(text);
    free(text);
    REQUIRE(o, "not JSON: %s", fields);
    union vw_rep_any part;
    struct vw_dec d = {.arena = &g->a, .partial = !last};
    int r = vw_decode(status_t(), o, &part, &d);
    cJSON_Delete(o);
    REQUIRE(r == 0, "decode: %s", d.why);
    if (g->frames++ == 0)
        vw_merge_begin(&g->m, status_t(), &g->acc, NULL, &g->a);
    return vw_merge_add(&g->m, &part);
}

static void client(struct vw_jw *w, uint32_t id, bool comma)
{
    char s[300];
    snprintf(s, sizeof(s), "%s{\"id\":%u,\"name\":\"c%u\",\"pid\":1,\"role\":"
             "\"engine\",\"state\":\"connected\",\"held_bytes\":0,"
             "\"quarantined_bytes\":0,\"delinquent\":false,\"missed_recalls\":0,"
             "\"stages\":[%u]}", comma ? "," : "", id, id, id);
    vw_jw_lit(w, s);
}

static void stage_with_regions(struct vw_jw *w, uint32_t stage, uint32_t first,
                               uint32_t n)
{
    char s[600];
    snprintf(s, sizeof(s), "{\"id\":%u,\"device\":0,\"first_layer\":0,"
             "\"last_layer\":1,\"configured\":false,\"kv_mapped_bytes\":0,"
             "\"kv_needed_bytes\":0,\"kv_max_bytes\":0,\"expert_loaned_bytes\":0,"
             "\"expert_slots_backed\":0,\"expert_slot_bytes\":0,"
             "\"recalls_pending\":0,\"residency_version\":0,\"fixed_bytes\":0,"
             "\"fixed_reserved_bytes\":0,\"regions\":[", stage);
    vw_jw_lit(w, s);
    for (uint32_t i = 0; i < n; i++) {
        snprintf(s, sizeof(s), "%s{\"id\":%u,\"stage\":%u,\"kind\":\"fixed\","
                 "\"device\":0,\"base\":0,\"lane_stride\":0,\"va_bytes\":0,"
                 "\"lanes\":1,\"lane_slots\":1,\"stride_slots\":1,"
                 "\"chunk_bytes\":2097152,\"chunks\":0}", i ? "," : "",
                 first + i, stage);
        vw_jw_lit(w, s);
    }
    vw_jw_lit(w, "]}");
}

/* 4,096 frames of one client each: the clients in order, and the arena
 * holding a small multiple of their bytes. */
static void linear(void)
{
    struct merger g = {0};
    struct vw_jw w = {0};
    enum { N = 4096 };
    for (uint32_t i = 1; i <= N; i++) {
        w.len = 0;
        vw_jw_lit(&w, "\"clients\":[");
        client(&w, i, false);
        vw_jw_lit(&w, "]");
        REQUIRE(add(&g, w.p, false) == 0, "frame %u: %s", i, g.m.why);
    }
    vw_jw_free(&w);
    CHECK(g.acc.clients.n == N, "%zu clients merged", g.acc.clients.n);
    bool order = true;
    for (size_t i = 0; i < g.acc.clients.n; i++)
        order &= g.acc.clients.v[i].id == i + 1 &&
                 g.acc.clients.v[i].stages.n == 1 &&
                 g.acc.clients.v[i].stages.v[0] == i + 1 &&
                 strcmp(g.acc.clients.v[i].name, "c") > 0;
    CHECK(order, "the clients are not the frames' in order");
    /* What the frames' parts take themselves (strings, stage ids, their
     * one-item arrays), measured alone. */
    struct vw_arena alone = {0};
    struct vw_jw w2 = {0};
    vw_jw_lit(&w2, "{\"clients\":[");
    client(&w2, 1, false);
    vw_jw_lit(&w2, "]}");
    cJSON *o = cJSON_Parse(w2.p);
    union vw_rep_any part;
    struct vw_dec d = {.arena = &alone, .partial = true};
    REQUIRE(vw_decode(status_t(), o, &part, &d) == 0, "decode");
    cJSON_Delete(o);
    vw_jw_free(&w2);
    size_t parts = alone.bytes * N;
    vw_arena_free(&alone);
    size_t items = N * sizeof(struct vw_t_client);
    size_t merged = g.a.bytes - parts;
    printf("  %d frames of one client: the merge took %zu bytes for %zu bytes "
           "of clients (%.2fx); the parts %zu\n", N, merged, items,
           (double)merged / (double)items, parts);
    CHECK(merged <= 3 * items, "merging %d frames took %zu bytes for %zu bytes "
          "of clients", N, merged, items);
    vw_arena_free(&g.a);
}

/* Stage 0's regions over three frames, then stage 1: joined in order; the
 * parts' arrays untouched (they are shared, not the merge's to grow). */
static void continued(void)
{
    struct merger g = {0};
    struct vw_jw w = {0};
    struct vw_t_region *first_part = NULL;
    for (uint32_t f = 0; f < 3; f++) {
        w.len = 0;
        vw_jw_lit(&w, "\"stages\":[");
        stage_with_regions(&w, 0, f * 10 + 1, 10);
        vw_jw_lit(&w, "]");
        REQUIRE(add(&g, w.p, false) == 0, "frame %u: %s", f, g.m.why);
        if (f == 0)
            first_part = g.acc.stages.v[0].regions.v;
    }
    w.len = 0;
    vw_jw_lit(&w, "\"stages\":[");
    stage_with_regions(&w, 1, 100, 5);
    vw_jw_lit(&w, "]");
    REQUIRE(add(&g, w.p, false) == 0, "stage 1: %s", g.m.why);
    w.len = 0;
    vw_jw_lit(&w, "\"stages\":[");
    stage_with_regions(&w, 1, 105, 3);
    vw_jw_lit(&w, "]");
    REQUIRE(add(&g, w.p, false) == 0, "stage 1 continued: %s", g.m.why);
    vw_jw_free(&w);
    REQUIRE(g.acc.stages.n == 2, "%zu stages", g.acc.stages.n);
    const struct vw_t_stage *s0 = &g.acc.stages.v[0], *s1 = &g.acc.stages.v[1];
    CHECK(s0->regions.n == 30 && s1->regions.n == 8, "regions %zu and %zu",
          s0->regions.n, s1->regions.n);
    bool order = true;
    for (size_t i = 0; i < s0->regions.n; i++)
        order &= s0->regions.v[i].id == i + 1;
    for (size_t i = 0; i < s1->regions.n; i++)
        order &= s1->regions.v[i].id == 100 + i;
    CHECK(order, "the regions are not joined in order");
    /* The first frame's own array still holds its 10 regions: the merge
     * copied it before growing it. */
    CHECK(first_part && first_part != s0->regions.v, "a part's array was grown "
          "in place");
    CHECK(first_part && first_part[9].id == 10, "a part's array was written");
    vw_arena_free(&g.a);
}

static void maxima(void)
{
    /* 65,536 clients over frames are legal; one more is not. */
    struct merger g = {0};
    struct vw_jw w = {0};
    int r = 0;
    for (uint32_t f = 0; r == 0 && f < 17; f++) {
        w.len = 0;
        vw_jw_lit(&w, "\"clients\":[");
        for (uint32_t i = 0; i < (f < 16 ? 4096u : 1u); i++)
            client(&w, f * 4096 + i + 1, i > 0);
        vw_jw_lit(&w, "]");
        r = add(&g, w.p, false);
        if (f < 16)
            CHECK(r == 0, "frame %u refused: %s", f, g.m.why);
    }
    CHECK(r == -E2BIG, "65,537 clients over frames: %d", r);
    CHECK(strstr(g.m.why, "status.clients: 65537 items over the reply's frames, "
                 "at most 65536"), "why: %s", g.m.why);
    vw_arena_free(&g.a);
    /* A stage's 4,096 regions in two frames, then one more. */
    struct merger h = {0};
    r = 0;
    for (uint32_t f = 0; r == 0 && f < 3; f++) {
        w.len = 0;
        vw_jw_lit(&w, "\"stages\":[");
        stage_with_regions(&w, 7, f * 2048 + 1, f < 2 ? 2048 : 1);
        vw_jw_lit(&w, "]");
        r = add(&h, w.p, false);
        if (f < 2)
            CHECK(r == 0, "regions frame %u refused: %s", f, h.m.why);
    }
    CHECK(r == -E2BIG, "4,097 regions over frames: %d", r);
    CHECK(strstr(h.m.why, "status.stages[0].regions: 4097 items over the "
                 "reply's frames, at most 4096"), "why: %s", h.m.why);
    vw_arena_free(&h.a);
    vw_jw_free(&w);
}

int main(void)
{
    linear();
    continued();
    maxima();
    return check_report("test_merge");
}
