/* The ledger's private helpers, shared between its files (prefix vli_).
 * Nothing outside daemon/ledger/ includes this; the public API is ledger.h,
 * the rules R1..R13 are in README.md. Grouped by the file that defines
 * them. */
#ifndef VRAMD_LEDGER_INTERNAL_H
#define VRAMD_LEDGER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger.h"

/* vl_stage.slot_layer of a slot no layer claims. */
#define VLI_SLOT_LAYER_NONE 0xffffu

/* Without overflow for any a (a + b - 1 wraps near UINT64_MAX). */
static inline uint64_t vli_div_up(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

/* pool.c: devices, chunks and their states */
int vli_fail(struct vl_ledger *L, int err, const char *fmt, ...);
struct vl_device *vli_dev_get(struct vl_ledger *L, uint32_t id);
uint32_t vli_dev_index(struct vl_ledger *L, const struct vl_device *d);
struct vl_chunk *vli_chunk_get(struct vl_ledger *L, uint64_t id,
                               struct vl_device **d_out, uint32_t *idx_out);
void vli_set_state(struct vl_device *d, struct vl_chunk *c, int st);
void vli_set_cat(struct vl_device *d, struct vl_chunk *c, int cat);
int vli_cat_of_kind(const struct vl_region *r);
void vli_place(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
               struct vl_region *r, uint32_t slot, int state);
void vli_unplace(struct vl_ledger *L, struct vl_chunk *c);
uint32_t vli_dev_free(const struct vl_device *d);
uint32_t vli_take_free(struct vl_device *d);
void vli_to_free(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
                 struct vl_fxlist *fx);

/* fxlist.c: effect lists */
int vli_fx_push(struct vl_fxlist *fx, struct vl_fx e);
int vli_fx_reserve(struct vl_fxlist *fx, size_t more);

/* observer.c: what a restarted vramd needs to know (R13) */
void vli_note_chunk(struct vl_ledger *L, struct vl_device *d, uint32_t idx,
                    const struct vl_region *r);
uint32_t vli_note_va_take(struct vl_ledger *L, uint32_t region,
                          uint32_t client, uint64_t base, uint64_t size);
void vli_note_va_give(struct vl_ledger *L, uint32_t tag);
void vli_note_stage(struct vl_ledger *L, uint32_t stage, uint32_t client);

/* va.c: the address window and held ranges */
int vli_va_alloc(struct vl_ledger *L, uint64_t size, uint64_t align,
                 uint64_t *out);
ptrdiff_t vli_va_find(const struct vl_ledger *L, uint64_t base, uint64_t size);
void vli_va_release(struct vl_ledger *L, uint64_t base, uint64_t size);
int vli_va_take_exact(struct vl_ledger *L, uint64_t base, uint64_t size);
int vli_hold_add(struct vl_ledger *L, const struct vl_va_hold *h);

/* promise.c: promises per stage and device (R2, R4, R7) */
struct vli_promises {
    uint32_t hard, need, claim;
};
uint32_t vli_window_free(const struct vl_stage *s);
uint32_t vli_fixed_free(const struct vl_stage *s);
uint32_t vli_pool_loans(const struct vl_stage *s);
uint32_t vli_stage_full(const struct vl_stage *s);
struct vli_promises vli_dev_promises(struct vl_ledger *L,
                                     const struct vl_device *d);
uint32_t vli_dev_unpromised(struct vl_ledger *L, struct vl_device *d);
uint32_t vli_dev_unclaimed(struct vl_ledger *L, struct vl_device *d);
uint32_t vli_free_for_window(struct vl_ledger *L, struct vl_device *d,
                             const struct vl_stage *s);
uint32_t vli_free_for_fixed(struct vl_ledger *L, struct vl_device *d,
                            const struct vl_stage *s);

/* region.c: regions and their lanes */
struct vli_geometry {
    uint64_t lane_stride, total, va_bytes, unit;
};
int vli_region_geometry(struct vl_ledger *L, const struct vl_device *d,
                        uint32_t lanes, const uint32_t *lane_slots,
                        struct vli_geometry *g);
int vli_region_new(struct vl_ledger *L, uint32_t client, struct vl_stage *s,
                   int kind, uint32_t lanes, const uint32_t *lane_slots,
                   struct vl_region **out);
void vli_region_free(struct vl_region *r);
struct vl_region *vli_own_region(struct vl_ledger *L, uint32_t client,
                                 uint32_t region);
uint32_t vli_lane_used(const struct vl_region *r, uint32_t lane);
uint32_t vli_lane_first_empty(const struct vl_region *r, uint32_t lane);
uint32_t vli_lane_last_in(struct vl_ledger *L, const struct vl_region *r,
                          uint32_t lane, int st);
void vli_grant_lanes(struct vl_ledger *L, struct vl_region *r,
                     const uint32_t *per_lane, int state,
                     struct vl_fxlist *fx);
void vli_drop_regions(struct vl_ledger *L, uint32_t client, uint32_t stage,
                      bool quarantine, struct vl_fxlist *fx);

/* stage.c: stages and their owners */
struct vl_stage *vli_stage_get(struct vl_ledger *L, uint32_t id);
int vli_own_stage(struct vl_ledger *L, uint32_t client, uint32_t stage,
                  struct vl_stage **out);
void vli_stage_reset(struct vl_ledger *L, struct vl_stage *s);

/* client.c: quarantine that stands for a stage's promise (R11) */
void vli_qstage_set(struct vl_ledger *L, struct vl_chunk *c, uint32_t stage,
                    int cat);
void vli_qstage_clear(struct vl_ledger *L, struct vl_chunk *c);

/* loans.c: expert loans and recalls (R5, R6) */
uint32_t vli_expert_room(struct vl_ledger *L, struct vl_stage *s);
int vli_recall_pool_loans(struct vl_ledger *L, struct vl_stage *s,
                          struct vl_device *d, uint32_t short_by,
                          struct vl_fxlist *fx);

/* slots.c: expert slots (R9) */
void vli_budget_changed(struct vl_ledger *L, struct vl_stage *s,
                        struct vl_fxlist *fx);

#endif
