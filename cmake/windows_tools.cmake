# SPDX-License-Identifier: Apache-2.0
# The tools on Windows: vramctl.exe and vram-replay.exe, and their test
# (included by cmake/windows.cmake, inside its VRAM_BUILD_TESTS branch,
# after libvram.dll and vramd.exe).
#
# The Linux build's lists of sources (cmake/sources.cmake) and its structure: each tool links
# libvram (here its import library, libvram.dll.a, so the tools use the
# DLL an engine uses, not a second copy of the client) for the vram.h API,
# and the static vram_proto for what the DLL does not export (the
# catalogue's decoder, the JSON writer, the size units). vram_proto brings
# vram_platform (the clock, ^C, spawning the replay's workers) with it, as on
# Linux.
#
# tool_row's and the tools' own format(printf) attributes are checked
# against msvcrt's printf here (no %zu, %lld), while the calls go to the C99
# printf (__USE_MINGW_ANSI_STDIO): -Wno-format, as for vramd.exe and
# proto/msg.c; the Linux build checks the same format strings.
add_executable(vramctl ${VRAMCTL_SOURCES})
target_link_libraries(vramctl PRIVATE vram vram_proto vram_platform vram_cjson uv_a)
add_dependencies(vramctl vram_generated)

add_executable(vram-replay ${VRAM_REPLAY_SOURCES})
target_link_libraries(vram-replay PRIVATE vram vram_proto vram_platform vram_cjson)
add_dependencies(vram-replay vram_generated)

foreach(t vramctl vram-replay)
  target_compile_options(${t} PRIVATE -Wno-format)
  target_link_options(${t} PRIVATE -static-libgcc)
endforeach()

# The tools against the real vramd.exe, each run a process of its own under
# wine (status, clients, stages, loans, metrics, top, watch, metrics
# --listen, vram-replay in both modes, the error exits). cJSON reads their
# JSON; ws2_32 is the test's own HTTP client for metrics --listen.
vram_win_test(test_win_vramctl SOURCES tests/win/test_win_vramctl.c
              LIBS vram_cjson ws2_32 TIMEOUT 240)
add_dependencies(test_win_vramctl vramd vramctl vram-replay)
