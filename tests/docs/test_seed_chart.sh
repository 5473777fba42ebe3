#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# README.md's chart is what the seed does now: the real vramd (host backend,
# the seed's configuration) on a temporary socket, vram-replay's seed
# replay (one client process per stage), and scripts/seed_chart.py make
# docs/seed-transition.svg and docs/seed-replay.jsonl (the steps without
# their timings) again; the test fails when either differs from the
# committed file, and prints the difference.
# Usage: test_seed_chart.sh BUILD_DIR SOURCE_DIR [--update]
# (--update writes the new files into docs/ instead: commit them.)
set -u
build=$1
src=$2
update=${3:-}
name=seed_chart pids="vramd"
vramd=
. "$src/tests/lib/shtest.sh"
config=$src/tests/scenarios/seed-pp32-16.json
start_vramd
"$build/vram-replay" --socket "$sock" "$config" >"$tmp/replay.out" 2>"$tmp/replay.err" \
    || fail "vram-replay failed: $(cat "$tmp/replay.err")"
python3 "$src/scripts/seed_chart.py" --svg "$tmp/seed-transition.svg" \
    --json "$tmp/seed-replay.jsonl" "$tmp/replay.out" \
    || fail "seed_chart.py failed"
if [ "$update" = --update ]; then
    cp "$tmp/seed-transition.svg" "$tmp/seed-replay.jsonl" "$src/docs/"
    echo "$name: wrote docs/seed-transition.svg and docs/seed-replay.jsonl"
    passed=1
    exit 0
fi
bad=0
for f in seed-replay.jsonl seed-transition.svg; do
    if ! cmp -s "$src/docs/$f" "$tmp/$f"; then
        echo "$name: docs/$f differs from what the seed's replay gives now:"
        diff -u "$src/docs/$f" "$tmp/$f" | head -40
        bad=1
    fi
done
[ $bad = 0 ] || fail "regenerate with: sh tests/docs/test_seed_chart.sh BUILD_DIR . --update, and commit"
# The chart's own figures: the seed's KV at 261,000 tokens and after the
# switch, in the JSON the chart was drawn from.
grep -q '"kv_mapped_bytes":2214592512' "$tmp/seed-replay.jsonl" \
    || fail "the replay no longer maps 2,112 MiB of KV on GPU 0 at 261,000 tokens"
echo "$name: 1 passed, 0 failed"
passed=1
