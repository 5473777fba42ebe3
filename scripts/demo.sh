#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The main job: build, start vramd on its default backend with the seed's
# two-GPU layer split, replay the seed's requests (one client process per
# stage), and show what the broker decided, with vramctl status while the
# clients still hold their memory.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "== built: build/vramd build/vramctl build/vram-replay build/libvram.so"

dir=$(mktemp -d /tmp/vramd-demo-XXXXXX)
sock="$dir/vramd.sock"
scenario=tests/scenarios/seed-pp32-16.json
build/vramd --socket "$sock" --config "$scenario" 2>"$dir/vramd.log" &
vramd=$!
trap 'kill $vramd 2>/dev/null; wait $vramd 2>/dev/null; rm -rf "$dir"' EXIT
i=0
until build/vramctl --socket "$sock" status >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 100 ] || { cat "$dir/vramd.log"; exit 1; }
    sleep 0.05
done
head -n 1 "$dir/vramd.log" | grep -q "backend" && head -n 1 "$dir/vramd.log"
echo "== vramd is up on $sock; replaying $scenario"
build/vram-replay --socket "$sock" --hold --table "$scenario" >"$dir/replay.out" &
replay=$!
i=0
until grep -q 'holding' "$dir/replay.out" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 600 ] || ! kill -0 $replay 2>/dev/null; then
        cat "$dir/replay.out"; cat "$dir/vramd.log"; exit 1
    fi
    sleep 0.05
done
echo
cat "$dir/replay.out"
echo
echo "== vramctl status (the replay's two clients still hold their memory)"
build/vramctl --socket "$sock" status
kill $replay
wait $replay || true
echo
echo "== done. Without --table, vram-replay prints one JSON object per step;"
echo "   vramctl has clients, stages, loans, watch and metrics too (docs/operators.md)."
