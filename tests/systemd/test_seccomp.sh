#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# vramd runs under vramd.service's system call filter where no systemd
# applies it: vram-seccomp (tests/systemd/vram_seccomp.c) loads the unit's
# list (vramd.syscalls) and executes vramd (host backend); the example
# engine grants, maps, trims and releases memory through it, vramctl reads
# its status, and SIGTERM stops it cleanly, with no call denied. Then once
# more with MemoryDenyWriteExecute's rules added, which vramd itself (not
# the CUDA driver) keeps too. First the wrapper is shown to filter: a call
# of @resources fails with EPERM and is named, and log mode lets it run.
# Exits 77 (skipped) where vram-seccomp was not built (no libseccomp).
# Usage: test_seccomp.sh BUILD_DIR SOURCE_DIR VRAM_SECCOMP
set -u
build=$1
src=$2
wrap=${3:-}
[ -n "$wrap" ] && [ -x "$wrap" ] ||
    { echo "skipped: no vram-seccomp (apt-get install libseccomp-dev, then cmake again)"; exit 77; }
name=seccomp pids="vramd"
vramd=
. "$src/tests/lib/shtest.sh"
# The supervisor writes its summary once the last process under the filter
# has exited, a moment after the program itself.
summary() { # report file: its "done:" line, waited for
    i=0
    until grep -q 'vram-seccomp: done:' "$1" 2>/dev/null; do
        i=$((i + 1)); [ $i -lt 100 ] || { echo "no summary in $1"; return; }
        sleep 0.05
    done
    grep 'vram-seccomp: done:' "$1"
}

# 1. It filters: nice(1)'s setpriority is in @resources, which the unit
# takes away. Denied, nice says so and runs at niceness 0; in log mode it
# runs at 1. Each mode names the call.
n=$("$wrap" --report "$tmp/nice.report" -- nice -n 1 nice 2>"$tmp/nice.err")
[ "$n" = 0 ] || fail "setpriority was not denied (niceness '$n'): $(cat "$tmp/nice.err")"
grep -q 'denied: setpriority' "$tmp/nice.report" ||
    fail "the denial was not named: $(cat "$tmp/nice.report")"
n=$("$wrap" --mode log --report "$tmp/nice-log.report" -- nice -n 1 nice 2>&1)
[ "$n" = 1 ] || fail "log mode did not let setpriority run (niceness '$n')"
grep -q 'would be denied: setpriority' "$tmp/nice-log.report" ||
    fail "log mode did not name the call: $(cat "$tmp/nice-log.report")"
summary "$tmp/nice-log.report" | grep -q 'done: 1 call would be denied: setpriority 1' ||
    fail "log mode's summary: $(cat "$tmp/nice-log.report")"

# 2. vramd under the filter (then with --mdwe), serving the example engine.
for extra in "" --mdwe; do
    r=$tmp/vramd${extra}.report
    : >"$tmp/vramd.log"
    "$wrap" $extra --report "$r" -- "$build/vramd" --backend host \
        --config "$src/examples/engine.json" --socket "$sock" --log-level info \
        2>>"$tmp/vramd.log" &
    vramd=$!
    i=0
    until "$build/vramctl" --socket "$sock" status >"$tmp/status" 2>&1; do
        i=$((i + 1))
        [ $i -lt 200 ] || fail "vramd did not start under the filter$extra: $(tail -5 "$tmp/vramd.log"; cat "$r")"
        sleep 0.05
    done
    "$build/vram-example-engine" "$sock" 0 >"$tmp/engine.out" 2>&1 ||
        fail "the engine failed under the filter$extra: $(tail -5 "$tmp/engine.out")"
    grep -q '^engine: done$' "$tmp/engine.out" || fail "the engine did not finish$extra"
    "$build/vramctl" --socket "$sock" status --json >"$tmp/status.json" ||
        fail "vramctl status failed under the filter$extra"
    grep -q '"capacity_bytes"' "$tmp/status.json" || fail "no status$extra"
    kill -TERM "$vramd"
    wait "$vramd"
    rc=$?
    vramd=
    [ $rc -eq 0 ] || fail "vramd exited with $rc after SIGTERM$extra: $(tail -5 "$tmp/vramd.log")"
    s=$(summary "$r")
    echo "seccomp: vramd${extra:+ $extra}: ${s#vram-seccomp: }"
    [ "$s" = "vram-seccomp: done: 0 calls denied" ] ||
        fail "vramd needed calls outside the filter$extra: $(cat "$r")"
done

passed=1
echo "seccomp: 1 passed, 0 failed"
