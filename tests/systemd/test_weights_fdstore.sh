#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A weight set outlives vramd through systemd's fd store (issue 31 item 4):
# vramd runs as a transient service (Type=notify, FileDescriptorStoreMax=,
# Environment=FDSTORE=, Restart=on-failure) of a real systemd manager
# (tests/lib/sd_manager.sh); a writer (Python, libvram) makes and seals an
# 8 MiB set of a pattern; vramd is killed with SIGKILL with no engine
# connected; the manager starts it again, handing back the set's handles
# (LISTEN_FDS, LISTEN_FDNAMES); the next engine maps the set sealed, with
# every byte, loading nothing. No vramd-holder runs: the manager kept them.
# Exits 77 (skipped) where no manager can run (no root, systemd, unshare).
# Usage: test_weights_fdstore.sh BUILD_DIR SOURCE_DIR [PYTHON]
set -eu
build=$1
src=$2
# The Python with numpy: the one given (cmake's), else the system's.
py=
for p in ${3:-} python3 /usr/bin/python3; do
    "$p" -c 'import numpy' 2>/dev/null && py=$p && break
done
. "$src/tests/lib/sd_manager.sh"
[ -n "$py" ] || { echo "skipped: no Python with numpy (${3:-python3}, /usr/bin/python3)"; exit 77; }
tmp=$(mktemp -d /tmp/vram-wfd-XXXXXX)
chmod 755 "$tmp"
unit=vram-wfd-test-$(basename "$tmp" | cut -d- -f3)
passed=0
cleanup() {
    if [ -n "$sd_mgr" ]; then
        kill -9 "$sd_mgr" 2>/dev/null || true
        # its services outlive it: this test's vramd, should a failure have
        # left it running
        pkill -9 -f "vramd --config $tmp/" 2>/dev/null || true
    elif [ -d /run/systemd/system ]; then
        systemctl stop "$unit.service" 2>/dev/null || true
        systemctl reset-failed "$unit.service" 2>/dev/null || true
    fi
    if [ $passed = 1 ]; then rm -rf "$tmp"; else echo "weights_fdstore: kept $tmp"; fi
}
trap cleanup EXIT

cat >"$tmp/vramd.json" <<EOF
{"devices": [{"id": 0, "capacity": "64MiB", "chunk": "2MiB"}],
 "pool": {"prefill_chunks": 0}, "weights": {"alloc": "2MiB"}}
EOF
# The engines: libvram through the Python binding.
cat >"$tmp/engine.py" <<EOF
import sys
sys.path.insert(0, "$src/python")
import numpy as np
import vram
role = sys.argv[1]
key = bytes(range(32))
n = 8 << 20
data = (np.arange(n, dtype=np.uint64) * 2654435761 >> 7).astype(np.uint8)
c = vram.Client("$tmp/vramd.sock", name="fdstore-" + role)
w = c.weights_open("sd/model", 0, n, key, nowait=True)
if role == "writer":
    assert w.writer and not w.sealed, w
    w.array()[:] = data
    w.seal()
else:
    assert not w.writer and w.sealed, w
    assert np.array_equal(w.array(), data), "the set's bytes changed"
w.close()
c.close()
print(role, "ok")
EOF

cat >"$tmp/run.sh" <<EOF
set -eu
export VRAM_LIB=$build/libvram.so
systemd-run \$user --unit=$unit -p Type=notify \
    -p FileDescriptorStoreMax=64 -p Environment=FDSTORE=64 \
    -p Restart=on-failure -p RestartSec=100ms \
    -p StandardOutput=append:$tmp/vramd.log -p StandardError=append:$tmp/vramd.log \
    $build/vramd --config $tmp/vramd.json --socket $tmp/vramd.sock --backend host \
    --log-level debug >/dev/null 2>$tmp/run.err
ready() { # the count of "ready on" lines it waits for
    i=0
    until [ "\$(grep -c ' ready on ' $tmp/vramd.log 2>/dev/null)" -ge \$1 ] &&
          [ -S $tmp/vramd.sock ]; do
        i=\$((i + 1)); [ \$i -lt 300 ] || { echo "vramd is not ready (\$1)"; return 1; }
        sleep 0.05
    done
}
ready 1
$py $tmp/engine.py writer >>$tmp/engines.log 2>&1
systemctl \$user kill -s KILL $unit.service
ready 2
ps -eo args | grep -c "[v]ramd-holder.*$tmp" >$tmp/holders || true
$py $tmp/engine.py reader >>$tmp/engines.log 2>&1
systemctl \$user status $unit.service >$tmp/status 2>&1 || true
systemctl \$user stop $unit.service 2>/dev/null || true
EOF

rc=0
sd_manager_run "$tmp" "$tmp/run.sh" >"$tmp/run.log" 2>&1 || rc=$?
head -1 "$tmp/run.log"
[ $rc -eq 77 ] && { cat "$tmp/run.log"; passed=1; exit 77; }
fail=0
bad() { echo "weights_fdstore: $*"; fail=1; }
[ $rc -eq 0 ] || bad "the run failed (status $rc): $(tail -5 "$tmp/run.log")"
grep -qx "writer ok" "$tmp/engines.log" 2>/dev/null || bad "the writer failed"
grep -qx "reader ok" "$tmp/engines.log" 2>/dev/null ||
    bad "the reader after the kill -9 failed"
grep -q "weight sets are kept by the fd store" "$tmp/vramd.log" 2>/dev/null ||
    bad "vramd did not use the fd store"
grep -q "weight set 1 'sd/model' (8 MiB on device 0) came back with its 4 allocations" \
    "$tmp/vramd.log" 2>/dev/null || bad "the restarted vramd did not take the set back"
[ "$(cat "$tmp/holders" 2>/dev/null)" = 0 ] || bad "a vramd-holder runs beside the fd store"
if [ $fail -ne 0 ]; then
    echo "engines:"; sed 's/^/  /' "$tmp/engines.log" 2>/dev/null || true
    echo "vramd's log (end):"; tail -30 "$tmp/vramd.log" 2>/dev/null | sed 's/^/  /' || true
    echo "its status:"; sed 's/^/  /' "$tmp/status" 2>/dev/null || true
    echo "weights_fdstore: 0 passed, 1 failed"
    exit 1
fi
passed=1
echo "weights_fdstore: 1 passed, 0 failed"
