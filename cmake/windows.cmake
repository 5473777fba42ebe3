# The Windows build, cross-compiled with mingw-w64 (cmake/mingw-w64.cmake;
# scripts/windows-test.sh configures, builds and tests it). Included from
# the top-level CMakeLists.txt, which returns right after: nothing of the
# Linux build below that point is configured here.
#
# For now it builds only what needs no operating system:
#   - vram_ledger (daemon/ledger/, pure C) and its three unit tests;
#   - libuv (static uv_a) and cJSON from Debian's source packages, which
#     scripts/windows-deps.sh fetches into VRAM_WIN_DEPS_DIR, with a smoke
#     test (tests/win/test_win_deps.c) that links both.
# ctest runs the tests under wine (CMAKE_CROSSCOMPILING_EMULATOR).
# Not yet: platform/ for Windows, the protocol, the daemon, libvram, the
# tools, the integration tests, installing.

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

# The ledger. mingw's errno.h lacks EDQUOT and ESTALE, which the ledger
# returns; proto/errnames.h defines them (the values the wire maps to
# names) and is forced into the ledger and what uses it until the ledger
# has a header of its own for them.
add_library(vram_ledger STATIC ${VRAM_LEDGER_SOURCES})
target_include_directories(vram_ledger PUBLIC daemon/ledger daemon)
target_compile_options(vram_ledger PUBLIC
  "SHELL:-include \"${PROJECT_SOURCE_DIR}/proto/errnames.h\"")

if(VRAM_BUILD_TESTS)
  enable_testing()
  function(vram_win_test name)
    cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS" ${ARGN})
    add_executable(${name} ${T_SOURCES})
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
    target_link_libraries(${name} PRIVATE ${T_LIBS})
    add_test(NAME ${name} COMMAND ${name})
    if(NOT T_TIMEOUT)
      set(T_TIMEOUT 120)
    endif()
    set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT})
  endfunction()
  foreach(t ledger ledger_random ledger_capacity)
    vram_win_test(test_${t} SOURCES tests/unit/test_${t}.c LIBS vram_ledger)
  endforeach()
  vram_win_test(test_win_deps SOURCES tests/win/test_win_deps.c LIBS uv_a vram_cjson)
endif()
