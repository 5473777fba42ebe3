#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# libvram's layers, checked on its compiled objects (the calls as the
# linker sees them, not the includes): a file of client/lib/ that uses a
# symbol another one defines calls it. Fails, naming each offence, when
#  - two or more files call each other in a circle;
#  - a file calls a file of a layer above its own;
#  - a file of client/lib/ has no layer below.
# Calls through function pointers (the protocol's port, the mappers, the
# engine's callback) are not references: they are how a layer answers the
# one above it.
# Usage: check_lib_calls.sh NM OBJECT... (the objects of the vram target;
# those not compiled from client/lib/ are left out).
set -u
export LC_ALL=C # sort and join agree on the order
nm=${1:?usage: check_lib_calls.sh NM OBJECT...}
shift
fail=0
say() {
    echo "lib_calls: $*"
    fail=1
}

# Each file's layer, from the bottom (docs/architecture.md draws them):
# 0 what every layer uses (the last error), 1 transport (frames and
# handles on the connection), 2 protocol (requests, replies, events),
# 3 state (chunks, regions, stages, mappings, the mappers), 4 the API (the
# public calls and what frames them).
layer_of() {
    case $1 in
    error) echo 0 ;;
    transport) echo 1 ;;
    protocol) echo 2 ;;
    chunk_table | region_table | stage_table | mapping | background | events | \
        mappers | map_host | map_cuda) echo 3 ;;
    api | call | call_frame | connect | event_thread | sleep | weight_sets | \
        weights_list | vc_stubs) echo 4 ;;
    *) echo - ;;
    esac
}

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
: >"$tmp/defs"
: >"$tmp/uses"
n=0
for o in "$@"; do
    case $o in
    */client/lib/* | */gen/vc_stubs.*) ;; # and the calls msggen writes
    *) continue ;;
    esac
    f=$(basename "$o")
    f=${f%.o}
    f=${f%.obj}
    f=${f%.c}
    n=$((n + 1))
    [ "$(layer_of "$f")" = - ] &&
        say "client/lib/$f.c has no layer (give it one in $0)"
    "$nm" -g --defined-only "$o" | awk -v f="$f" 'NF >= 3 { print $3, f }' >>"$tmp/defs" ||
        exit 2
    "$nm" -u "$o" | awk -v f="$f" '{ print $NF, f }' >>"$tmp/uses" || exit 2
done
[ "$n" -gt 0 ] || { echo "lib_calls: no object of client/lib/ given"; exit 2; }

# Edges "from to symbol": from uses a symbol that to defines.
sort -u "$tmp/defs" >"$tmp/defs.s"
sort -u "$tmp/uses" >"$tmp/uses.s"
join "$tmp/uses.s" "$tmp/defs.s" | awk '$2 != $3 { print $2, $3, $1 }' |
    sort -u >"$tmp/edges"

while read -r from to sym; do
    lf=$(layer_of "$from")
    lt=$(layer_of "$to")
    [ "$lf" = - ] || [ "$lt" = - ] && continue
    [ "$lt" -gt "$lf" ] &&
        say "$from.c (layer $lf) calls $sym in $to.c (layer $lt), a layer above it"
done <"$tmp/edges"

awk '{ print $1, $2 }' "$tmp/edges" | sort -u >"$tmp/pairs"
# tsort names the files of each circle it meets, one a line.
in_loop=$(tsort <"$tmp/pairs" 2>&1 >/dev/null | grep -v 'input contains a loop' |
    sed 's/^tsort: //' | sort -u | tr '\n' ' ')
if [ -n "$in_loop" ]; then
    say "files of client/lib/ call each other in a circle; in circles: $in_loop"
    # Each call between two of them, to show where the circles run.
    while read -r from to sym; do
        case " $in_loop" in *" $from "*) ;; *) continue ;; esac
        case " $in_loop" in *" $to "*) ;; *) continue ;; esac
        echo "lib_calls:   $from.c -> $to.c ($sym)"
    done <"$tmp/edges"
fi

[ $fail = 0 ] && echo "lib_calls: $n files of client/lib/, each calling only its layer and those below, no circle"
exit $fail
