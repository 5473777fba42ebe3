/* SPDX-License-Identifier: Apache-2.0 */
/* The state file (see state.h; its layout in format.h). Records are
 * written so a crash at any instruction leaves each either old or new: a
 * chunk record is one aligned 64-bit store; holders and ranges are written
 * body first and marked valid (client id) last, and cleared valid first.
 * From version 5 each change is also a journaled transaction on the block
 * that holds its record (journal.h), so that the checksums hold after a
 * kill too; the record-level ordering stays, for a reader of a file made
 * before. */
#include "daemon/state/state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/state/format.h"
#include "daemon/state/journal.h"
#include "daemon/ledger/ledger.h"
#include "daemon/log.h"
#include "platform/mapfile.h"
#include "platform/proc.h"

#define hdr vd_state_hdr
#define holder vd_state_holder
#define range vd_state_range

struct vd_state {
    const struct vd_state_params *params;
    char path[4096];
    struct vp_mapfile file;
    uint8_t *map;
    size_t size;
    struct hdr *h;
    struct holder *holders;
    uint32_t *stages;
    struct range *ranges;
    uint64_t *chunks[VL_MAX_DEVICES];
    uint32_t *free_ranges; /* stack of free range slots */
    uint32_t nfree_ranges;
    bool range_full_logged;
    struct vd_state_wset *wsets; /* R17: sealed sets */
    struct vd_state_wuser *wusers;
    uint32_t nwsets, nwusers;
    bool wusers_full_logged;
    /* The sets the previous vramd recorded, for the caller to restore. */
    struct vd_state_found_wset *found;
    size_t nfound;
    struct vd_journal jl;
    struct vd_state_counters *counters;
};

/* A change to record i of table t: between the two, stores only. */
#define CHANGE(st, t, i) vd_journal_begin(&(st)->jl, (t), (uint32_t)(i))
#define DONE(st) vd_journal_end(&(st)->jl)

/* ---- records ------------------------------------------------------------ */

static uint64_t chunk_pack(uint32_t holder, uint16_t stage, uint8_t cat)
{
    return (uint64_t)holder | (uint64_t)stage << 32 | (uint64_t)cat << 48;
}

static void obs_chunk(void *ctx, uint32_t dev, uint32_t idx, uint32_t holder,
                      uint16_t stage, uint8_t cat)
{
    struct vd_state *st = ctx;
    CHANGE(st, VD_T_CHUNKS + dev, idx);
    __atomic_store_n(&st->chunks[dev][idx],
                     holder ? chunk_pack(holder, stage, cat) : 0,
                     __ATOMIC_RELEASE);
    DONE(st);
}

static uint32_t obs_va_take(void *ctx, uint32_t region, uint32_t client,
                            uint64_t base, uint64_t size)
{
    struct vd_state *st = ctx;
    if (!st->nfree_ranges) {
        if (!st->range_full_logged)
            vlog(VLOG_ERR, "state file: the range table (%u entries) is full; "
                 "a restart would not know every region's address",
                 st->h->nranges);
        st->range_full_logged = true;
        return 0;
    }
    uint32_t i = st->free_ranges[--st->nfree_ranges];
    struct range *r = &st->ranges[i];
    CHANGE(st, VD_T_RANGES, i);
    r->region = region;
    r->base = base;
    r->size = size;
    __atomic_store_n(&r->client, client, __ATOMIC_RELEASE);
    DONE(st);
    return i + 1;
}

static void obs_va_give(void *ctx, uint32_t tag)
{
    struct vd_state *st = ctx;
    if (!tag || tag > st->h->nranges)
        return;
    CHANGE(st, VD_T_RANGES, tag - 1);
    __atomic_store_n(&st->ranges[tag - 1].client, 0, __ATOMIC_RELEASE);
    DONE(st);
    st->free_ranges[st->nfree_ranges++] = tag - 1;
}

/* A resumed region keeps its range's record: the new owner is written in
 * place (one store), so no crash can find the range unrecorded. */
static void obs_va_move(void *ctx, uint32_t tag, uint32_t region,
                        uint32_t client)
{
    struct vd_state *st = ctx;
    if (!tag || tag > st->h->nranges)
        return;
    struct range *r = &st->ranges[tag - 1];
    CHANGE(st, VD_T_RANGES, tag - 1);
    r->region = region;
    __atomic_store_n(&r->client, client, __ATOMIC_RELEASE);
    DONE(st);
}

static void obs_stage(void *ctx, uint32_t stage, uint32_t client)
{
    struct vd_state *st = ctx;
    if (stage >= VL_MAX_STAGES)
        return;
    CHANGE(st, VD_T_STAGES, stage);
    __atomic_store_n(&st->stages[stage], client, __ATOMIC_RELEASE);
    DONE(st);
}

/* R17: a sealed set's record, and its users; an unsealed set is not kept
 * (its handles are not either: it dies with vramd). Written as the holders
 * are: body first, id last; cleared id first. */
static void obs_wset(void *ctx, uint32_t set, const struct vl_wset_view *v)
{
    struct vd_state *st = ctx;
    struct vd_state_wset *rec = NULL, *free_rec = NULL;
    for (uint32_t i = 0; i < st->nwsets && !rec; i++) {
        if (st->wsets[i].id == set)
            rec = &st->wsets[i];
        else if (!st->wsets[i].id && !free_rec)
            free_rec = &st->wsets[i];
    }
    for (uint32_t i = 0; i < st->nwusers; i++)
        if (st->wusers[i].set == set) {
            CHANGE(st, VD_T_WUSERS, i);
            __atomic_store_n(&st->wusers[i].set, 0, __ATOMIC_RELEASE);
            DONE(st);
        }
    if (!v || !v->sealed) {
        if (rec) {
            CHANGE(st, VD_T_WSETS, rec - st->wsets);
            __atomic_store_n(&rec->id, 0, __ATOMIC_RELEASE);
            DONE(st);
        }
        return;
    }
    if (!rec) {
        if (!free_rec)
            return; /* VL_MAX_WSETS entries: never full */
        rec = free_rec;
        CHANGE(st, VD_T_WSETS, rec - st->wsets);
        *rec = (struct vd_state_wset){
            .device = v->device, .bytes = v->bytes,
            .alloc_bytes = v->alloc_bytes, .nalloc = v->nalloc,
            .units = v->units, .base = v->base, .va_bytes = v->va_bytes,
            .tenant = v->tenant, .flags = v->keep ? VD_WSET_KEEP : 0,
            .created_ms = v->sealed_at, .sealed_ms = v->sealed_at,
            .stage = v->stage, .fixed = v->fixed};
        memcpy(rec->key, v->key, VL_WSET_KEY);
        snprintf(rec->name, sizeof(rec->name), "%s", v->name);
        __atomic_store_n(&rec->id, set, __ATOMIC_RELEASE);
        DONE(st);
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < st->nwusers && k < v->users; i++) {
        if (st->wusers[i].set)
            continue;
        CHANGE(st, VD_T_WUSERS, i);
        st->wusers[i].client = v->user[k++];
        __atomic_store_n(&st->wusers[i].set, set, __ATOMIC_RELEASE);
        DONE(st);
    }
    if (k < v->users && !st->wusers_full_logged) {
        vlog(VLOG_ERR, "state file: the weight set users' table (%u entries) "
             "is full; a restart would not know every process that maps a "
             "set", st->nwusers);
        st->wusers_full_logged = true;
    }
}

int vd_state_holder_add(struct vd_state *st, uint32_t client, int64_t pid,
                        uint64_t starttime, uint32_t uid, const char *name)
{
    if (!st)
        return 0;
    for (uint32_t i = 0; i < st->h->nholders; i++) {
        struct holder *h = &st->holders[i];
        if (h->client)
            continue;
        CHANGE(st, VD_T_HOLDERS, i);
        h->pid = (int32_t)pid;
        h->starttime = starttime;
        h->flags = 0;
        h->uid = uid;
        snprintf(h->name, sizeof(h->name), "%s", name ? name : "");
        __atomic_store_n(&h->client, client, __ATOMIC_RELEASE);
        DONE(st);
        return 0;
    }
    return -ENOSPC;
}

static struct holder *holder_find(struct vd_state *st, uint32_t client)
{
    for (uint32_t i = 0; st && i < st->h->nholders; i++)
        if (st->holders[i].client == client)
            return &st->holders[i];
    return NULL;
}

void vd_state_holder_name(struct vd_state *st, uint32_t client, const char *name)
{
    /* The journal makes even this store crash-safe (a torn name would only
     * be cosmetic, but a block is old or new as a whole). */
    struct holder *h = holder_find(st, client);
    if (!h)
        return;
    CHANGE(st, VD_T_HOLDERS, h - st->holders);
    snprintf(h->name, sizeof(h->name), "%s", name ? name : "");
    DONE(st);
}

void vd_state_holder_drop(struct vd_state *st, uint32_t client)
{
    struct holder *h = holder_find(st, client);
    if (!h)
        return;
    CHANGE(st, VD_T_HOLDERS, h - st->holders);
    __atomic_store_n(&h->client, 0, __ATOMIC_RELEASE);
    DONE(st);
}

void vd_state_holder_evicted(struct vd_state *st, uint32_t client)
{
    struct holder *h = holder_find(st, client);
    if (!h)
        return;
    CHANGE(st, VD_T_HOLDERS, h - st->holders);
    h->flags |= VD_HOLDER_EVICTED;
    DONE(st);
}

void vd_state_next_client(struct vd_state *st, uint32_t next)
{
    if (!st)
        return;
    CHANGE(st, VD_T_COUNTERS, 0);
    st->counters->next_client = next;
    DONE(st);
}

uint32_t vd_state_first_client(const struct vd_state *st)
{
    return st ? st->counters->next_client : 0;
}

/* ---- the previous daemon's file ----------------------------------------- */

struct prev {
    struct vp_mapfile file;
    uint8_t *copy; /* the file's bytes, read once: what is checked is what
                      is used */
    const uint8_t *map;
    size_t size;
    const struct hdr *h;
    struct vd_state_view v;
};

/* Maps the old file read-only. A file that is not ours or fails the check
 * is never silently dropped: a newcomer could then be granted chunk ids a
 * live engine still maps. vramd refuses to start over it (-EBADMSG, the
 * reason logged) unless the operator said to discard it. A file of an
 * earlier boot knows no live process: it is ignored. */
static int prev_open(const char *path, bool discard, struct prev *p)
{
    memset(p, 0, sizeof(*p));
    p->file = VP_MAPFILE_NONE;
    char why[512];
    int e = vp_mapfile_open(path, &p->file, why, sizeof(why));
    if (e == -ENOENT)
        return 0;
    if (e == 0 && discard) {
        vp_mapfile_close(&p->file);
        char to[4200];
        snprintf(to, sizeof(to), "%s.discarded", path);
        vlog(VLOG_WARNING, "state file %s discarded as asked (--discard-state), "
             "kept as %s: memory that engines of the previous vramd still map "
             "may be granted to others", path, to);
        return vp_file_rename(path, to);
    }
    if (e == -EPERM || e == -ELOOP) {
        vlog(VLOG_ERR, "state file %s: %s; vramd will not start over it (see "
             "--discard-state)", path,
             e == -ELOOP ? "is a symbolic link" : why);
        return -EBADMSG;
    }
    if (e < 0) {
        vlog(VLOG_ERR, "state file %s: %s", path, why);
        return e;
    }
    /* A private copy: the check may put a journaled block back, and the
     * bytes checked are then the bytes read, whatever happens to the file. */
    size_t size = p->file.size;
    p->copy = malloc(size ? size : 1);
    if (!p->copy) {
        vp_mapfile_close(&p->file);
        return -ENOMEM;
    }
    if (size) /* an empty file is not mapped (map NULL) */
        memcpy(p->copy, p->file.map, size);
    vp_mapfile_close(&p->file);
    struct vd_state_view v;
    e = vd_state_check(p->copy, size, &v, why, sizeof(why));
    if (e == -EPROTONOSUPPORT) {
        /* Left as it is, for the vramd that wrote it. */
        free(p->copy);
        p->copy = NULL;
        vlog(VLOG_ERR, "state file %s: %s; run the newer vramd again, or "
             "--discard-state", path, why);
        return -EBADMSG;
    }
    if (e < 0) {
        free(p->copy);
        p->copy = NULL;
        vlog(VLOG_ERR, "state file %s: %s. vramd will not start over it: it "
             "may record memory that live engines map. Once no engine of the "
             "previous vramd runs, start with --discard-state (or remove the "
             "file)", path, why);
        return -EBADMSG;
    }
    if (v.h->version < VD_STATE_VERSION_CRC)
        vlog(VLOG_INFO, "state file %s: format version %u, which has no "
             "checksum: read as it is", path, v.h->version);
    char boot[40];
    vp_boot_id(boot);
    if (strncmp(boot, v.h->boot_id, 40) != 0) {
        vlog(VLOG_INFO, "state file %s is from an earlier boot; no process it "
             "knew runs", path);
        free(p->copy);
        p->copy = NULL;
        return 0;
    }
    p->map = p->copy;
    p->size = size;
    p->h = v.h;
    p->v = v;
    return 0;
}

/* ---- the new file ------------------------------------------------------- */

static int state_create(const struct vd_state_params *prm, const char *path,
                        size_t orphans, struct vd_state **out)
{
    struct vd_state *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->params = prm;
    st->file.h = -1;
    snprintf(st->path, sizeof(st->path), "%s", path);
    struct vl_ledger *L = prm->ledger;
    uint32_t ndev = vl_device_count(L);
    struct vl_device_view dv[VL_MAX_DEVICES];
    for (uint32_t i = 0; i < ndev; i++)
        vl_device_view(L, i, &dv[i]);
    uint32_t nholders = 4 * prm->max_clients + 64 + (uint32_t)orphans;
    uint64_t nranges = (uint64_t)prm->max_clients * prm->max_regions_per_client;
    if (nranges < 1024)
        nranges = 1024;
    if (nranges > (1u << 20))
        nranges = 1u << 20;
    size_t off = (VD_STATE_HDR_V5_BYTES + 63) & ~(size_t)63;
    size_t off_holders = off;
    off += (size_t)nholders * sizeof(struct holder);
    size_t off_stages = off;
    off += VL_MAX_STAGES * sizeof(uint32_t);
    size_t off_ranges = off;
    off += (size_t)nranges * sizeof(struct range);
    size_t off_chunks[VL_MAX_DEVICES];
    for (uint32_t i = 0; i < ndev; i++) {
        off = (off + 7) & ~(size_t)7;
        off_chunks[i] = off;
        off += (size_t)dv[i].chunks * 8;
    }
    uint32_t nwusers = 4 * nholders;
    off = (off + 7) & ~(size_t)7;
    size_t off_wsets = off;
    off += (size_t)VL_MAX_WSETS * sizeof(struct vd_state_wset);
    size_t off_wusers = off;
    off += (size_t)nwusers * sizeof(struct vd_state_wuser);
    size_t off_counters = off;
    off += sizeof(struct vd_state_counters);
    /* How many blocks: a header of these counts says (format.c). */
    uint64_t lay[(VD_STATE_HDR_V5_BYTES + 7) / 8];
    memset(lay, 0, sizeof(lay));
    struct hdr *lh = (struct hdr *)lay;
    lh->ndev = ndev;
    lh->nholders = nholders;
    lh->nstages = VL_MAX_STAGES;
    lh->nranges = (uint32_t)nranges;
    for (uint32_t i = 0; i < ndev; i++)
        lh->dev[i].nchunks = dv[i].chunks;
    VD_STATE_WSETS_AT(lh)->nwsets = VL_MAX_WSETS;
    VD_STATE_WSETS_AT(lh)->nwusers = nwusers;
    struct vd_state_blocks blocks;
    vd_state_blocks(lh, &blocks);
    off = (off + 7) & ~(size_t)7;
    size_t off_check = off;
    off += (size_t)blocks.nblocks * sizeof(uint32_t);
    off = (off + 7) & ~(size_t)7;
    size_t off_journal = off;
    off += sizeof(struct vd_state_journal) + blocks.max_len;
    st->size = off;
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    char why[512];
    int e = vp_mapfile_create(tmp, st->size, &st->file, why, sizeof(why));
    if (e < 0) {
        vlog(VLOG_ERR, "state file %s", why);
        free(st);
        return e;
    }
    st->map = st->file.map;
    st->free_ranges = malloc(nranges * sizeof(uint32_t));
    if (!st->free_ranges) {
        e = -ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < nranges; i++)
        st->free_ranges[i] = (uint32_t)nranges - 1 - i;
    st->nfree_ranges = (uint32_t)nranges;
    struct hdr *h = st->h = (struct hdr *)st->map;
    memcpy(h->magic, VD_STATE_MAGIC, 8);
    h->version = VD_STATE_VERSION;
    h->ndev = ndev;
    vp_boot_id(h->boot_id);
    h->nholders = nholders;
    h->nranges = (uint32_t)nranges;
    h->off_holders = off_holders;
    h->off_stages = off_stages;
    h->nstages = VL_MAX_STAGES;
    h->off_ranges = off_ranges;
    h->size = st->size;
    for (uint32_t i = 0; i < ndev; i++) {
        h->off_chunks[i] = off_chunks[i];
        h->dev[i].chunk_bytes = dv[i].chunk_bytes;
        h->dev[i].nchunks = dv[i].chunks;
        h->dev[i].id = dv[i].id;
        snprintf(h->dev[i].uuid, sizeof(h->dev[i].uuid), "%s",
                 prm->uuid[i] ? prm->uuid[i] : "");
        st->chunks[i] = (uint64_t *)(st->map + off_chunks[i]);
    }
    struct vd_state_hdr_wsets *x = (void *)(st->map + sizeof(*h));
    x->nwsets = VL_MAX_WSETS;
    x->off_wsets = off_wsets;
    x->nwusers = nwusers;
    x->off_wusers = off_wusers;
    st->wsets = (struct vd_state_wset *)(st->map + off_wsets);
    st->nwsets = VL_MAX_WSETS;
    st->wusers = (struct vd_state_wuser *)(st->map + off_wusers);
    st->nwusers = nwusers;
    st->holders = (struct holder *)(st->map + off_holders);
    st->stages = (uint32_t *)(st->map + off_stages);
    st->ranges = (struct range *)(st->map + off_ranges);
    struct vd_state_hdr_check *c = VD_STATE_CHECK_AT(h);
    c->block_bytes = VD_STATE_BLOCK;
    c->nblocks = blocks.nblocks;
    c->off_check = off_check;
    c->off_journal = off_journal;
    c->off_counters = off_counters;
    c->journal_bytes = blocks.max_len;
    st->counters = (struct vd_state_counters *)(st->map + off_counters);
    /* The header is complete: it is summed once, and never changes again. */
    vd_journal_init(&st->jl, st->map);
    *out = st;
    return 0;
fail:
    vp_mapfile_close(&st->file);
    vp_file_remove(tmp);
    free(st);
    return e;
}

void vd_state_close(struct vd_state *st)
{
    if (!st)
        return;
    vp_mapfile_close(&st->file);
    free(st->free_ranges);
    vd_state_found_free(st);
    free(st);
}

void vd_state_found_wsets(const struct vd_state *st,
                          const struct vd_state_found_wset **v, size_t *n)
{
    *v = st ? st->found : NULL;
    *n = st ? st->nfound : 0;
}

void vd_state_found_free(struct vd_state *st)
{
    if (!st)
        return;
    free(st->found);
    st->found = NULL;
    st->nfound = 0;
}

/* Is the process behind a holder still the one that held? */
static int holder_alive(const struct holder *h, vp_handle *pin_out)
{
    if (h->pid <= 0)
        return 0;
    vp_handle pin;
    if (vp_proc_pin(h->pid, &pin) < 0)
        return 0;
    /* Pinned now: the start time says whether the pid was reused. Where it
     * could not be read, a live pid counts as the holder: its memory waits
     * for that process to exit (it can never resume). */
    if (h->starttime && vp_proc_start_time(h->pid) != h->starttime) {
        vp_close(&pin);
        return 0;
    }
    *pin_out = pin;
    return 1;
}
int vd_state_open(const struct vd_state_params *prm, const char *path,
                  struct vd_orphan **orphans_out, size_t *norphans_out,
                  struct vd_state **out)
{
    struct vl_ledger *L = prm->ledger;
    uint32_t ndev = vl_device_count(L);
    struct prev p;
    int e = prev_open(path, prm->discard, &p);
    if (e < 0)
        return e;
    struct vd_orphan *orph = NULL;
    size_t norph = 0;
    uint32_t *ids = NULL;
    struct vl_restore_chunk *rc = NULL;
    struct vl_va_hold *va = NULL;
    size_t nrc = 0, nva = 0;
    uint32_t *stage_holder = calloc(VL_MAX_STAGES, sizeof(*stage_holder));
    struct vd_state *st = NULL;
    if (!stage_holder) {
        free(p.copy);
        return -ENOMEM;
    }
    uint32_t next_client = 0;

    if (p.h) {
        const struct hdr *h = p.h;
        const struct range *rs = (const void *)(p.map + h->off_ranges);
        const uint32_t *ss = (const void *)(p.map + h->off_stages);
        uint32_t nss = h->nstages ? h->nstages : VD_STATE_OLD_STAGES;
        next_client = p.v.next_client;
        orph = calloc(h->nholders + 1, sizeof(*orph));
        ids = calloc(h->nholders + 1, sizeof(*ids));
        if (!orph || !ids) {
            e = -ENOMEM;
            goto out;
        }
        /* Which holders' processes still run, and hold something. */
        for (uint32_t i = 0; i < h->nholders; i++) {
            struct holder hd;
            vd_state_holder_at(&p.v, i, &hd);
            if (!hd.client)
                continue;
            if (hd.client >= next_client)
                next_client = hd.client + 1;
            vp_handle pin = VP_NONE;
            if (!holder_alive(&hd, &pin))
                continue;
            orph[norph] = (struct vd_orphan){
                .client = hd.client, .pid = hd.pid, .pin = pin,
                .starttime = hd.starttime, .uid = hd.uid,
                .resumable = !(hd.flags & VD_HOLDER_EVICTED)};
            snprintf(orph[norph].name, sizeof(orph[norph].name), "%s", hd.name);
            norph++;
        }
        /* The same devices, in the same places, cut the same way: a chunk
         * id means the same memory. A capacity may differ (a reload changes
         * it at once, the configuration file with it), as long as every
         * chunk still held is inside the new one (checked below). */
        bool same = h->ndev == ndev;
        uint32_t now_chunks[VL_MAX_DEVICES] = {0};
        for (uint32_t i = 0; same && i < ndev; i++) {
            struct vl_device_view d;
            vl_device_view(L, i, &d);
            now_chunks[i] = d.chunks;
            same = h->dev[i].chunk_bytes == d.chunk_bytes && h->dev[i].id == d.id &&
                   strncmp(h->dev[i].uuid, prm->uuid[i] ? prm->uuid[i] : "",
                           sizeof(h->dev[i].uuid)) == 0;
        }
        size_t total = 0;
        for (uint32_t d = 0; d < h->ndev; d++)
            total += h->dev[d].nchunks;
        rc = calloc(total + 1, sizeof(*rc));
        va = calloc(h->nranges + 1, sizeof(*va));
        if (!rc || !va) {
            e = -ENOMEM;
            goto out;
        }
        for (uint32_t d = 0; d < h->ndev; d++) {
            const uint64_t *cs = (const void *)(p.map + h->off_chunks[d]);
            for (uint32_t k = 0; k < h->dev[d].nchunks; k++) {
                uint64_t r = cs[k];
                uint32_t who = (uint32_t)r;
                for (size_t o = 0; who && o < norph; o++)
                    if (orph[o].client == who) {
                        if (d >= ndev || k >= now_chunks[d])
                            same = false; /* held beyond the capacity now */
                        rc[nrc++] = (struct vl_restore_chunk){
                            .chunk = vl_chunk_id(d, k), .client = who,
                            .stage = (uint16_t)(r >> 32),
                            .cat = (uint8_t)(r >> 48)};
                        break;
                    }
            }
        }
        for (uint32_t i = 0; i < h->nranges; i++) {
            struct range r = rs[i];
            for (size_t o = 0; r.client && o < norph; o++)
                if (orph[o].client == r.client) {
                    va[nva++] = (struct vl_va_hold){.client = r.client,
                                                    .region = r.region,
                                                    .base = r.base,
                                                    .size = r.size};
                    break;
                }
        }
        for (uint32_t i = 0; i < nss; i++)
            for (size_t o = 0; ss[i] && o < norph; o++)
                if (orph[o].client == ss[i])
                    stage_holder[i] = ss[i];
        if (nrc && !same) {
            vlog(VLOG_ERR, "state file %s: %zu chunks are still held by live "
                 "processes (pid %d first) under another device layout "
                 "(devices or chunk sizes changed, or a capacity no longer "
                 "holds them); stop those processes, or restore the old "
                 "configuration",
                 path, nrc, (int)orph[0].pid);
            e = -EBADMSG;
            goto out;
        }
        /* A process that holds nothing has nothing to come back for: a
         * weight set it maps counts (R17). */
        size_t keep = 0;
        for (size_t o = 0; o < norph; o++) {
            bool any = false;
            for (uint32_t i = 0; !any && i < p.v.nwusers; i++)
                any = p.v.wusers[i].set && p.v.wusers[i].client == orph[o].client;
            for (size_t i = 0; !any && i < nrc; i++)
                any = rc[i].client == orph[o].client;
            for (size_t i = 0; !any && i < nva; i++)
                any = va[i].client == orph[o].client;
            for (uint32_t i = 0; !any && i < VL_MAX_STAGES; i++)
                any = stage_holder[i] == orph[o].client;
            if (any)
                orph[keep++] = orph[o];
            else
                vp_close(&orph[o].pin);
        }
        norph = keep;
        for (size_t o = 0; o < norph; o++)
            ids[o] = orph[o].client;
    }

    e = state_create(prm, path, norph, &st);
    if (e < 0)
        goto out;
    vd_state_next_client(st, next_client);
    /* R17: the sealed sets, whatever processes run (a set outlives every
     * engine): their users cut to the gone clients that come back. The
     * caller restores those whose handles the keeper kept. */
    if (p.h && p.v.nwsets) {
        size_t n = 0;
        for (uint32_t i = 0; i < p.v.nwsets; i++)
            n += p.v.wsets[i].id != 0;
        st->found = calloc(n + 1, sizeof(*st->found));
        if (!st->found) {
            e = -ENOMEM;
            goto out;
        }
        for (uint32_t i = 0; i < p.v.nwsets; i++) {
            const struct vd_state_wset *w = &p.v.wsets[i];
            if (!w->id)
                continue;
            struct vd_state_found_wset *f = &st->found[st->nfound++];
            f->rec = *w;
            f->rec.name[sizeof(f->rec.name) - 1] = 0; /* whatever it holds */
            for (uint32_t u = 0; u < p.v.nwusers && f->nusers < VD_STATE_FOUND_USERS;
                 u++) {
                if (p.v.wusers[u].set != w->id)
                    continue;
                for (size_t o = 0; o < norph; o++)
                    if (orph[o].client == p.v.wusers[u].client) {
                        f->users[f->nusers++] = p.v.wusers[u].client;
                        break;
                    }
            }
        }
    }
    vl_set_observer(L, &(struct vl_observer){.ctx = st, .chunk = obs_chunk,
                                             .va_take = obs_va_take,
                                             .va_give = obs_va_give,
                                             .va_move = obs_va_move,
                                             .stage = obs_stage,
                                             .wset = obs_wset});
    for (size_t o = 0; o < norph; o++) {
        /* The table has room for every orphan (state_create). */
        if (vd_state_holder_add(st, orph[o].client, orph[o].pid,
                                orph[o].starttime, orph[o].uid, orph[o].name) < 0) {
            e = -ENOSPC;
            goto out;
        }
        if (!orph[o].resumable)
            vd_state_holder_evicted(st, orph[o].client);
    }
    if (norph) {
        e = vl_restore(L, ids, norph, rc, nrc, va, nva, stage_holder);
        if (e < 0) {
            vlog(VLOG_ERR, "state file %s is inconsistent: %s. vramd will not "
                 "start over it; once no engine of the previous vramd runs, "
                 "start with --discard-state", path, vl_why(L));
            e = -EBADMSG;
            goto out;
        }
        vlog(VLOG_NOTICE, "restart: %zu processes still hold %zu chunks; they "
             "stay theirs until each comes back or exits", norph, nrc);
    }
    /* The old file is no longer mapped (prev_open let it go once copied),
     * so it can be replaced: Windows refuses to replace a mapped file. */
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    if ((e = vp_file_rename(tmp, path)) < 0) {
        vlog(VLOG_ERR, "state file %s: rename: %s", path, strerror(-e));
        goto out;
    }
    *out = st;
    st = NULL;
    *orphans_out = orph;
    *norphans_out = norph;
    orph = NULL;
    norph = 0;
out:
    if (st) {
        vl_set_observer(L, NULL);
        char tmp2[4200];
        snprintf(tmp2, sizeof(tmp2), "%s.new", path);
        vp_file_remove(tmp2);
        vd_state_close(st);
    }
    for (size_t o = 0; o < norph; o++)
        vp_close(&orph[o].pin);
    free(orph);
    free(ids);
    free(rc);
    free(va);
    free(stage_holder);
    free(p.copy);
    return e;
}
