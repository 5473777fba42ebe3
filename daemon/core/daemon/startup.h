/* SPDX-License-Identifier: Apache-2.0 */
/* The core's life: built from the configuration and the backend, started
 * (the lock, the state file of an earlier daemon), reloaded on SIGHUP,
 * ended. */
#ifndef VRAMD_STARTUP_H
#define VRAMD_STARTUP_H

#include "daemon/core/core.h"

/* Builds the ledger from cfg (devices sized by the backend, stages
 * configured, limits set); the port is how replies and events leave. Logs
 * why it fails. */
int vd_core_init(struct vd_core *core, uv_loop_t *loop,
                 const struct vd_config *cfg, const char *config_path,
                 struct vd_backend *backend, const struct vd_port *port);
/* Takes the daemon's lock beside socket_path and rebuilds from the state
 * file what live processes still hold (R13), then starts the pool refill.
 * Logs why it fails. */
/* keeper_path: where the keeper of weight sets' handles is found
 * (platform/keeper.h: vramd's socket, or its pipe on Windows). */
int vd_core_start(struct vd_core *core, const char *socket_path,
                  const char *keeper_path);
/* From now on connections that end leave their memory to the next daemon
 * (the state file keeps it). */
void vd_core_stopping(struct vd_core *core);
/* SIGHUP: rereads the configuration file; capacities, limits and access
 * lists change at once, anything else is refused, each change named. */
void vd_core_reload(struct vd_core *core);
/* After the loop has run its last turn (every handle closed). */
void vd_core_fini(struct vd_core *core);

/* A device's capacity: its cap, at most what it has less the reserve, in
 * whole chunks. */
uint64_t vd_core_capacity_of(const struct vd_device_conf *dc, uint64_t total);

#endif
