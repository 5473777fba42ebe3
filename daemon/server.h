/* The daemon's runtime: the listening socket, client sessions, held
 * requests, recall deadlines and quarantine reapers, on one libuv loop. */
#ifndef VRAMD_SERVER_H
#define VRAMD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "access.h"
#include "backend.h"
#include "config.h"
#include "ledger.h"
#include "peer.h"
#include "watch.h"
#include "wire.h"

#include <cjson/cJSON.h>

struct vd_server;

struct vd_session {
    struct vd_session *next;
    struct vd_server *srv;
    uint32_t id;
    vp_handle h;
    struct vp_watch watch;
    struct vram_wire wire;
    int64_t pid;
    struct vp_peer peer;
    bool admin;
    vp_handle pin;      /* the peer's process, pinned */
    uint64_t starttime; /* of the peer's process: with the pid, names it */
    char name[64];
    bool hello;
    bool evicted;     /* its process may not resume it */
    uint32_t resumed_from; /* the gone client it took back, 0 if none */
    cJSON *resume_acc;     /* a resume declaration arriving in parts */
    bool ctl;
    bool closing;     /* being torn down */
    bool drain_close; /* close once the queue is flushed */
    uint32_t held;    /* requests waiting (hold) */
    uint32_t regions;
};

struct vd_held {
    struct vd_held *next;
    struct vd_server *srv;
    struct vd_session *s;
    uint64_t id;
    uint32_t stage;
    uint64_t prompt, output;
    uv_timer_t timer;
};

struct vd_recall {
    struct vd_recall *next;
    struct vd_server *srv;
    uint32_t client;
    uint32_t stage;
    uint32_t deadline_ms;
    uint64_t *chunks;
    size_t n;
    uv_timer_t timer;
};

/* A gone client whose process still runs: its memory is quarantined until
 * the pidfd says the process exited, or the process resumes (rule 13). */
struct vd_reaper {
    struct vd_reaper *next;
    struct vd_server *srv;
    uint32_t client;
    int64_t pid;
    vp_handle pin;
    uint64_t starttime;
    bool resumable;
    struct vp_watch watch;
};

struct vd_counters {
    uint64_t grants, moves, recalls, recalls_missed, releases, errors,
        disconnects, protocol_errors, kept_after_release;
};

struct vd_server {
    uv_loop_t *loop;
    struct vd_config cfg;
    struct vl_ledger ledger;
    struct vd_backend *backend;
    struct vd_state *state;
    char socket_path[108];
    char config_path[4096]; /* "" without a file */
    char lock_path[116];
    char state_path[116];
    vp_handle listen_h, lock_h;
    struct vp_watch listen_watch;
    uv_signal_t sig[3];
    uv_idle_t idle;
    bool idle_on;
    struct vd_session *sessions;
    uint32_t nsessions;
    uint32_t next_client_id;
    struct vd_held *held;
    struct vd_recall *recalls;
    struct vd_reaper *reapers;
    struct vl_fxlist fx;
    struct vd_counters counters;
    bool budget_pending[VL_MAX_STAGES];
    bool check_invariants;
    bool stopping;
    bool activated; /* the listening socket came from the service manager */
    uint64_t started_ns;
    uint64_t last_grant_ns; /* pool refill waits for grant bursts to end */
    /* Fault injection for tests (VRAMD_TEST_CRASH_BEFORE_REPLY=<type>):
     * vramd kills itself after the ledger committed the first such request
     * and before any of its effects or its reply went out, which is the
     * window a real crash can hit. Unset in production. */
    const char *crash_before_reply;
    const char *request_type; /* the request being handled */
};

int vd_server_init(struct vd_server *srv, uv_loop_t *loop,
                   const struct vd_config *cfg, struct vd_backend *backend,
                   const char *socket_path);
int vd_server_listen(struct vd_server *srv);
void vd_server_stop(struct vd_server *srv);
void vd_server_reload(struct vd_server *srv);
void vd_server_fini(struct vd_server *srv);

/* session.c */
void vd_session_accept(struct vd_server *srv, vp_handle h);
/* Watches a gone client's process (its pin taken); reaps at its exit. */
int vd_reaper_watch(struct vd_server *srv, uint32_t client, int64_t pid,
                    vp_handle pin, uint64_t starttime, bool resumable);
struct vd_reaper *vd_reaper_find(struct vd_server *srv, uint32_t client);
/* Stops watching and reaps the client now. */
void vd_reaper_end(struct vd_reaper *rp);
void vd_session_close(struct vd_session *s, const char *why);
void vd_session_free(struct vd_session *s);
void vd_held_retry_all(struct vd_server *srv);
void vd_apply_background_fx(struct vd_server *srv);

/* status.c */
struct cJSON *vd_status_build(struct vd_server *srv);
struct cJSON *vd_stage_json(struct vd_server *srv, uint32_t stage);
struct cJSON *vd_region_json(struct vd_server *srv, const struct vl_region *r);

#endif
