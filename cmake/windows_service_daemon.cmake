# SPDX-License-Identifier: Apache-2.0
# vramd.exe as a Windows service (daemon/main.c run by the platform entry,
# platform/win32/entry_win32.c, and installed by windows-service/), tested
# under wine's SCM: included from
# cmake/windows.cmake inside its VRAM_BUILD_TESTS block, with its
# vram_win_test().
#
# test_win_service_daemon installs vramd.exe with its own --install-service
# (a configuration, run directory and pipe of the test's in the service's
# command line), starts it, serves win_vramd_client.exe, reloads with
# PARAMCHANGE, stops, restarts, uninstalls with --uninstall-service, and
# runs --console. It needs scripts/windows-test.sh's persistent wineserver
# (test_win_service says why).
vram_win_test(test_win_service_daemon SOURCES tests/win/test_win_service_daemon.c
              LIBS vram_winsvc vram_platform TIMEOUT 300)
add_dependencies(test_win_service_daemon vramd win_vramd_client)
# One service-manager test at a time (cmake/windows.cmake says why).
set_tests_properties(test_win_service_daemon PROPERTIES RESOURCE_LOCK service_manager)
