#!/bin/sh
# The Windows build, cross-compiled on Debian 12 and tested under wine:
# installs what it needs (scripts/windows-deps.sh, as root the first time),
# configures build-win/ with cmake/mingw-w64.cmake (warnings as errors),
# builds, and runs ctest there, each test a .exe under wine64.
#
# What it covers, for now (cmake/windows.cmake):
#   - the ledger (daemon/ledger/, pure C) and its unit tests test_ledger,
#     test_ledger_random and test_ledger_capacity;
#   - libuv (static uv_a) and cJSON built from Debian's source packages, and
#     test_win_deps, which links both, runs a libuv loop and parses and
#     prints JSON.
# What it does not cover yet: a Windows platform/ layer (named pipes,
# sections, the service), the protocol, the daemon, libvram and the tools,
# the integration and attack tests, installing; and nothing here runs on
# real Windows (wine 8 differs: see WINDOWS.md's list).
#
#   sh scripts/windows-test.sh            # BUILD_TYPE=Debug by default
#
# Exits non-zero when the installs, the build or a test fail.
set -eu
cd "$(dirname "$0")/.."
root=$PWD
build=$root/build-win
deps=$root/build-win-deps
jobs=$(nproc)
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - $1)) s"; }

echo "== dependencies (scripts/windows-deps.sh)"
sh scripts/windows-deps.sh "$deps"
t1=$(date +%s)
echo "== dependencies ready in $(elapsed "$t0")"

echo "== configure $build (mingw-w64, ${BUILD_TYPE:-Debug}, -Werror)"
mkdir -p "$build"
if ! cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/mingw-w64.cmake" \
    -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Debug}" -DVRAM_WERROR=ON \
    -DVRAM_WIN_DEPS_DIR="$deps" >"$build/configure.log" 2>&1; then
    tail -n 40 "$build/configure.log"
    echo "windows-test: configuring failed (whole log: $build/configure.log)" >&2
    exit 1
fi

echo "== build ($jobs jobs; libuv's own warnings are in $build/build.log)"
if ! cmake --build "$build" -j"$jobs" >"$build/build.log" 2>&1; then
    grep -E 'error|Error' "$build/build.log" | head -n 40
    echo "windows-test: the build failed (whole log: $build/build.log)" >&2
    exit 1
fi
t2=$(date +%s)
echo "== built in $(elapsed "$t1")"

# One prefix for the run (the emulator's default, scripts/wine-run.sh),
# made before the tests so that they do not race to create it; wine's
# messages while it does so are in the log.
WINEPREFIX=${WINEPREFIX:-$build/wineprefix}
export WINEPREFIX
if [ ! -f "$WINEPREFIX/system.reg" ]; then
    echo "== wine prefix $WINEPREFIX"
    sh scripts/wine-run.sh cmd /c exit </dev/null >"$build/wineprefix.log" 2>&1 || {
        cat "$build/wineprefix.log"
        echo "windows-test: wine could not make its prefix $WINEPREFIX" >&2
        exit 1
    }
fi

echo "== ctest under wine"
rc=0
(cd "$build" && ctest --output-on-failure -j"$jobs" --timeout 300) || rc=$?
echo "== tests ran in $(elapsed "$t2"); all in $(elapsed "$t0")"
[ "$rc" = 0 ] || echo "windows-test: tests failed" >&2
exit "$rc"
