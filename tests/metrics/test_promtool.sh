#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# vramctl metrics, with stages and clients holding memory, passes
# promtool check metrics. Usage: test_promtool.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
command -v promtool >/dev/null || { echo "promtool is needed (apt-get install prometheus)"; exit 1; }
tmp=$(mktemp -d /tmp/vram-metrics-XXXXXX)
"$build/vramd" --backend host --socket "$tmp/s" --config "$src/tests/scenarios/seed-pp32-16.json" \
    2>"$tmp/log" &
vramd=$!
replay=
trap 'kill $replay $vramd 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
i=0
until "$build/vramctl" --socket "$tmp/s" status >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 100 ] || { cat "$tmp/log"; exit 1; }
    sleep 0.05
done
"$build/vram-replay" --socket "$tmp/s" --hold "$src/tests/scenarios/seed-pp32-16.json" >"$tmp/replay" &
replay=$!
i=0
until grep -q holding "$tmp/replay"; do
    i=$((i + 1)); [ $i -lt 200 ] || { echo "replay did not finish"; exit 1; }
    sleep 0.05
done
"$build/vramctl" --socket "$tmp/s" metrics >"$tmp/metrics"
if ! promtool check metrics <"$tmp/metrics"; then
    echo "promtool: 0 passed, 1 failed"; exit 1
fi
grep -q '^vramd_stage_expert_loaned_bytes{stage="0",device="0"} 2046820352$' "$tmp/metrics" ||
    { echo "stage 0's 1952 MiB of loans not in the metrics"; exit 1; }
echo "promtool: 1 passed, 0 failed"
