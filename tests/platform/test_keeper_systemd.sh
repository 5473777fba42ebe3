#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The keeper's fd store against a real systemd: a transient service with a
# socket of its own (test_keeper_fdstore service DIR) stores four memfds
# (two sealed) in the manager's fd store and kills itself; the manager
# restarts it (Restart=on-failure) with its socket and the four in
# LISTEN_FDS/LISTEN_FDNAMES; it checks their bytes, removes two and kills
# itself; restarted again it must find exactly the other two.
#
# The manager: tests/lib/sd_manager.sh (systemd itself, or systemd --user
# in a namespace of the test's own). Exits 77 (skipped) without root,
# systemd or unshare.
# Usage: test_keeper_systemd.sh TEST_KEEPER_FDSTORE_BINARY
set -eu
bin=$1
. "$(dirname "$0")/../lib/sd_manager.sh"
tmp=$(mktemp -d /tmp/vram-keeper-sd-XXXXXX)
chmod 755 "$tmp"
unit=vram-keeper-test-$(basename "$tmp" | cut -d- -f4)
cleanup() {
    if [ -n "$sd_mgr" ]; then
        kill -9 "$sd_mgr" 2>/dev/null || true
    elif [ -d /run/systemd/system ]; then
        systemctl stop "$unit.socket" "$unit.service" 2>/dev/null || true
        systemctl reset-failed "$unit.service" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# Inside the namespace (or on a systemd host): run the service, wait for
# its end, print its log.
cat >"$tmp/run.sh" <<EOF
set -eu
systemd-run \$user --unit=$unit --socket-property=ListenStream=$tmp/svc.sock \
    -p Type=notify -p FileDescriptorStoreMax=16 -p Environment=FDSTORE=16 \
    -p Restart=on-failure -p RestartSec=100ms \
    -p StandardOutput=append:$tmp/out -p StandardError=append:$tmp/out \
    $bin service $tmp >/dev/null 2>$tmp/run.err
systemctl \$user start $unit.service || true
i=0
until grep -q "done\\|failed\\|keeper -" $tmp/service.log 2>/dev/null; do
    i=\$((i + 1)); [ \$i -lt 600 ] || break
    ! systemctl \$user is-failed -q $unit.service || break
    sleep 0.1
done
systemctl \$user status $unit.service >$tmp/status 2>&1 || true
systemctl \$user stop $unit.socket $unit.service 2>/dev/null || true
EOF

rc=0
sd_manager_run "$tmp" "$tmp/run.sh" || rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "could not run the service (status $rc)"; exit 1; }

echo "the service's log:"
sed 's/^/  /' "$tmp/service.log" 2>/dev/null || echo "  (none)"
fail=0
expect() {
    grep -qxF "$1" "$tmp/service.log" 2>/dev/null || { echo "missing: $1"; fail=1; }
}
expect "start: listener 1 $tmp/svc.sock, 0 kept:"
expect "stored 4, crashing"
expect "start: listener 1 $tmp/svc.sock, 4 kept: w0.0 w0.1 w0.2 w0.3"
expect "removed w0.1 and w0.2, crashing"
expect "start: listener 1 $tmp/svc.sock, 2 kept: w0.0 w0.3"
expect "passed: done"
if [ $fail -ne 0 ]; then
    echo "the service's output:"; sed 's/^/  /' "$tmp/out" 2>/dev/null || true
    echo "its status:"; sed 's/^/  /' "$tmp/status" 2>/dev/null || true
    echo "the manager's log:"; tail -20 "$tmp/manager.log" 2>/dev/null | sed 's/^/  /' || true
    echo "keeper_systemd: 0 passed, 1 failed"
    exit 1
fi
echo "keeper_systemd: 1 passed, 0 failed"
