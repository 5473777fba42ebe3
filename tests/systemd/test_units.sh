#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The systemd units verify, and vramd started by socket activation
# (systemd-socket-activate) serves vramctl on the socket it was given.
# Usage: test_units.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
tmp=$(mktemp -d /tmp/vram-units-XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
if ! command -v systemd-analyze >/dev/null || ! command -v systemd-socket-activate >/dev/null; then
    echo "systemd-analyze and systemd-socket-activate are needed (apt-get install systemd)"
    exit 1
fi

# 1. systemd-analyze verify, with ExecStart pointing at this build.
cp "$build/vramd.service" "$src/systemd/vramd.socket" "$tmp/"
sed -i "s|^ExecStart=[^ ]*|ExecStart=$build/vramd|" "$tmp/vramd.service"
if ! out=$(systemd-analyze verify --man=no "$tmp/vramd.socket" "$tmp/vramd.service" 2>&1) ||
    [ -n "$out" ]; then
    echo "systemd-analyze verify: $out"
    fail=1
fi
grep -q '^Type=notify' "$tmp/vramd.service" || { echo "not Type=notify"; fail=1; }
grep -q '^SocketMode=0660' "$tmp/vramd.socket" || { echo "socket not 0660"; fail=1; }

# 2. Socket activation: the daemon takes fd 3 and serves on it.
sock="$tmp/activated.sock"
systemd-socket-activate -l "$sock" "$build/vramd" --backend host \
    --log-level info >"$tmp/vramd.log" 2>&1 &
pid=$!
i=0
until [ -S "$sock" ]; do
    i=$((i + 1)); [ $i -lt 100 ] || { echo "no socket"; exit 1; }
    sleep 0.05
done
# The first connection starts vramd; it must answer.
if ! "$build/vramctl" --socket "$sock" status --json >"$tmp/status.json" 2>"$tmp/err"; then
    echo "vramctl on the activated socket failed: $(cat "$tmp/err")"
    fail=1
fi
grep -q '"capacity_bytes"' "$tmp/status.json" || { echo "no status"; fail=1; }
"$build/vramctl" --socket "$sock" status >/dev/null || { echo "second request failed"; fail=1; }
grep -q "socket passed by the service manager" "$tmp/vramd.log" ||
    { echo "vramd did not say it was socket-activated:"; cat "$tmp/vramd.log"; fail=1; }
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=
# 3. Under the journal (stderr is the stream JOURNAL_STREAM names), lines
# carry syslog priority prefixes instead of timestamps.
: >"$tmp/journal.log"
js=$(stat -c '%d:%i' "$tmp/journal.log")
JOURNAL_STREAM=$js "$build/vramd" --backend host --socket "$tmp/j.sock" \
    2>>"$tmp/journal.log" &
pid=$!
i=0
until grep -q "ready on" "$tmp/journal.log"; do
    i=$((i + 1)); [ $i -lt 100 ] || break
    sleep 0.05
done
kill "$pid"; wait "$pid" 2>/dev/null || true
pid=
grep -q '^<5>vramd .* ready on' "$tmp/journal.log" ||
    { echo "no journald priority prefix:"; cat "$tmp/journal.log"; fail=1; }
if grep -qv '^<[0-7]>' "$tmp/journal.log"; then
    echo "a line without a priority prefix:"; cat "$tmp/journal.log"; fail=1
fi
[ $fail -eq 0 ] && echo "units: 1 passed, 0 failed" || echo "units: 0 passed, 1 failed"
exit $fail
