/* SPDX-License-Identifier: Apache-2.0 */
/* vramd's restart in little: the state file at path read into prm's ledger
 * (vd_state_open rebuilds it from the file), then all it handed back let
 * go: the gone clients' pins closed, the state closed, the ledger's
 * observer unset. Returns vd_state_open's result; on success *orphans
 * (when not NULL) is how many gone clients the file held. Shared by
 * tests/unit/test_state_fuzz.c and tests/fuzz/fuzz_state.c (static: each
 * includes it once). */
#ifndef VRAM_TEST_STATE_REBUILD_H
#define VRAM_TEST_STATE_REBUILD_H

#include <stdlib.h>
#include <unistd.h>

#include "daemon/ledger/ledger.h"
#include "daemon/state/state.h"

static int state_rebuild(const struct vd_state_params *prm, const char *path,
                         size_t *orphans)
{
    struct vd_orphan *orph = NULL;
    size_t n = 0;
    struct vd_state *st = NULL;
    int e = vd_state_open(prm, path, &orph, &n, &st);
    if (e == 0) {
        for (size_t i = 0; i < n; i++)
            if (orph[i].pin.v >= 0)
                close((int)orph[i].pin.v);
        free(orph);
        vd_state_close(st);
        if (orphans)
            *orphans = n;
    }
    vl_set_observer(prm->ledger, NULL);
    return e;
}

#endif
