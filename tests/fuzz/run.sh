#!/bin/sh
# Builds the libFuzzer harness with clang (ASan + UBSan) and runs it for a
# bounded time (default 60 s) from the seed corpus. Usage: run.sh [SECONDS]
set -eu
cd "$(dirname "$0")/../.."
secs=${1:-60}
CC=clang cmake -S . -B build-fuzz -DVRAM_FUZZ=ON -DVRAM_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_wire >/dev/null
corpus=$(mktemp -d /tmp/vram-fuzz-XXXXXX)
cp tests/fuzz/corpus/* "$corpus/"
rc=0
./build-fuzz/fuzz_wire -max_total_time="$secs" -max_len=70000 -print_final_stats=1 \
    "$corpus" >"$corpus.log" 2>&1 || rc=$?
tail -n 8 "$corpus.log"
rm -f "$corpus.log"
rm -rf "$corpus"
[ $rc -eq 0 ] && echo "fuzz: 1 passed, 0 failed" || echo "fuzz: 0 passed, 1 failed"
exit $rc
