#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs the test suites again and again under load, to find the flaky tests:
# the Linux suite (the Debug -Werror ctest of scripts/test.sh, in
# build-test), the Windows suite under wine (build-win's ctest, as
# scripts/windows-test.sh runs it), or both, N rounds each, while a second
# copy of the same suite runs beside it: a copy of this working tree (its
# tracked files and the untracked ones git does not ignore) in
# build-soak/src, with build trees of its own, so that two instances of
# every test run at once, on the same machine, under each other's load.
# The tests' names cannot collide (random suffixes, mkdtemp, port 0): that
# is part of what this checks.
#
#   sh scripts/soak.sh [--linux | --windows | --both] N [PATTERN]
#
#   --linux, --windows, --both   which suites (default: both, Linux first)
#   N                            rounds of each suite in this tree
#   PATTERN                      only the tests ctest -R PATTERN picks
#
# The copy beside runs its rounds until this tree's N are done (it finishes
# the one it is in), so the load lasts to the end. Packages are checked
# once at the start (scripts/deps.sh --test, scripts/windows-deps.sh
# through windows-test.sh --build-only: nothing is installed when all is
# there), and each tree is built once; a round only runs ctest.
#
# At the end, for each suite, every test that failed: "NAME: failed K of N"
# for this tree, and K of M for the copy beside, then a total. Each round's
# ctest output is kept in build-soak/logs/<time>/. Exits 1 when any test
# failed in either tree, 2 on a usage error or a failed build.
set -eu
cd "$(dirname "$0")/.."
root=$PWD

usage() {
    echo "usage: sh scripts/soak.sh [--linux | --windows | --both] N [PATTERN]" >&2
    exit 2
}

# One tree's rounds of one suite (also the copy beside, run as
# "soak.sh --worker ...", in a session of its own so that it can be ended
# whole): SUITE TREE ROUNDS STOPFILE LOGPREFIX PATTERN. ROUNDS 0: until
# STOPFILE exists. Appends the failed tests' names, one a line, to
# LOGPREFIX.failed, and a line per round to LOGPREFIX.rounds.
worker() {
    suite=$1 tree=$2 rounds=$3 stop=$4 prefix=$5 pattern=$6
    r=0
    : >"$prefix.failed"
    : >"$prefix.rounds"
    while :; do
        if [ "$rounds" -gt 0 ]; then
            [ "$r" -lt "$rounds" ] || break
        else
            [ ! -e "$stop" ] || break
        fi
        r=$((r + 1))
        log=$prefix.round$r.log
        case $suite in
        linux)
            dir=$tree/build-test
            rm -f "$dir/Testing/Temporary/LastTestsFailed.log"
            t=$(date +%s)
            rc=0
            if [ -n "$pattern" ]; then
                (cd "$dir" && ctest --output-on-failure -j2 --timeout 600 \
                    --no-tests=error -R "$pattern") >"$log" 2>&1 || rc=$?
            else
                (cd "$dir" && ctest --output-on-failure -j2 --timeout 600 \
                    --no-tests=error) >"$log" 2>&1 || rc=$?
            fi
            ;;
        windows)
            dir=$tree/build-win
            rm -f "$dir/Testing/Temporary/LastTestsFailed.log"
            t=$(date +%s)
            rc=0
            if [ -n "$pattern" ]; then
                VRAM_WIN_BUILD_DIR=$dir sh "$tree/scripts/windows-test.sh" --ctest-only \
                    --no-tests=error -R "$pattern" >"$log" 2>&1 || rc=$?
            else
                VRAM_WIN_BUILD_DIR=$dir sh "$tree/scripts/windows-test.sh" --ctest-only \
                    --no-tests=error >"$log" 2>&1 || rc=$?
            fi
            ;;
        esac
        failed=$dir/Testing/Temporary/LastTestsFailed.log
        n=0
        if [ -f "$failed" ]; then
            # "NUMBER:NAME" a line.
            sed 's/^[0-9]*://' "$failed" >>"$prefix.failed"
            n=$(wc -l <"$failed")
        elif [ "$rc" != 0 ]; then
            # ctest itself failed (a wine that would not start): the round
            # counts as a failure of the whole suite; its log says why.
            echo "(the $suite ctest itself)" >>"$prefix.failed"
            echo "$log: ctest exited with $rc and named no test" >>"$prefix.broken"
            n=1
        fi
        ran=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n 1)
        echo "$r ${ran:-?} $n $(($(date +%s) - t))" >>"$prefix.rounds"
    done
}

if [ "${1:-}" = --worker ]; then
    shift
    worker "$@"
    exit 0
fi

suites="linux windows"
case "${1:-}" in
--linux) suites=linux; shift ;;
--windows) suites=windows; shift ;;
--both) shift ;;
-*) usage ;;
esac
[ $# -ge 1 ] && [ $# -le 2 ] || usage
rounds=$1
pattern=${2:-}
case $rounds in
'' | *[!0-9]*) usage ;;
esac
[ "$rounds" -gt 0 ] || usage
command -v git >/dev/null && git -C "$root" rev-parse --git-dir >/dev/null 2>&1 || {
    echo "soak: $root is not a git checkout (the copy beside is made from git's file list)" >&2
    exit 2
}
command -v setsid >/dev/null || { echo "soak: setsid not found (util-linux)" >&2; exit 2; }

soak=$root/build-soak
copy=$soak/src
logs=$soak/logs/$(date +%Y%m%d-%H%M%S)
mkdir -p "$copy" "$logs"
jobs=$(nproc)
t0=$(date +%s)

# The copy beside: this tree's files as they are now. Its build trees are
# kept from one soak to the next, and tar keeps the files' times, so an
# unchanged file is not built again.
echo "== the copy beside: $copy"
find "$copy" -mindepth 1 -maxdepth 1 ! -name 'build-*' -exec rm -rf {} +
git -C "$root" ls-files -z -c -o --exclude-standard |
    (cd "$root" && tar -c --null -T - -f -) | (cd "$copy" && tar -x -f -)

fail_build() {
    echo "soak: $1 failed (log: $2)" >&2
    tail -n 30 "$2" >&2
    exit 2
}

for s in $suites; do
    case $s in
    linux)
        echo "== packages (scripts/deps.sh --test), once"
        sh scripts/deps.sh --test >"$logs/deps.log" 2>&1 ||
            fail_build "scripts/deps.sh --test" "$logs/deps.log"
        for tree in "$root" "$copy"; do
            echo "== build $tree/build-test (Debug, -Werror)"
            blog=$logs/build-linux-$(basename "$tree").log
            { cmake -S "$tree" -B "$tree/build-test" -DCMAKE_BUILD_TYPE=Debug \
                  -DVRAM_WERROR=ON && cmake --build "$tree/build-test" -j"$jobs"; } \
                >"$blog" 2>&1 || fail_build "the Linux build in $tree" "$blog"
        done
        ;;
    windows)
        for tree in "$root" "$copy"; do
            # The copy uses this tree's source packages (no second download).
            [ "$tree" = "$root" ] || [ -e "$tree/build-win-deps" ] ||
                ln -s "$root/build-win-deps" "$tree/build-win-deps"
            echo "== build $tree/build-win (windows-test.sh --build-only)"
            blog=$logs/build-windows-$(basename "$tree").log
            VRAM_WIN_BUILD_DIR=$tree/build-win sh "$tree/scripts/windows-test.sh" \
                --build-only >"$blog" 2>&1 || fail_build "the Windows build in $tree" "$blog"
        done
        ;;
    esac
done

# A pattern that picks nothing would make every round fail at once.
if [ -n "$pattern" ]; then
    for s in $suites; do
        case $s in linux) b=build-test ;; windows) b=build-win ;; esac
        n=$(cd "$root/$b" && ctest -N -R "$pattern" | sed -n 's/^Total Tests: //p')
        [ "${n:-0}" -gt 0 ] || {
            echo "soak: no $s test matches '$pattern'" >&2
            exit 2
        }
    done
fi

beside=""
stop_beside() {
    if [ -n "$beside" ]; then
        kill -TERM -- "-$beside" 2>/dev/null || true
        wait "$beside" 2>/dev/null || true
        beside=""
    fi
}
trap 'stop_beside; exit 130' INT TERM
trap 'stop_beside' EXIT

for s in $suites; do
    stop=$logs/$s.done
    rm -f "$stop"
    echo "== $s: $rounds rounds here${pattern:+ (ctest -R $pattern)}, the copy beside until they end"
    setsid sh "$root/scripts/soak.sh" --worker "$s" "$copy" 0 "$stop" "$logs/$s-beside" "$pattern" &
    beside=$!
    worker "$s" "$root" "$rounds" "" "$logs/$s-here" "$pattern" &
    here=$!
    # Progress, one line a round, as rounds end.
    shown=0
    while kill -0 "$here" 2>/dev/null; do
        sleep 5
        n=$(wc -l <"$logs/$s-here.rounds" 2>/dev/null || echo 0)
        while [ "$shown" -lt "$n" ]; do
            shown=$((shown + 1))
            sed -n "${shown}p" "$logs/$s-here.rounds" | {
                read -r r ran nf secs
                echo "   round $r/$rounds: $ran tests, $nf failed, $secs s"
            }
        done
    done
    wait "$here" || true
    n=$(wc -l <"$logs/$s-here.rounds")
    while [ "$shown" -lt "$n" ]; do
        shown=$((shown + 1))
        sed -n "${shown}p" "$logs/$s-here.rounds" | {
            read -r r ran nf secs
            echo "   round $r/$rounds: $ran tests, $nf failed, $secs s"
        }
    done
    touch "$stop"
    echo "   (the copy beside finishes its round)"
    wait "$beside" || true
    beside=""
done
trap - EXIT INT TERM

# The report.
total=0
echo
echo "== soak: $rounds rounds here, beside a copy, in $(($(date +%s) - t0)) s${pattern:+; ctest -R $pattern}"
for s in $suites; do
    here_n=$(wc -l <"$logs/$s-here.rounds")
    beside_n=$(wc -l <"$logs/$s-beside.rounds")
    tests=$(awk '{ if ($2 != "?" && $2 > m) m = $2 } END { print m + 0 }' "$logs/$s-here.rounds")
    echo "$s: $tests tests, $here_n rounds here, $beside_n beside"
    names=$(sort -u "$logs/$s-here.failed" "$logs/$s-beside.failed")
    if [ -z "$names" ]; then
        echo "   no failures"
        continue
    fi
    echo "$names" | while IFS= read -r name; do
        k=$(grep -cxF -- "$name" "$logs/$s-here.failed" || true)
        j=$(grep -cxF -- "$name" "$logs/$s-beside.failed" || true)
        echo "   $name: failed $k of $here_n here, $j of $beside_n beside"
    done
    f=$(($(wc -l <"$logs/$s-here.failed") + $(wc -l <"$logs/$s-beside.failed")))
    total=$((total + f))
    cat "$logs/$s-here.broken" "$logs/$s-beside.broken" 2>/dev/null | sed 's/^/   /' || true
done
echo "total: $total failures (logs: $logs)"
[ "$total" = 0 ]
