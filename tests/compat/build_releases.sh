#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds each release of releases.txt, once per build tree, for
# test_compat and test_upgrade: its commit's tree (git archive) into
# CACHE/VERSION/src, with that commit's own CMake into CACHE/VERSION/build,
# only what the compatibility tests run (libvram, vramd, vramd-holder,
# vramctl, vram-replay, the example engine, the seed replay and engine
# contract tests), Debug without -Werror; then this tree's
# tests/compat/compat_engine.c against that release's libvram
# (CACHE/VERSION/build/vram-compat-engine). A release already built from
# its commit for these targets is kept as it is. Quiet: the build's output
# goes to CACHE/VERSION/build.log, shown when it fails.
#
# Usage: sh build_releases.sh SOURCE_DIR CACHE_DIR [CC]
#   SOURCE_DIR  a git clone with the releases' commits (the current tree)
set -u
src=$1
cache=$2
cc=${3:-cc}
here=$(cd "$(dirname "$0")" && pwd)
releases=$here/releases.txt
targets="vram vramd vramd-holder vramctl vram-replay vram-example-engine test_engine_contract test_seed_replay"

fail() {
    echo "build_releases: $*" >&2
    exit 1
}

mkdir -p "$cache" || fail "cannot make $cache"
# test_compat and test_upgrade may start together (ctest -j): one builds,
# the other waits for it and finds the release built.
exec 9>"$cache/.lock"
flock 9 || fail "cannot lock $cache/.lock"

grep -v '^[[:space:]]*\(#\|$\)' "$releases" | while read -r version commit; do
    [ -n "$commit" ] || fail "$releases: '$version' names no commit"
    rel=$cache/$version
    # What it was built from and for: another commit or target list builds
    # it again.
    stamp="$commit $targets"
    if [ "$(cat "$rel/built" 2>/dev/null)" != "$stamp" ]; then
        git -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
            fail "$src is not a git repository: release $version is built from its commit $commit with git archive; run the tests from a clone with the project's history"
        git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null ||
            fail "$src lacks commit $commit (release $version): a shallow clone? fetch the history (git fetch --unshallow, or the tag v$version)"
        echo "build_releases: building $version ($commit) in $rel"
        start=$(date +%s)
        rm -rf "$rel"
        mkdir -p "$rel/src" || fail "cannot make $rel/src"
        git -C "$src" archive "$commit" | tar -x -C "$rel/src" ||
            fail "git archive $commit failed"
        # shellcheck disable=SC2086 # the targets are words
        if ! { cmake -S "$rel/src" -B "$rel/build" -DCMAKE_BUILD_TYPE=Debug \
                   -DVRAM_WERROR=OFF -DVRAM_SANITIZE=OFF \
                   -DCMAKE_C_COMPILER="$cc" &&
               cmake --build "$rel/build" -j2 --target $targets; } \
                >"$rel/build.log" 2>&1; then
            tail -n 40 "$rel/build.log" >&2
            fail "release $version did not build (its log: $rel/build.log)"
        fi
        echo "$stamp" >"$rel/built"
        echo "build_releases: $version built in $(($(date +%s) - start)) s"
    fi
    engine=$rel/build/vram-compat-engine
    if [ ! -x "$engine" ] || [ -n "$(find "$here/compat_engine.c" -newer "$engine")" ]; then
        "$cc" -std=c11 -D_GNU_SOURCE -g -Wall -Wextra -I"$rel/src/client/include" \
            -o "$engine" "$here/compat_engine.c" -L"$rel/build" -lvram \
            -Wl,-rpath,"$rel/build" ||
            fail "compat_engine.c does not build against release $version's libvram"
    fi
done || exit 1
