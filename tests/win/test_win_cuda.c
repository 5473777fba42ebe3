/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA backend's Windows pieces that run without a GPU: the security
 * descriptor of the chunks' Win32 handles (platform/win32/cuda_share.c),
 * the driver and NVML loaders failing cleanly, with the reason, where
 * nvcuda.dll and nvml.dll are absent (wine has neither), and the WDDM
 * bound's arithmetic and message (common/nvml.c). Exporting, importing
 * and the bound against a real GPU need a Windows GPU machine: nothing of
 * that runs here (docs/windows.md, "CUDA on Windows").
 *
 * Built with cuda.h (the driver loader's types): cmake/windows.cmake
 * registers it where it finds cuda.h, and scripts/windows-test.sh runs it. */
#include "tests/win/wintest.h"

#include <sddl.h>
#include <winternl.h>

#include "common/cuda_driver.h"
#include "platform/win32/cuda_share.h"
#include "platform/dl.h"
#include "platform/win32/identity.h"
#include "common/nvml.h"

#define FIXED "D:P(A;;GA;;;SY)(A;;GA;;;BA)"

static void my_sid(struct vp_sid *out, bool *is_system)
{
    struct vp_identity *me = malloc(sizeof(*me));
    MUST(me && vp_identity_self(me) == 0, "this process's identity");
    *out = me->user;
    free(me);
    struct vp_sid sy;
    vp_sid_parse("S-1-5-18", &sy);
    *is_system = vp_sid_equal(out, &sy);
}

static void test_sddl(void)
{
    char buf[512];
    struct vp_sid sid;
    MUST(vp_sid_parse("S-1-5-18", &sid) == 0, "SYSTEM's SID");
    CHECK(vpw_cuda_sddl(&sid, buf, sizeof(buf)) == 0 && strcmp(buf, FIXED) == 0,
          "as SYSTEM: %s", buf);
    MUST(vp_sid_parse("S-1-5-21-1-2-3-1001", &sid) == 0, "a user's SID");
    CHECK(vpw_cuda_sddl(&sid, buf, sizeof(buf)) == 0 &&
              strcmp(buf, FIXED "(A;;GA;;;S-1-5-21-1-2-3-1001)") == 0,
          "as a user: %s", buf);
    /* Exactly the length, and one short of it. */
    size_t need = strlen(FIXED "(A;;GA;;;S-1-5-21-1-2-3-1001)") + 1;
    CHECK(vpw_cuda_sddl(&sid, buf, need) == 0, "a buffer just large enough");
    CHECK(vpw_cuda_sddl(&sid, buf, need - 1) == -ENOSPC, "one byte short");

    /* This process's user (the daemon's under --console). */
    bool sys;
    struct vp_sid me;
    my_sid(&me, &sys);
    char s[VP_SID_STRING_MAX], want[512];
    MUST(vp_sid_format(&me, s, sizeof(s)) == 0, "format my SID");
    if (sys)
        snprintf(want, sizeof(want), "%s", FIXED);
    else
        snprintf(want, sizeof(want), FIXED "(A;;GA;;;%s)", s);
    CHECK(vpw_cuda_sddl(NULL, buf, sizeof(buf)) == 0 && strcmp(buf, want) == 0,
          "this process: %s, expected %s", buf, want);
}

/* The DACL of sd: protected, n ACEs, each allowing GENERIC_ALL to sids[i]. */
static void check_dacl(PSECURITY_DESCRIPTOR sd, const struct vp_sid *sids, int n)
{
    MUST(IsValidSecurityDescriptor(sd), "a valid descriptor");
    SECURITY_DESCRIPTOR_CONTROL ctl = 0;
    DWORD rev = 0;
    CHECK(GetSecurityDescriptorControl(sd, &ctl, &rev) && (ctl & SE_DACL_PROTECTED),
          "the DACL is protected (control 0x%x)", (unsigned)ctl);
    BOOL present = FALSE, defaulted = FALSE;
    PACL acl = NULL;
    MUST(GetSecurityDescriptorDacl(sd, &present, &acl, &defaulted) && present && acl,
         "a DACL (not a NULL one, which would allow everyone)");
    CHECK_EQ_U(acl->AceCount, n);
    for (int i = 0; i < n && i < acl->AceCount; i++) {
        ACCESS_ALLOWED_ACE *a = NULL;
        MUST(GetAce(acl, (DWORD)i, (void **)&a), "ACE %d", i);
        CHECK(a->Header.AceType == ACCESS_ALLOWED_ACE_TYPE, "ACE %d allows", i);
        CHECK(a->Mask == GENERIC_ALL, "ACE %d: mask 0x%lx", i, (unsigned long)a->Mask);
        PSID got = (PSID)&a->SidStart;
        CHECK(GetLengthSid(got) == sids[i].len &&
                  memcmp(got, sids[i].b, sids[i].len) == 0,
              "ACE %d names the expected SID", i);
    }
}

static void test_share(void)
{
    char why[256] = "";
    struct vpw_cuda_share *s = NULL;
    int e = vpw_cuda_share_create(NULL, &s, why, sizeof(why));
    MUST(e == 0 && s, "vpw_cuda_share_create: %d %s", e, why);
    OBJECT_ATTRIBUTES *oa = vpw_cuda_share_meta(s);
    MUST(oa != NULL, "the metadata pointer");
    /* What InitializeObjectAttributes(&oa, NULL, 0, NULL, sd) gives. */
    CHECK_EQ_U(oa->Length, sizeof(OBJECT_ATTRIBUTES));
    CHECK(oa->RootDirectory == NULL && oa->ObjectName == NULL, "no name, no root");
    CHECK(oa->Attributes == 0, "no attributes (not inheritable): 0x%lx",
          (unsigned long)oa->Attributes);
    CHECK(oa->SecurityQualityOfService == NULL, "no QoS");
    MUST(oa->SecurityDescriptor != NULL, "a security descriptor");

    bool sys;
    struct vp_sid sids[3];
    vp_sid_parse("S-1-5-18", &sids[0]);
    vp_sid_parse("S-1-5-32-544", &sids[1]);
    my_sid(&sids[2], &sys);
    check_dacl(oa->SecurityDescriptor, sids, sys ? 2 : 3);
    char want[512];
    vpw_cuda_sddl(NULL, want, sizeof(want));
    CHECK(strcmp(vpw_cuda_share_sddl(s), want) == 0, "the SDDL kept: %s",
          vpw_cuda_share_sddl(s));
    vpw_cuda_share_free(s);

    /* A given SDDL; the exact ACEs. */
    struct vp_sid u;
    vp_sid_parse("S-1-5-21-1-2-3-1001", &u);
    char sddl[256];
    vpw_cuda_sddl(&u, sddl, sizeof(sddl));
    s = NULL;
    MUST(vpw_cuda_share_create(sddl, &s, why, sizeof(why)) == 0, "%s: %s", sddl, why);
    struct vp_sid three[3] = {sids[0], sids[1], u};
    check_dacl(((OBJECT_ATTRIBUTES *)vpw_cuda_share_meta(s))->SecurityDescriptor,
               three, 3);
    vpw_cuda_share_free(s);

    /* Refused ones leave *out alone and say why. */
    struct vpw_cuda_share *keep = (struct vpw_cuda_share *)&u;
    s = keep;
    why[0] = 0;
    e = vpw_cuda_share_create("D:P(A;;GA;;;NOT-A-SID)", &s, why, sizeof(why));
    CHECK(e < 0 && s == keep && strstr(why, "refused"), "bad SDDL: %d %s", e, why);
    char longer[400];
    memset(longer, 'A', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = 0;
    e = vpw_cuda_share_create(longer, &s, why, sizeof(why));
    CHECK(e == -ENAMETOOLONG && s == keep, "too long: %d %s", e, why);

    vpw_cuda_share_free(NULL); /* NULL-tolerant */
    CHECK(vpw_cuda_share_meta(NULL) == NULL, "no metadata without a share");
}

static void test_loaders(void)
{
    void *present = vp_dl_open("nvcuda.dll");
    vp_dl_close(present);
    if (present) {
        skip_count++;
        printf("SKIP: nvcuda.dll is installed here: the no-driver path is "
               "checked where there is none (wine)\n");
    } else {
        struct vcu d;
        memset(&d, 0x5a, sizeof(d));
        struct vcu before = d;
        char why[256] = "";
        CHECK(vcu_load(&d, why, sizeof(why)) == -ENODEV, "no driver: -ENODEV");
        CHECK(strstr(why, "nvcuda.dll") && strstr(why, "System32"),
              "the reason names the DLL and where it is looked for: %s", why);
        CHECK(memcmp(&d, &before, sizeof(d)) == 0, "*out untouched on failure");
        vcu_unload(NULL);
    }

    void *nv = vp_dl_open("nvml.dll");
    vp_dl_close(nv);
    if (nv) {
        skip_count++;
        printf("SKIP: nvml.dll is installed here: its absence is checked "
               "where there is none (wine)\n");
    } else {
        struct vnvml n;
        memset(&n, 0x5a, sizeof(n));
        struct vnvml before = n;
        char why[256] = "";
        CHECK(vnvml_load(&n, why, sizeof(why)) == -ENOENT, "no NVML: -ENOENT");
        CHECK(strstr(why, "nvml.dll") && strstr(why, "System32"),
              "the reason names the DLL and where: %s", why);
        CHECK(memcmp(&n, &before, sizeof(n)) == 0, "*out untouched on failure");
        CHECK(vnvml_load(&n, NULL, 0) == -ENOENT, "no reason asked for");
    }
    struct vnvml none;
    memset(&none, 0, sizeof(none));
    uint64_t f = 7;
    CHECK(vnvml_free_bytes(&none, "GPU-0", &f) == -ENOENT && f == 7,
          "no figure without NVML, out untouched");
    vnvml_unload(NULL);
    vnvml_unload(&none);
}

static void test_fits(void)
{
    const uint64_t MiB = 1ull << 20;
    char why[400] = "untouched";
    CHECK(vnvml_fits(4 * MiB, 2 * MiB, 2 * MiB, why, sizeof(why)) == 0 &&
              strcmp(why, "untouched") == 0,
          "exactly room: fits, why untouched");
    CHECK(vnvml_fits(4 * MiB, 0, 4 * MiB, why, sizeof(why)) == 0, "no keep");
    CHECK(vnvml_fits(4 * MiB, 2 * MiB + 1, 2 * MiB, why, sizeof(why)) == -ENOSPC,
          "one byte short");
    CHECK(strstr(why, "WDDM") && strstr(why, "pages to system memory") &&
              strstr(why, "4 MiB of dedicated memory free") &&
              strstr(why, "2 MiB stay to other processes"),
          "the message says why: %s", why);
    CHECK(vnvml_fits(MiB, 0, 2 * MiB, why, sizeof(why)) == -ENOSPC &&
              !strstr(why, "stay to other"), "a grant keeps nothing: %s", why);
    /* No sum wraps. */
    CHECK(vnvml_fits(UINT64_MAX, UINT64_MAX, 1, why, sizeof(why)) == -ENOSPC,
          "keep of everything");
    CHECK(vnvml_fits(8 * MiB, 2 * MiB, UINT64_MAX, why, sizeof(why)) == -ENOSPC,
          "a need beyond everything");
    CHECK(vnvml_fits(0, 0, 2 * MiB, NULL, 0) == -ENOSPC, "no message asked for");
}

int main(void)
{
    test_sddl();
    test_share();
    test_loaders();
    test_fits();
    return win_report("test_win_cuda");
}
