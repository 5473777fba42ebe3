# SPDX-License-Identifier: Apache-2.0
# The Windows build, cross-compiled with mingw-w64 (cmake/mingw-w64.cmake;
# scripts/windows-test.sh configures, builds and tests it). Included from
# the top-level CMakeLists.txt, which returns right after: nothing of the
# Linux build below that point is configured here. The source lists are
# the Linux build's, from cmake/sources.cmake (included before the branch),
# which chooses platform/win32/'s files and windows-service/'s installer.
#
# What it builds:
#   - vram_ledger (daemon/ledger/, pure C) and its three unit tests;
#   - libuv (static uv_a) and cJSON from Debian's source packages, which
#     scripts/windows-deps.sh fetches into VRAM_WIN_DEPS_DIR, with a smoke
#     test (tests/win/test_win_deps.c) that links both;
#   - vram_platform from platform/win32/: handle.h, clock.h, conn.h (named
#     pipes), and for the daemon's side pipe_listener.h (vramd's own pipe,
#     with its security descriptor), identity.h (the pipe client's token,
#     pid and start time; account names, SIDs, access lists; the client's
#     check of the server's pid), stream.h (connected instances as libuv
#     uv_pipe_t streams, an acceptor thread feeding a loop), push.h (handles
#     pushed into a client's process), mem.h (page-file-backed sections,
#     fixed-address views over placeholders) and part of proc.h (pins,
#     start times, children);
#   - platform/win32/gpu_share_win32.c with cuda_share.c (the CUDA chunks'
#     security descriptor), in vram_platform with or without cuda.h;
#   - the daemon's entry (platform/win32/entry_win32.c: the SCM's run, the
#     console, the entry's options; service_dirs.c: %ProgramData%\vramd,
#     the run directory and the log file) in vram_platform, and vram_winsvc
#     from windows-service/, the service program: install, uninstall,
#     query;
#   - vram_proto (proto/ and the catalogue's generated C, made by a
#     vram_msggen built for the build machine) and its unit tests
#     test_frame, test_json, test_codec and test_catalogue;
#   - libvram.dll with its import library libvram.dll.a (client/lib/, the
#     host mapper, and the CUDA mapper where cuda.h is found; exports
#     exactly vram.h's functions, from a .def written from vram.h), and
#     test_win_libvram, linked against the import library only, against a
#     stand-in daemon in the test;
#   - the platform's own tests (tests/win/): test_win_conn, test_win_listener,
#     test_win_identity, test_win_stream, test_win_push and test_win_mem
#     (with win_child.exe, a helper process they start), and
#     test_win_service (with win_test_service.exe, a small service built on
#     the platform entry and installed by windows-service/, under wine's
#     SCM).
#   - vramd.exe: the daemon with the host backend (and the cuda backend
#     where cuda.h is found, below), its io layer (daemon/io/, the same as
#     Linux's) over platform/win32/endpoint_win32.c (vramd's pipe, its
#     connections as libuv streams, handles pushed; peer_map.c: SIDs
#     numbered for the core's access lists) and the rest of platform/win32/
#     it needs (watch: process handles; lock; mapfile: the state file;
#     service; peer); test_win_vramd, which runs it against win_vramd_client.exe
#     (libvram.dll.a only); test_win_access (the access lists of names and
#     SIDs, with the daemon's own sources); test_win_backend ("backend":
#     "cuda" refused at start and "auto" falling back to host where
#     nvcuda.dll cannot be loaded, each with its reason; host chunks'
#     handles pushed into a client with map access only, as backend.h's
#     kinds say);
#   - where cuda.h is found (CUDA_PATH, -DCUDA_INCLUDE, /usr/local/cuda,
#     as on Linux; the configure step says which, or that there is none,
#     and then all of this is left out and the rest is built host only):
#     vram_cuda (common/cuda_driver.c, common/nvml.c: nvcuda.dll and
#     nvml.dll loaded at run time, never imported), daemon/backends/cuda.c in vramd.exe and client/lib/map_cuda.c with
#     common/cuda_driver.c in libvram.dll; test_win_cuda (the descriptor,
#     the loaders without the DLLs, the WDDM bound; no GPU) and
#     test_win_cuda_objects (scripts/windows-cuda-check.sh: nm and objdump
#     on the build's objects and libvram.dll, without wine);
#   - in cmake/windows_service_daemon.cmake: vramd.exe's service mode
#     (--service, --console, --install-service, --uninstall-service) and
#     test_win_service_daemon under wine's SCM; in cmake/windows_tools.cmake:
#     the tools and their test.
# ctest runs the tests under wine (CMAKE_CROSSCOMPILING_EMULATOR); what wine
# does not enforce is checked on real Windows only and skipped under wine
# with the reason (docs/windows.md lists both). Nothing runs the CUDA path
# itself: that needs a Windows GPU machine.
# Not yet: listener.h's POSIX-shaped calls and proc.h's mapping counts,
# the integration suites, installing; test_transport and
# test_transport_greedy (they test SCM_RIGHTS, which Windows does not have:
# handles travel inline there).

if(NOT CMAKE_C_COMPILER_ID STREQUAL "GNU")
  message(FATAL_ERROR "The Windows build is for mingw-w64's gcc "
    "(-DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake), not ${CMAKE_C_COMPILER_ID}")
endif()

# The dependencies, from their Debian source packages (libuv1-<version>/
# and cjson-<version>/, as apt-get source unpacks them).
set(VRAM_WIN_DEPS_DIR ${PROJECT_SOURCE_DIR}/build-win-deps CACHE PATH
    "Where scripts/windows-deps.sh put the libuv1 and cjson source packages")
function(vram_win_dep var glob marker)
  file(GLOB found LIST_DIRECTORIES true ${VRAM_WIN_DEPS_DIR}/${glob})
  list(SORT found COMPARE NATURAL ORDER DESCENDING)
  foreach(d ${found})
    if(EXISTS ${d}/${marker})
      message(STATUS "Windows dependency: ${d}")
      set(${var} ${d} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "No ${glob}/${marker} in VRAM_WIN_DEPS_DIR=${VRAM_WIN_DEPS_DIR}: "
    "run scripts/windows-deps.sh ${VRAM_WIN_DEPS_DIR}")
endfunction()
vram_win_dep(VRAM_WIN_LIBUV_DIR "libuv1-*" CMakeLists.txt)
vram_win_dep(VRAM_WIN_CJSON_DIR "cjson-*" cJSON.c)

# The CUDA toolkit's headers are optional, as on Linux: with cuda.h the
# cuda backend, libvram's CUDA mapper and their platform piece compile; the
# driver (nvcuda.dll) and NVML (nvml.dll) are loaded at run time from
# System32, so nothing links against them and a machine without them runs
# the host backend. cuda.h is the same file for every target, so it is
# looked for outside the mingw-w64 sysroot (NO_CMAKE_FIND_ROOT_PATH): by
# -DVRAM_CUDA_INCLUDE_DIR (the cache variable, as on Linux), then
# -DCUDA_INCLUDE or $CUDA_INCLUDE (a folder that holds cuda.h), $CUDA_PATH
# or $CUDA_HOME (a toolkit), /usr/local/cuda.
find_path(VRAM_CUDA_INCLUDE_DIR cuda.h
  HINTS ${CUDA_INCLUDE} ENV CUDA_INCLUDE ENV CUDA_PATH ENV CUDA_HOME /usr/local/cuda
  PATH_SUFFIXES include NO_CMAKE_FIND_ROOT_PATH)
if(VRAM_CUDA_INCLUDE_DIR)
  message(STATUS "CUDA headers: ${VRAM_CUDA_INCLUDE_DIR} (cuda backend, libvram's "
    "CUDA mapper and test_win_cuda built; nvcuda.dll is loaded at run time)")
else()
  message(STATUS "CUDA headers not found (no cuda.h under -DCUDA_INCLUDE, "
    "$CUDA_PATH or /usr/local/cuda): building without the cuda backend, host "
    "only (vramd.exe refuses \"cuda\", libvram.dll refuses a cuda daemon)")
endif()

# libuv: only the static uv_a is built (EXCLUDE_FROM_ALL: what links it);
# its tests stay off as it is not the top-level project. Added before the
# project's warning flags, which its own code does not pass.
add_subdirectory(${VRAM_WIN_LIBUV_DIR} ${CMAKE_CURRENT_BINARY_DIR}/libuv
                 EXCLUDE_FROM_ALL SYSTEM)

# cJSON: one file, a static library; its header reachable as
# <cjson/cJSON.h> as on Linux. CJSON_HIDE_SYMBOLS: no dllexport/dllimport.
set(VRAM_WIN_CJSON_INCLUDE ${CMAKE_CURRENT_BINARY_DIR}/cjson-include)
configure_file(${VRAM_WIN_CJSON_DIR}/cJSON.h ${VRAM_WIN_CJSON_INCLUDE}/cjson/cJSON.h
               COPYONLY)
add_library(vram_cjson STATIC EXCLUDE_FROM_ALL ${VRAM_WIN_CJSON_DIR}/cJSON.c)
target_include_directories(vram_cjson SYSTEM PUBLIC ${VRAM_WIN_CJSON_INCLUDE})
target_compile_definitions(vram_cjson PUBLIC CJSON_HIDE_SYMBOLS)
target_link_libraries(vram_cjson PRIVATE m)

# The project's own code: the Linux build's warnings (errors with
# VRAM_WERROR). C99 printf (%zu, %llu, the same number formatting as glibc)
# rather than msvcrt's.
# -fdata-sections: binutils 2.40 for PE x86-64 relocates a reference to a
# weak variable defined in the same file (tests/check.h's check_count and
# check_failures) to the variable's address plus its offset in its section,
# so the counters landed on other variables (a failure could go uncounted);
# a section of its own puts each variable at offset 0.
set(VRAM_WARNINGS -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
    -Wno-unused-parameter)
if(VRAM_WERROR)
  list(APPEND VRAM_WARNINGS -Werror)
endif()
add_compile_options(${VRAM_WARNINGS} -fdata-sections)
add_compile_definitions(VRAM_VERSION="${PROJECT_VERSION}" __USE_MINGW_ANSI_STDIO=1)

# mingw's errno.h lacks EDQUOT and ESTALE, which the ledger and the
# protocol use: platform/win32/include/errno.h adds them to the C library's
# (with #include_next), ahead of the system headers for all the project's
# code below, so <errno.h> has them everywhere, as on Linux; the ledger may
# include nothing outside its folder (tests/layering), and needs nothing
# more. (libuv, added above, does not see it.)
include_directories(BEFORE SYSTEM ${PROJECT_SOURCE_DIR}/platform/win32/include)

# The ledger.
add_library(vram_ledger STATIC ${VRAM_LEDGER_SOURCES})

# The message catalogue, proto/messages.json, becomes C at build time, as in
# the Linux build: vram_msggen writes the structs and descriptors into gen/.
# The generator runs here, on the build machine, so it is built with the
# build machine's compiler by one custom command, from the same cJSON source
# as the Windows build (no host libcjson-dev, no second CMake project as an
# ExternalProject would need, no try_run); it is rebuilt when msggen.c
# changes. -DVRAM_MSGGEN=PATH names a generator built already (the Linux
# build's option of the same name), and VRAM_HOST_CC another host compiler.
if(VRAM_MSGGEN)
  set(VRAM_MSGGEN_CMD ${VRAM_MSGGEN})
else()
  # CMAKE_FIND_ROOT_PATH_MODE_PROGRAM is NEVER: this finds the host's.
  find_program(VRAM_HOST_CC NAMES cc gcc clang
               DOC "The build machine's C compiler, for vram_msggen")
  if(NOT VRAM_HOST_CC)
    message(FATAL_ERROR "No C compiler for the build machine (cc, gcc or clang) "
      "to build vram_msggen with: apt-get install gcc, or pass -DVRAM_MSGGEN=PATH")
  endif()
  set(VRAM_MSGGEN_DIR ${CMAKE_CURRENT_BINARY_DIR}/host)
  set(VRAM_MSGGEN_CMD ${VRAM_MSGGEN_DIR}/vram_msggen)
  list(TRANSFORM VRAM_MSGGEN_SOURCES PREPEND ${PROJECT_SOURCE_DIR}/
       OUTPUT_VARIABLE VRAM_MSGGEN_PATHS)
  add_custom_command(
    OUTPUT ${VRAM_MSGGEN_CMD}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${VRAM_MSGGEN_DIR}
    COMMAND ${VRAM_HOST_CC} -std=c11 -D_GNU_SOURCE -O1
            -I${VRAM_WIN_CJSON_INCLUDE} -o ${VRAM_MSGGEN_CMD}
            ${VRAM_MSGGEN_PATHS} ${VRAM_WIN_CJSON_DIR}/cJSON.c -lm
    DEPENDS ${VRAM_MSGGEN_PATHS} ${VRAM_WIN_CJSON_DIR}/cJSON.c
            ${VRAM_WIN_CJSON_INCLUDE}/cjson/cJSON.h
    COMMENT "Building vram_msggen for the build machine with ${VRAM_HOST_CC}"
    VERBATIM)
endif()
add_custom_command(
  OUTPUT ${VRAM_GEN_OUTPUTS}
  COMMAND ${VRAM_MSGGEN_CMD} ${PROJECT_SOURCE_DIR}/proto/messages.json ${VRAM_GEN_DIR}
  DEPENDS ${PROJECT_SOURCE_DIR}/proto/messages.json ${VRAM_MSGGEN_CMD}
  COMMENT "Generating the protocol's C from proto/messages.json"
  VERBATIM)
add_custom_target(vram_generated DEPENDS ${VRAM_GEN_OUTPUTS})

# The platform layer for Windows (platform/win32/, cmake/sources.cmake's
# per-OS block), as far as it goes: handles, clocks, connections over
# named pipes, threads and run-time loading (for libvram), the daemon's
# endpoint and watches, the keeper. ntdll: whether a pipe was opened for
# overlapped I/O (conn_state.c).
add_library(vram_platform STATIC ${VRAM_PLATFORM_SOURCES}
  ${VRAM_PLATFORM_LOOP_SOURCES} ${VRAM_KEEPER_SOURCES})
# The entry's run directory: SHGetKnownFolderPath (shell32), CoTaskMemFree
# (ole32), FOLDERID_ProgramData (uuid), its security (advapi32).
target_link_libraries(vram_platform PUBLIC ntdll uv_a shell32 ole32 uuid advapi32)
# The keeper's holder (platform/keeper.h, platform/win32/holder_win32.c): beside
# vramd.exe, where the keeper looks for it.
add_executable(vramd-holder ${VRAM_HOLDER_SOURCES})
target_link_libraries(vramd-holder PRIVATE vram_platform)
target_link_options(vramd-holder PRIVATE -static-libgcc)

# The protocol.
add_library(vram_proto STATIC ${VRAM_PROTO_SOURCES})
target_link_libraries(vram_proto PUBLIC vram_platform vram_cjson m)
# On mingw, gcc checks format(printf, ...) attributes against msvcrt's
# printf, which has no %zu; the calls go to the C99 printf
# (__USE_MINGW_ANSI_STDIO), which has. The Linux build checks the same
# format strings; here msg.c's (its bad()) would fail for nothing.
set_source_files_properties(proto/msg.c PROPERTIES COMPILE_OPTIONS -Wno-format)

# The CUDA driver's and NVML's loaders (the Linux build's vram_cuda), for
# the cuda backend and test_win_cuda.
include(${CMAKE_CURRENT_LIST_DIR}/vram_cuda.cmake)

# libvram as libvram.dll with its import library libvram.dll.a, which
# engines link (with mingw, or MSVC: link.exe takes the import library as it
# is), and vram.h unchanged. The Linux build's list of sources: with cuda.h,
# client/lib/map_cuda.c is the CUDA mapper (it imports the NT handles vramd
# pushes; platform/win32/cuda_import_win32.c, VRAM_CUDA_IMPORT_SOURCES, closes
# them after the import) and common/cuda_driver.c is compiled in,
# nvcuda.dll loaded by it at run time (never imported: an engine without
# NVIDIA's driver loads the DLL all the same); without cuda.h, map_cuda.c
# compiles to the refusal of a cuda daemon, as on Linux.
#
# What the DLL exports is vram.h's VRAM_API functions and nothing else: gcc
# ignores visibility on PE targets, and without a single dllexport ld would
# export every global of the library and of the static libraries linked in
# (vp_*, vram_codec_*, cJSON). So cmake/vram_def.cmake writes libvram.def
# from vram.h at build time, which keeps the two from drifting apart.
set(VRAM_WIN_CLIENT_SOURCES ${VRAM_CLIENT_SOURCES})
if(VRAM_CUDA_INCLUDE_DIR)
  list(APPEND VRAM_WIN_CLIENT_SOURCES ${VRAM_CUDA_DRIVER_SOURCES}
    ${VRAM_CUDA_IMPORT_SOURCES})
endif()
set(VRAM_DEF ${CMAKE_CURRENT_BINARY_DIR}/libvram.def)
add_custom_command(
  OUTPUT ${VRAM_DEF}
  COMMAND ${CMAKE_COMMAND} -DHEADER=${PROJECT_SOURCE_DIR}/client/include/vram.h
          -DOUT=${VRAM_DEF} -P ${PROJECT_SOURCE_DIR}/cmake/vram_def.cmake
  DEPENDS ${PROJECT_SOURCE_DIR}/client/include/vram.h
          ${PROJECT_SOURCE_DIR}/cmake/vram_def.cmake
  COMMENT "Writing libvram.def from vram.h's VRAM_API functions"
  VERBATIM)
add_library(vram SHARED ${VRAM_WIN_CLIENT_SOURCES} ${VRAM_DEF})
target_include_directories(vram PUBLIC ${PROJECT_SOURCE_DIR}/client/include)
target_link_libraries(vram PRIVATE vram_proto vram_platform vram_cjson)
if(VRAM_CUDA_INCLUDE_DIR)
  # libvram exports nothing new: libvram.def, from vram.h, is the same.
  target_include_directories(vram SYSTEM PRIVATE ${VRAM_CUDA_INCLUDE_DIR})
  target_compile_definitions(vram PRIVATE VRAM_HAVE_CUDA_H)
endif()
add_dependencies(vram vram_generated)
# libvram.dll, libvram.dll.a; nothing of libgcc's for an engine to ship
# beside it.
set_target_properties(vram PROPERTIES PREFIX lib IMPORT_PREFIX lib
  IMPORT_SUFFIX .dll.a)
target_link_options(vram PRIVATE -static-libgcc)

# The Windows service's own program (windows-service/), the counterpart of
# systemd/: installing, removing and asking the SCM about the service. Its
# run under the SCM is the platform entry's (platform/win32/entry_win32.c);
# vramd.exe reaches this through its installer (installer_winsvc.c, one of
# vramd's sources, as systemd/installer_systemd.c is on Linux).
add_library(vram_winsvc STATIC ${VRAM_WINSVC_SOURCES})
target_link_libraries(vram_winsvc PUBLIC vram_platform)

# vramd.exe: the Linux build's daemon sources (io/ over platform/endpoint.h,
# which platform/win32/endpoint_win32.c implements with the pipe acceptor's
# connections as libuv streams, SIDs as the core's peers), and both
# backends: with cuda.h, cuda.c is the cuda backend
# (CU_MEM_HANDLE_TYPE_WIN32 chunks, the WDDM bound; "auto" tries it first
# and falls back to host, saying why, where the driver cannot be loaded);
# without it, cuda.c compiles to the refusal of "cuda" with the reason.
# Runs in the foreground; --run-dir names where the state file and the
# lock go. (windows-service/installer_winsvc.c is its installer, chosen
# in cmake/sources.cmake.)
add_executable(vramd ${VRAMD_SOURCES})
# log.h's and request.h's format(printf) attributes are checked against
# msvcrt's printf here (no %zu), while the calls go to the C99 printf
# (__USE_MINGW_ANSI_STDIO), as for proto/msg.c above: the Linux build
# checks the same format strings.
target_compile_options(vramd PRIVATE -Wno-format)
target_link_libraries(vramd PRIVATE vram_ledger vram_proto vram_platform
  vram_winsvc uv_a vram_cjson)
if(VRAM_CUDA_INCLUDE_DIR)
  target_link_libraries(vramd PRIVATE vram_cuda)
endif()
add_dependencies(vramd vram_generated)
target_link_options(vramd PRIVATE -Wl,--stack,8388608 -static-libgcc)

if(VRAM_BUILD_TESTS)
  enable_testing()
  function(vram_win_test name)
    cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS" ${ARGN})
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} PRIVATE ${T_LIBS})
    add_test(NAME ${name} COMMAND ${name})
    if(NOT T_TIMEOUT)
      set(T_TIMEOUT 120)
    endif()
    # wine passes the environment on; Unix paths work in it (drive Z:).
    set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT}
      ENVIRONMENT "VRAM_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  endfunction()
  foreach(t ledger ledger_random ledger_capacity)
    vram_win_test(test_${t} SOURCES tests/unit/test_${t}.c LIBS vram_ledger)
  endforeach()
  # The protocol's unit tests (the header of this file says why the
  # transport ones are not here).
  foreach(t frame json codec catalogue)
    vram_win_test(test_${t} SOURCES tests/unit/test_${t}.c LIBS vram_proto)
  endforeach()
  vram_win_test(test_win_conn SOURCES tests/win/test_win_conn.c LIBS vram_proto)
  # platform/win32/ beyond connections: the listener, peer identity,
  # libuv streams, handles pushed into a child (win_child.exe, a helper
  # the tests start), sections and fixed-address views.
  add_executable(win_child tests/win/win_child.c)
  target_link_libraries(win_child PRIVATE vram_platform)
  foreach(t listener identity stream push mem thread mapfile)
    vram_win_test(test_win_${t} SOURCES tests/win/test_win_${t}.c LIBS vram_platform)
    add_dependencies(test_win_${t} win_child)
  endforeach()
  # windows-service/ under wine's SCM, with a small service built on it
  # (win_test_service.exe). scripts/windows-test.sh keeps one persistent
  # wineserver for the run: without it, wineserver kills the service 3 s
  # after the last ordinary process ends.
  add_executable(win_test_service tests/win/win_test_service.c)
  target_link_libraries(win_test_service PRIVATE vram_winsvc vram_platform)
  vram_win_test(test_win_service SOURCES tests/win/test_win_service.c
                LIBS vram_winsvc vram_platform TIMEOUT 240)
  add_dependencies(test_win_service win_test_service)
  # The tests that install and start services share the service manager,
  # one at a time: under wine a process that asks to be a service without
  # having been started as one connects to the control pipe of whichever
  # service is starting meanwhile (wine finds it by the last one started),
  # and becomes that service (test_win_service's "not started by the SCM"
  # check saw it under ctest -j).
  set_tests_properties(test_win_service PROPERTIES RESOURCE_LOCK service_manager)
  vram_win_test(test_win_deps SOURCES tests/win/test_win_deps.c LIBS uv_a vram_cjson)
  # The keeper under wine: sections kept by vramd-holder.exe across the
  # kill of the process that put them.
  vram_win_test(test_win_keeper SOURCES tests/win/test_win_keeper.c LIBS vram_platform)
  add_dependencies(test_win_keeper vramd-holder)
  # libvram.dll as an engine links it: vram.h and the import library
  # libvram.dll.a, nothing else of the project's (a stand-in daemon in the
  # test answers the library's frames and grants host chunks inline).
  vram_win_test(test_win_libvram SOURCES tests/win/test_win_libvram.c LIBS vram)
  # vramd's access lists of account names, SIDs and groups: the
  # configuration, the numbering of SIDs and the judging of tokens, with
  # the daemon's own sources (config, core/access) and platform/win32/
  # peer_map.c.
  vram_win_test(test_win_access SOURCES tests/win/test_win_access.c
    ${VRAMD_CONFIG_SOURCES} ${VRAMD_LOG_SOURCES} daemon/core/clients/access.c
    ${VRAMD_BACKEND_SOURCES}
    LIBS vram_ledger vram_proto vram_platform vram_cjson)
  if(VRAM_CUDA_INCLUDE_DIR)
    target_link_libraries(test_win_access PRIVATE vram_cuda)
  endif()
  target_compile_options(test_win_access PRIVATE -Wno-format)
  # The first integration test: the real vramd.exe serving
  # win_vramd_client.exe (vram.h and libvram.dll.a only) over its pipe.
  add_executable(win_vramd_client tests/win/win_vramd_client.c)
  target_link_libraries(win_vramd_client PRIVATE vram)
  vram_win_test(test_win_vramd SOURCES tests/win/test_win_vramd.c TIMEOUT 240)
  add_dependencies(test_win_vramd vramd win_vramd_client)
  # vramd.exe's backends: "cuda" refused at start and "auto" falling back
  # to host where nvcuda.dll cannot be loaded (wine), each with its reason;
  # the handles pushed into a client (this test, through libvram.dll) with
  # the access their backend's kind asks for (backend.h).
  vram_win_test(test_win_backend SOURCES tests/win/test_win_backend.c
                LIBS vram ntdll TIMEOUT 240)
  if(VRAM_CUDA_INCLUDE_DIR)
    target_compile_definitions(test_win_backend PRIVATE VRAM_HAVE_CUDA_H)
  endif()
  add_dependencies(test_win_backend vramd)
  if(VRAM_CUDA_INCLUDE_DIR)
    # The CUDA pieces that run without a GPU: the chunks' security
    # descriptor, the loaders failing cleanly without nvcuda.dll and
    # nvml.dll, the WDDM bound's arithmetic.
    vram_win_test(test_win_cuda SOURCES tests/win/test_win_cuda.c
                  LIBS vram_cuda vram_platform)
    # That the objects hold the Windows CUDA paths, not the "built without
    # cuda.h" stubs, and that libvram.dll imports no NVIDIA DLL (nvcuda.dll
    # is loaded at run time): nm and objdump on the build's own files, no
    # wine.
    add_test(NAME test_win_cuda_objects
      COMMAND sh ${PROJECT_SOURCE_DIR}/scripts/windows-cuda-check.sh
              ${CMAKE_NM} ${CMAKE_OBJDUMP} $<TARGET_FILE:vram>
              "$<FILTER:$<TARGET_OBJECTS:vramd>,INCLUDE,/daemon/backends/cuda\\.c\\.obj$>"
              "$<FILTER:$<TARGET_OBJECTS:vram>,INCLUDE,/client/lib/map_cuda\\.c\\.obj$>"
              "$<FILTER:$<TARGET_OBJECTS:vram_cuda>,INCLUDE,/common/cuda_driver\\.c\\.obj$>")
  endif()
  # test_win_thread loads libvram.dll by its path (and refuses it by a bare
  # name, which looks in System32 only).
  add_dependencies(test_win_thread vram)
  # The tools (vramctl.exe, vram-replay.exe) and vramd.exe as a service,
  # each with its tests, in files of their own.
  include(${CMAKE_CURRENT_LIST_DIR}/windows_tools.cmake OPTIONAL)
  include(${CMAKE_CURRENT_LIST_DIR}/windows_service_daemon.cmake OPTIONAL)
  # Tests that only real Windows can run (another user's processes): built
  # here, skipped under wine with the reason.
  include(${CMAKE_CURRENT_LIST_DIR}/windows_crossuser.cmake OPTIONAL)
  # Hostile peers against the real vramd.exe.
  include(${CMAKE_CURRENT_LIST_DIR}/windows_attack.cmake OPTIONAL)
endif()

# The layout an operator copies to Windows (cmake --install), and its test.
include(${CMAKE_CURRENT_LIST_DIR}/windows_install.cmake)
