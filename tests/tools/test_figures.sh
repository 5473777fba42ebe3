#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The same figures in every view of vramctl (stages, metrics, top), against
# what vram-replay's engines were told:
#  - KV-NEEDED after a step whose KV is kept (no trim): the exact bytes of
#    the step's 8,192 + 1,024 tokens (74.25 and 46.41 MiB), not 0;
#  - after vramd was killed and started again under engines that hold
#    memory (they stay away until their next call): each gone client is
#    listed as quarantined with the bytes it held, in clients, metrics and
#    top.
# The temporary folder is removed when the test passes, kept (and named)
# when it fails. Usage: test_figures.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
name=vramctl_figures pids="replay vramd"
vramd= replay=
. "$src/tests/lib/shtest.sh"
config=$src/tests/scenarios/seed-pp32-16.json
# stage_row ID COLUMN: a column of stage ID's row in vramctl stages, named by
# the legend (a size is one cell: "74.25 MiB").
stage_row() {
    "$build/vramctl" --socket "$sock" stages | awk -v id="$1" -v col="$2" '
        NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
        $1 == id { n = h[col]
                   # sizes are two words ("74.25 MiB"): count them as one
                   j = 0
                   for (i = 1; i <= NF; i++) {
                       j++
                       v = $i
                       if ($(i + 1) ~ /^(B|KiB|MiB|GiB|TiB)$/) { v = v " " $(i + 1); i++ }
                       if (j == n) print v
                   } }'
}

start_vramd
# The seed's steps, KV kept after each (no trim).
sed 's/"trim_after_each_step": true/"trim_after_each_step": false/' "$config" \
    >"$tmp/keep.json"
grep -q '"trim_after_each_step": false' "$tmp/keep.json" || fail "no scenario without trims"
: >"$tmp/replay" # the loop below may look before the job opens it
"$build/vram-replay" --socket "$sock" --hold "$tmp/keep.json" >"$tmp/replay" 2>&1 &
replay=$!
i=0
until grep -q holding "$tmp/replay"; do
    i=$((i + 1)); [ $i -lt 200 ] || fail "the replay did not finish: $(cat "$tmp/replay")"
    sleep 0.05
done
# What the engines were told at the last step (8,192 + 1,024 tokens).
last=$(grep '"step":4' "$tmp/replay")
for st in 0 1; do
    want=$(printf '%s' "$last" | python3 -c "import json,sys
print([s for s in json.load(sys.stdin)['stages'] if s['stage'] == $st][0]['kv_needed_bytes'])")
    [ "$want" -gt 0 ] || fail "the replay says stage $st needs nothing"
    got=$("$build/vramctl" --socket "$sock" metrics |
          sed -n "s/^vramd_stage_kv_needed_bytes{stage=\"$st\",device=\"$st\"} //p")
    [ "$got" = "$want" ] || fail "metrics: stage $st needs '$got', the engine was told $want"
done
[ "$(stage_row 0 KV-NEEDED)" = "74.25 MiB" ] || fail "stages: stage 0 KV-NEEDED '$(stage_row 0 KV-NEEDED)'"
[ "$(stage_row 1 KV-NEEDED)" = "46.41 MiB" ] || fail "stages: stage 1 KV-NEEDED '$(stage_row 1 KV-NEEDED)'"
[ "$(stage_row 0 KV-MAPPED)" = "2.06 GiB" ] || fail "stages: stage 0 KV-MAPPED '$(stage_row 0 KV-MAPPED)'"
"$build/vramctl" --socket "$sock" top >"$tmp/frame" </dev/null || fail "top"
grep -q '2.06 GiB/2.06 GiB mapped, needs 74.25 MiB$' "$tmp/frame" || fail "top: stage 0's need: $(cat "$tmp/frame")"
grep -q '1.29 GiB/1.29 GiB mapped, needs 46.41 MiB$' "$tmp/frame" || fail "top: stage 1's need"

# vramd killed and started again: the engines are away (they make no call
# while holding), quarantined with what they held.
kill -9 "$vramd"; wait "$vramd" 2>/dev/null
start_vramd
"$build/vramctl" --socket "$sock" clients >"$tmp/clients"
for bytes in "2.06 GiB" "1.29 GiB"; do
    grep -Eq "^[0-9]+ +[^ ]+ +[0-9]+ +engine +quarantined +0 B +$bytes( |$)" "$tmp/clients" ||
        fail "clients: no quarantined client holding $bytes: $(cat "$tmp/clients")"
done
"$build/vramctl" --socket "$sock" metrics >"$tmp/metrics"
for b in 2214592512 1384120320; do
    grep -Eq "^vramd_client_quarantined_bytes\{client=\"[0-9]+\",name=\"[^\"]*\"\} $b\$" \
        "$tmp/metrics" || fail "metrics: no quarantined client with $b bytes"
done
grep -Eq '^vramd_client_info\{.*state="quarantined",role="engine"\} 1$' "$tmp/metrics" ||
    fail "metrics: no client in state quarantined"
"$build/vramctl" --socket "$sock" top >"$tmp/frame2" </dev/null || fail "top after the restart"
grep -Eq '^[0-9]+ +[^ ]+ +[0-9]+ +quarantined +0 B +2.06 GiB( |$)' "$tmp/frame2" ||
    fail "top: no quarantined client of 2.06 GiB: $(cat "$tmp/frame2")"

passed=1
echo "vramctl_figures: 1 passed, 0 failed"
