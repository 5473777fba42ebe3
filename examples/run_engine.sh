#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs examples/engine.c against a vramd of its own, started with
# examples/engine.json on a socket in a fresh temporary directory, and
# checks that it serves its requests (and that it fails, naming the socket,
# where no vramd listens). Exit status 0 when all of it holds.
#
# Usage: VRAMD_BIN=build/vramd EXAMPLE_BIN=build/vram-example-engine \
#        sh examples/run_engine.sh [CONFIG]
set -u
here=$(cd "$(dirname "$0")" && pwd)
vramd=${VRAMD_BIN:-vramd}
engine=${EXAMPLE_BIN:-vram-example-engine}
config=${1:-$here/engine.json}

# vramd wants a socket directory that only its user may write: mktemp -d
# makes one (mode 0700).
tmp=$(mktemp -d /tmp/vram-example-XXXXXX) || exit 1
sock=$tmp/vramd.sock
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

fail() {
    echo "run_engine: $*" >&2
    if [ -s "$tmp/vramd.log" ]; then
        echo "---- vramd log, the end ----" >&2
        tail -n 40 "$tmp/vramd.log" >&2
    fi
    exit 1
}

"$vramd" --config "$config" --socket "$sock" --log-level info \
    >"$tmp/vramd.log" 2>&1 &
pid=$!
i=0
# Ready once it says so: the socket's path exists from its bind, a moment
# before it listens.
until [ -S "$sock" ] && grep -q " ready on " "$tmp/vramd.log"; do
    i=$((i + 1))
    [ $i -le 100 ] || fail "vramd was not ready on $sock within 10 s"
    sleep 0.1
done

# Where nothing listens, the example fails, and its message names the socket.
if "$engine" "$tmp/none.sock" >"$tmp/none.out" 2>&1; then
    fail "the example succeeded without a daemon: $(cat "$tmp/none.out")"
fi
grep -q "$tmp/none.sock" "$tmp/none.out" ||
    fail "the connect error does not name the socket: $(cat "$tmp/none.out")"

"$engine" "$sock" 0 >"$tmp/engine.out" 2>&1
rc=$?
cat "$tmp/engine.out"
[ $rc -eq 0 ] || fail "the example exited with $rc"
for want in \
    '^connected as client [0-9]* (backend host)$' \
    '^registered stage 0: layers 0-15 on device 0, kv 40 of 528 MiB mapped$' \
    '^  region [0-9]* kv: .* 4 lanes of 66 slots of 2 MiB' \
    '^  region [0-9]* expert: ' \
    '^  region [0-9]* weights: ' \
    '^weights: 64 MiB mapped' \
    '^experts: 325 slots backed, 128 experts resident$' \
    '^request 1: 8192+1024 tokens: kv 40 MiB mapped, 325 expert slots backed' \
    '^  expert shrink: expert slots \[[0-9]*, 325) leave' \
    '^request 3: 200000+4096 tokens: kv 416 MiB mapped, 74 expert slots backed, 74 experts resident$' \
    '^request 3: trimmed: kv 40 MiB mapped, 325 expert slots backed, 128 experts resident$' \
    '^request 4: 300000+1024 tokens: refused: .*native context' \
    '^request 5: trimmed: ' \
    '^engine: done$'; do
    grep -q -- "$want" "$tmp/engine.out" || fail "no line matching '$want'"
done

kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
[ $rc -eq 0 ] || fail "vramd exited with $rc after SIGTERM"
[ ! -e "$sock" ] || fail "vramd left its socket behind"
echo "run_engine: passed"
