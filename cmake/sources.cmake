# SPDX-License-Identifier: Apache-2.0
# Every target's sources, for both builds: CMakeLists.txt includes this
# before it branches to cmake/windows.cmake, and each build makes its
# targets from these lists (tests/layering/check_cmake_lists.sh fails when
# a file is listed twice). What differs by system is chosen in one place,
# the per-OS block below: platform/posix/ with platform/linux/ on Linux,
# platform/win32/ on Windows, and the service program's installer. A new
# POSIX system is a branch beside Linux's there, naming its platform/<os>/
# files (docs/architecture.md, "A new OS").
# Expects VRAM_GEN_DIR (the generated C, gen/).

# The platform layer: the only code that talks to the operating system.
# VRAM_PLATFORM_SOURCES is what libvram needs too; VRAM_KEEPER_SOURCES the
# keeper of handles across vramd's restarts (platform/keeper.h) and
# VRAM_HOLDER_SOURCES its holder program; VRAM_PLATFORM_LOOP_SOURCES the
# daemon's watches and its endpoint (platform/endpoint.h) on the libuv
# loop; VRAM_CUDA_IMPORT_SOURCES libvram's import of CUDA chunks' handles.
set(VRAM_KEEPER_SOURCES platform/keeper_names.c)
if(WIN32)
  set(VRAM_PLATFORM_SOURCES
    platform/win32/winerr.c platform/win32/wstr.c platform/win32/handle_win32.c
    platform/win32/clock_win32.c platform/win32/conn_state.c platform/win32/conn_win32.c
    platform/win32/identity.c platform/win32/proc_win32.c platform/win32/pipe_listener.c
    platform/win32/stream.c platform/win32/push.c platform/win32/mem_win32.c
    platform/win32/thread_win32.c platform/win32/dl_win32.c
    platform/win32/lock_win32.c platform/win32/mapfile_win32.c platform/win32/service_win32.c
    platform/win32/peer_win32.c platform/win32/peer_map.c
    platform/win32/gpu_share_win32.c platform/win32/cuda_share.c
    platform/win32/entry_win32.c platform/win32/service_dirs.c
    platform/win32/scm_errno.c platform/win32/scm_install.c)
  list(APPEND VRAM_KEEPER_SOURCES platform/win32/keeper_win32.c
    platform/win32/keeper_lines.c)
  set(VRAM_HOLDER_SOURCES platform/win32/holder_win32.c)
  set(VRAM_PLATFORM_LOOP_SOURCES platform/win32/watch_win32.c platform/win32/endpoint_win32.c)
  set(VRAM_CUDA_IMPORT_SOURCES platform/win32/cuda_import_win32.c)
  # The service program's installer (daemon/installer.h), beside vramd's
  # own sources as systemd/'s is on Linux.
  set(VRAMD_INSTALLER_SOURCES windows-service/installer_winsvc.c)
  set(VRAM_WINSVC_SOURCES windows-service/install.c)
else()
  # platform/posix/ is what every POSIX system shares; platform/<os>/ what
  # only that one has (on Linux: memfd seals, pidfds, /proc, peer groups,
  # systemd's fd store).
  set(VRAM_PLATFORM_SOURCES
    platform/posix/handle_posix.c platform/posix/conn_posix.c
    platform/posix/listener.c platform/posix/peer_posix.c
    platform/posix/proc_posix.c platform/posix/mem_posix.c
    platform/posix/mapfile_posix.c platform/posix/lock_posix.c
    platform/posix/clock_posix.c platform/posix/service_posix.c
    platform/posix/dl_posix.c platform/posix/thread_posix.c
    platform/posix/passed.c platform/posix/gpu_share_posix.c
    platform/posix/entry_posix.c)
  # keeper_link.c finds vramd-holder from vramd's own path (CMakeLists.txt
  # gives it the path from bin/ to libexec/).
  set(VRAM_KEEPER_LINK_SOURCE platform/posix/keeper_link.c)
  list(APPEND VRAM_KEEPER_SOURCES platform/posix/keeper_posix.c
    platform/posix/keeper_wire.c ${VRAM_KEEPER_LINK_SOURCE})
  set(VRAM_HOLDER_SOURCES platform/posix/holder_posix.c)
  set(VRAM_PLATFORM_LOOP_SOURCES platform/posix/watch_posix.c platform/posix/endpoint_posix.c)
  set(VRAM_CUDA_IMPORT_SOURCES platform/posix/cuda_import_posix.c)
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    list(APPEND VRAM_PLATFORM_SOURCES
      platform/linux/mem_linux.c platform/linux/proc_linux.c
      platform/linux/mapfile_linux.c platform/linux/peer_linux.c
      platform/linux/notify_linux.c)
    list(APPEND VRAM_KEEPER_SOURCES platform/linux/keeper_fdstore_linux.c
      platform/linux/sockcred_linux.c)
    set(VRAMD_INSTALLER_SOURCES systemd/installer_systemd.c)
  else()
    message(FATAL_ERROR "vramd has no platform layer for ${CMAKE_SYSTEM_NAME}: "
      "platform/posix/ needs a platform/<os>/ beside it (docs/architecture.md)")
  endif()
endif()

# The catalogue's generator (a program for the build machine).
set(VRAM_MSGGEN_SOURCES proto/gen/msggen.c)

# The protocol: frames, the codec (no system calls), the wire (the codec over
# a platform connection), the message catalogue.
set(VRAM_PROTO_SOURCES proto/frame.c proto/codec.c proto/wire.c proto/json.c
    proto/errnames.c proto/arena.c proto/msg.c proto/message.c proto/units.c proto/text.c
    proto/hexkey.c
    ${VRAM_GEN_DIR}/vram_msg.c)

# The ledger: pure, a library of its own so unit tests link it alone.
set(VRAM_LEDGER_SOURCES daemon/ledger/pool.c daemon/ledger/fxlist.c daemon/ledger/observer.c daemon/ledger/va.c daemon/ledger/region.c daemon/ledger/chunk.c daemon/ledger/promise.c daemon/ledger/admission.c daemon/ledger/stage.c daemon/ledger/kv_budgets.c daemon/ledger/loans.c daemon/ledger/slots.c daemon/ledger/client.c daemon/ledger/capacity.c daemon/ledger/restore.c daemon/ledger/resume_claims.c daemon/ledger/check.c daemon/ledger/views.c daemon/ledger/weight_cache.c daemon/ledger/sleep_wake.c)

# The CUDA driver's loader (libvram compiles it in) and NVML's: vram_cuda
# (cmake/vram_cuda.cmake).
set(VRAM_CUDA_DRIVER_SOURCES common/cuda_driver.c)
set(VRAM_CUDA_SOURCES ${VRAM_CUDA_DRIVER_SOURCES} common/nvml.c)

# vramd: main -> io -> core -> {ledger, backends, state, proto} -> platform.
# The log and the configuration, the state file (its format and sums, then
# the state and its journal) and the backends are lists of their own, for
# the tests and fuzzers that compile them without the rest.
set(VRAMD_LOG_SOURCES daemon/log.c)
set(VRAMD_CONFIG_SOURCES daemon/config.c)
set(VRAMD_IO_SOURCES daemon/io/connections.c daemon/io/io_port.c daemon/io/session.c
  daemon/io/session_rules.c)
set(VRAMD_CORE_SOURCES
  daemon/core/daemon/startup.c daemon/core/daemon/refill.c
  daemon/core/requests/dispatch.c daemon/core/requests/request.c
  daemon/core/requests/reply.c daemon/core/requests/send.c
  daemon/core/requests/apply_effects.c daemon/core/requests/waits.c
  daemon/core/requests/recalls.c daemon/core/requests/status.c
  daemon/core/requests/lifecycle.c daemon/core/requests/resume_declaration.c
  daemon/core/requests/still_held.c daemon/core/requests/weight_opens.c
  daemon/core/requests/weight_records.c
  daemon/core/requests/handlers/handle_admin.c
  daemon/core/requests/handlers/handle_hello.c
  daemon/core/requests/handlers/handle_kv.c
  daemon/core/requests/handlers/handle_regions.c
  daemon/core/requests/handlers/handle_resume.c
  daemon/core/requests/handlers/handle_stages.c
  daemon/core/requests/handlers/handle_weights.c
  daemon/core/clients/clients.c daemon/core/clients/access.c
  daemon/core/clients/orphans.c daemon/core/clients/reapers.c
  ${VRAM_GEN_DIR}/vd_dispatch.c)
set(VRAMD_BACKEND_SOURCES daemon/backends/registry.c daemon/backends/host.c
  daemon/backends/cuda.c daemon/backends/standby.c)
set(VRAMD_STATE_SEAL_SOURCES daemon/state/format.c daemon/state/crc32c.c)
set(VRAMD_STATE_SOURCES ${VRAMD_STATE_SEAL_SOURCES} daemon/state/state.c
  daemon/state/journal.c)
set(VRAMD_SOURCES daemon/main.c ${VRAMD_CONFIG_SOURCES} ${VRAMD_LOG_SOURCES}
  ${VRAMD_INSTALLER_SOURCES} ${VRAMD_IO_SOURCES} ${VRAMD_CORE_SOURCES}
  ${VRAMD_BACKEND_SOURCES} ${VRAMD_STATE_SOURCES})

# libvram's own files, in its layers from the top (docs/architecture.md):
# the API, state, protocol, transport. Each build adds the protocol and the
# platform (compiled in on Linux, linked statically on Windows); with
# cuda.h, also the CUDA driver's loader and VRAM_CUDA_IMPORT_SOURCES.
set(VRAM_CLIENT_SOURCES client/lib/api.c client/lib/call.c client/lib/call_frame.c
    client/lib/connect.c client/lib/event_thread.c client/lib/sleep.c
    client/lib/weight_sets.c client/lib/weights_list.c
    client/lib/chunk_table.c client/lib/region_table.c client/lib/stage_table.c
    client/lib/mapping.c client/lib/background.c client/lib/events.c
    client/lib/mappers.c client/lib/map_host.c client/lib/map_cuda.c
    client/lib/protocol.c client/lib/transport.c client/lib/error.c
    ${VRAM_GEN_DIR}/vc_stubs.c)

# The tools: vramctl and vram-replay, which share the table printer.
# vramctl's exposition (the metrics' text and its buffer) and top's keys
# (the decoder and what each key does) are lists of their own for their
# unit tests.
set(VRAM_TOOLS_TABLE_SOURCES client/tools/table.c)
set(VRAMCTL_EXPOSITION_SOURCES client/tools/metrics_text.c client/tools/textbuf.c)
set(VRAMCTL_TOP_KEYS_SOURCES client/tools/top_keys.c client/tools/top_control.c)
set(VRAMCTL_SOURCES client/tools/vramctl.c ${VRAM_TOOLS_TABLE_SOURCES}
  client/tools/snapshot.c client/tools/fetcher.c
  ${VRAMCTL_EXPOSITION_SOURCES} client/tools/http_request.c
  client/tools/metrics_http.c client/tools/metrics_slots.c
  client/tools/top_frame.c client/tools/top.c client/tools/weights_view.c
  client/tools/cmdline.c client/tools/connect_why.c client/tools/exits.c
  ${VRAMCTL_TOP_KEYS_SOURCES})
set(VRAM_REPLAY_SOURCES client/tools/replay.c ${VRAM_TOOLS_TABLE_SOURCES})
