#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer harnesses with clang (ASan + UBSan) and runs each for
# a bounded time from its seed corpus: the wire (frames, codec, JSON,
# catalogue; default 60 s) and the state file reader (default 30 s).
# Usage: run.sh [WIRE_SECONDS [STATE_SECONDS]]
set -eu
cd "$(dirname "$0")/../.."
wire_secs=${1:-60}
state_secs=${2:-30}
CC=clang cmake -S . -B build-fuzz -DVRAM_FUZZ=ON -DVRAM_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_wire fuzz_state >/dev/null
passed=0 failed=0
run() { # NAME SECONDS CORPUS MAX_LEN
    log=$(mktemp /tmp/vram-fuzz-log-XXXXXX)
    rc=0
    "./build-fuzz/$1" -max_total_time="$2" -max_len="$4" -print_final_stats=1 \
        "$3" >"$log" 2>&1 || rc=$?
    echo "== $1"
    # The end of its log, without the dictionary libFuzzer recommends (a
    # block of escaped byte strings that a short tail would start inside
    # of): the last progress lines and the final stats, or on a failure
    # the report, in whole lines.
    sed -e '/^###### Recommended dictionary/,/^###### End of recommended dictionary/d' \
        "$log" >"$log.tail"
    if [ $rc -eq 0 ]; then tail -n 8 "$log.tail"; else tail -n 60 "$log.tail"; fi
    rm -f "$log" "$log.tail"
    if [ $rc -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}
corpus=$(mktemp -d /tmp/vram-fuzz-XXXXXX)
cp tests/fuzz/corpus/* "$corpus/"
run fuzz_wire "$wire_secs" "$corpus" 70000
rm -rf "$corpus"
corpus=$(mktemp -d /tmp/vram-fuzz-XXXXXX)
VRAM_FUZZ_STATE_SEED="$corpus" ./build-fuzz/fuzz_state
# The seed is a whole file (about 0.9 MB): a shorter max_len would cut
# the seed short of the size its header records, and no input would pass.
run fuzz_state "$state_secs" "$corpus" 1048576
rm -rf "$corpus" /tmp/vram-fuzz-state-*
echo "fuzz: $passed passed, $failed failed"
[ $failed -eq 0 ]
