/* SPDX-License-Identifier: Apache-2.0 */
/* The security descriptor of CUDA chunks' Win32 handles, as an
 * OBJECT_ATTRIBUTES for cuMemCreate (cuda_share.h says why). */
#include "platform/win32/cuda_share.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <sddl.h>
#include <winternl.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/win32/winerr.h"
#include "platform/win32/wstr.h"

#define SDDL_MAX (64 + VP_SID_STRING_MAX)

struct vpw_cuda_share {
    OBJECT_ATTRIBUTES oa; /* what the driver reads; points at sd */
    PSECURITY_DESCRIPTOR sd;
    char sddl[SDDL_MAX];
};

int vpw_cuda_sddl(const struct vp_sid *self, char *buf, size_t len)
{
    struct vp_sid own, sy;
    if (!self) {
        /* vp_identity is large (its groups): not on the stack. */
        struct vp_identity *me = malloc(sizeof(*me));
        if (!me)
            return -ENOMEM;
        int e = vp_identity_self(me);
        own = me->user;
        free(me);
        if (e < 0)
            return e;
        self = &own;
    }
    /* P: protected, nothing inherited. GA for SYSTEM (the service) and
     * Administrators, as Windows' default descriptors give them. */
    char s[VP_SID_STRING_MAX] = "";
    vp_sid_parse("S-1-5-18", &sy);
    if (!vp_sid_equal(self, &sy) && vp_sid_format(self, s, sizeof(s)) < 0)
        return -EINVAL;
    int n = snprintf(buf, len, "D:P(A;;GA;;;SY)(A;;GA;;;BA)%s%s%s",
                     *s ? "(A;;GA;;;" : "", s, *s ? ")" : "");
    return n < 0 || (size_t)n >= len ? -ENOSPC : 0;
}

int vpw_cuda_share_create(const char *sddl, struct vpw_cuda_share **out,
                          char *why, size_t whylen)
{
    int e;
    struct vpw_cuda_share *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    if (sddl) {
        if (strlen(sddl) >= sizeof(s->sddl)) {
            snprintf(why, whylen, "the security descriptor's SDDL is longer "
                     "than %zu characters", sizeof(s->sddl) - 1);
            e = -ENAMETOOLONG;
            goto fail;
        }
        memcpy(s->sddl, sddl, strlen(sddl) + 1);
    } else if ((e = vpw_cuda_sddl(NULL, s->sddl, sizeof(s->sddl))) < 0) {
        snprintf(why, whylen, "this process's user cannot be read for the "
                 "chunks' security descriptor (%s)", strerror(-e));
        goto fail;
    }
    wchar_t w[SDDL_MAX];
    if ((e = vpw_wide(s->sddl, w, SDDL_MAX)) < 0) {
        snprintf(why, whylen, "security descriptor %s: not UTF-8", s->sddl);
        goto fail;
    }
    if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(
            w, SDDL_REVISION_1, &s->sd, NULL)) {
        DWORD err = GetLastError();
        snprintf(why, whylen, "security descriptor %s refused: error %lu",
                 s->sddl, (unsigned long)err);
        e = err == ERROR_INVALID_PARAMETER ? -EINVAL : vpw_errno(err);
        goto fail;
    }
    /* No name: the object can only be reached through a handle vramd gives
     * out. No OBJ_INHERIT: nothing vramd starts inherits it. */
    InitializeObjectAttributes(&s->oa, NULL, 0, NULL, s->sd);
    *out = s;
    return 0;
fail:
    vpw_cuda_share_free(s);
    return e;
}

void *vpw_cuda_share_meta(const struct vpw_cuda_share *s)
{
    return s ? (void *)&s->oa : NULL;
}

const char *vpw_cuda_share_sddl(const struct vpw_cuda_share *s)
{
    return s ? s->sddl : "";
}

void vpw_cuda_share_free(struct vpw_cuda_share *s)
{
    if (!s)
        return;
    if (s->sd)
        LocalFree(s->sd);
    free(s);
}
