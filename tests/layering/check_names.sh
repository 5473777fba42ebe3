#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Names that say where they live (docs/architecture.md, "Names"), checked on
# the sources ($1: the source tree). Fails, naming each offence, when:
#  - two product files (.c and .h of daemon/, client/, proto/, platform/,
#    common/, systemd/, windows-service/) have the same name, but for the
#    repeats allowed below; an allowed name that repeats no more fails too,
#    to be taken off the list;
#  - a quoted include of the product or the tests names no folder: every
#    #include "..." is the header's path from the top of the tree
#    ("platform/handle.h") or gen/'s, the generated C ("gen/vram_msg.h").
# With --self-test first, proves on a small tree of its own that each check
# fails where it should.
set -u
fail=0
say() {
    echo "names: $*"
    fail=1
}

# Names allowed to repeat, one a line, each with its reason. Empty: every
# product file name is unique (platform/'s are named by their system).
allowed_repeats=''

product='daemon client proto platform common systemd windows-service'

# check TREE ALLOWED: prints each offence; returns 1 when there is one.
check() {
    (
        cd "$1" || exit 2
        allowed=$2
        bad=0
        dirs=$(for d in $product; do [ -d "$d" ] && echo "$d"; done)
        names=$(find $dirs -name '*.[ch]' -type f 2>/dev/null |
            sed 's|.*/||' | sort | uniq -d)
        for n in $names; do
            if ! printf '%s\n' "$allowed" | grep -qx "$n"; then
                echo "names: $n repeats: $(find $dirs -name "$n" -type f | sort | tr '\n' ' ')"
                bad=1
            fi
        done
        for n in $allowed; do
            printf '%s\n' "$names" | grep -qx "$n" ||
                { echo "names: $n repeats no more: take it off allowed_repeats"; bad=1; }
        done
        for f in $(find $dirs tests -name '*.[ch]' -type f 2>/dev/null | sort); do
            grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
                grep -vE '#[[:space:]]*include[[:space:]]*"[^"/]+/[^"]+"' |
                while IFS= read -r line; do
                    echo "names: $f:$line: a quoted include that names no folder"
                done
            grep -oE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$f" |
                sed -e 's/.*"\(.*\)"/\1/' |
                while IFS= read -r h; do
                    case $h in gen/*) continue ;; esac
                    [ -f "$h" ] || echo "names: $f: \"$h\" is not a path from the top of the tree"
                done
        done | grep . && bad=1
        exit $bad
    )
}

self_test() {
    t=$(mktemp -d) || exit 2
    mkdir -p "$t/daemon/a" "$t/platform/posix" "$t/platform/win32" "$t/client/lib"
    printf '#include "daemon/a/x.h"\n' >"$t/daemon/a/x.c"
    : >"$t/daemon/a/x.h"
    : >"$t/platform/posix/mem.c"
    : >"$t/platform/win32/mem.c"
    out=$(check "$t" mem.c)
    [ $? = 0 ] || { echo "names: self-test: a clean tree failed: $out"; rm -rf "$t"; return 1; }
    : >"$t/client/lib/x.c"
    out=$(check "$t" mem.c)
    [ $? = 1 ] && printf '%s\n' "$out" | grep -q '^names: x.c repeats' ||
        { echo "names: self-test: x.c twice was not found: $out"; rm -rf "$t"; return 1; }
    rm "$t/client/lib/x.c" "$t/platform/win32/mem.c"
    out=$(check "$t" mem.c)
    [ $? = 1 ] && printf '%s\n' "$out" | grep -q 'mem.c repeats no more' ||
        { echo "names: self-test: an allowed name that repeats no more passed: $out"; rm -rf "$t"; return 1; }
    printf '#include "x.h"\n' >"$t/daemon/a/x.c"
    out=$(check "$t" '')
    [ $? = 1 ] && printf '%s\n' "$out" | grep -q 'names no folder' ||
        { echo "names: self-test: a bare include was not found: $out"; rm -rf "$t"; return 1; }
    printf '#include "a/x.h"\n' >"$t/daemon/a/x.c"
    out=$(check "$t" '')
    [ $? = 1 ] && printf '%s\n' "$out" | grep -q 'not a path from the top' ||
        { echo "names: self-test: an include not from the top was not found: $out"; rm -rf "$t"; return 1; }
    rm -rf "$t"
    echo "names: self-test: a repeat, a stale allowed repeat, a bare include and a partial path each fail"
}

if [ "${1:-}" = --self-test ]; then
    self_test || exit 1
    shift
fi
src=${1:?usage: check_names.sh [--self-test] SOURCE_DIR}
check "$src" "$allowed_repeats" || fail=1
[ $fail = 0 ] && echo "names: product file names unique (but platform/'s allowed repeats), every quoted include names its folder from the top"
exit $fail
