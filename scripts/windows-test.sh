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

# One prefix for the run (the emulator's default, scripts/wine-run.sh) and
# one persistent wineserver for it, started here with wine's helper
# processes (services.exe and the rest) on /dev/null: started by a test,
# they would keep its output pipe open, and ctest would wait for them (3 s
# after each test that starts the server, or until the timeout with a
# persistent one). A server left over for this prefix is stopped first;
# this one is stopped at the end.
WINEPREFIX=${WINEPREFIX:-$build/wineprefix}
export WINEPREFIX
wineserver=${VRAM_WINESERVER:-/usr/lib/wine/wineserver64}
"$wineserver" -k >/dev/null 2>&1 || true
"$wineserver" -w >/dev/null 2>&1 || true
trap '"$wineserver" -k >/dev/null 2>&1 || true' EXIT
echo "== wine: prefix $WINEPREFIX, persistent wineserver"
mkdir -p "$WINEPREFIX"
"$wineserver" -p </dev/null >/dev/null 2>&1 || {
    echo "windows-test: $wineserver -p failed" >&2
    exit 1
}
sh scripts/wine-run.sh cmd /c exit </dev/null >"$build/wineprefix.log" 2>&1 || {
    cat "$build/wineprefix.log"
    echo "windows-test: wine could not start in $WINEPREFIX" >&2
    exit 1
}
t3=$(date +%s)
echo "== wine ready in $(elapsed "$t2")"

echo "== ctest under wine"
rc=0
(cd "$build" && ctest --output-on-failure -j"$jobs" --timeout 300) || rc=$?
echo "== tests ran in $(elapsed "$t3"); all in $(elapsed "$t0")"
[ "$rc" = 0 ] || echo "windows-test: tests failed" >&2
exit "$rc"
