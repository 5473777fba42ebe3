#!/bin/sh
# The keeper's fd store against a real systemd: a transient service with a
# socket of its own (test_keeper_fdstore service DIR) stores four memfds
# (two sealed) in the manager's fd store and kills itself; the manager
# restarts it (Restart=on-failure) with its socket and the four in
# LISTEN_FDS/LISTEN_FDNAMES; it checks their bytes, removes two and kills
# itself; restarted again it must find exactly the other two.
#
# Where PID 1 is systemd, the system manager runs the service
# (systemd-run). Where it is not (a container, as on the machines this was
# written on), a manager of the test's own does: systemd --user, in a
# private mount namespace whose /run is a tmpfs that says the system runs
# systemd (/run/systemd/system), with no units but a few empty targets of
# the test's own. The service manager's fd store is the same code in both.
# Exits 77 (skipped) without root, systemd or unshare.
# Usage: test_keeper_systemd.sh TEST_KEEPER_FDSTORE_BINARY
set -eu
bin=$1
[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 77; }
for t in systemd-run systemctl; do
    command -v "$t" >/dev/null || { echo "skipped: no $t"; exit 77; }
done
tmp=$(mktemp -d /tmp/vram-keeper-sd-XXXXXX)
chmod 755 "$tmp"
unit=vram-keeper-test-$(basename "$tmp" | cut -d- -f4)
mgr=
cleanup() {
    if [ -n "$mgr" ]; then
        kill -9 "$mgr" 2>/dev/null || true
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
user=
if [ "\${1:-}" = own ]; then
    mount -t tmpfs tmpfs /run
    mkdir -p /run/systemd/system
    export XDG_RUNTIME_DIR=$tmp/xdg SYSTEMD_UNIT_PATH=$tmp/units
    mkdir -m 700 \$XDG_RUNTIME_DIR
    \$manager --user --unit=keeper-test.target >$tmp/manager.log 2>&1 &
    echo \$! >$tmp/manager.pid
    i=0
    until [ -S \$XDG_RUNTIME_DIR/systemd/private ]; do
        i=\$((i + 1)); [ \$i -lt 200 ] || { echo "skipped: systemd --user does not start here:"; cat $tmp/manager.log; exit 77; }
        sleep 0.05
    done
    user=--user
fi
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

if [ -d /run/systemd/system ] && [ "$(cat /proc/1/comm)" = systemd ]; then
    echo "PID 1 is systemd $(systemctl --version | head -1 | cut -d' ' -f2): a transient system service"
    sh "$tmp/run.sh"
else
    command -v unshare >/dev/null && unshare --mount --propagation private true 2>/dev/null ||
        { echo "skipped: PID 1 is not systemd and no mount namespace can be made"; exit 77; }
    manager=
    for m in /lib/systemd/systemd /usr/lib/systemd/systemd; do
        [ -x "$m" ] && manager=$m && break
    done
    [ -n "$manager" ] || { echo "skipped: no systemd binary"; exit 77; }
    echo "PID 1 is $(cat /proc/1/comm), not systemd: a manager of the test's own ($manager --user, $(systemctl --version | head -1))"
    mkdir "$tmp/units"
    for t in keeper-test basic default sockets timers paths shutdown; do
        printf '[Unit]\nDescription=%s\nDefaultDependencies=no\n' "$t" >"$tmp/units/$t.target"
    done
    printf '[Unit]\nDescription=exit\nDefaultDependencies=no\nSuccessAction=exit-force\n' \
        >"$tmp/units/exit.target"
    rc=0
    manager=$manager unshare --mount --propagation private sh "$tmp/run.sh" own || rc=$?
    mgr=$(cat "$tmp/manager.pid" 2>/dev/null || true)
    [ $rc -eq 77 ] && exit 77
    [ $rc -eq 0 ] || { echo "could not run the service (status $rc)"; exit 1; }
    mgr=$(cat "$tmp/manager.pid" 2>/dev/null || true)
fi

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
