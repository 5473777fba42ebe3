# SPDX-License-Identifier: Apache-2.0
# Tests that only real Windows can run: vramd serving and refusing
# processes of other users. Included from cmake/windows.cmake inside its
# VRAM_BUILD_TESTS block, with its vram_win_test().
#
# test_win_crossuser creates two temporary local users (NetUserAdd,
# netapi32), installs vramd.exe as a service (LocalSystem) allowing one of
# them, runs win_vramd_client.exe and a probe as each user
# (CreateProcessWithLogonW, advapi32), and checks that a directory another
# user made first in %ProgramData% is refused (vpw_svc_prepare_dir).
# Passwords come from BCryptGenRandom (bcrypt); a profile a logon made is
# removed with DeleteProfileW and CreateEnvironmentBlock gives a client's
# environment (userenv). Under wine (one user, no pipe DACL checked) every
# check prints "SKIP (real Windows only): ..." and it exits 0; on Windows
# without an elevated administrator it exits 77, which ctest counts as
# skipped.
vram_win_test(test_win_crossuser SOURCES tests/win/test_win_crossuser.c
              LIBS vram_winsvc vram_platform netapi32 advapi32 userenv bcrypt
              TIMEOUT 300)
set_tests_properties(test_win_crossuser PROPERTIES SKIP_RETURN_CODE 77
                     RESOURCE_LOCK service_manager)
# It copies these into its own directory under %ProgramData% (the test says
# why) and runs them as the other users.
add_dependencies(test_win_crossuser vramd win_vramd_client)
