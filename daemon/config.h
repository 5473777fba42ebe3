/* SPDX-License-Identifier: Apache-2.0 */
/* vramd's configuration: a JSON file, validated in full. Every error names
 * the offending key path ("stages[1].kv_lanes[0].bytes_per_token: ...").
 * Without a file the host backend presents two 16 GiB devices with 2 MiB
 * chunks (the two-card case of the seed) and no configured stages. */
#ifndef VRAMD_CONFIG_H
#define VRAMD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/ledger/ledger.h"
#include "daemon/backends/section.h"

#define VD_MAX_CONFIG_ERRORS 32
/* pool.prefill_chunks when the file does not say: cuda fills the pool up to
 * every chunk the ledger could grant; host keeps VD_POOL_HOST (its chunks
 * are fds). */
#define VD_POOL_AUTO UINT32_MAX
#define VD_POOL_HOST 16u

struct vd_device_conf {
    struct vl_device_cfg l; /* capacity here is the cap before the reserve */
    bool has_capacity;      /* else: everything the device has */
    uint64_t reserve_bytes;
};

struct vd_config {
    char backend[8]; /* a backend's name or auto; "" = not set by the file */
    struct vd_device_conf dev[VL_MAX_DEVICES];
    uint32_t ndev;
    bool devices_given;
    struct vl_stage_cfg *stages;
    uint32_t nstages;
    uint64_t va_base, va_size; /* 0 = the backend's default window */
    uint32_t pool_prefill;     /* chunks kept ready per device, at most
                                  (pool.prefill_chunks; VD_POOL_AUTO: the
                                  standby decides) */
    uint64_t pool_standby;     /* pool.standby: bytes made ahead per device,
                                  at most; 0: the backend's default */
    uint32_t pool_idle_release_ms; /* returned chunks kept beyond the
                                      standby this long after the last
                                      release (pool.idle_release_ms) */
    /* Each backend's own section, parsed by the backend into its slot (in
     * the registry's order: backends/section.h, registry.h). */
    struct vd_backend_conf backend_conf[VD_MAX_BACKENDS];
    uint32_t max_clients;
    uint32_t max_chunks_per_client;
    uint32_t max_regions_per_client;
    uint32_t max_stages_per_client;
    uint32_t admin_connections;    /* slots above max_clients for admins */
    uint32_t connections_per_user; /* of one uid at once (admins: no bound) */
    uint32_t hello_timeout_ms;     /* to say hello after connecting */
    uint32_t frame_timeout_ms;     /* to finish a frame once begun */
    uint64_t queued_bytes;         /* output queued towards all peers */
    uint64_t va_bytes_per_client, va_bytes_per_user; /* address space (R16) */
    uint32_t stages_per_user, gone_per_user;         /* (R16) */
    uint32_t wsets_per_user;                         /* (R17) */
    uint64_t weights_alloc; /* a weight set's allocation size (R17) */
    /* Who may connect, and who may administer (root always may both). */
    struct vd_access_list {
        uint32_t uids[32], gids[32];
        uint32_t nuids, ngids;
    } allow, admin, weights; /* weights: who may open another user's
                                weight sets (R17; their writer's uid and
                                admins always may) */
    bool allow_given;  /* else: the daemon's user and the group vramd */
    char socket_group[64]; /* group of the socket file ("" = unchanged) */
    uint32_t socket_mode;  /* of the socket file */
};

void vd_config_default(struct vd_config *c);
/* Loads path into c (defaults first). On failure returns -EINVAL and fills
 * errs with one line per problem (at most VD_MAX_CONFIG_ERRORS). */
int vd_config_load(const char *path, struct vd_config *c, char errs[][256],
                   int *nerrs);
void vd_config_free(struct vd_config *c);

#endif
