#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# No copied CMake source lists ($1: the source tree). Each target's sources
# are listed once, in cmake/sources.cmake, for both builds (CMakeLists.txt
# and cmake/windows.cmake); a second list of the same files drifts from the
# first. Fails, naming every place, when a .c file of daemon/, client/,
# proto/, common/ or platform/ is named in more than one place in the
# build's CMake files (comments aside; ${PROJECT_SOURCE_DIR}/ and the like
# count as the tree's root), unless the list below allows it that many
# times; and when an allowed repeat is gone (take it off the list).
set -u
src=${1:?usage: check_cmake_lists.sh SOURCE_DIR}
cd "$src" || exit 2
fail=0
say() {
    echo "cmake lists: $*"
    fail=1
}

# The intended repeats: a file and how many places may name it, each with
# why. Unit tests and fuzzers that compile one file of a target alone name
# it beside the target's list; so do per-file settings.
allowed='
daemon/backends/standby.c 2   test_standby: the standby policy alone
daemon/core/clients/access.c 2        test_win_access: the access lists with the configuration
proto/text.c 3                fuzz_state, test_state_fuzz: the state layer without the rest of the protocol
proto/units.c 2               vram_torch_alloc: the size units, which libvram does not export
proto/msg.c 2                 cmake/windows.cmake: -Wno-format for msvcrt-checked formats
client/tools/http_request.c 2 test_http_request: the request parser alone
client/tools/metrics_slots.c 2 test_metrics_slots: the connection slots alone
'

files=$(find . \( -name 'build*' -o -name .git \) -prune -o \
    \( -name CMakeLists.txt -o -name '*.cmake' \) -type f -print |
    sed 's|^\./||' | sort)

# file:line:name for every source named, comments stripped.
names=$(for f in $files; do
    awk -v f="$f" '{
        sub(/#.*/, "")
        gsub(/\$\{(PROJECT_SOURCE_DIR|CMAKE_SOURCE_DIR)\}\//, "")
        gsub(/\$\{CMAKE_CURRENT_LIST_DIR\}\/\.\.\//, "")
        n = split($0, w, /[][[:space:]()"\047;]+/)
        for (i = 1; i <= n; i++)
            if (w[i] ~ /^(daemon|client|proto|common|platform)\/[A-Za-z0-9_.\/-]*\.c$/)
                print f ":" NR ":" w[i]
    }' "$f"
done)

for name in $(printf '%s\n' "$names" | sed 's/^[^:]*:[^:]*://' | sort | uniq -d); do
    count=$(printf '%s\n' "$names" | grep -c ":$name\$")
    may=$(printf '%s\n' "$allowed" | awk -v n="$name" '$1 == n { print $2 }')
    [ -n "$may" ] && [ "$count" -le "$may" ] && continue
    where=$(printf '%s\n' "$names" | grep ":$name\$" | sed 's/:[^:]*$//' | tr '\n' ' ')
    say "$name is named in $count places (a copied list?): $where"
done

printf '%s\n' "$allowed" | while read -r name may why; do
    [ -n "$name" ] || continue
    count=$(printf '%s\n' "$names" | grep -c ":$name\$")
    if [ "$count" -lt 2 ]; then
        echo "cmake lists: $name is named in $count place(s) now: take it off the allowed repeats"
    fi
done | grep . && fail=1

[ "$fail" = 0 ] && echo "cmake lists: no copied lists ($(printf '%s\n' "$names" | wc -l) names in $(echo $files | wc -w) files; $(printf '%s\n' "$allowed" | grep -c .) allowed repeats)"
exit "$fail"
