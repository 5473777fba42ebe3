#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# vramd under valgrind through a real run: the seed replay (two client
# processes), a client killed while holding memory, vramctl, a garbage frame,
# then SIGTERM. Passes with no valgrind error and nothing definitely lost.
# Usage: test_daemon.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)"; exit 1; }
tmp=$(mktemp -d /tmp/vram-valgrind-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
scenario="$src/tests/scenarios/seed-pp32-16.json"
VRAMD_CHECK_INVARIANTS=1 valgrind --leak-check=full --errors-for-leak-kinds=definite \
    --error-exitcode=99 --log-file="$tmp/valgrind.log" \
    "$build/vramd" --backend host --socket "$tmp/s" --config "$scenario" 2>"$tmp/vramd.log" &
vg=$!
i=0
until "$build/vramctl" --socket "$tmp/s" status >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 600 ] || { cat "$tmp/vramd.log"; exit 1; }
    sleep 0.1
done
"$build/vram-replay" --socket "$tmp/s" --one-client "$scenario" >/dev/null
"$build/vram-replay" --socket "$tmp/s" --hold "$scenario" >"$tmp/replay" &
r=$!
i=0
until grep -q holding "$tmp/replay"; do
    i=$((i + 1)); [ $i -lt 600 ] || { echo "replay stuck"; exit 1; }
    sleep 0.1
done
# Kill the stage clients with SIGKILL: their chunks go through quarantine.
pkill -KILL -P $r || true
kill -KILL $r 2>/dev/null || true
wait $r 2>/dev/null || true
"$build/vramctl" --socket "$tmp/s" metrics >/dev/null
# A garbage frame: that peer is dropped, the daemon goes on.
if command -v python3 >/dev/null; then
    python3 -c "import socket; s=socket.socket(socket.AF_UNIX); s.connect('$tmp/s'); s.send(b'GARBAGE GARBAGE!'); s.recv(10)" || true
fi
"$build/vramctl" --socket "$tmp/s" status >/dev/null
kill -TERM $vg
rc=0
wait $vg || rc=$?
grep -E "ERROR SUMMARY|definitely lost" "$tmp/valgrind.log" | sed 's/^==[0-9]*== //'
if [ $rc -ne 0 ]; then
    cat "$tmp/valgrind.log" | tail -n 40
    echo "valgrind: 0 passed, 1 failed"
    exit 1
fi
echo "valgrind: 1 passed, 0 failed"
