#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs a Windows program under wine64: the emulator of the cross build
# (cmake/mingw-w64.cmake), through which ctest runs the .exe tests.
#
#   wine-run.sh [--build-dir DIR] PROGRAM.exe [ARGS...]
#
# WINEDEBUG defaults to -all (wine's own diagnostics off) and WINEPREFIX to
# DIR/wineprefix (DIR: the build directory, else the current one); either
# may be set in the environment instead. wine is /usr/lib/wine/wine64 in
# Debian 12 (not on PATH), or $VRAM_WINE.
set -eu
build=$PWD
if [ "${1:-}" = --build-dir ]; then
    build=${2:?wine-run.sh: --build-dir needs a directory}
    shift 2
fi
[ $# -gt 0 ] || {
    echo "usage: wine-run.sh [--build-dir DIR] PROGRAM.exe [ARGS...]" >&2
    exit 2
}
: "${WINEDEBUG:=-all}"
: "${WINEPREFIX:=$build/wineprefix}"
export WINEDEBUG WINEPREFIX
wine=${VRAM_WINE:-/usr/lib/wine/wine64}
[ -x "$wine" ] || {
    echo "wine-run.sh: $wine not found: run scripts/windows-deps.sh (package wine64)" >&2
    exit 127
}
exec "$wine" "$@"
