/* SPDX-License-Identifier: Apache-2.0 */
/* A resume's declaration (R13) as it arrives, in parts when it is larger
 * than a frame: what the process says it still holds, gathered into the
 * ledger's resume arrays. */
#ifndef VRAMD_RESUME_DECLARATION_H
#define VRAMD_RESUME_DECLARATION_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/ledger/ledger.h"
#include "gen/vram_msg.h"

struct vd_resume_acc {
    struct vl_resume_stage *stages;
    size_t nstages, capstages;
    struct vl_resume_region *regions;
    size_t nregions, capregions;
    struct vl_resume_chunk *chunks;
    size_t nchunks, capchunks;
    struct vl_resume_claim *claims;
    size_t nclaims, capclaims;
};

/* Adds a part: 0, -EINVAL with why (an ad-hoc stage without its device and
 * layers, an unknown region kind), or -ENOMEM. */
int vd_declaration_add(struct vd_resume_acc **acc,
                       const struct vw_req_resume *m, char *why,
                       size_t whylen);
void vd_resume_acc_free(struct vd_resume_acc *acc); /* NULL-tolerant */

#endif
