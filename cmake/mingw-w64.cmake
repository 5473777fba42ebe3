# SPDX-License-Identifier: Apache-2.0
# Cross-compiling vramd for 64-bit Windows with Debian's mingw-w64
# (gcc-mingw-w64-x86-64, mingw-w64-tools; scripts/windows-deps.sh installs
# them). Programs built here run under wine: ctest and try_run go through
# scripts/wine-run.sh, which runs /usr/lib/wine/wine64 with WINEDEBUG=-all
# and a WINEPREFIX in the build directory unless those are set.
#
#   cmake -S . -B build-win -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)

set(VRAM_MINGW_TRIPLE x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${VRAM_MINGW_TRIPLE}-gcc)
set(CMAKE_RC_COMPILER ${VRAM_MINGW_TRIPLE}-windres)

# Headers and libraries from the mingw-w64 sysroot only; programs (the
# build's own tools) from the build machine.
set(CMAKE_FIND_ROOT_PATH /usr/${VRAM_MINGW_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# The host pkg-config would find the Linux libuv.pc.
set(PKG_CONFIG_EXECUTABLE ${VRAM_MINGW_TRIPLE}-pkg-config CACHE FILEPATH
    "pkg-config for the mingw-w64 sysroot")

# Windows gives the main thread 1 MiB of stack by default, which the
# ledger's unit tests overflow; Linux gives 8 MiB.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,--stack,8388608")

get_filename_component(VRAM_WINE_RUN "${CMAKE_CURRENT_LIST_DIR}/../scripts/wine-run.sh"
                       ABSOLUTE)
set(CMAKE_CROSSCOMPILING_EMULATOR /bin/sh ${VRAM_WINE_RUN} --build-dir ${CMAKE_BINARY_DIR})
