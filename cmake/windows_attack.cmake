# SPDX-License-Identifier: Apache-2.0
# The Windows hostile-peer test: included from cmake/windows.cmake inside
# its VRAM_BUILD_TESTS block, with its vram_win_test().
#
# test_win_attack starts the real vramd.exe (host backend, a small
# capacity, its own pipe, run directory and configuration with short
# deadlines and a small queued-output cap, its log in a file) and attacks
# it with raw pipe clients of the test's own: malformed headers and
# payloads, requests out of order, frames that announce handles, half
# frames, silence, a peer that never reads, more connections than the
# limit, over-limit and foreign requests. After each attack vramd.exe must
# still run, serve win_vramd_client.exe (libvram.dll.a only), hold as many
# handles as before, and have logged the reason. Valid frames come from
# the project's encoder (vram_proto's frame.h); malformed ones are written
# byte by byte.
vram_win_test(test_win_attack SOURCES tests/win/test_win_attack.c
              LIBS vram_proto vram_cjson TIMEOUT 300)
add_dependencies(test_win_attack vramd win_vramd_client)
